"""Kernel Stein discrepancy (:mod:`structmc.diagnostics.stein`): the Langevin Stein kernel of
the IMQ base kernel and the KSD (V- or U-statistic, and its curve over the first m samples) from
Gram matrices in row blocks (Liu, Lee & Jordan 2016; Chwialkowski, Strathmann & Gretton 2016;
Gorham & Mackey 2017)."""

from __future__ import annotations

import torch
from torch import Tensor

from .points import _check_pair, _rowdot


def imq_stein_kernel(
    x: Tensor, y: Tensor, sx: Tensor, sy: Tensor, c: float = 1.0, beta: float = -0.5, lengthscale: float = 1.0
) -> Tensor:
    """Langevin Stein kernel of the IMQ kernel, elementwise over leading dims of ``[..., d]``.

    With ``r = x − y``, ``q = c² + ‖r‖²/ℓ²``:
    ``k0 = (sx·sy) q^β − (2β/ℓ²) q^{β−1} ((sx − sy)·r + d) − 4β(β−1) (‖r‖²/ℓ⁴) q^{β−2}``
    (= sx·sy k + sx·∇_y k + sy·∇_x k + ∇_x·∇_y k). Direct pairwise form, for small inputs/tests.
    """
    r = x - y
    d = x.shape[-1]
    r2 = (r * r).sum(-1) / lengthscale**2
    q = c * c + r2
    return (
        (sx * sy).sum(-1) * q**beta
        - 2 * beta / lengthscale**2 * q ** (beta - 1) * (((sx - sy) * r).sum(-1) + d)
        - 4 * beta * (beta - 1) * r2 / lengthscale**2 * q ** (beta - 2)
    )


def _ksd_blocks(x: Tensor, s: Tensor, c2: float, beta: float, ell: float, block: int | None, center: bool):
    """Yield ``(i0, K)`` with K the rows ``i0:i0+b`` of a matrix whose sum over any square index
    set ``I×I`` equals that of the Stein kernel matrix (``k0`` with ``M_ij + M_ji`` replaced by
    ``2 M_ij``, ``M = S Xᵀ``: valid because the weights ``q^{β−1}`` are symmetric).

    Per block: three matrix products ``X_b Xᵀ``, ``S_b Sᵀ``, ``S_b Xᵀ`` and O(b·n) elementwise
    work, so the cost is the 3 Gram products (3n²d) and memory O(b·n), never O(n²d).
    """
    n, d = x.shape
    if center:
        # k0 is translation invariant in x; centring shrinks ‖x‖² and so the cancellation in
        # ‖x_i‖² + ‖x_j‖² − 2x_i·x_j
        x = x - x.mean(dim=0, keepdim=True)
    xx = _rowdot(x, x)
    a = _rowdot(s, x)
    if block is None:
        block = max(1, min(n, 2**22 // max(n, 1)))
    inv_l2 = 1.0 / (ell * ell)
    c_cross = -2.0 * beta * inv_l2
    c_r2 = 4.0 * beta * (beta - 1.0) * inv_l2
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        xb, sb = x[i0:i1], s[i0:i1]
        rows = torch.arange(i1 - i0, device=x.device)
        # ‖x_i − x_j‖² and (s_i·x_i + s_j·x_j − 2 s_i·x_j) straight out of the GEMM (addmm adds
        # the outer sums), then a handful of in-place passes: the cost is the three products
        r2 = torch.addmm(xx[i0:i1, None] + xx[None, :], xb, x.T, alpha=-2.0).clamp_min_(0.0)
        r2[rows, rows + i0] = 0.0  # exact zeros on the diagonal instead of rounding noise
        cross = torch.addmm(a[i0:i1, None] + a[None, :], sb, x.T, alpha=-2.0)
        cross[rows, rows + i0] = 0.0
        K = sb @ s.T
        if inv_l2 != 1.0:
            r2.mul_(inv_l2)
        inv_q = r2 + c2
        qb = inv_q.rsqrt() if beta == -0.5 else inv_q.pow(beta)  # q^β
        inv_q.reciprocal_()
        # k0 = (s_i·s_j) q^β + q^{β−1} [c_cross (cross + d) − c_r2 ‖r‖²/q]
        t = cross.add_(d).mul_(c_cross).sub_(r2.mul_(inv_q).mul_(c_r2))
        K.mul_(qb).add_(t.mul_(qb.mul_(inv_q)))
        yield i0, K


def _diag(x: Tensor, s: Tensor, c2: float, beta: float, ell: float) -> Tensor:
    d = x.shape[1]
    return _rowdot(s, s) * c2**beta - 2 * beta / ell**2 * c2 ** (beta - 1) * d


def ksd(
    samples,
    scores,
    *,
    c: float = 1.0,
    beta: float = -0.5,
    lengthscale: float = 1.0,
    statistic: str = "v",
    squared: bool = False,
    block_size: int | None = None,
    center: bool = True,
    reference_compat: bool = False,
) -> Tensor:
    """Kernel Stein discrepancy with the IMQ kernel and Langevin Stein operator (Liu, Lee &
    Jordan 2016; Chwialkowski et al. 2016; Gorham & Mackey 2017), see :func:`imq_stein_kernel`.

    * ``statistic="v"``: ``KSD² = (1/n²) Σ_{i,j} k0(x_i, x_j)`` (V-statistic, >= 0, biased up
      by ``E k0(x,x)/n``); returns ``√KSD²``. Same as stein-thinning's ``ksd`` and the MAMBA
      reference ``imq_KSD`` (``√(ΣΣk0)/N``).
    * ``statistic="u"``: ``KSD² = (1/(n(n−1))) Σ_{i≠j} k0(x_i, x_j)`` (unbiased, can be < 0);
      returns ``√max(KSD², 0)`` or, with ``squared=True``, the signed estimate.

    ``samples``, ``scores``: ``[n, d]`` (``[C, D, P]`` is pooled). Computed from Gram matrices in
    row blocks of ``block_size`` (default: ~4M kernel entries per block), so n = 2,000 in
    d = 10^5 needs the inputs plus a centred copy of ``samples`` (``center=False`` skips it at
    some float32 accuracy cost), not n²·d. ``reference_compat=True``: see :mod:`structmc.diagnostics.stein`.
    """
    x, s = _check_pair(samples, scores)
    if reference_compat:
        statistic, lengthscale = "v", 1.0
    n = x.shape[0]
    c2 = float(c) ** 2
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for _, K in _ksd_blocks(x, s, c2, float(beta), float(lengthscale), block_size, center):
        total += K.sum(dtype=torch.float64)
    if statistic == "v":
        val = total / (n * n)
    elif statistic == "u":
        if n < 2:
            raise ValueError("the U-statistic needs n >= 2")
        trace = _diag(x, s, c2, float(beta), float(lengthscale)).sum(dtype=torch.float64)
        val = (total - trace) / (n * (n - 1))
    else:
        raise ValueError(f"statistic must be 'v' or 'u', got {statistic!r}")
    val = val.to(x.dtype)
    return val if squared else val.clamp_min(0.0).sqrt()


def ksd_curve(
    samples,
    scores,
    *,
    at=None,
    c: float = 1.0,
    beta: float = -0.5,
    lengthscale: float = 1.0,
    statistic: str = "v",
    block_size: int | None = None,
    center: bool = True,
) -> Tensor:
    """KSD of the first m samples for m = 1..n (or for the sizes in ``at``), in one pass.

    ``T_m = Σ_{i,j<=m} k0_ij`` is accumulated from row sums of the lower triangle and column
    sums of the strict upper triangle of each block; V: ``√T_m / m`` (stein-thinning's
    ``stein.ksd`` sequence), U: ``√max(0, (T_m − Σ_{i<=m} k0_ii) / (m(m−1)))`` (NaN at m = 1).
    Useful to watch a chain approach its target as draws accumulate (``samples`` in draw order).
    """
    x, s = _check_pair(samples, scores)
    n = x.shape[0]
    c2 = float(c) ** 2
    lower = torch.zeros(n, dtype=torch.float64, device=x.device)
    upper = torch.zeros(n, dtype=torch.float64, device=x.device)
    cols = torch.arange(n, device=x.device)
    for i0, K in _ksd_blocks(x, s, c2, float(beta), float(lengthscale), block_size, center):
        K = K.to(torch.float64)
        rows = torch.arange(i0, i0 + K.shape[0], device=x.device).unsqueeze(1)
        lower[i0 : i0 + K.shape[0]] = torch.where(cols <= rows, K, 0.0).sum(1)
        upper += torch.where(rows < cols, K, 0.0).sum(0)
    T = (lower + upper).cumsum(0)
    m = torch.arange(1, n + 1, device=x.device, dtype=torch.float64)
    if statistic == "v":
        out = T.clamp_min(0.0).sqrt() / m
    elif statistic == "u":
        tr = _diag(x, s, c2, float(beta), float(lengthscale)).to(torch.float64).cumsum(0)
        out = ((T - tr) / (m * (m - 1))).clamp_min(0.0).sqrt()
    else:
        raise ValueError(f"statistic must be 'v' or 'u', got {statistic!r}")
    out = out.to(x.dtype)
    if at is not None:
        at = torch.as_tensor(at, dtype=torch.long, device=x.device)
        out = out[at - 1]
    return out
