"""ModuleEnergy (float64): per-group priors, the single-chain, vmapped and reference paths agree,
and the Hutchinson Hessian diagonal."""

from __future__ import annotations

import pytest
import torch
from support.gradients import (
    DTYPE,
    PRIOR_STD,
    N,
    _tol,
    classification_data,
    full_batch,
    independent_mlp_energy,
    mlp,
    mlp_energy,
    regression_data,
)
from torch import nn

import structmc
import structmc as sm


def test_module_energy_per_group_prior():
    """prior_std patterns: first match wins; with zero data weight the energy is the prior."""
    energy = mlp_energy()
    stds = energy.space.per_param_vector(PRIOR_STD, like=torch.empty(0, dtype=DTYPE))
    expected = {"0.weight": 0.5, "0.bias": 10.0, "2.weight": 2.0, "2.bias": 10.0}
    for info in energy.space.params:
        assert torch.all(stds[info.slice] == expected[info.name])
    theta = torch.randn(1, energy.space.dim, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    X, y = classification_data()
    u_all, g_all = energy.value_and_grad(theta, full_batch((X, y)))
    nll = structmc.ModuleEnergy(mlp(), "categorical", prior_std=1e12, num_data=N).value_and_grad(
        theta, full_batch((X, y))
    )
    torch.testing.assert_close(g_all - nll[1], theta / stds**2, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(u_all - nll[0], 0.5 * (theta.square() / stds**2).sum(-1), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------
# ModuleEnergy: fast paths agree with the reference
# ---------------------------------------------------------------------------------------
def _module_cases():
    Xr, yr = regression_data()
    Xc, yc = classification_data()
    yb = (Xr[:, 0] > 0).to(DTYPE)
    torch.manual_seed(0)
    return {
        "linear_gaussian": (
            structmc.ModuleEnergy(
                nn.Linear(3, 1, bias=False).to(DTYPE), "gaussian", noise_std=0.7, prior_std=2.0, num_data=N
            ),
            (Xr, yr),
        ),
        "mlp_categorical": (mlp_energy(), (Xc, yc)),
        "mlp_bernoulli": (
            structmc.ModuleEnergy(
                nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1)).to(DTYPE),
                "bernoulli",
                prior_std={"*.bias": 3.0, "*": 1.5},
                num_data=N,
            ),
            (Xr, yb),
        ),
        # buffers: several chains go one after another with their own buffers (the looped path)
        "bn_categorical": (structmc.ModuleEnergy(_batchnorm_mlp(), "categorical", num_data=N), (Xc, yc)),
        # a prior object (not prior_std's Normal): its energy and grad in the fast paths
        "mlp_laplace": (
            structmc.ModuleEnergy(mlp(), "categorical", prior=structmc.priors.Laplace(0.8), num_data=N),
            (Xc, yc),
        ),
    }


def _batchnorm_mlp() -> nn.Module:
    """BatchNorm in eval mode with running statistics away from (0, 1): the forward reads them."""
    net = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 3)).to(DTYPE)
    g = torch.Generator().manual_seed(11)
    net[1].running_mean.copy_(torch.randn(5, generator=g, dtype=DTYPE))
    net[1].running_var.copy_(torch.rand(5, generator=g, dtype=DTYPE) + 0.5)
    return net.eval()


@pytest.mark.parametrize(
    "case", ["linear_gaussian", "mlp_categorical", "mlp_bernoulli", "bn_categorical", "mlp_laplace"]
)
def test_module_energy_paths_agree(case):
    """Each fast path (one chain through the bound module; several chains vmapped, or looped
    with per-chain buffers) equals the reference path (functional_call + autograd) to 1e-12."""
    energy, data = _module_cases()[case]
    assert energy.has_buffers == (case == "bn_categorical")  # which multi-chain path runs
    C, n, P = 4, 3, energy.space.dim
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(C, P, generator=g, dtype=DTYPE)
    idx = torch.stack([torch.randperm(N, generator=g)[:n] for _ in range(C)])
    batch = tuple(t[idx] for t in data)
    v_ref, g_ref = energy.reference_value_and_grad(theta, batch)
    v_vm, g_vm = energy.value_and_grad(theta, batch)  # vmapped, or looped with buffers
    assert energy.buffer_chains == (C if energy.has_buffers else None)
    torch.testing.assert_close(v_vm, v_ref, **_tol())
    torch.testing.assert_close(g_vm, g_ref, **_tol())
    torch.testing.assert_close(energy.value(theta, batch), v_ref, **_tol())
    for c in range(C):  # single-chain fast path, called repeatedly (shared flat buffers)
        bc = tuple(t[c : c + 1] for t in batch)
        v1, g1 = energy.value_and_grad(theta[c : c + 1], bc)
        torch.testing.assert_close(v1, v_ref[c : c + 1], **_tol())
        torch.testing.assert_close(g1, g_ref[c : c + 1], **_tol())
        torch.testing.assert_close(energy.value(theta[c : c + 1], bc), v_ref[c : c + 1], **_tol())
    # the returned gradient is not a view of the energy's internal buffer
    _, g_a = energy.value_and_grad(theta[:1], tuple(t[:1] for t in batch))
    energy.value_and_grad(theta[1:2], tuple(t[1:2] for t in batch))
    torch.testing.assert_close(g_a, g_ref[:1], **_tol())


# ---------------------------------------------------------------------------------------
# Hessian diagonal (used by pSGLD's Γ term)
# ---------------------------------------------------------------------------------------
def test_hessian_diag_exact_for_diagonal_hessian():
    """Hutchinson z ⊙ (∇²U z) with Rademacher z is exact when ∇²U is diagonal."""
    h = torch.tensor([2.0, 0.5, 3.0], dtype=DTYPE)
    c = torch.tensor([0.3, 1.0, 0.1], dtype=DTYPE)

    def lp(theta, batch):
        return -(0.5 * h * theta.square() + 0.25 * c * theta.pow(4)).sum()

    theta = torch.tensor([[0.7, -1.2, 0.4], [0.1, 2.0, -3.0]], dtype=DTYPE)
    est = structmc.LogDensityEnergy(lp, 3).hessian_diag(theta, None, torch.Generator().manual_seed(0))
    torch.testing.assert_close(est, h + 3 * c * theta.square(), **_tol())
    # a module whose inputs have one non-zero feature each: XᵀX is diagonal on every batch
    X = torch.zeros(N, 3, dtype=DTYPE)
    X[torch.arange(N), torch.arange(N) % 3] = torch.arange(1.0, N + 1, dtype=DTYPE)
    y = torch.randn(N, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    energy = structmc.ModuleEnergy(
        nn.Linear(3, 1, bias=False).to(DTYPE), "gaussian", noise_std=0.7, prior_std={"*": 2.0}, num_data=N
    )
    batch = tuple(t[:5].unsqueeze(0).expand(2, *t[:5].shape) for t in (X, y))
    est = energy.hessian_diag(theta, batch, torch.Generator().manual_seed(2))
    exact = (N / 5) * X[:5].square().sum(0) / 0.49 + 1 / 4.0
    torch.testing.assert_close(est, exact.expand(2, 3), **_tol())


def test_hessian_diag_module_energy_is_unbiased():
    """For a non-diagonal Hessian (MLP) the probe average converges to diag ∇²U: checked
    against the exact Hessian with a tolerance of 6 SD of the Hutchinson estimate."""
    X, y = classification_data()
    energy = mlp_energy()
    P, K = energy.space.dim, 300
    theta = 0.5 * torch.randn(1, P, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    batch = tuple(t[:5].unsqueeze(0) for t in (X, y))
    H = torch.autograd.functional.hessian(lambda t: independent_mlp_energy(mlp(), t, X[:5], y[:5]), theta[0])
    est = energy.hessian_diag(theta, batch, torch.Generator().manual_seed(4), num_probes=K)[0]
    off = H - torch.diag(torch.diag(H))
    sd = off.square().sum(1).div(K).sqrt()
    assert torch.all((est - torch.diag(H)).abs() <= 6 * sd + 1e-10), (est, torch.diag(H))


def test_the_callers_energy_still_computes_its_gradient_after_copies_and_runs():
    """A shallow copy (``with_prior``) and a run's copy (``with_num_data``, what every ``sample()``
    without ``num_data`` takes) share or deep-copy the module; neither may bind the caller's module
    to another flat vector. Before the fix, after ``sample()`` the caller's energy's one-chain
    ``value_and_grad`` returned the prior's gradient alone (its flat gradient no longer the
    parameters' ``.grad``)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    energy = sm.ModuleEnergy(net, "categorical", prior_std=1.0)
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    batch = (X[:10].unsqueeze(0), y[:10].unsqueeze(0))
    theta = 0.3 * torch.randn(1, energy.space.dim, generator=g)
    value, grad = energy.value_and_grad(theta, batch)
    assert float(grad.sub(theta).abs().max()) > 1e-3  # the likelihood's gradient is in it
    energy.with_prior(sm.priors.Laplace(scale=1.0))
    energy.with_num_data(40)
    sm.sample(energy, None, sm.SGLD(1e-3), 3, data=(X, y), batch_size=10, progress=False)
    again_value, again_grad = energy.value_and_grad(theta, batch)
    assert torch.equal(again_value, value) and torch.equal(again_grad, grad)
