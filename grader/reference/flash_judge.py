"""Judging a traced call of ex07's ``flash_attention`` (grading process only).

The probe in the worker (``probes/ex07.py``) records what happened during
the call; these checks turn that record into feedback.  Judging code, not an
answer: it ships with the student edition.
"""
from __future__ import annotations

import torch

# Named tolerances beyond grader.feedback.TOLERANCES: on a GPU, float32 tl.dot
# runs in TF32 (10-bit mantissa) by default; float16/bfloat16 kernels round
# the probabilities to the input's precision before the second matmul.
GPU_TOLERANCES = {
    "tf32": (5e-3, 5e-3),
    "float16": (5e-3, 5e-3),
    "bfloat16": (4e-2, 4e-2),
}
# More PyTorch arithmetic than a wrapper needs (a scale, a cast): the
# attention itself was computed with PyTorch ops.
MAX_COMPUTE_OPS = 16


def tolerance(dtype: str, device: str) -> tuple:
    """``(atol, rtol)`` for an output of ``dtype`` computed on ``device``."""
    from grader.feedback import TOLERANCES
    if device.startswith("cuda"):
        return GPU_TOLERANCES["tf32" if dtype == "float32" else dtype]
    return TOLERANCES[dtype]


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def check_output(result: dict, q, expected, *, what: str, mistakes=None, hint=None) -> None:
    """The output of a traced call: a plain tensor like ``q``, close to ``expected``."""
    from grader.feedback import Feedback, check_close
    if result["out_type"] != "torch.Tensor":
        kind = result["out_type"]
        raise Feedback(f"{what} returned a {kind}, not a plain torch.Tensor: return the "
                       "tensor your kernel wrote (no subclasses, no arrays, no lazy values)")
    if result["out_device"] != result["device"]:
        raise Feedback(f"{what} returned a tensor on {result['out_device']}; the inputs were "
                       f"on {result['device']} (keep the output on the inputs' device)")
    out = result["out"]
    if out.dtype != q.dtype:
        raise Feedback(f"{what} returned {_dtype_name(out)} for {_dtype_name(q)} inputs "
                       "(keep the dtype of the inputs: allocate the output like q)")
    atol, rtol = tolerance(_dtype_name(q), result["device"])
    check_close(out, expected, what=what, atol=atol, rtol=rtol, mistakes=mistakes, hint=hint)


def check_authentic(result: dict, q, k, v, *, what: str) -> None:
    """The work of a traced call happened in the student's own Triton kernel."""
    from grader.feedback import Feedback
    ops = result["forbidden"]
    if ops:
        listed = ", ".join(f"{n} x{c}" for n, c in sorted(ops.items()))
        raise Feedback(f"{what}: PyTorch did attention's work during the call ({listed}). "
                       "The matmuls and the softmax belong inside your Triton kernel: no "
                       "torch.matmul, @, bmm, softmax or scaled_dot_product_attention.")
    own = [x for x in result["launches"] if x["in_submission"]]
    if not own:
        others = ", ".join(sorted({f"{x['name']} ({x['file']})" for x in result["launches"]}))
        raise Feedback(f"{what}: no Triton kernel of your own was launched during the call"
                       + (f" (launched: {others})" if others else "") +
                       ". Write an @triton.jit kernel in your file and launch it with "
                       "kernel[grid](...).")
    compute = result["compute_ops"]
    if sum(compute.values()) > MAX_COMPUTE_OPS:
        listed = ", ".join(f"{n} x{c}" for n, c in sorted(compute.items(), key=lambda x: -x[1])[:6])
        raise Feedback(f"{what}: {sum(compute.values())} PyTorch arithmetic ops ran during the "
                       f"call ({listed}); the attention must be computed by your kernel, the "
                       "wrapper only allocates the output and launches it.")
    small = min(q.numel(), k.numel())
    moved = [c for c in result["host_copies"] + result["numpy_conversions"] if c[1] >= small]
    if moved:
        raise Feedback(f"{what}: tensors were copied to the host or to NumPy during the call "
                       f"({moved[0][0]} of {moved[0][1]} elements); compute on the device, in "
                       "your kernel.")
    s_q, s_k = q.shape[-2], k.shape[-2]
    if s_q * s_k > max(q.numel(), k.numel(), v.numel()):
        big = [b for b in result["buffers"] if b[1] >= s_q * s_k]
        if big:
            raise Feedback(f"{what}: a buffer of {big[0][1]} elements (shape {tuple(big[0][2])}, "
                           f"made by {big[0][0]}) was allocated during the call, at least "
                           f"S_q*S_k = {s_q}*{s_k} = {s_q * s_k}: flash attention never "
                           "materializes the scores; keep one tile of them in the kernel.")
    check_inputs_unchanged(result, q, k, v, what=what)


def check_inputs_unchanged(result: dict, q, k, v, *, what: str) -> None:
    from grader.feedback import Feedback
    after = result["inputs_after"]
    for name, before in (("q", q), ("k", k), ("v", v)):
        now = after[name]
        if now.shape != before.shape or not torch.equal(now, before.to(now.dtype)):
            raise Feedback(f"{what} changed its input {name} (it must be left as it was: "
                           "compute into a new output tensor, scale the scores, not q, "
                           "in the kernel).")


def check_no_kv_copy(result: dict, q, k, *, what: str) -> None:
    """GQA: no buffer as large as K or V repeated for every query head."""
    from grader.feedback import Feedback
    batch, n_heads, _, d_head = q.shape
    repeated = batch * n_heads * k.shape[-2] * d_head
    if repeated <= max(q.numel(), k.numel()):
        raise ValueError("check_no_kv_copy needs S_k > S_q and h > h_kv to tell a copy apart")
    big = [b for b in result["buffers"] if b[1] >= repeated]
    if big:
        raise Feedback(f"{what}: a buffer of {big[0][1]} elements (shape {tuple(big[0][2])}, "
                       f"made by {big[0][0]}) was allocated during the call: K or V copied for "
                       f"every query head (B*h*S_k*d_head = {repeated}). Index the shared head "
                       "in the kernel instead: query head i reads K/V head i // (h // h_kv).")


