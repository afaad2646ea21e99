"""pSGLD's optional Γ term against finite differences of the preconditioner G(θ)."""

from __future__ import annotations

import torch
from torch import nn

import structmc as sm
from structmc.samplers.psgld import PSGLDState


def quartic(theta, batch):
    return -(0.25 * theta**4 + 0.5 * theta**2).sum()


def test_gamma_equals_finite_difference_derivative_of_the_preconditioner():
    alpha, eps, lr, N = 0.9, 1e-3, 0.01, 4
    energy = sm.LogDensityEnergy(quartic, 3)
    theta = torch.tensor([[0.7, -1.2, 0.3]], dtype=torch.float64)
    v_prev = torch.tensor([[0.5, 2.0, 0.1]], dtype=torch.float64) / N**2

    def precond(t):  # G after the V update at position t, as a function of t
        _, g = energy.value_and_grad(t, None)
        return 1 / (eps + (alpha * v_prev + (1 - alpha) * (g / N) ** 2).sqrt())

    h = 1e-6
    eye = torch.eye(3, dtype=torch.float64)
    fd = torch.stack([(precond(theta + h * eye[i]) - precond(theta - h * eye[i]))[0, i] / (2 * h) for i in range(3)])

    sampler = sm.PSGLD(lr, alpha=alpha, eps=eps, num_data=N, temperature=0.0, include_gamma=True)
    _, g = energy.value_and_grad(theta, None)
    state = PSGLDState(theta.clone(), v_prev.clone(), step=5)
    state = sampler.update(state, g, lr, None, hessian_diag=energy.hessian_diag(theta, None))
    expected = theta - 0.5 * lr * precond(theta) * g + 0.5 * lr * fd
    assert torch.allclose(state.theta, expected, rtol=1e-7, atol=1e-10)

    plain = sm.PSGLD(lr, alpha=alpha, eps=eps, num_data=N, temperature=0.0)
    s2 = plain.update(PSGLDState(theta.clone(), v_prev.clone(), step=5), g, lr, None)
    assert torch.allclose(s2.theta, theta - 0.5 * lr * precond(theta) * g)
    assert not torch.allclose(s2.theta, state.theta)


def test_module_hessian_diag_is_unbiased_and_runs_in_sample():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    energy = sm.ModuleEnergy(net, "categorical", prior_std=2.0, num_data=40)
    X, y = torch.randn(40, 3, dtype=torch.float64), torch.randint(0, 2, (40,))
    theta = energy.initial_position().unsqueeze(0)
    batch = (X[:10].unsqueeze(0), y[:10].unsqueeze(0))
    leaf = theta[0].clone().requires_grad_(True)

    def u(t):
        out = torch.func.functional_call(energy.module, energy.space.unflatten(t), (X[:10],))
        return 4.0 * torch.nn.functional.cross_entropy(out, y[:10], reduction="sum") + (t * t).sum() / 8

    exact = torch.autograd.functional.hessian(u, leaf).diagonal()
    est = energy.hessian_diag(theta, batch, torch.Generator().manual_seed(0), num_probes=1000)[0]
    # Hutchinson: Var[z_i (Hz)_i] = Σ_{j≠i} H_ij², so the error bound per coordinate is known
    hess = torch.autograd.functional.hessian(u, leaf)
    se = ((hess.square().sum(1) - hess.diagonal().square()) / 1000).sqrt()
    assert bool(((est - exact).abs() <= 5 * se + 1e-9).all())

    chain = sm.sample(energy, None, sm.PSGLD(1e-4, include_gamma=True), 20, data=(X, y), batch_size=10,
                      num_chains=2, progress=False)
    assert bool(torch.isfinite(chain.samples).all())
