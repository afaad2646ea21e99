"""A chain blowing up without NaN is caught on scales that mean something (issue 22 §6.3):
the energy against its start (×100, not ×1000) and the position against the prior; and
``structmc diagnose`` says so instead of reporting R-hat 1.003 for a divergence.

The case from the issue: digits, SGLD lr = 1, 300 steps: the energy went 3.4e3 -> 1.8e6 at
step 1 (×530, under the old 1000× threshold), |θ| = 853 under an N(0, 1) prior, no warning."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.diagnostics.health import ConvergenceWarning
from structmc.diagnostics.report import blowup_note, diagnose_run


def _digits_like(N=1500, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, 64, generator=g)
    y = (X[:, :10].argmax(1)).long()
    torch.manual_seed(seed)
    return sm.ModuleEnergy(nn.Linear(64, 10), "categorical"), (X, y)


def test_a_chain_at_too_large_a_step_warns_although_its_energy_grew_less_than_1000_fold():
    energy, data = _digits_like()
    with pytest.warns(
        UserWarning,
        match=r"sgld: the minibatch energy is blowing up: .* at iteration 64\)?, .* times "
        r"its initial magnitude.*lr=1 may be too large",
    ) as rec:
        chain = sm.sample(
            energy, None, sm.SGLD(1.0), 300, data=data, batch_size=100, num_chains=2, seed=0, progress=False
        )
    growth = (chain.info["energy"].abs().amax(1) / chain.info["energy"][:, 0].abs()).max()
    assert 100 < float(growth) < 1000  # the old rule (×1000) stayed silent on this chain
    assert sum("blowing up" in str(w.message) for w in rec) == 1


def test_a_chain_that_leaves_the_prior_is_caught_on_the_prior_scale():
    """Tempered far beyond the posterior, coordinate 1 (no likelihood: its input is 0)
    diffuses to |θ|/σ ~ 100 while the energy, dominated by the likelihood, falls: only the
    prior scale sees it."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 2, generator=g)
    x[:, 1] = 0.0
    y = x[:, :1] * 1.0 + torch.randn(2000, 1, generator=g)
    torch.manual_seed(0)
    net = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        net.weight.zero_()
    energy = sm.ModuleEnergy(net, "gaussian", noise_std=1.0)
    with pytest.warns(
        UserWarning,
        match=r"left the prior's mass: at iteration \d+ the prior energy per parameter .* "
        r"RMS θ/σ = ",
    ) as rec:
        chain = sm.sample(
            energy,
            None,
            sm.SGLD(1e-4, temperature=1e4),
            640,
            data=data_of(x, y),
            batch_size=200,
            seed=0,
            progress=False,
        )
    e = chain.info["energy"][0]
    assert float(e.abs().max() / e[0].abs()) < 100  # the energy rule alone would not fire
    assert not any("minibatch energy is blowing up" in str(w.message) for w in rec)


def data_of(x, y):
    return (x, y)


def test_a_posterior_chain_from_a_prior_draw_does_not_warn():
    energy, data = _digits_like()
    init = energy.initial_position("prior", generator=torch.Generator().manual_seed(0), num_chains=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        # no blow-up warning; the energy still falling from the prior draw (burn_in=0) is another matter
        warnings.simplefilter("ignore", ConvergenceWarning)
        sm.sample(energy, init, sm.SGLD(1e-4), 400, data=data, batch_size=100, num_chains=2, seed=0, progress=False)


def test_diagnose_reports_a_blown_up_chain(tmp_path):
    energy, data = _digits_like()
    with pytest.warns(UserWarning):
        sm.sample(
            energy,
            None,
            sm.SGLD(1.0),
            300,
            data=data,
            batch_size=100,
            num_chains=2,
            seed=0,
            out_dir=tmp_path / "run",
            progress=False,
        )
    text = diagnose_run(tmp_path / "run", tmp_path / "diag", plots=False)
    assert "WARNING: the chain blew up" in text and "describe a divergence, not the posterior" in text


def test_blowup_note_is_silent_for_a_falling_energy_and_names_the_peak():
    falling = torch.tensor([[1e4, 5e3, 2e3, 1e3]])
    assert blowup_note(falling, 10) is None
    near_mode = torch.tensor([[3.0, 40.0, 60.0]])  # the floor P: thermal spread from a start at the mode
    assert blowup_note(near_mode, 50) is None
    grown = torch.tensor([[10.0, 20.0], [100.0, 2e5]])
    note = blowup_note(grown, 5)
    assert note is not None and "chain 1" in note and "iteration 2" in note and "2e+03 times" in note
