"""Finite-set Stein discrepancy (:mod:`structmc.diagnostics.stein`; Jitkrittum, Xu, Szabó,
Fukumizu & Gretton 2017, "A linear-time kernel goodness-of-fit test"): FSSD² in O(n·d·J), its
test locations, their optimisation, and the median bandwidth heuristic."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .points import _as_points, _check_pair, _rowdot


def median_bandwidth(samples, max_points: int = 1000, seed: int = 0) -> float:
    """Median heuristic: median pairwise Euclidean distance among at most ``max_points``
    samples (a seeded random subset), as ``meddistance`` in Jitkrittum et al.'s ``kgof``."""
    x = _as_points(samples, "samples")
    if x.shape[0] > max_points:
        g = torch.Generator().manual_seed(seed)
        x = x[torch.randperm(x.shape[0], generator=g)[:max_points].to(x.device)]
    x = x - x.mean(0, keepdim=True)
    n, d = x.shape
    if n * n * d <= 2**26:
        # exact differences: the Gram form ‖x‖² + ‖y‖² − 2x·y cancels catastrophically when
        # the points span many orders of magnitude (an exploding chain), giving zeros
        dist = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist")
    else:
        xx = (x * x).sum(1)
        dist = (xx[:, None] + xx[None, :] - 2 * x @ x.T).clamp_min(0).sqrt()
    iu = torch.triu_indices(n, n, 1, device=x.device)
    if iu.shape[1] == 0:
        return 1.0
    med = float(dist[iu[0], iu[1]].median())
    return med if med > 0 and math.isfinite(med) else 1.0


def _kernel_weights(r2: Tensor, kernel: str, bandwidth: float, c: float, beta: float, compat: bool):
    """``ξ(x_i, v_j) = A_ij s_i + B_ij (x_i − v_j)``: return (A, B) from squared distances."""
    if kernel == "gauss":
        A = torch.exp(-r2 / (2.0 * bandwidth**2))
        return A, -A / bandwidth**2
    if kernel == "imq":
        l2 = bandwidth**2
        q = (c if compat else c * c) + r2 / l2
        A = q.pow(beta)
        return A, 2.0 * beta * (A / q) / l2
    raise ValueError(f"kernel must be 'gauss' or 'imq', got {kernel!r}")


#: up to this many n·J·d elements FSSD works on exact differences x_i − v_j (see below)
EXACT_FSSD_ELEMENTS = 2**22


def _fssd_terms(x, s, V, kernel, bandwidth, c, beta, compat, power: bool):
    n, d = x.shape
    J = V.shape[0]
    if n * J * d <= EXACT_FSSD_ELEMENTS:
        return _fssd_terms_exact(x, s, V, kernel, bandwidth, c, beta, compat, power)
    xx = _rowdot(x, x)
    vv = (V * V).sum(1)
    XV = x @ V.T
    SV = s @ V.T
    r2 = (xx[:, None] + vv[None, :] - 2.0 * XV).clamp_min(0.0)
    A, B = _kernel_weights(r2, kernel, bandwidth, c, beta, compat)
    G = A.T @ s + B.T @ x - V * B.sum(0).unsqueeze(1)  # [J, d]: Σ_i ξ(x_i, v_j)
    ss = _rowdot(s, s)
    a = _rowdot(s, x)
    sq = (A * A * ss[:, None] + 2.0 * A * B * (a[:, None] - SV) + B * B * r2).sum()  # Σ_ij ‖ξ_ij‖²
    G2 = (G * G).sum()
    u_stat = (G2 - sq) / (d * J * n * (n - 1))
    v_stat = G2 / (d * J * n * n)
    if not power:
        return u_stat, v_stat, None
    # τ_i·μ with τ_i = vec_j ξ_ij / √(dJ), μ = mean_i τ_i = G / (n √(dJ))
    u = (A * (s @ G.T) + B * (x @ G.T - (V * G).sum(1)[None, :])).sum(1) / (d * J * n)
    var_h1 = 4.0 * ((u * u).mean() - v_stat**2)
    return u_stat, v_stat, var_h1


def _fssd_terms_exact(x, s, V, kernel, bandwidth, c, beta, compat, power: bool):
    """The terms of :func:`_fssd_terms` from the differences ``x_i − v_j`` themselves
    (``[J, n, d]``, at most :data:`EXACT_FSSD_ELEMENTS`). The Gram form ``‖x‖² + ‖v‖² − 2x·v``
    and ``Bᵀx − v ΣB`` cancel catastrophically for samples far from the origin relative to
    their spread (a chain that is exploding), turning a terrible sample into FSSD = 0."""
    n, d = x.shape
    J = V.shape[0]
    diff = x.unsqueeze(0) - V.unsqueeze(1)  # [J, n, d]
    A, B = _kernel_weights((diff * diff).sum(2), kernel, bandwidth, c, beta, compat)  # [J, n]
    xi = A.unsqueeze(2) * s.unsqueeze(0) + B.unsqueeze(2) * diff  # ξ(x_i, v_j)
    G = xi.sum(1)  # [J, d]
    sq = (xi * xi).sum()
    G2 = (G * G).sum()
    u_stat = (G2 - sq) / (d * J * n * (n - 1))
    v_stat = G2 / (d * J * n * n)
    if not power:
        return u_stat, v_stat, None
    u = torch.einsum("jnd,jd->n", xi, G) / (d * J * n)
    var_h1 = 4.0 * ((u * u).mean() - v_stat**2)
    return u_stat, v_stat, var_h1


def fssd(
    samples,
    scores,
    locations,
    *,
    kernel: str = "gauss",
    bandwidth: float | None = None,
    c: float = 1.0,
    beta: float = -0.5,
    statistic: str = "u",
    center: bool = True,
    reference_compat: bool = False,
) -> Tensor:
    """Finite-set Stein discrepancy ``FSSD² = (1/(dJ)) Σ_j ‖E_x ξ(x, v_j)‖²`` with
    ``ξ(x, v) = k(x, v) ∇log π(x) + ∇_x k(x, v)`` (Jitkrittum et al. 2017, eq. 2).

    ``statistic="u"``: the unbiased ``Σ_j [‖Σ_i ξ_ij‖² − Σ_i ‖ξ_ij‖²] / (d J n(n−1))``
    (Jitkrittum et al. eq. 3); ``"v"``: ``Σ_j ‖Σ_i ξ_ij‖² / (d J n²)``. Returns FSSD² (not its
    root). O(n·d·J) via the products ``X Vᵀ``, ``S Vᵀ``, ``Aᵀ S``, ``Bᵀ X``: no ``[n, J, d]``
    tensor. Kernels: ``"gauss"`` ``exp(−‖x−v‖²/(2σ²))`` (σ = ``bandwidth``, default median
    heuristic), ``"imq"`` ``(c² + ‖x−v‖²/ℓ²)^β`` (ℓ = ``bandwidth``, default 1).
    Differentiable in ``locations``. ``reference_compat=True``: the MAMBA reference's
    ``FSSD``: IMQ ``(c + ‖r‖²)^β``, U-statistic (see :mod:`structmc.diagnostics.stein`).
    """
    x, s = _check_pair(samples, scores)
    V = _as_points(locations, "locations").to(x)
    if V.shape[1] != x.shape[1]:
        raise ValueError(f"locations have dimension {V.shape[1]}, samples {x.shape[1]}")
    if reference_compat:
        kernel, statistic, bandwidth = "imq", "u", 1.0
    if bandwidth is None:
        bandwidth = median_bandwidth(x) if kernel == "gauss" else 1.0
    if center:
        m = x.mean(0, keepdim=True).detach()
        x, V = x - m, V - m
    u, v, _ = _fssd_terms(x, s, V, kernel, float(bandwidth), float(c), float(beta), reference_compat, False)
    if statistic == "u":
        if x.shape[0] < 2:
            raise ValueError("the U-statistic needs n >= 2")
        return u
    if statistic == "v":
        return v
    raise ValueError(f"statistic must be 'u' or 'v', got {statistic!r}")


def fssd_test_locations(
    samples,
    num_locations: int = 10,
    *,
    generator: torch.Generator | None = None,
    covariance: str = "full",
    reference_compat: bool = False,
) -> Tensor:
    """J test locations drawn from a Gaussian fitted to the samples (Jitkrittum et al. 2017, §4).

    ``covariance="full"``: ``N(x̄, Σ̂ + 1e-10·I)`` with Σ̂ the sample covariance (divisor n−1),
    sampled as ``x̄ + (X − x̄)ᵀ z / √(n−1) + 1e-5 ε`` with ``z ~ N(0, I_n)``: exact in
    distribution, O(n·d) per location, no d×d matrix. ``"diag"``: ``N(x̄, diag σ̂²)``.
    Independent draws from ``generator`` (seed it for reproducibility). ``reference_compat=True``
    draws one location and repeats it J times, as the reference's reused PRNG key does.
    """
    x = _as_points(samples, "samples")
    n, d = x.shape
    J = int(num_locations)
    draws = 1 if reference_compat else J
    gen_device = generator.device if generator is not None else torch.device("cpu")

    def normal(*shape):
        return torch.randn(*shape, generator=generator, device=gen_device, dtype=x.dtype).to(x.device)

    mean = x.mean(0)
    if covariance == "full":
        if n < 2:
            raise ValueError("a full-covariance fit needs n >= 2")
        z = normal(draws, n)
        V = mean + (z @ (x - mean)) / math.sqrt(n - 1) + 1e-5 * normal(draws, d)
    elif covariance == "diag":
        sd = x.std(0) if n > 1 else torch.zeros_like(mean)
        V = mean + sd * normal(draws, d)
    else:
        raise ValueError(f"covariance must be 'full' or 'diag', got {covariance!r}")
    return V.expand(J, d).clone() if reference_compat else V


@dataclass
class FSSDResult:
    """Outcome of :func:`fssd_optimize`."""

    value: Tensor  # FSSD² (U-statistic) on the evaluation samples, final locations
    initial_value: Tensor  # same, at the initial locations
    locations: Tensor  # [J, d] optimised test locations
    history: list[float] = field(default_factory=list)  # objective on the training samples per step
    bandwidth: float = 1.0
    kernel: str = "gauss"
    objective: str = "fssd"
    evaluated_on: str = "all"  # "all" or "holdout"


def fssd_optimize(
    samples,
    scores,
    num_locations: int = 10,
    *,
    kernel: str = "gauss",
    bandwidth: float | None = None,
    c: float = 1.0,
    beta: float = -0.5,
    objective: str = "fssd",
    steps: int = 50,
    lr: float | None = None,
    holdout: float | None = None,
    reg: float = 1e-2,
    covariance: str = "full",
    locations: Tensor | None = None,
    generator: torch.Generator | None = None,
    reference_compat: bool = False,
) -> FSSDResult:
    """Optimise the J test locations with ``torch.optim.Adam``, then evaluate FSSD².

    ``objective="fssd"`` maximises the U-statistic FSSD² itself (as the MAMBA reference does);
    ``objective="power"`` maximises Jitkrittum et al.'s (2017, §3) test-power proxy
    ``FSSD²_U / √(σ²_H1 + reg)``, ``σ²_H1 = 4(mean_i (τ_iᵀμ)² − (μᵀμ)²)``, which is invariant to
    the scale of the discrepancy. With ``holdout=f`` a random fraction f of the samples
    (``generator``) is kept out of the optimisation and the returned value is computed on it
    (the in-sample maximum is biased upward). ``lr`` defaults to 0.1 × the median per-coordinate
    standard deviation (Adam moves each coordinate by about ``lr`` per step).
    ``reference_compat=True``: IMQ ``(c+‖r‖²)^β``, identical initial locations, FSSD² objective,
    ``Adam(lr=1e-3)``, no hold-out.
    """
    x, s = _check_pair(samples, scores)
    n = x.shape[0]
    if reference_compat:
        kernel, objective, lr, holdout, bandwidth = "imq", "fssd", 1e-3, None, 1.0
    if objective not in ("fssd", "power"):
        raise ValueError(f"objective must be 'fssd' or 'power', got {objective!r}")
    if holdout is not None:
        if not 0.0 < holdout < 1.0:
            raise ValueError("holdout must be a fraction in (0, 1)")
        gen_device = generator.device if generator is not None else torch.device("cpu")
        perm = torch.randperm(n, generator=generator, device=gen_device).to(x.device)
        n_test = max(2, int(round(holdout * n)))
        test_idx, train_idx = perm[:n_test], perm[n_test:]
        if train_idx.numel() < 2:
            raise ValueError("too few samples left for training")
        xtr, str_, xte, ste = x[train_idx], s[train_idx], x[test_idx], s[test_idx]
    else:
        xtr, str_, xte, ste = x, s, x, s
    if bandwidth is None:
        bandwidth = median_bandwidth(xtr) if kernel == "gauss" else 1.0
    bandwidth = float(bandwidth)
    if locations is None:
        locations = fssd_test_locations(
            xtr, num_locations, generator=generator, covariance=covariance, reference_compat=reference_compat
        )
    if lr is None:
        sd = xtr.std(0) if xtr.shape[0] > 1 else torch.ones(1)
        lr = 0.1 * float(sd.median()) if float(sd.median()) > 0 else 0.1
    m = xtr.mean(0, keepdim=True)
    xc = xtr - m
    V = (locations.detach().to(x) - m).clone().requires_grad_(True)
    opt = torch.optim.Adam([V], lr=lr)
    history = []
    cc, bb = float(c), float(beta)
    for _ in range(int(steps)):
        opt.zero_grad()
        u, _, var = _fssd_terms(xc, str_, V, kernel, bandwidth, cc, bb, reference_compat, objective == "power")
        obj = u if objective == "fssd" else u / torch.sqrt(var.clamp_min(0.0) + reg)
        (-obj).backward()
        opt.step()
        history.append(float(obj.detach()))
    V_final = V.detach() + m
    kw: dict[str, Any] = dict(
        kernel=kernel, bandwidth=bandwidth, c=c, beta=beta, statistic="u", reference_compat=reference_compat
    )
    value = fssd(xte, ste, V_final, **kw)
    initial = fssd(xte, ste, locations.to(x), **kw)
    return FSSDResult(
        value.detach(),
        initial.detach(),
        V_final,
        history,
        bandwidth,
        kernel,
        objective,
        "holdout" if holdout is not None else "all",
    )
