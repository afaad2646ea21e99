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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: how a window's positions become M: "variance" (Stan's: the positions' variance), "curvature"
#: (the ratio of the positions' and the gradients' standard deviations)
ESTIMATORS = ("curvature", "variance")


@dataclass(frozen=True)
class WindowAdaptation:
    """Adapt a diagonal inverse mass ``M`` during the first ``steps`` updates, then freeze it
    (see the module docstring). ``initial_buffer``, ``base_window`` and ``terminal_buffer`` are
    Stan's (75, 25, 50); when they do not fit in ``steps``, they are 15 %, 75 % and 10 % of it,
    as in Stan."""

    steps: int
    estimator: str = "curvature"
    initial_buffer: int = 75
    base_window: int = 25
    terminal_buffer: int = 50

    def __post_init__(self):
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
    running means and sums of squared deviations (Welford) of θ and of the gradient."""

    inverse_mass: Tensor
    mean: Tensor
    m2: Tensor
    grad_mean: Tensor
    grad_m2: Tensor
    count: int = 0

    @classmethod
    def start(cls, theta: Tensor) -> WindowState:
        z = torch.zeros_like
        return cls(torch.ones_like(theta), z(theta), z(theta), z(theta), z(theta))

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("inverse_mass", "mean", "m2", "grad_mean", "grad_m2", "count")}


def adapt(
    adaptation: WindowAdaptation, layout, window: WindowState, update: int, theta: Tensor, grad: Tensor
) -> Tensor | None:
    """After update number ``update`` (0-based, at position ``theta`` with gradient ``grad``):
    accumulate inside the slow windows; at a window's end set ``M`` (regularised as Stan does,
    n/(n+5)·m̂ + 10⁻³·5/(n+5)), start the next window afresh and return the previous ``M``
    (``None`` where ``M`` did not change)."""
    initial, ends = layout
    if not ends or not initial <= update < ends[-1]:
        return None
    window.count += 1
    for x, mean, m2 in ((theta, window.mean, window.m2), (grad, window.grad_mean, window.grad_m2)):
        delta = x - mean
        mean.add_(delta, alpha=1.0 / window.count)
        m2.addcmul_(delta, x - mean)
    if update + 1 not in ends:
        return None
    previous = window.inverse_mass.clone()
    n = window.count
    if adaptation.estimator == "variance":
        estimate = window.m2 / max(n - 1, 1)
    else:  # a quadratic energy has g = H(θ - μ): std(θ)/std(g) = 1/H, however far the chain has moved
        estimate = (window.m2 / window.grad_m2.clamp_min(torch.finfo(theta.dtype).tiny)).sqrt()
    window.inverse_mass.copy_(estimate * (n / (n + 5.0)) + 1e-3 * (5.0 / (n + 5.0)))
    window.count = 0
    for t in (window.mean, window.m2, window.grad_mean, window.grad_m2):
        t.zero_()
    return previous


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
    "window_from_flat",
    "ESTIMATORS",
]
