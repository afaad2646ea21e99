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
