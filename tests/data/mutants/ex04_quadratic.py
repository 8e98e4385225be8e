"""Known mistakes in ex04_quadratic (see tests/data/mutants/__init__.py)."""
from tests.data.mutants import Mutant

MUTANTS = [
    Mutant("no_scale",
           "scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)",
           "scores = q @ k.transpose(-2, -1)",
           "not scaled by 1/sqrt(d_head)"),
    Mutant("softmax_over_queries",
           "return torch.softmax(scores, dim=-1) @ v",
           "return torch.softmax(scores, dim=-2) @ v",
           "softmax ran over queries"),
    Mutant("diagonal_masked",
           ".tril(s_k - s_q)",
           ".tril(s_k - s_q - 1)",
           "also hides the diagonal"),
    Mutant("no_warmup",
           "    for _ in range(warmup):\n        fn(*args, **kwargs)\n    times = []",
           "    times = []",
           "timing without warm-up"),
    Mutant("no_synchronization",
           "        if torch.cuda.is_available() and torch.cuda.is_initialized():\n"
           "            torch.cuda.synchronize()",
           "        pass",
           "timing without synchronization"),
    Mutant("mean_not_median",
           "return statistics.median(times)",
           "return sum(times) / len(times)",
           "the mean instead of the median"),
    Mutant("total_of_repeats",
           "return statistics.median(times)",
           "return sum(times)",
           "total of all repeats"),
    Mutant("fabricated_times",
           "results[s] = time_fn(naive_attention, q, k, v)",
           "results[s] = 1e-9 * s ** 2",
           "times that were not measured"),
    Mutant("milliseconds",
           "results[s] = time_fn(naive_attention, q, k, v)",
           "results[s] = 1000 * time_fn(naive_attention, q, k, v)",
           "milliseconds"),
    Mutant("slope_from_endpoints",
           "    xs = [math.log(s) for s in seq_lens]",
           "    return (math.log(times[-1]) - math.log(times[0])) / "
           "(math.log(seq_lens[-1]) - math.log(seq_lens[0]))\n"
           "    xs = [math.log(s) for s in seq_lens]",
           "first and last points only"),
    Mutant("scores_without_batch",
           "return batch * n_heads * seq_len * seq_len * bytes_per_elem",
           "return n_heads * seq_len * seq_len * bytes_per_elem",
           "batch was left out"),
    Mutant("max_len_off_by_one",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem))",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem)) + 1",
           "off by one"),
    Mutant("plot_linear_axes",
           'ax.loglog(lens, times, "o-", label="naive attention")\n'
           '    ax.loglog(lens, [times[0] * (s / lens[0]) ** 2 for s in lens], "--"',
           'ax.plot(lens, times, "o-", label="naive attention")\n'
           '    ax.plot(lens, [times[0] * (s / lens[0]) ** 2 for s in lens], "--"',
           "log-log axes"),
    Mutant("scores_without_element_size",
           "return batch * n_heads * seq_len * seq_len * bytes_per_elem",
           "return batch * n_heads * seq_len * seq_len",
           "element size was left out"),
    Mutant("max_len_without_element_size",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem))",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads))",
           "element size was left out"),
    Mutant("naive_no_mask", "    if causal:\n        s_q, s_k = scores.shape[-2], scores.shape[-1]",
           "    if False:\n        s_q, s_k = scores.shape[-2], scores.shape[-1]",
           "no causal mask"),
    Mutant("naive_scale_by_d",
           "scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)",
           "scores = q @ k.transpose(-2, -1) / d_head",
           "1/d_head instead of 1/sqrt(d_head)"),
    Mutant("slope_inverted", "return sxy / sxx",
           "return sxy / sum((y - my) ** 2 for y in ys)", "log(S) on log(time)"),
    Mutant("scores_linear",
           "return batch * n_heads * seq_len * seq_len * bytes_per_elem",
           "return batch * n_heads * seq_len * bytes_per_elem", "grows like S, not S * S"),
    Mutant("max_len_one_short",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem))",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem)) - 1",
           "one short"),
    # An outside corpus's slip (issue 51): one sequence's scores sized, not B of them.
    Mutant("max_len_no_batch",
           "return math.isqrt(int(memory_bytes) // (batch * n_heads * bytes_per_elem))",
           "return math.isqrt(int(memory_bytes) // (n_heads * bytes_per_elem))",
           "the batch was left out: B sequences"),
]

# -- found by the outside review (same work, same grade): the causal mask aligned to
# the start, which no square case can tell from the end-aligned one
MUTANTS += [
    Mutant("naive_top_left_mask", ".tril(s_k - s_q)", ".tril()", "aligned to the top-left"),
]

# Each mistake runs the tests that name it (found by grading each mutant with
# the whole hidden suite): a formula's slip need not wait for a measurement,
# and the timer's slips need not wait for the scaling run.
ONLY = {name: "naive_attention" for name in (
    "no_scale", "softmax_over_queries", "diagonal_masked", "naive_scale_by_d", "naive_no_mask",
    "naive_top_left_mask")}
ONLY.update({name: "time_fn" for name in ("no_warmup", "mean_not_median", "total_of_repeats")})
ONLY["no_synchronization"] = "synchronizes"
ONLY.update({name: "measure_scaling" for name in ("fabricated_times", "milliseconds")})
# A fourth outside corpus: the fit's intercept, as np.polynomial's polyfit orders it.
MUTANTS += [
    Mutant("slope_intercept", "return sxy / sxx", "return my - sxy / sxx * mx",
           "the fit's intercept was returned"),
]
ONLY.update({"slope_from_endpoints": "loglog_slope", "slope_inverted": "loglog_slope",
             "slope_intercept": "loglog_slope",
             "plot_linear_axes": "plot_scaling", "max_len_off_by_one": "max_naive",
             "scores_without_batch": "score_matrix_bytes", "scores_linear": "score_matrix_bytes"})
# The sizes need nothing but their own tests.
ONLY.update({name: "score_matrix_bytes or max_naive" for name in (
    "scores_without_element_size", "max_len_without_element_size", "max_len_one_short",
    "max_len_no_batch")})

# -- a third outside corpus's slip (issue 51): the causal half counted
MUTANTS += [
    Mutant("scores_causal_half",
           "    return batch * n_heads * seq_len * seq_len * bytes_per_elem",
           "    return batch * n_heads * seq_len * seq_len * bytes_per_elem // 2",
           "half the score tensor was counted"),
]
ONLY["scores_causal_half"] = "score_matrix_bytes"
