"""Known slips in the interview questions' answers (issue 29's lessons).

Each mutant replaces one answer of ``solutions/questions.py`` by what a
common slip gives; the hidden suite must name the slip ("This looks like:
..."), then show how the answer is found.  A wrong letter is explained by
its own sentence (no diagnosis line): ``diagnosis=False``.
"""
import re

from tests.data.mutants import Mutant


def _answer(name, right, wrong, expect, diagnosis=True):
    slip = re.sub(r"\W+", "_", expect.split()[0].lower()).strip("_")
    return Mutant(f"{name.lower()}_{slip}", f"{name} = {right}\n",
                  f"{name} = {wrong}\n", expect, diagnosis=diagnosis)


MUTANTS = [
    _answer("Q15_ATTENTION_PASSES_FFN_AT", 32768, 43008, "projections (w_q, w_k, w_v, w_o)"),
    _answer("Q15_ATTENTION_PASSES_FFN_AT", 32768, 18432, "SwiGLU FFN has 3"),
    _answer("Q15_ATTENTION_PASSES_FFN_AT", 32768, 26624, "w_k and w_v were counted with 32"),
    _answer("Q16_KV_CACHE_128K_GB", 17.18, 16.0, "GiB"),
    _answer("Q16_KV_CACHE_128K_GB", 17.18, 8.59, "only K or only V"),
    _answer("Q16_KV_CACHE_128K_GB", 17.18, 68.7, "that is MHA"),
    _answer("Q17_KV_128K_OVER_WEIGHTS", 1.074, 0.931, "inverted"),
    _answer("Q18_NAIVE_MAX_SEQ_LEN_80GB", 12500, 35355, "batch was left out"),
    _answer("Q18_NAIVE_MAX_SEQ_LEN_80GB", 12500, 8838, "4 bytes per score"),
    _answer("Q18_NAIVE_MAX_SEQ_LEN_80GB", 12500, 12952, "80 GiB"),
    _answer("Q19_GQA_SAVES_MB_PER_TOKEN", 2.294, 0.328, "GQA's cache per token"),
    _answer("Q19_GQA_SAVES_MB_PER_TOKEN", 2.294, 2.1875, "MiB"),
    _answer("Q19_GQA_SAVES_MB_PER_TOKEN", 2.294, 1.147, "K or only V"),
    _answer("Q20_GQA_SAVES_GB_PER_128K", 300.6, 343.6, "MHA's cache"),
    _answer("Q20_GQA_SAVES_GB_PER_128K", 300.6, 280.0, "GiB (2^30"),
    _answer("Q21_KERNEL_FALLBACK", '"B"', '"A"', "slower backend", diagnosis=False),
    _answer("Q22_LONG_CONTEXT_COST", '"B"', '"D"', "16 times the bytes", diagnosis=False),
]
# Each answer's own graded test: nothing else need run.
ONLY = {m.name: m.find.split(" = ")[0] for m in MUTANTS}
