"""Array code that the framework backends' ops (_jax_ops, _torch_ops) share: written with indexing and
operators only, so one function serves jax and torch arrays alike."""

from __future__ import annotations

from typing import Any


def softmax_inverse_cdf(e: Any, u: Any, zeros: Any) -> Any:
    """The action the reference (:func:`portkern.policy.sample_actions`) draws by inverse CDF of the softmax:
    ``e`` [N, K] the exponentials of the logits less their row max, ``u`` [N] the uniforms in [0, 1),
    ``zeros`` [N] int32 zeros to count in.

    The total and the partial sums acc_k run sequentially in ``e``'s float32, as the reference's do (not a
    cumsum, which on CPU accumulates in float64), so the chosen index is the reference's for the same logits:
    the first k with u * total < acc_k, counted as how many acc_k (k < K - 1) are <= u * total.
    """
    total = e[:, 0]
    for k in range(1, e.shape[1]):
        total = total + e[:, k]
    threshold = u * total
    action = zeros
    acc = e[:, 0]
    for k in range(e.shape[1] - 1):
        if k:
            acc = acc + e[:, k]
        action = action + (threshold >= acc)  # a bool adds as 0 or 1 and keeps int32 (jax and torch)
    return action
