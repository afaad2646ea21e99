"""Functions of any energy: :func:`as_energy` (an energy from a target), :func:`validate_data`,
:func:`check_finite_at` and :func:`full_data_value_and_grad`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..module_binding import energy_input_keys, flat_data
from .log_density import LogDensityEnergy
from .protocols import Batch, Energy


def validate_data(energy: Energy, data) -> None:
    """Check ``data`` against ``energy`` before any compute: ``energy.check(data)`` (a wrapper
    checks through its base; an energy without data checks does nothing). ``data=None`` is not
    checked."""
    if data is not None:
        energy.check(data)


def as_energy(target, dim: int | None = None) -> Energy:
    """An :class:`Energy` as is, or a log density callable wrapped as :class:`LogDensityEnergy`."""
    if isinstance(target, Energy):
        return target
    if isinstance(target, nn.Module):
        raise TypeError("wrap a module as ModuleEnergy(module, likelihood, prior_std=..., num_data=...)")
    if hasattr(target, "value_and_grad"):
        missing = [
            m
            for m in (
                "space",
                "num_data",
                "evaluations_per_call",
                "requires_data",
                "device",
                "dtype",
                "cv_base",
                "value_and_grad",
                "value",
                "with_num_data",
                "has_buffers",
                "check",
                "describe",
            )
            if not hasattr(target, m)
        ]
        raise TypeError(
            f"{type(target).__name__} does not implement the Energy protocol: missing {missing} "
            "(see structmc.energy.Energy; subclass structmc.energy.EnergyBase for the defaults of "
            "evaluations_per_call, requires_data, device, dtype, cv_base, has_buffers, check and describe, "
            "or structmc.energy.WrappedEnergy to wrap another energy)"
        )
    if callable(target):
        if dim is None:
            raise ValueError("dim is needed to wrap a log density; it is taken from init")
        return LogDensityEnergy(target, dim)
    raise TypeError(f"expected an Energy or a log density callable, got {type(target).__name__}")


def check_finite_at(energy: Energy, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
    """Evaluate ``energy`` at ``theta [C, P]`` on ``batch`` and raise ``ValueError`` naming the
    chains whose energy or gradient is NaN/Inf (e.g. at the initial point, before sampling);
    returns ``(energy [C], grad [C, P])``."""
    value, grad = energy.value_and_grad(theta, batch)
    bad_value = ~torch.isfinite(value)
    bad_grad = ~torch.isfinite(grad).all(-1)
    if bool(bad_value.any()) or bool(bad_grad.any()):
        chains = torch.nonzero(bad_value | bad_grad).flatten().tolist()
        what = "energy" if bool(bad_value.any()) else "gradient"
        if bool(bad_value.any()) and bool(bad_grad.any()):
            what = "energy and gradient"
        raise ValueError(
            f"the {what} is not finite at the initial point for chain(s) {chains} "
            f"(energy {value[chains].tolist()}): check init, the data and the log density"
        )
    return value, grad


def full_data_value_and_grad(energy: Energy, theta: Tensor, data: Sequence[Tensor], chunk_size: int = 4096):
    """Exact full-data energy and gradient, accumulated over contiguous chunks of ``data``.

    Each chunk's N/n-scaled energy is weighted by n_k/N, so the likelihood sums exactly once
    and the prior (present in every chunk) gets total weight one. ``data`` may hold the inputs
    as one dict of tensors (a module called with keyword inputs: ``ModuleEnergy(...,
    input_keys=...)``).
    """
    data = flat_data(energy_input_keys(energy), data, "full_data_value_and_grad")
    n_total = int(data[0].shape[0])
    if energy.num_data is None and n_total > chunk_size:
        raise ValueError("full-data evaluation in chunks needs energy.num_data (the N/n scaling)")
    C = theta.shape[0]
    value, grad = theta.new_zeros(C), torch.zeros_like(theta)
    for start in range(0, n_total, chunk_size):
        chunk = tuple(t[start : start + chunk_size].expand(C, *t[start : start + chunk_size].shape) for t in data)
        weight = chunk[-1].shape[1] / n_total if energy.num_data is not None else 1.0
        u, g = energy.value_and_grad(theta, chunk)
        value += weight * u
        grad += weight * g
    return value, grad
