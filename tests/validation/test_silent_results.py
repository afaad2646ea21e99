"""Inputs that used to give a silently wrong result now give a clear error or warning (issue 21
§A; the pickling finding has its own property test in tests/energy/test_pickling.py).

Each test states what the code at the time of filing did."""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from support.items import Items
from support.tuning import linreg
from torch import nn
from torch.utils.data import TensorDataset

import structmc as sm
from structmc import Budget
from structmc.priors import Normal
from structmc.tuning import grid, grid_search, mamba


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


# -- A2: a shadowed pattern ---------------------------------------------------------------------
def test_a_shadowed_prior_std_pattern_is_refused():
    """``{"*": 1e-2, "*.bias": 10.0}`` gave the biases σ = 0.01 (first match wins)."""
    with pytest.raises(ValueError, match=r"'\*\.bias'.*already took.*first matching pattern wins"):
        sm.ModuleEnergy(_mlp(), prior_std={"*": 1e-2, "*.bias": 10.0})


def test_a_shadowed_prior_map_pattern_is_refused_by_the_same_rule():
    with pytest.raises(ValueError, match=r"'\*\.bias'.*already took.*first matching pattern wins"):
        sm.ModuleEnergy(_mlp(), prior={"*": Normal(0.0, 1e-2), "*.bias": Normal(0.0, 10.0)})


def test_the_specific_pattern_first_gives_the_biases_their_prior():
    e = sm.ModuleEnergy(_mlp(), prior_std={"*.bias": 10.0, "*": 1e-2})
    prec = e.prior_precision
    for info in e.space.params:
        want = 1 / 10.0**2 if info.name.endswith("bias") else 1 / 1e-2**2
        torch.testing.assert_close(prec[info.slice], torch.full((info.numel,), want))


def test_a_pattern_that_adds_parameters_is_not_shadowed():
    """``"0.*"`` after ``"*.bias"`` still takes ``0.weight``: allowed."""
    sm.ModuleEnergy(_mlp(), prior_std={"*.bias": 10.0, "0.*": 0.5, "*": 1.0})


# -- A3: labels of the wrong length -------------------------------------------------------------
def test_stratified_labels_of_the_wrong_length_are_refused_before_compute():
    """``labels=y[:10]`` of 300 rows confined every batch to rows 0-9."""
    X, y = torch.randn(300, 3), torch.randint(0, 2, (300,))
    for data in (TensorDataset(X, y), Items(X, y, y)):
        with pytest.raises(ValueError, match=r"one class label per item, shape \[300\], got shape \[10\]"):
            sm.DataSource(data, labels=y[:10])
    energy = sm.ModuleEnergy(_mlp(), num_data=300)
    with pytest.raises(ValueError, match=r"'targets' must hold one class label per item, shape \[300\]"):
        sm.sample(
            energy,
            None,
            sm.SGLD(1e-3),
            5,
            data=sm.DataSource(Items(X, y, y[:10])),
            batch_size=20,
            batching="stratified",
            progress=False,
        )


def test_stratified_labels_of_the_right_length_sample_every_row():
    X, y = torch.arange(300.0).unsqueeze(1), torch.randint(0, 2, (300,))
    source = sm.DataSource(TensorDataset(X, y), labels=y)
    seen: set[int] = set()

    def log_lik(theta, batch):
        seen.update(int(v) for v in batch[0][:, 0])
        return -0.5 * (theta * theta).sum() * 0

    energy = sm.LogDensityEnergy(dim=1, log_likelihood=log_lik, log_prior=lambda t: -0.5 * (t * t).sum())
    sm.sample(
        energy, torch.zeros(1), sm.SGLD(1e-3), 200, data=source, batch_size=20, batching="stratified", progress=False
    )
    assert len(seen) > 250  # rows 0-9 only, before


# -- A4: scale-adapted SGHMC whose noise is clamped to 0 ----------------------------------------
def _gaussian(theta, batch):
    return -0.5 * (theta * theta).sum()


def test_scale_adapted_sghmc_warns_when_its_noise_is_clamped():
    """Target variance 1, lr 0.5: 2αηm = 0.05 < η² = 0.25 on every coordinate, the noise is
    clamped to 0 and the chain froze (variance 6e-43) without a word."""
    with pytest.warns(RuntimeWarning, match=r"clamped to 0 on 100% of the coordinates"):
        chain = sm.sample(
            _gaussian, torch.ones(3), sm.ScaleAdaptedSGHMC(0.5, adapt_steps=20), 400, burn_in=200, progress=False
        )
    assert float(chain.samples.var()) < 1e-3  # what the warning is about: target variance 1, chain ~0


def test_scale_adapted_sghmc_at_a_sound_step_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        chain = sm.sample(
            _gaussian, torch.ones(3), sm.ScaleAdaptedSGHMC(1e-3, adapt_steps=20), 3000, burn_in=1000, progress=False
        )
    assert float(chain.samples.var()) > 0.2


def test_the_clamp_check_reads_the_device_once_not_per_iteration():
    """The warning costs one read after adaptation (and one per increase of lr), not one per
    update: the sampler records the step size it last checked."""
    sampler = sm.ScaleAdaptedSGHMC(1e-3, adapt_steps=5)
    run = sm.Run(_gaussian, torch.ones(2), sampler, seed=0)
    reads = []
    original = torch.Tensor.__float__

    def counting(self):
        reads.append(1)
        return original(self)

    for _ in range(10):
        run.step()
    torch.Tensor.__float__ = counting
    try:
        for _ in range(20):
            run.step()
    finally:
        torch.Tensor.__float__ = original
    assert reads == []


# -- A5: a MAMBA budget too small to score ------------------------------------------------------
ARMS9 = grid("sgld", lr=[1e-3, 1e-2, 1e-1], batch_size=[None, 6, 3])


def test_a_mamba_budget_too_small_to_score_is_refused_before_compute():
    """``Budget(iterations=1)`` for 9 arms scored one sample per arm and still named a winner."""
    energy, data, _ = linreg(N=12, d=2)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"too small to score.*at least iterations=360"):
        mamba(
            energy,
            torch.zeros(2, dtype=torch.float64),
            ARMS9,
            Budget(iterations=1),
            data=data,
            thin=2,
            min_samples=10,
            progress=False,
        )
    assert time.perf_counter() - t0 < 5.0


def test_a_grid_search_budget_too_small_to_score_is_refused():
    energy, data, _ = linreg(N=12, d=2)
    with pytest.raises(ValueError, match=r"too small to score.*at least grad_evals=100 per arm"):
        grid_search(
            energy,
            torch.zeros(2, dtype=torch.float64),
            ARMS9,
            Budget(grad_evals=50),
            data=data,
            batch_size=None,
            thin=10,
            min_samples=10,
            progress=False,
        )


def test_the_smallest_scorable_mamba_budget_runs():
    energy, data, _ = linreg(N=12, d=2)
    res = mamba(
        energy,
        torch.zeros(2, dtype=torch.float64),
        ARMS9,
        Budget(iterations=360),
        data=data,
        thin=2,
        min_samples=10,
        progress=False,
    )
    assert all(r["scored"] >= 10 for r in res.rounds[0]["results"] if not r["error"])
