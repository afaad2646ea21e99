"""Each copy's minibatch: a chain's batch repeated for its k copies, or cut into K slices
(``split_batch``; see :class:`~structmc.structured.StructuredEnergy`)."""

from __future__ import annotations

from torch import Tensor


def _repeat_chains(t: Tensor, k: int) -> Tensor:
    """``[C, n, ...]`` -> ``[C·k, n, ...]``, each chain's batch for its k copies; a zero-copy
    expand for one chain (the batch is read-only)."""
    if t.shape[0] == 1:
        return t.expand(k, *t.shape[1:])
    return t.repeat_interleave(k, dim=0)


def _split_chains(t: Tensor, K: int, k0: int, k1: int) -> Tensor:
    """``[C, n, ...]`` -> ``[C·(k1-k0), n/K, ...]``: slices k0..k1-1 of K contiguous slices of
    each chain's batch, chain-major like the mixed parameters. A view for all K slices of a
    contiguous batch (a copy only of a chunk of several chains, or of a stride-0 batch)."""
    parts = t.unflatten(1, (K, t.shape[1] // K))
    if k0 or k1 != K:
        parts = parts[:, k0:k1]
    return parts.flatten(0, 1)
