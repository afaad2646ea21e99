"""Derivatives beyond the gradient, shared by energies and priors (below both)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def hutchinson_diag(
    energy_of: Callable[[Tensor], Tensor], theta: Tensor, generator: torch.Generator | None, num_probes: int = 1
) -> Tensor:
    """Unbiased estimate of diag ∇²U per chain: E_z[z ⊙ (∇²U z)], z Rademacher (Hutchinson).

    Exact when the Hessian is diagonal. ``energy_of(theta) -> [C]`` must build a graph.
    """
    with torch.enable_grad():
        leaf = theta.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(energy_of(leaf).sum(), leaf, create_graph=True)
        est = torch.zeros_like(theta)
        for k in range(num_probes):
            z = (
                torch.randint(0, 2, theta.shape, generator=generator, device=theta.device)
                .to(theta.dtype)
                .mul_(2)
                .sub_(1)
            )
            (hz,) = torch.autograd.grad(grad, leaf, grad_outputs=z, retain_graph=k < num_probes - 1)
            est += z * hz
    return est / num_probes


def traced_value_and_grad(
    energy_of: Callable[..., Tensor], leaves: tuple[Tensor, ...], extra: tuple[Tensor, ...] = ()
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """``(energy_of(*leaves, *extra).detach(), ∇ of its sum with respect to each leaf)`` inside a
    ``torch.compile`` trace: through :func:`torch.func.grad`, which Dynamo captures on every
    supported PyTorch (a leaf made with ``requires_grad_()`` is refused by torch 2.11's Dynamo:
    "Unsupported Tensor.requires_grad_() call"). ``extra``: tensors the function updates in place
    (BatchNorm's running statistics), passed in rather than captured, as the transform requires.
    Eager code keeps ``torch.autograd.grad``."""

    def total(*xs: Tensor) -> tuple[Tensor, Tensor]:
        energy = energy_of(*xs)
        return energy.sum(), energy

    grads, energy = torch.func.grad(total, argnums=tuple(range(len(leaves))), has_aux=True)(*leaves, *extra)
    return energy.detach(), tuple(grads)
