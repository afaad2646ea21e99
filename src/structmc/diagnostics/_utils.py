"""Shared tensor helpers for the diagnostics: layout checks, chunking over parameters,
split chains, rank normalisation and type-7 quantiles, all vectorised over parameters."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

# Elements of one parameter chunk ``[C, D, p]``. FFTs pad to about 2D in complex and sorts keep
# int64 indices, so a chunk costs roughly 6-8x this in bytes at float32 (~64 MiB). Small chunks
# keep the FFT buffers and temporaries in cache: at 4 x 5,000 draws, 2^21 (~100 parameters) ran
# the one-pass ``mixing`` 1.9x and the FFTs up to 4x faster than 2^24 on 2 cores.
CHUNK_ELEMENTS = 2**21


def as_draws(x, name: str = "x") -> Tensor:
    """``x`` as a floating tensor of layout ``(chains, draws, ...)``.

    Accepts a :class:`~structmc.chain.Chain` (its ``samples``), a tensor or an array. Integer and
    boolean inputs become the default float dtype; half precisions become float32 because FFT
    and rank statistics lose too much precision below that.
    """
    if hasattr(x, "samples") and hasattr(x, "space"):
        x = x.samples
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    elif x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if x.dim() < 2:
        raise ValueError(f"{name} must have layout (chains, draws, ...), got shape {tuple(x.shape)}")
    return x


def flat_params(x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """``[C, D, *shape]`` -> ``([C, D, P], shape)``."""
    shape = tuple(x.shape[2:])
    return x.reshape(x.shape[0], x.shape[1], -1), shape


def map_params(fn: Callable[[Tensor], Tensor], x: Tensor, chunk: int | None = None) -> Tensor:
    """Apply ``fn: [p, C, D] -> [p, ...]`` over parameter chunks of ``x [C, D, *shape]``.

    Each chunk is copied to parameter-major layout ``[p, C, D]`` (draws contiguous), where
    FFTs and sorts along the last dim run several times faster than along a strided dim.
    Returns ``[*shape, ...]``. Chunking bounds memory when P is 10^5-10^6; the work inside a
    chunk stays fully vectorised.
    """
    xf, shape = flat_params(x)
    C, D, P = xf.shape
    if chunk is None:
        chunk = max(1, CHUNK_ELEMENTS // max(1, C * D))
    outs = [fn(xf[:, :, i : i + chunk].permute(2, 0, 1).contiguous()) for i in range(0, P, chunk)]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
    return out.reshape(tuple(shape) + tuple(out.shape[1:]))


def split_chains(t: Tensor) -> Tensor:
    """Split each chain in halves: ``[p, C, D] -> [p, 2C, D // 2]``.

    For odd D the middle draw is dropped (first ``D//2`` and last ``D//2`` draws), as in ArviZ
    and Vehtari et al. (2021); TFP drops the last draw instead.
    """
    D = t.shape[-1]
    half = D // 2
    return torch.cat([t[..., :half], t[..., D - half :]], dim=-2)


def quantile_sorted(s: Tensor, q: float) -> Tensor:
    """Type-7 (linear interpolation, numpy/R default) quantile of data sorted on the last dim."""
    n = s.shape[-1]
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    w = h - lo
    a, b = s[..., lo], s[..., hi]
    return a + (b - a) * w


def quantile_select(x: Tensor, q: float) -> Tensor:
    """Type-7 quantile along the last dim by partial selection (``topk`` of the few order
    statistics below or above it) instead of a full sort: tail quantiles need O(N) work, as
    numpy's partition-based ``quantile`` does."""
    n = x.shape[-1]
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    w = h - lo
    if q <= 0.5:
        v = torch.topk(x, hi + 1, dim=-1, largest=False).values  # ascending
        a, b = v[..., lo], v[..., hi]
    else:
        v = torch.topk(x, n - lo, dim=-1, largest=True).values  # descending
        a, b = v[..., n - 1 - lo], v[..., n - 1 - hi]
    return a + (b - a) * w


def quantiles(x: Tensor, qs, dim: int = 0) -> Tensor:
    """Type-7 quantiles along ``dim``; returns ``[len(qs), ...]``.

    ``torch.quantile`` refuses inputs above 2^24 elements, hence a sort-based version.
    """
    s = torch.sort(x.movedim(dim, -1), dim=-1).values
    return torch.stack([quantile_sorted(s, float(q)) for q in qs])


_ROW_BLOCK = 16  # rows per task of the packed-key sort: keeps a block's keys in L2
_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _pool() -> ThreadPoolExecutor:
    """Worker threads for the numpy sorts (which release the GIL); a fresh pool after ``fork``,
    whose child would otherwise wait on threads that do not exist there."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())))
    return _POOL[1]


def _sort_rows_packed(xn: np.ndarray, vals: np.ndarray, order: np.ndarray, lo: int, hi: int) -> None:
    """Sort rows ``lo:hi`` of float32 ``xn [r, S]`` into ``vals`` / ``order`` via int64 keys
    ``(order-preserving int32 of the value) << 32 | index``: one key sort replaces the slower
    value-plus-index sort, and numpy sorts int64 with SIMD (x86-simd-sort)."""
    S = xn.shape[-1]
    if np.isnan(xn[lo:hi]).any():  # keep torch's NaN placement (last) for these rows
        v, o = torch.sort(torch.from_numpy(xn[lo:hi]), dim=-1)
        vals[lo:hi], order[lo:hi] = v.numpy(), o.numpy()
        return
    b = xn[lo:hi].view(np.int32)
    key = (b ^ ((b >> 31) & 0x7FFFFFFF)).astype(np.int64)
    key <<= 32
    key |= np.arange(S, dtype=np.int64)
    key.sort(axis=-1)
    np.bitwise_and(key, 0xFFFFFFFF, out=order[lo:hi])
    key >>= 32
    k32 = key.astype(np.int32)
    k32 ^= (k32 >> 31) & 0x7FFFFFFF
    vals[lo:hi] = k32.view(np.float32)


def sort_last(t: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.sort(t, dim=-1)`` (values, indices). For float32 CPU input without NaN, a packed
    int64 key sort in numpy threads, several times faster; the values are the same and so are
    the indices up to the order inside runs of equal values (which rank statistics average)."""
    if t.dtype != torch.float32 or t.device.type != "cpu" or t.dim() < 1 or t.shape[-1] >= 2**31 or t.numel() == 0:
        return torch.sort(t, dim=-1)
    lead, S = t.shape[:-1], t.shape[-1]
    xn = t.detach().reshape(-1, S).contiguous().numpy()
    r = xn.shape[0]
    vals = np.empty((r, S), dtype=np.float32)
    order = np.empty((r, S), dtype=np.int64)
    blocks = [(i, min(i + _ROW_BLOCK, r)) for i in range(0, r, _ROW_BLOCK)]
    if len(blocks) == 1:
        _sort_rows_packed(xn, vals, order, 0, r)
    else:
        list(_pool().map(lambda b: _sort_rows_packed(xn, vals, order, *b), blocks))
    return torch.from_numpy(vals).reshape(*lead, S), torch.from_numpy(order).reshape(*lead, S)


def _blom_table(S: int, dtype: torch.dtype, device) -> Tensor:
    r = torch.arange(1, S + 1, dtype=torch.float64, device=device)
    return torch.special.ndtri((r - 0.375) / (S + 0.25)).to(dtype)


def z_from_sorted(srt: Tensor, order: Tensor) -> Tensor:
    """Blom scores ``Φ⁻¹((r − 3/8)/(S + 1/4))`` of average ranks r, from ``torch.sort`` output
    along the last dim.

    Ranks are first taken as the permutation 1..S, so one table of S normal quantiles is
    scattered back (no per-element ndtri). Tie groups (rare for continuous draws, but float32
    rounding and folding create a few) are then found as runs in the sparse list of equal
    neighbours and given the Blom score of their average rank, as scipy ``rankdata("average")``.
    """
    S = srt.shape[-1]
    table = _blom_table(S, srt.dtype, srt.device)
    z = torch.empty_like(srt).scatter_(-1, order, table.expand_as(srt))
    eq = srt[..., 1:] == srt[..., :-1]
    if not bool(eq.any()):
        return z
    lead = srt.shape[:-1]
    z2, order2 = z.reshape(-1, S), order.reshape(-1, S)
    row, j = eq.reshape(-1, S - 1).nonzero(as_tuple=True)  # row-major, so runs are contiguous
    pos = j + 1  # the later element of each equal pair
    new_run = torch.ones_like(pos, dtype=torch.bool)
    new_run[1:] = (row[1:] != row[:-1]) | (pos[1:] != pos[:-1] + 1)
    run_id = new_run.cumsum(0) - 1
    is_end = torch.ones_like(new_run)
    is_end[:-1] = new_run[1:]
    first, last = pos[new_run] - 1, pos[is_end]  # 0-based sorted positions spanned by each run
    zr = torch.special.ndtri(((first + last).to(torch.float64) * 0.5 + 1.0 - 0.375) / (S + 0.25)).to(srt.dtype)
    rows = torch.cat([row, row[new_run]])
    cols = torch.cat([pos, first])
    z2[rows, order2[rows, cols]] = torch.cat([zr[run_id], zr])
    return z2.reshape(*lead, S)


def z_scale(t: Tensor, return_sorted: bool = False):
    """Rank normalisation of Vehtari et al. (2021), eq. 14: pool all chains and draws of each
    parameter, ``z = Φ⁻¹((r − 3/8) / (S + 1/4))`` with average ranks r over the S pooled values
    (Blom 1958). ``t [p, C, D]``; optionally also returns the pooled sorted values ``[p, C·D]``."""
    p = t.shape[0]
    srt, order = sort_last(t.reshape(p, -1))
    z = z_from_sorted(srt, order).reshape(t.shape)
    return (z, srt) if return_sorted else z


def check_min_draws(x: Tensor, min_draws: int = 4, min_chains: int = 1) -> None:
    if x.shape[1] < min_draws or x.shape[0] < min_chains:
        raise ValueError(f"need at least {min_chains} chain(s) of {min_draws} draws, got shape {tuple(x.shape)}")
