"""Gradient estimators against exact answers (float64).

* A control variate at its centre returns the full-data gradient on any minibatch.
* The minibatch gradient (N/n scaling) averaged over ALL minibatches is the full gradient.
* ``full_data_value_and_grad`` in chunks equals one pass.
"""

from __future__ import annotations

import pytest
import torch
from support.gradients import (
    DTYPE,
    N,
    _tol,
    all_subset_batch,
    all_tuple_batch,
    classification_data,
    full_batch,
    independent_mlp_energy,
    mlp,
    mlp_energy,
    regression_data,
    regression_full_grad,
    regression_log_prob,
)

import structmc
from structmc.energy import full_data_value_and_grad


# ---------------------------------------------------------------------------------------
# Control variates
# ---------------------------------------------------------------------------------------
def _energies():
    X, y = regression_data()
    Xc, yc = classification_data()
    return {
        "log_prob": (structmc.LogDensityEnergy(regression_log_prob, 3, num_data=N), (X, y)),
        "module": (mlp_energy(), (Xc, yc)),
    }


@pytest.mark.parametrize("kind", ["log_prob", "module"])
@pytest.mark.parametrize("chunk_size", [3, 4096])
def test_control_variate_at_centre_equals_full_gradient(kind, chunk_size):
    energy, data = _energies()[kind]
    P = energy.space.dim
    g = torch.Generator().manual_seed(5)
    centre = torch.randn(P, generator=g, dtype=DTYPE)
    full_value, full_grad = energy.value_and_grad(centre[None], full_batch(data))
    # the full gradient itself is right (closed form for the regression)
    if kind == "log_prob":
        torch.testing.assert_close(full_grad[0], regression_full_grad(centre, *data), **_tol())
    cv = structmc.ControlVariate(centre, chunk_size=chunk_size)
    subsets, K = all_subset_batch(data, 2)
    theta = centre.expand(K, P).clone()
    cv.prepare(energy, data, theta)
    torch.testing.assert_close(cv._full_grad_c, full_grad.expand(K, P), **_tol())
    # on every minibatch, at θ = centre, the estimate is the full gradient
    value, grad = cv(energy, theta, subsets)
    torch.testing.assert_close(grad, full_grad.expand(K, P), **_tol())
    # ... and its reported energy is the plain minibatch energy
    torch.testing.assert_close(value, energy.value_and_grad(theta, subsets)[0], **_tol())
    # on the full data it is the full gradient too
    cv2 = structmc.ControlVariate(centre, chunk_size=chunk_size)
    cv2.prepare(energy, data, centre[None])
    _, grad_full = cv2(energy, centre[None], full_batch(data))
    torch.testing.assert_close(grad_full, full_grad, **_tol())


def test_control_variate_off_centre_is_unbiased_and_per_chain_centres():
    """Away from the centre the CV estimate averages (over all minibatches) to the full
    gradient; a [C, P] centre gives each chain its own full gradient."""
    energy, data = _energies()["module"]
    P = energy.space.dim
    g = torch.Generator().manual_seed(6)
    subsets, K = all_subset_batch(data, 3)
    centres = torch.randn(K, P, generator=g, dtype=DTYPE)
    theta = torch.randn(P, generator=g, dtype=DTYPE).expand(K, P).clone()
    cv = structmc.ControlVariate(centres, chunk_size=5)
    cv.prepare(energy, data, theta)
    _, full_at_centres = energy.value_and_grad(centres, full_batch(data, K))
    torch.testing.assert_close(cv._full_grad_c, full_at_centres, **_tol())
    # with one shared centre the estimate is unbiased over the K equally likely subsets
    cv1 = structmc.ControlVariate(centres[0])
    cv1.prepare(energy, data, theta)
    _, grad = cv1(energy, theta, subsets)
    _, full_theta = energy.value_and_grad(theta[:1], full_batch(data))
    torch.testing.assert_close(grad.mean(0), full_theta[0], rtol=1e-11, atol=1e-11)
    assert (grad - full_theta).abs().max() > 1e-3  # but not trivially: single batches differ


# ---------------------------------------------------------------------------------------
# Unbiased minibatch gradients
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 5])
def test_minibatch_gradient_unbiased_log_prob(n):
    X, y = regression_data()
    energy = structmc.LogDensityEnergy(regression_log_prob, 3, num_data=N)
    theta = torch.tensor([0.4, -1.1, 0.9], dtype=DTYPE)
    full = regression_full_grad(theta, X, y)
    for batches, K in (all_subset_batch((X, y), n), all_tuple_batch((X, y), min(n, 3))):
        value, grad = structmc.Minibatch()(energy, theta.expand(K, 3).clone(), batches)
        torch.testing.assert_close(grad.mean(0), full, rtol=1e-11, atol=1e-11)
        full_value = -regression_log_prob(theta, (X, y))
        torch.testing.assert_close(value.mean(), full_value, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_minibatch_gradient_unbiased_module_energy(n):
    """ModuleEnergy applies N/n itself: the average over all C(N, n) subsets (vmapped chains)
    is the full-data gradient, which matches an independent hand-written energy with the
    per-group priors of ``PRIOR_STD``."""
    X, y = classification_data()
    energy = mlp_energy(num_data=None).with_num_data(N)
    module = mlp()
    g = torch.Generator().manual_seed(2)
    theta = torch.randn(energy.space.dim, generator=g, dtype=DTYPE)
    leaf = theta.clone().requires_grad_(True)
    u_ref = independent_mlp_energy(module, leaf, X, y)
    (g_ref,) = torch.autograd.grad(u_ref, leaf)
    value_full, grad_full = energy.value_and_grad(theta[None], full_batch((X, y)))
    torch.testing.assert_close(value_full[0], u_ref.detach(), **_tol())
    torch.testing.assert_close(grad_full[0], g_ref, **_tol())
    batches, K = all_subset_batch((X, y), n)
    value, grad = energy.value_and_grad(theta.expand(K, -1).clone(), batches)
    torch.testing.assert_close(grad.mean(0), g_ref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(value.mean(), u_ref.detach(), rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------------------------------
# Full-data evaluation in chunks
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["log_prob", "module"])
@pytest.mark.parametrize("chunk_size", [1, 3, 5, 8])
def test_full_data_chunked_equals_single_pass(kind, chunk_size):
    energy, data = _energies()[kind]
    theta = torch.randn(3, energy.space.dim, generator=torch.Generator().manual_seed(4), dtype=DTYPE)
    v1, g1 = full_data_value_and_grad(energy, theta, data, chunk_size=4096)
    vk, gk = full_data_value_and_grad(energy, theta, data, chunk_size=chunk_size)
    torch.testing.assert_close(vk, v1, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(gk, g1, rtol=1e-12, atol=1e-10)
    # and the single pass is the energy on the whole data set
    v, g = energy.value_and_grad(theta, full_batch(data, 3))
    torch.testing.assert_close(v1, v, **_tol())
    torch.testing.assert_close(g1, g, **_tol())


def test_full_data_chunked_needs_num_data():
    X, y = classification_data()
    energy = structmc.ModuleEnergy(mlp(), "categorical")  # num_data None: no N/n scaling
    with pytest.raises(ValueError, match="num_data"):
        full_data_value_and_grad(energy, torch.zeros(1, energy.space.dim, dtype=DTYPE), (X, y), chunk_size=3)


@pytest.mark.parametrize("kind", ["log_prob", "module"])
@pytest.mark.parametrize("num_chains", [1, 3])
def test_stacked_control_variate_equals_two_passes(kind, num_chains):
    """θ and θ̂ in one call of the energy give the two-pass estimate (float64: to rounding),
    for one chain (zero-copy expand of the batch) and several (each pair shares its chain's
    batch); a whole SGLD-CV chain agrees too."""
    energy, data = _energies()[kind]
    P = energy.space.dim
    g = torch.Generator().manual_seed(11)
    centre = torch.randn(P, generator=g, dtype=DTYPE)
    theta = torch.randn(num_chains, P, generator=g, dtype=DTYPE)
    idx = torch.stack([torch.randperm(data[0].shape[0], generator=g)[:4] for _ in range(num_chains)])
    batch = tuple(t[idx] for t in data)
    estimates = []
    for stacked in (False, True):
        cv = structmc.ControlVariate(centre, stacked=stacked)
        cv.prepare(energy, data, theta)
        estimates.append(cv(energy, theta, batch))
    torch.testing.assert_close(estimates[1][0], estimates[0][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(estimates[1][1], estimates[0][1], rtol=1e-12, atol=1e-12)
    assert (estimates[0][1] - cv._full_grad_c).abs().max() > 1e-3  # the batch terms do not vanish here
    chains = [
        structmc.sample(
            energy,
            theta,
            structmc.SGLD(1e-3),
            20,
            data=data,
            batch_size=4,
            num_chains=num_chains,
            gradient=structmc.ControlVariate(centre, stacked=stacked),
            progress=False,
        ).samples
        for stacked in (False, True)
    ]
    torch.testing.assert_close(chains[1], chains[0], rtol=1e-10, atol=1e-10)


def test_stacked_must_be_a_bool():
    with pytest.raises(TypeError, match="stacked must be True or False"):
        structmc.ControlVariate(torch.zeros(3), stacked="yes")
