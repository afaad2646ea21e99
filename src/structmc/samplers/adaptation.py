r"""A diagonal preconditioner adapted in burn-in windows, then frozen (Stan's window adaptation).

A single global step size cannot sample a posterior whose scales differ by orders of magnitude:
the step the narrowest coordinate tolerates barely moves the widest. Preconditioned Langevin
dynamics with a constant positive diagonal :math:`M` (the inverse mass),

.. math::  \theta_{t+1} = \theta_t - \frac{\epsilon}{2} M \nabla\hat U(\theta_t) + \sqrt{\epsilon T M}\,\xi_t,

has the same invariant law as the unpreconditioned diffusion (:math:`M` constant), and with
:math:`M_i` the posterior variance of coordinate :math:`i` every coordinate moves on its own
scale. :class:`WindowAdaptation` estimates :math:`M` per chain during the first ``steps``
updates in Stan's windows (Stan Reference Manual, "Automatic parameter tuning"): an initial
buffer, slow windows doubling in length at whose end :math:`M` is set from the window, and a
terminal buffer; the estimate is regularised as Stan's,
:math:`\frac{n}{n+5}\hat m + 10^{-3}\frac{5}{n+5}`. After ``steps`` updates :math:`M` is frozen:
the sampler is an SGLD with a constant preconditioner from then on (keep ``burn_in >= steps``).

Two estimators of :math:`M_i` from a window's positions :math:`\theta` and gradients :math:`g`:

* ``"variance"`` (Stan's): the positions' variance. It needs the window to have explored the
  posterior, which HMC's long trajectories do; a Langevin chain started at the mode has not, in
  its wide coordinates: their window variance is small, :math:`M` shrinks and the chain slows
  further. On a Gaussian with variances 1e-2 .. 56 (tests/samplers/test_adaptation.py's target,
  1,000 windowed updates at ε = 0.02, 2,000 more) it left the two widest coordinates at 0.23 and
  0.04 of their variance (plain SGLD: 1.04 and 0.72).
* ``"curvature"`` (the default): :math:`\mathrm{sd}(\theta_i) / \mathrm{sd}(g_i)` over the window.
  For a quadratic energy :math:`g = H(\theta - \mu)` with diagonal :math:`H` this is
  :math:`1/H_{ii} = \sigma_i^2` exactly, however far the chain has moved; elsewhere it is the
  inverse curvature along the explored region (a secant estimate). Minibatch noise in :math:`g`
  makes it smaller, the safe side. On the same target every coordinate's variance came out
  within 7 % (0.95 .. 1.07).

``dense=True`` (for up to :data:`MAX_DENSE_DIM` parameters) estimates a dense ``M [C, P, P]``
instead, which also undoes correlations. ``"variance"`` is then the window's covariance S of
θ; ``"curvature"`` generalises the ratio of spreads: for a quadratic energy, g = A(θ − μ), the
window's gradient covariance is :math:`C_g = A S A` exactly, so :math:`A^{-1}` is the matrix
geometric mean

.. math::  M = S \,\#\, C_g^{-1} = S^{1/2}\,\big(S^{1/2} C_g S^{1/2}\big)^{-1/2} S^{1/2},

the solution of :math:`M C_g M = S` (Bhatia, *Positive Definite Matrices*, 2007, §4.1), again
exact however little the chain has moved, as long as the window spans every direction: the
slow windows must be longer than P (``base_window > P``). Both are shrunk toward a scaled
identity as Stan does, :math:`\frac{n}{n+5}\hat M + 10^{-3}\frac{5}{n+5} I`, and M's
Cholesky factor :math:`L` (:math:`M = LL^\top`) is computed once per window, when M is set; the
samplers use :math:`M\nabla\hat U` and :math:`L\xi` where the diagonal form has
:math:`M\nabla\hat U` and :math:`M^{1/2}\xi`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: how a window's positions become M: "variance" (Stan's: the positions' variance), "curvature"
#: (the ratio of the positions' and the gradients' standard deviations)
ESTIMATORS = ("curvature", "variance")
#: the most parameters a dense M is estimated for (it holds four [C, P, P] matrices per chain)
MAX_DENSE_DIM = 1000


@dataclass(frozen=True)
class WindowAdaptation:
    """Adapt a diagonal inverse mass ``M`` during the first ``steps`` updates, then freeze it
    (see the module docstring). ``initial_buffer``, ``base_window`` and ``terminal_buffer`` are
    Stan's (75, 25, 50); when they do not fit in ``steps``, they are 15 %, 75 % and 10 % of it,
    as in Stan. ``dense=True``: a dense ``M`` (at most :data:`MAX_DENSE_DIM` parameters, slow
    windows longer than P)."""

    steps: int
    estimator: str = "curvature"
    initial_buffer: int = 75
    base_window: int = 25
    terminal_buffer: int = 50
    dense: bool = False

    def __post_init__(self):
        if not isinstance(self.dense, bool):
            raise ValueError(f"WindowAdaptation: dense must be True or False, got {self.dense!r}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"WindowAdaptation: estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        for name in ("steps", "initial_buffer", "base_window", "terminal_buffer"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"WindowAdaptation: {name} must be an integer >= 0, got {value!r}")
        if self.steps < 20 or self.base_window < 1:
            raise ValueError(
                f"WindowAdaptation: steps = {self.steps} is too short to estimate a variance in windows "
                "(at least 20; Stan's default windows need 150)"
            )

    def layout(self) -> tuple[int, tuple[int, ...]]:
        """``(initial buffer, ends of the slow windows)``, in updates: the chain's positions from
        the first until the last end are accumulated, and ``M`` is set at every end."""
        initial, base, terminal = self.initial_buffer, self.base_window, self.terminal_buffer
        if initial + base + terminal > self.steps:  # Stan's fallback split
            initial, terminal = int(0.15 * self.steps), int(0.1 * self.steps)
            base = self.steps - initial - terminal
        ends, start, size, last = [], initial, base, self.steps - terminal
        while start < last:
            end = start + size
            if end + 2 * size > last:  # the next window would not fit: this one runs to the end
                end = last
            ends.append(end)
            start, size = end, 2 * size
        return initial, tuple(ends)


@dataclass
class WindowState:
    """The adaptation's state per chain: the inverse mass ``M [C, P]`` and the current window's
    running means and sums of squared deviations (Welford) of θ and of the gradient. Dense:
    ``M``, the sums of outer products ``m2``, ``grad_m2`` and M's Cholesky factor ``cholesky``
    are ``[C, P, P]``."""

    inverse_mass: Tensor
    mean: Tensor
    m2: Tensor
    grad_mean: Tensor
    grad_m2: Tensor
    count: int = 0
    cholesky: Tensor | None = None  # L with M = L Lᵀ, dense only

    @classmethod
    def start(cls, theta: Tensor, adaptation: WindowAdaptation | None = None) -> WindowState:
        z = torch.zeros_like
        if adaptation is None or not adaptation.dense:
            return cls(torch.ones_like(theta), z(theta), z(theta), z(theta), z(theta))
        C, P = theta.shape
        if P > MAX_DENSE_DIM:
            raise ValueError(
                f"WindowAdaptation(dense=True) is for at most {MAX_DENSE_DIM} parameters (it keeps four "
                f"[chains, P, P] matrices and factorises M), got P = {P}: use dense=False (a diagonal M)"
            )
        initial, ends = adaptation.layout()
        shortest = min(b - a for a, b in zip((initial,) + ends[:-1], ends, strict=True))
        if shortest <= P:
            raise ValueError(
                f"WindowAdaptation(dense=True): a slow window of {shortest} updates cannot estimate a {P} x {P} "
                f"matrix (a window must be longer than P = {P}): raise base_window to at least {P + 1} "
                "(and steps with it) or use dense=False"
            )
        eye = torch.eye(P, dtype=theta.dtype, device=theta.device).expand(C, P, P)
        # the window's sums in float64 whatever the chain's dtype: a gradient covariance spans the
        # squared range of the curvatures (3e7 for a 5,600-fold one), beyond float32's precision
        vector, square = theta.new_zeros(C, P, dtype=torch.float64), theta.new_zeros(C, P, P, dtype=torch.float64)
        return cls(eye.clone(), vector, square, vector.clone(), square.clone(), cholesky=eye.clone())

    def as_dict(self) -> dict:
        keys = ("inverse_mass", "mean", "m2", "grad_mean", "grad_m2", "count")
        return {k: getattr(self, k) for k in keys} | ({} if self.cholesky is None else {"cholesky": self.cholesky})

    @property
    def dense(self) -> bool:
        return self.cholesky is not None

    def times_inverse_mass(self, x: Tensor) -> Tensor:
        """M x per chain (``x [C, P]``), dense only."""
        return torch.einsum("cij,cj->ci", self.inverse_mass, x)

    def times_cholesky(self, x: Tensor) -> Tensor:
        """L x per chain (``x [C, P]``): a N(0, I) draw becomes a N(0, M) draw. Dense only."""
        assert self.cholesky is not None
        return torch.einsum("cij,cj->ci", self.cholesky, x)


def _spd_power(S: Tensor, power: float, relative_floor: float = 1e-12) -> Tensor:
    """S^power for symmetric positive semi-definite ``S [..., P, P]`` by its eigendecomposition;
    eigenvalues below ``relative_floor`` times the largest count as 0 (a pseudo-power)."""
    values, vectors = torch.linalg.eigh(0.5 * (S + S.transpose(-1, -2)))
    keep = values > relative_floor * values.amax(-1, keepdim=True).clamp_min(torch.finfo(S.dtype).tiny)
    powered = torch.where(keep, values.clamp_min(torch.finfo(S.dtype).tiny).pow(power), torch.zeros_like(values))
    return (vectors * powered.unsqueeze(-2)) @ vectors.transpose(-1, -2)


def dense_curvature_estimate(S: Tensor, grad_cov: Tensor) -> Tensor:
    """The matrix geometric mean S # C_g⁻¹ = S^{1/2}(S^{1/2} C_g S^{1/2})^{-1/2} S^{1/2}: the M
    with M C_g M = S, which is A⁻¹ for a quadratic energy with Hessian A (C_g = A S A)."""
    root = _spd_power(S, 0.5)
    middle = _spd_power(root @ grad_cov @ root, -0.5)
    estimate = root @ middle @ root
    return 0.5 * (estimate + estimate.transpose(-1, -2))


def adapt(
    adaptation: WindowAdaptation, layout, window: WindowState, update: int, theta: Tensor, grad: Tensor
) -> Tensor | None:
    """After update number ``update`` (0-based, at position ``theta`` with gradient ``grad``):
    accumulate inside the slow windows; at a window's end set ``M`` (regularised as Stan does,
    n/(n+5)·m̂ + 10⁻³·5/(n+5)), start the next window afresh and return the previous ``M``, or
    with a dense M its previous Cholesky factor (``None`` where ``M`` did not change)."""
    initial, ends = layout
    if not ends or not initial <= update < ends[-1]:
        return None
    window.count += 1
    dense = window.dense
    for x, mean, m2 in ((theta, window.mean, window.m2), (grad, window.grad_mean, window.grad_m2)):
        x = x.to(mean.dtype)  # float64 sums for a dense M (WindowState.start)
        delta = x - mean
        mean.add_(delta, alpha=1.0 / window.count)
        if dense:  # Welford's outer products: Σ δ (x − mean_new)ᵀ
            m2.add_(delta.unsqueeze(-1) * (x - mean).unsqueeze(-2))
        else:
            m2.addcmul_(delta, x - mean)
    if update + 1 not in ends:
        return None
    n = window.count
    if dense:
        assert window.cholesky is not None
        previous = window.cholesky.clone()
        # in float64 (the sums are): in float32 the gradient covariance lost its small eigenvalues
        # (the wide directions'), leaving M singular along them in some chains (measured)
        S, grad_cov = (m2 / max(n - 1, 1) for m2 in (window.m2, window.grad_m2))
        estimate = S if adaptation.estimator == "variance" else dense_curvature_estimate(S, grad_cov)
        eye = torch.eye(S.shape[-1], dtype=S.dtype, device=S.device)
        inverse_mass = estimate * (n / (n + 5.0)) + eye * (1e-3 * (5.0 / (n + 5.0)))
        window.inverse_mass.copy_(inverse_mass)
        window.cholesky.copy_(torch.linalg.cholesky(inverse_mass))
    else:
        previous = window.inverse_mass.clone()
        if adaptation.estimator == "variance":
            estimate = window.m2 / max(n - 1, 1)
        else:  # a quadratic energy has g = H(θ - μ): std(θ)/std(g) = 1/H, however far the chain has moved
            estimate = (window.m2 / window.grad_m2.clamp_min(torch.finfo(theta.dtype).tiny)).sqrt()
        window.inverse_mass.copy_(estimate * (n / (n + 5.0)) + 1e-3 * (5.0 / (n + 5.0)))
    window.count = 0
    for t in (window.mean, window.m2, window.grad_mean, window.grad_m2):
        t.zero_()
    return previous


def rescale_momentum(window: WindowState, previous: Tensor, v: Tensor) -> None:
    """After M changed (``previous`` from :func:`adapt`): v = M^{1/2} v_φ kept the same v_φ,
    i.e. v ← (M_new/M_old)^{1/2} v (diagonal) or v ← L_new L_old⁻¹ v (dense)."""
    if window.cholesky is None:
        v.mul_((window.inverse_mass / previous).sqrt())
    else:
        v_phi = torch.linalg.solve_triangular(previous, v.unsqueeze(-1), upper=False).squeeze(-1)
        v.copy_(window.times_cholesky(v_phi))


def window_to_flat(d: dict) -> dict:
    """A state dict with its ``window`` (a :class:`WindowState` or ``None``) written as flat
    ``window_*`` entries (checkpoints hold tensors and numbers); without a window, unchanged."""
    d = dict(d)
    window = d.pop("window", None)
    if window is not None:
        d.update({f"window_{k}": v for k, v in window.as_dict().items()})
    return d


def window_from_flat(d: dict) -> dict:
    """The inverse of :func:`window_to_flat`: ``window_*`` entries back into ``window``."""
    window = {k[len("window_") :]: v for k, v in d.items() if k.startswith("window_")}
    d = {k: v for k, v in d.items() if not k.startswith("window_")}
    if window:
        d["window"] = WindowState(**window)
    return d


def as_adaptation(value) -> WindowAdaptation | None:
    """``None``, a :class:`WindowAdaptation`, or its config (``Sampler.config()`` writes one)."""
    if value is None or isinstance(value, WindowAdaptation):
        return value
    if isinstance(value, dict):
        fields = {k: v for k, v in value.items() if k != "kind"}
        if value.get("kind", "WindowAdaptation") != "WindowAdaptation":
            raise ValueError(f"preconditioner: unknown kind {value.get('kind')!r}")
        return WindowAdaptation(**fields)
    raise TypeError(f"preconditioner must be None or a WindowAdaptation, got {type(value).__name__}")


__all__ = [
    "WindowAdaptation",
    "WindowState",
    "adapt",
    "as_adaptation",
    "window_to_flat",
    "rescale_momentum",
    "dense_curvature_estimate",
    "MAX_DENSE_DIM",
    "window_from_flat",
    "ESTIMATORS",
]
