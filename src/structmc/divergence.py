"""What a run says when a chain diverges: :class:`DivergenceError`, and the message naming the
first non-finite iteration and its likely cause (:func:`divergence_error`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .chain import Chain


class DivergenceError(FloatingPointError):
    """The chain produced NaN/Inf. ``.chain`` holds the draws kept before it happened."""

    finite = False  # True for a blow-up stop: its iteration is finite, its draw and records are kept

    def __init__(self, message: str, step: int, chain: Chain | None = None):
        super().__init__(message)
        self.step = step
        self.chain = chain

    def __reduce__(self):  # pickles across processes (executors) with its step and chain
        return (type(self), (str(self), self.step, self.chain))


def divergence_error(name: str, iteration: int, energy, lr, target, theta0: Tensor, data) -> DivergenceError:
    """The error for a chain first non-finite at ``iteration`` (its records ``energy`` and
    ``lr``): at iteration 1 with a non-finite energy or gradient at the start, the start is
    blamed, not the step size."""
    if iteration == 1 and _non_finite_at_start(target, theta0, data):
        return DivergenceError(
            f"{name}: the energy or its gradient is NaN/Inf at the initial point, before any "
            "step: check init, the data and the prior (the step size is not the cause)",
            1,
        )
    if isinstance(energy, Tensor) and not bool(torch.isfinite(energy).all()):
        what = f"non-finite energy at iteration {iteration}"
    else:
        what = f"non-finite parameters after iteration {iteration}"
    hint = f" (lr={lr:.3g}); reduce the step size" if lr is not None else ""
    return DivergenceError(f"{name}: {what}{hint}", iteration)


def _non_finite_at_start(target, theta0: Tensor, data) -> bool:
    """Energy and gradient of the base target at the initial positions on the first rows of
    the data (no random draw: the run's stream is untouched)."""
    base = target.cv_base
    batch = None
    if data is not None:
        rows = min(64, int(data[0].shape[0]))
        batch = tuple(t[:rows].expand(theta0.shape[0], *t[:rows].shape) for t in data)
    try:
        value, grad = base.value_and_grad(theta0, batch)
    except Exception:  # noqa: BLE001  (a diagnosis only: keep the original error path)
        return False
    return not (bool(torch.isfinite(value).all()) and bool(torch.isfinite(grad).all()))


DivergenceError.__module__ = "structmc.run"  # its documented home, and the name pickles carry
