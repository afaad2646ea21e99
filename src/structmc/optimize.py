"""Finding a mode: the usual start point and control-variate centre for SGMCMC."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import Tensor

from .batching import MinibatchStream
from .energy import Energy, as_energy, from_draws_of, to_draws_of


def find_map(
    target: Energy,
    init: Tensor,
    *,
    data: Sequence[Tensor] | None = None,
    batch_size: int | None = None,
    num_steps: int = 1000,
    lr: float = 1e-2,
    seed: int = 0,
    max_seconds: float | None = None,
    info: dict | None = None,
) -> Tensor:
    """Minimise the energy with Adam on minibatches (MAMBA: lr 1e-2, batch 1%); returns ``[P]``.

    A constrained log density (``LogDensityEnergy(constraints=...)``) takes ``init`` and returns
    the mode in its draws' space; the mode is the unconstrained density's (its log-Jacobian
    included: Stan's ``jacobian=True``), a start point for sampling rather than the MAP of the
    constrained parameters.

    The energy is the N/n-scaled minibatch energy, divided by N so the step size does not
    depend on the data size. ``max_seconds``: stop after the step that passes this wall time
    (fewer than ``num_steps``; the steps taken are those of an unbounded run). ``info``: a dict
    filled with ``steps`` (taken), ``seconds`` and ``stopped_early``.
    """
    if max_seconds is not None and not float(max_seconds) > 0:
        raise ValueError(f"max_seconds must be > 0 or None, got {max_seconds!r}")
    init = torch.as_tensor(init).detach()
    energy = as_energy(target, init.shape[-1])
    init = from_draws_of(energy, init.reshape(-1))
    if data is not None and energy.num_data is None:
        energy = energy.with_num_data(int(data[0].shape[0]))
    scale = 1.0 / (energy.num_data or 1)
    theta = init.reshape(1, -1).clone().to(device=energy.device or init.device, dtype=energy.dtype or init.dtype)
    generator = torch.Generator(device=theta.device).manual_seed(seed)
    stream = None
    if data is not None:
        stream = MinibatchStream(tuple(t.to(theta.device) for t in data), batch_size, 1, generator)
    theta.requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    t0 = time.perf_counter()
    steps = 0
    for steps in range(1, int(num_steps) + 1):  # noqa: B007  (read after the loop: the steps taken)
        _, grad = energy.value_and_grad(theta.detach(), stream.next() if stream is not None else None)
        theta.grad = grad * scale
        opt.step()
        if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
            break
    if info is not None:
        info.update(steps=steps, seconds=time.perf_counter() - t0, stopped_early=steps < int(num_steps))
    out = theta.detach()[0]
    if not bool(torch.isfinite(out).all()):
        raise FloatingPointError("find_map diverged; lower lr")
    to_draws = to_draws_of(energy)
    return out if to_draws is None else to_draws(out)
