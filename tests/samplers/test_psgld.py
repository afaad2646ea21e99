"""pSGLD: the optional Γ term against autograd and finite differences of the preconditioner
G(θ); the per-datum scale N follows each run's data."""

from __future__ import annotations

import pytest
import torch
from support.gradients import DTYPE, N, _tol, regression_data
from torch import nn

import structmc
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

    chain = sm.sample(
        energy, None, sm.PSGLD(1e-4, include_gamma=True), 20, data=(X, y), batch_size=10, num_chains=2, progress=False
    )
    assert bool(torch.isfinite(chain.samples).all())


# ---------------------------------------------------------------------------------------
# Γ term against autograd; per-datum scale N
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("v_init", ["first", "zeros"])
def test_psgld_gamma_term_is_derivative_of_preconditioner(v_init):
    """With include_gamma, θ' = θ - (ε/2)G∇Û + (ε/2)Γ with Γ_i = ∂G_ii/∂θ_i, where
    G(θ) = 1/(λ + √V(θ)) and V(θ) the RMSprop update at θ (ḡ = ∇Û/N). Checked by autograd
    through that update on a separable energy (T = 0, one step)."""
    h = torch.tensor([2.0, 0.5, 3.0], dtype=DTYPE)
    c = torch.tensor([0.3, 1.0, 0.1], dtype=DTYPE)

    def lp(theta, batch):
        return -(0.5 * h * theta.square() + 0.25 * c * theta.pow(4)).sum()

    energy = structmc.LogDensityEnergy(lp, 3)
    theta = torch.tensor([[0.7, -1.2, 0.4]], dtype=DTYPE)
    lr, alpha, eps, num_data = 0.05, 0.9, 1e-3, 5
    v_prev = torch.tensor([[0.3, 0.01, 2.0]], dtype=DTYPE)
    sampler = structmc.PSGLD(
        lr, alpha=alpha, eps=eps, num_data=num_data, temperature=0.0, include_gamma=True, v_init=v_init
    )
    state = sampler.init(theta)
    first = v_init == "first"
    if not first:
        state.square_avg.copy_(v_prev)
        state.step = 3

    def precond(th):
        g = (h * th + c * th.pow(3)) / num_data
        v = g.square() if first else alpha * v_prev[0] + (1 - alpha) * g.square()
        return 1 / (eps + v.sqrt())

    G = precond(theta[0])
    Gamma = torch.diagonal(torch.autograd.functional.jacobian(precond, theta[0]))
    _, grad = energy.value_and_grad(theta, None)
    hdiag = energy.hessian_diag(theta, None, torch.Generator().manual_seed(0))
    sampler.update(state, grad, lr, None, hessian_diag=hdiag)
    expected = theta[0] - 0.5 * lr * G * grad[0] + 0.5 * lr * Gamma
    torch.testing.assert_close(state.theta[0], expected, **_tol())
    assert (Gamma.abs() > 1e-4).all()  # the term is not negligible here


def test_psgld_per_datum_scale_follows_each_runs_data():
    """pSGLD's ḡ = ∇Û/N takes N from the run's data when ``num_data`` is None. Reusing a
    sampler object for a second data set must give the same chain as a fresh sampler
    (same seed, same chain); ``sample`` must not leave the first run's N on the sampler."""
    X, y = regression_data(d=3)
    X2 = torch.cat([X, 2 * X]), torch.cat([y, -y])

    def lp_for(n_total):
        def lp(theta, batch):
            x, t = batch
            return -(n_total / t.shape[0]) * 0.5 * (t - x @ theta).square().sum() - 0.5 * theta.square().sum()

        return lp

    theta0 = torch.zeros(3, dtype=DTYPE)
    reused = structmc.PSGLD(1e-3)
    structmc.sample(lp_for(N), theta0, reused, 5, data=(X, y), batch_size=4, progress=False)
    a = structmc.sample(lp_for(2 * N), theta0, reused, 5, data=X2, batch_size=4, progress=False, seed=1)
    b = structmc.sample(lp_for(2 * N), theta0, structmc.PSGLD(1e-3), 5, data=X2, batch_size=4, progress=False, seed=1)
    torch.testing.assert_close(a.samples, b.samples, **_tol())
    assert reused.num_data in (None, 2 * N), f"sampler kept num_data={reused.num_data} from the first run"
