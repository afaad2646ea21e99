"""The energy protocol: one num_data contract, explicit pass-throughs of wrapped energies,
device/dtype asked of the energy. Regression tests for three silent bugs of 0.1.0."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.energy import HessianDiagEnergy, StatefulEnergy, full_data_value_and_grad
from structmc.structured import ChainHistory, StructuredEnergy, by_neuron
from structmc.zoo import energy_for

F64 = torch.float64


def ratings_problem(n=60, users=5, items=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, users, (n,), generator=g)
    i = torch.randint(0, items, (n,), generator=g)
    r = torch.randint(1, 6, (n,), generator=g).to(F64)
    return u, i, r


def pmf_problem():
    u, i, r = ratings_problem()
    energy = energy_for("pmf", num_users=5, num_items=6, dim=2, mean_rating=float(r.mean()))
    theta = energy.model.init(seed=1, dtype=F64, scale=0.5)
    return energy, theta, (u, i, r)


def test_pmf_energy_scales_the_likelihood_by_N_over_n():
    """Bug 1 (0.1.0): sample() set the wrapping energy's num_data but PMF.log_prob kept its own
    num_data=None, so the likelihood was not scaled (a silently tempered posterior). Two
    consecutive half-data batches of one epoch at (almost) the same θ must sum to twice the
    full-data energy."""
    energy, theta, data = pmf_problem()
    pmf, N = energy.model, data[-1].shape[0]
    chain = sm.sample(energy, theta, sm.SGLD(1e-14, temperature=0.0), 2, data=data, batch_size=N // 2, progress=False)
    full = -(pmf.log_likelihood(theta, data) + pmf.log_prior(theta))
    assert float(chain.info["energy"][0].sum()) == pytest.approx(2 * float(full), rel=1e-9)
    # and the same energy is the plain prior + (N/n) likelihood on any batch
    e = energy.with_num_data(N)
    batch = tuple(t[:15].unsqueeze(0) for t in data)
    expect = -(pmf.log_prior(theta) + (N / 15) * pmf.log_likelihood(theta, tuple(t[0] for t in batch)))
    assert float(e.value(theta.unsqueeze(0), batch)) == pytest.approx(float(expect), rel=1e-12)


def test_pmf_full_data_chunks_weigh_the_likelihood_once():
    """Bug 1, control-variate side: the chunked full-data gradient (the CV centre term) must be
    the exact full-data gradient for any chunk size."""
    energy, theta, data = pmf_problem()
    pmf, N = energy.model, data[-1].shape[0]
    leaf = theta.clone().requires_grad_(True)
    full = -(pmf.log_likelihood(leaf, data) + pmf.log_prior(leaf))
    (g_full,) = torch.autograd.grad(full, leaf)
    full = full.detach()
    for chunk in (7, 25, N):
        value, grad = full_data_value_and_grad(energy.with_num_data(N), theta.unsqueeze(0), data, chunk)
        assert float(value) == pytest.approx(float(full), rel=1e-10)
        torch.testing.assert_close(grad[0], g_full, rtol=1e-10, atol=1e-10)


def test_log_density_from_parts_validates():
    with pytest.raises(TypeError, match="either log_prob, or log_likelihood and log_prior"):
        sm.LogDensityEnergy(lambda t, b: t.sum(), 3, log_prior=lambda t: t.sum())
    with pytest.raises(TypeError, match="both be callables"):
        sm.LogDensityEnergy(dim=3, log_likelihood=lambda t, b: t.sum())
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        sm.LogDensityEnergy(lambda t, b: t.sum(), 0)
    e = sm.LogDensityEnergy(
        dim=2, log_likelihood=lambda t, b: -(b[0] - t[0]).square().sum(), log_prior=lambda t: -t @ t
    )
    assert e.requires_data
    with pytest.raises(ValueError, match="needs data"):
        sm.sample(e, torch.zeros(2), sm.SGLD(0.1), 5, progress=False)


def structured(base):
    return StructuredEnergy(base, by_neuron(base.space), ChainHistory(10))


def test_structured_energy_passes_through_only_what_belongs_to_it():
    """Bug 2 (0.1.0): StructuredEnergy.__getattr__ forwarded everything, so pSGLD's Γ silently
    used the base energy's Hessian and reference_value_and_grad was the base's."""
    torch.manual_seed(0)
    base = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    s = structured(base)
    assert isinstance(base, HessianDiagEnergy) and not isinstance(s, HessianDiagEnergy)
    assert not hasattr(s, "reference_value_and_grad") and not hasattr(s, "forward_draws")
    assert isinstance(s, StatefulEnergy) and not isinstance(base, StatefulEnergy)
    assert s.device == base.device and s.dtype == base.dtype and s.cv_base is base
    torch.testing.assert_close(s.initial_position(), base.initial_position())
    X, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    with pytest.raises(ValueError, match="include_gamma=True needs an energy with hessian_diag"):
        sm.sample(s, None, sm.PSGLD(1e-3, include_gamma=True), 5, data=(X, y), progress=False)
    sm.sample(
        base, None, sm.PSGLD(1e-3, include_gamma=True), 2, data=(X, y), progress=False, on_blowup="ignore"
    )  # the base has it (lr is far too large for this net: only wiring is tested)


def test_init_follows_the_energy_dtype_through_a_wrapper():
    """Bug 3 (0.1.0): init was moved to the energy's device/dtype only for a ModuleEnergy
    (an isinstance check), so a float32 init under a float64 structured energy stayed float32
    (and a CPU init stayed on the CPU under a CUDA base; see tests/gpu)."""
    torch.manual_seed(0)
    base = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double())
    X, y = torch.randn(20, 3, dtype=F64), torch.randint(0, 2, (20,))
    chain = sm.sample(
        structured(base),
        torch.zeros(base.space.dim, dtype=torch.float32),
        sm.SGLD(1e-3),
        3,
        data=(X, y),
        progress=False,
    )
    assert chain.samples.dtype == F64


def test_a_non_energy_object_gets_a_clear_error():
    class Half:
        space = sm.ParamSpace.flat(2)
        num_data = None

        def value_and_grad(self, theta, batch):
            return theta.sum(1), theta

    with pytest.raises(TypeError, match=r"does not implement the Energy protocol: missing \['evaluations_per_call'"):
        sm.sample(Half(), torch.zeros(2), sm.SGLD(0.1), 5, progress=False)


def test_copies_of_energies_share_no_mutable_state():
    """Runs (e.g. tuning arms in threads) get copies that share no buffers."""
    torch.manual_seed(0)
    base = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    copy = base.with_num_data(100)
    assert copy._flat.data_ptr() != base._flat.data_ptr() and copy._buffer_store is not base._buffer_store
    assert next(copy.module.parameters()).data_ptr() != next(base.module.parameters()).data_ptr()
    s = structured(base)
    s2 = s.with_num_data(100)
    assert s2.history is not s.history and s2._state is not s._state
    X, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    sm.sample(s, None, sm.SGLD(1e-3), 3, data=(X, y), progress=False)
    assert s.history.buffer is None  # the caller's structured energy was not started or mutated


def test_sampler_prepare_returns_an_independent_copy():
    sampler = sm.PSGLD(1e-3)
    energy = sm.LogDensityEnergy(lambda t, b: -0.5 * t @ t, 3, num_data=50)
    prepared = sampler.prepare(energy)
    assert prepared is not sampler and prepared.num_data == 50 and sampler.num_data is None
    assert prepared._noise is not sampler._noise
