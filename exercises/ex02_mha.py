"""Exercise B: multi-head attention with RoPE, in NumPy.

Usually takes about 2 hours.  From the chapters: "Attention from First
Principles", section 5 (The full multi-head computation, Why multiple
heads, The causal mask) and hands-on exercise B; "Attention" (chapter 03),
"Queries, keys and values" and "Many heads".

Build the nine steps of a decoder's attention layer from the chapter:
projections, head split, RoPE on q and k, causal mask, softmax over keys,
weighted sum of values, head merge and output projection.

Conventions (the course's contract):

* Shapes: ``B`` batch, ``S`` sequence length, ``h`` heads, ``d`` model width,
  ``d_head`` head width, ``d == h * d_head`` is not required (only
  ``w_q``'s rows must be ``h * d_head``).
* Weights act as ``y = x @ W.T``: ``w_q``, ``w_k``, ``w_v`` are
  ``(h*d_head, d)`` and ``w_o`` is ``(d, h*d_head)``.
* Causal masks are aligned to the end: with ``S_q`` queries and ``S_k``
  keys, query ``i`` sits at position ``S_k - S_q + i`` and sees keys
  ``0 .. S_k - S_q + i``.
* RoPE is rotate-half: feature ``j`` pairs with ``j + d_head/2`` and turns by
  ``position * base ** (-2j / d_head)``.
* Every function works for float32 and float64 inputs and returns the
  input's floating dtype: float32 in, float32 out.  NumPy 2 turns
  ``x / np.sqrt(d)`` into float64 (``np.sqrt`` returns a NumPy float64):
  divide by ``math.sqrt(d)`` or ``d ** 0.5`` instead.
* Accuracy (the course's precision rule): an answer is compared with a
  float64 reference to ``atol=2e-5, rtol=2e-4`` whatever the input's dtype
  (``rope`` and ``multi_head_attention``: ``atol=2e-4, rtol=2e-3``), so
  computing inside in float32 is fine; ``causal_mask``, ``split_heads`` and
  ``merge_heads`` exactly.

Then look at the heads: ``plot_attention_heads(q, k, path, *, causal=True)``
draws each head's attention weights as a heatmap.  ``q`` ``(h, S_q,
d_head)`` and ``k`` ``(h, S_k, d_head)`` are ONE sequence's queries and
keys, split into heads (and rotated, if you want what the layer sees: take
``q[0]`` of your ``(B, h, S, d_head)`` tensors).  Each head's weights are
``softmax(q_i @ k_i^T / sqrt(d_head) + mask)`` over keys, with the
end-aligned causal mask when ``causal``: an ``(S_q, S_k)`` matrix whose
rows sum to 1.  The PNG saved at ``path`` has one panel per head (not the
heads side by side in one image), panel ``i`` titled ``"head {i}"`` and
drawing head ``i``'s matrix unchanged (``ax.imshow(w[i])``: row ``i`` is
query ``i``), its x axis labelled "key" and its y axis "query" (on the
leftmost panel of each row at least).  A causal pattern is a lower
triangle; with random inputs the heads differ only by chance, in a trained
model they specialise.  Needs matplotlib (``pip install matplotlib``).

Run the public tests with ``attn-grade check ex02``.
"""
from __future__ import annotations

import numpy as np


def softmax(x, axis=-1):
    """Softmax of ``x`` along ``axis``, numerically stable.

    Must stay finite for logits as large as 1e4 (subtract the max first).
    Entries of ``-inf`` get weight 0; a slice that is all ``-inf`` (a query
    that may see no key) gives all zeros, not NaN.
    """
    raise NotImplementedError("ex02_mha.softmax: your code here")


def causal_mask(s_q, s_k=None):
    """Additive causal mask of shape ``(s_q, s_k)``, aligned to the end.

    0.0 where query ``i`` may see key ``j`` (``j <= s_k - s_q + i``), ``-inf``
    elsewhere.  ``s_k`` defaults to ``s_q`` (the usual lower triangle); with
    ``s_q == 1`` the single query sees every key.  Returns float64.
    """
    raise NotImplementedError("ex02_mha.causal_mask: your code here")


def rope(x, positions, base=10000.0):
    """Rotary position embedding (rotate-half convention).

    ``x``: ``(..., S, d_head)``; ``positions``: ``(S,)`` integers (absolute
    positions of the rows).  Feature ``j < d_head/2`` pairs with feature
    ``j + d_head/2``; the pair turns by angle ``positions * base ** (-2j /
    d_head)``:

        out[j]          = x[j] * cos - x[j + d/2] * sin
        out[j + d/2]    = x[j + d/2] * cos + x[j] * sin

    Raises ``ValueError`` when ``d_head`` is odd.
    """
    raise NotImplementedError("ex02_mha.rope: your code here")


def split_heads(x, n_heads):
    """``(B, S, n_heads*d_head)`` -> ``(B, n_heads, S, d_head)``.

    Head ``i`` takes features ``i*d_head .. (i+1)*d_head - 1``.
    """
    raise NotImplementedError("ex02_mha.split_heads: your code here")


def merge_heads(x):
    """``(B, h, S, d_head)`` -> ``(B, S, h*d_head)``: the inverse of ``split_heads``."""
    raise NotImplementedError("ex02_mha.merge_heads: your code here")


def attention(q, k, v, mask=None):
    """Scaled dot-product attention on split heads.

    ``q``: ``(B, h, S_q, d_head)``, ``k`` and ``v``: ``(B, h, S_k, d_head)``;
    ``mask``: additive, broadcastable to ``(B, h, S_q, S_k)`` (``None`` for
    no mask).  Scores are ``q @ k^T / sqrt(d_head)``, softmax runs over keys
    (the last axis).  Returns ``(B, h, S_q, d_head)``.
    """
    raise NotImplementedError("ex02_mha.attention: your code here")


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, *, causal=True, positions=None,
                         rope_base=10000.0):
    """Multi-head self-attention of ``x`` ``(B, S, d)`` -> ``(B, S, d)``.

    ``positions`` (``(S,)`` ints, default ``arange(S)``) are the tokens'
    absolute positions for RoPE; RoPE goes on q and k, never on v.  With
    ``causal`` the end-aligned causal mask is applied.
    """
    raise NotImplementedError("ex02_mha.multi_head_attention: your code here")


def plot_attention_heads(q, k, path, *, causal=True):
    """Save one heatmap of attention weights per head to ``path`` (PNG).

    ``q``: ``(h, S_q, d_head)``, ``k``: ``(h, S_k, d_head)``, one sequence.
    Panel ``i`` (titled ``"head {i}"``) draws head ``i``'s weights
    ``softmax(q_i k_i^T / sqrt(d_head) + mask)`` ``(S_q, S_k)`` unchanged,
    x axis "key", y axis "query"; the end-aligned causal mask when
    ``causal``.  Returns nothing.  Without matplotlib: ``ImportError``
    saying how to install it.
    """
    raise NotImplementedError("ex02_mha.plot_attention_heads: your code here")
