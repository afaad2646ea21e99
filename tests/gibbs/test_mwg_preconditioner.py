"""MALA-within-Gibbs with a diagonal preconditioner adapted in burn-in windows (issue 39 §2).

The ill-conditioned Gaussian of tests/samplers/test_adaptation.py (variances 1e-2 .. 56): with M
fixed, every block step is an exact Metropolis-Hastings step of the target, so chains started
at the target stay there, checked at a step where the unadjusted move would be 33 % off; the
adapted chain finds M ≈ σ² and samples every coordinate, where the unpreconditioned chain at the
step the narrow coordinate allows has not reached the wide coordinates after as many sweeps."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from support.runs import Interrupt, interrupt_at

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import round_robin

F64 = torch.float64
P = 20
VAR = torch.logspace(-2, 1.748, P, dtype=F64)  # 1e-2 .. 56


def _gaussian():
    prec = 1 / VAR
    return sm.LogDensityEnergy(lambda t, b: -0.5 * (t * t * prec).sum(), P)


def _mala(lr, preconditioner):
    return MetropolisWithinGibbs(round_robin(P, 2), lr, mala=True, preconditioner=preconditioner)


def test_with_a_fixed_m_every_block_step_leaves_the_target_invariant():
    """M_i = u_i σ_i² with u_i spread over 0.3 .. 1.2 and σ_b² = 1: each coordinate's proposal
    has the relative step h_i = u_i, where the unadjusted move's stationary variance would be
    σ²/(1 − h/4), 8-43 % too wide. 200 chains drawn from the target, 300 sweeps: the per-chain
    means of θ²/σ² and of θ/σ average to 1 and 0 within 5 standard errors (across chains) per
    coordinate, and those errors are small enough to see a 10 % error (the unadjusted law's is
    larger where u > 0.4)."""
    chains, sweeps = 200, 300
    g = torch.Generator().manual_seed(0)
    u = torch.linspace(0.3, 1.2, P, dtype=F64)[torch.randperm(P, generator=g)]
    start = torch.randn(chains, P, generator=g, dtype=F64) * VAR.sqrt()
    adaptation = sm.WindowAdaptation(20)
    run = sm.Run(_gaussian(), start, _mala(1.0, adaptation), num_chains=chains, seed=4)
    run.state.window.inverse_mass.copy_(u * VAR)
    run.state.step = adaptation.steps  # past the windows: M stays as given
    chain = run.sample(sweeps)
    assert torch.equal(run.state.window.inverse_mass, (u * VAR).expand(chains, P))  # never adapted
    z = chain.samples / VAR.sqrt()  # [C, S, P]
    for stat, expected in ((z.square().mean(1), 1.0), (z.mean(1), 0.0)):
        mean, se = stat.mean(0), stat.std(0) / math.sqrt(chains)
        assert bool(((mean - expected).abs() < 5 * se).all()), (mean, se)
        assert bool((5 * se < 0.1).all()), se
    rate = float(chain.info["accept"].double().mean())
    assert 0.3 < rate < 0.9, rate  # both outcomes common: the correction is exercised


def test_the_adapted_chain_samples_every_coordinate_and_the_plain_one_does_not():
    """σ_b² = 0.02 (twice the narrowest variance) for both chains, 200 chains from 0, 500 sweeps.
    Adapted in the windows of the first 200 sweeps: M/σ² ≈ 1 for every coordinate and, over the
    last 200 sweeps (frozen), θ²/σ² averages 1 within 5 standard errors (of the per-chain means,
    across chains) per coordinate. Plain MALA-within-Gibbs: the widest coordinates have not
    reached their variance (a Langevin move relaxes it as 1 − exp(−εt/σ²): 0.16 and 0.20)."""
    chains, sweeps, lr = 200, 500, 0.02
    start = torch.zeros(P, dtype=F64)
    run = sm.Run(_gaussian(), start, _mala(lr, sm.WindowAdaptation(200)), num_chains=chains, seed=1)
    run.sample(300)
    frozen = run.sample(sweeps - 300)
    ratio = (run.state.window.inverse_mass / VAR).median(0).values
    assert bool(((ratio > 0.8) & (ratio < 1.2)).all()), ratio
    z2 = (frozen.samples.square() / VAR).mean(1)  # [C, P]
    mean, se = z2.mean(0), z2.std(0) / math.sqrt(chains)
    assert bool(((mean - 1).abs() < 5 * se).all()), (mean, se)
    assert bool((5 * se < 0.4).all()), se  # the plain chain's 0.2 of σ² would be far outside
    plain = sm.Run(_gaussian(), start, _mala(lr, None), num_chains=chains, seed=1)
    plain.sample(sweeps)
    plain_ratio = plain.state.theta.var(0) / VAR
    assert float(plain_ratio[-1]) < 0.4 and float(plain_ratio[-2]) < 0.4, plain_ratio


def test_plain_chains_are_unchanged_and_a_random_walk_refuses_a_preconditioner():
    """Without a preconditioner the MALA sweep is the one it was (the same draws: the unadjusted
    code path), its config and state have no preconditioner entries; random-walk sweeps refuse one."""
    sampler = _mala(0.02, None)
    assert "preconditioner" not in sampler.config() and sampler.compile_blocker() == ""
    run = sm.Run(_gaussian(), torch.zeros(P, dtype=F64), sampler, num_chains=2, seed=0)
    run.sample(2)
    assert not any(k.startswith("window") for k in sampler.state_dict(run.state))
    with pytest.raises(ValueError, match="needs mala=True"):
        MetropolisWithinGibbs(round_robin(P, 2), 0.02, preconditioner=sm.WindowAdaptation(100))
    with pytest.raises(TypeError, match="WindowAdaptation"):
        _mala(0.02, 100)


def test_adaptation_resumes_exactly_inside_a_window_and_its_config_round_trips(tmp_path):
    adaptation = sm.WindowAdaptation(60, initial_buffer=10, base_window=10, terminal_buffer=10)
    sampler = _mala(0.02, adaptation)
    kw = dict(num_chains=3, seed=2, progress=False)
    start = torch.zeros(P, dtype=F64)
    whole = sm.sample(_gaussian(), start, sampler, 90, **kw)
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=7)
    with pytest.raises(Interrupt):
        sm.sample(_gaussian(), start, sampler, 90, callback=interrupt_at(33), **folder, **kw)  # inside a window
    resumed = sm.sample(_gaussian(), start, sampler, 90, resume=True, **folder, **kw)
    assert torch.equal(resumed.samples, whole.samples)
    assert torch.equal(resumed.info["accept"], whole.info["accept"])
    cfg = sampler.config()
    assert cfg["preconditioner"] == {**vars(adaptation), "kind": "WindowAdaptation"}
    again = _mala(0.02, cfg["preconditioner"])
    assert again.preconditioner == adaptation and again.config() == cfg
    with pytest.raises(ValueError, match="does not match|differs|config"):  # a resume with another M refused
        sm.sample(_gaussian(), start, _mala(0.02, None), 90, resume=True, **folder, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sm.sample(_gaussian(), start, sampler, 3, execution="compiled", progress=False)
    assert any("preconditioner" in str(w.message) for w in caught)
