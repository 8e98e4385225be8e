"""Which reference function the line pointer traces for a student's function.

``REFERENCES[(exercise, function)]`` is ``(module, call)``: the secret
reference module whose file is traced (its own local names become the
steps, ``grader.linepointer.STEP_WORDS`` says them to a student) and
``call(*args, **kwargs)``, the reference called with the student function's
own arguments.  A function not listed gets no pointer.  Loaded only in the
grading process; the student edition, which has no secret references, gets
no pointer (``references()`` returns nothing there).
"""
from __future__ import annotations


def references() -> dict:
    """The table, or ``{}`` where the secret references are absent."""
    try:
        from grader.reference.secret import attention, attention_np, flash, mla, roofline
        mla_functions = (mla.attention, mla.decode, mla.cache)
    except (ImportError, AttributeError):   # the student edition's replay modules
        return {}
    np_files = (attention_np,)
    torch_files = (attention,)
    return {
        ("ex02_mha", "multi_head_attention"): (np_files, lambda x, w_q, w_k, w_v, w_o, n_heads, *,
                                               causal=True, positions=None, rope_base=10000.0:
                                               attention_np.gqa(x, w_q, w_k, w_v, w_o, n_heads,
                                                                causal=causal, positions=positions,
                                                                rope_base=rope_base)),
        ("ex02_mha", "attention"): (np_files, lambda q, k, v, mask=None:
                                    attention_np.attention(q, k, v, mask=mask)),
        ("ex02_mha", "softmax"): (np_files, lambda x, axis=-1: attention_np.softmax(x, axis)),
        ("ex02_mha", "rope"): (np_files, lambda x, positions, base=10000.0:
                               attention_np.rope(x, positions, base)),
        ("ex03_gqa", "grouped_query_attention"): (
            np_files, lambda x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, causal=True,
            positions=None, rope_base=10000.0: attention_np.gqa(
                x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, causal=causal, positions=positions,
                rope_base=rope_base)),
        ("ex05_decode_prefill", "prefill_attention"): (
            torch_files + (roofline,), lambda q, k, v: roofline.grouped(q, k, v, causal=True)),
        ("ex05_decode_prefill", "decode_attention"): (
            torch_files + (roofline,), lambda q, k, v: roofline.grouped(q, k, v, causal=False)),
        # Formulas: their steps are numbers (flops, bytes).
        ("ex04_quadratic", "score_matrix_bytes"): ((roofline,), roofline.score_matrix_bytes),
        ("ex05_decode_prefill", "attention_flops"): ((roofline,), roofline.attention_flops),
        ("ex05_decode_prefill", "attention_bytes"): ((roofline,), roofline.attention_bytes),
        ("ex06_gqa_intensity", "decode_intensity"): ((roofline,), roofline.decode_intensity),
        ("ex07_flash_attention", "blockwise_attention"): (
            (flash,), lambda q, k, v, block_size, causal=True: flash.blockwise_reference(
                q, k, v, block_size, causal)),
        ("ex07_flash_attention", "online_softmax_step"): (
            (flash,), lambda m, l, acc, scores, v: flash.step_reference(m, l, acc, scores, v)),
        ("ex08_mla", "mla_attention"): (torch_files + (mla,), mla_functions[0]),
        ("ex08_mla", "mla_decode"): (torch_files + (mla,), mla_functions[1]),
        ("ex08_mla", "mla_cache"): (torch_files + (mla,), mla_functions[2]),
    }
