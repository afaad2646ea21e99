"""Issue 36: what a user meets when a run is interrupted, settles badly or blows up."""

from __future__ import annotations

import itertools
import os
import signal
import types
import warnings

import pytest
import torch

import structmc as sm
from structmc.storage import RunFolder


def _gauss(dim=3):
    return lambda th, b: -0.5 * (th * th).sum()


def test_ctrl_c_mid_step_under_a_handler_that_logs_and_reraises_still_checkpoints(tmp_path, capfd):
    """§2: the SIGINT arrives inside the step (here: while the log density is evaluated), under a
    program's handler that logs and re-raises KeyboardInterrupt. Before: no checkpoint (the
    exception left the step half done). Now the iteration finishes, a checkpoint is written, the
    run says where and how to resume (§20), and resuming gives the uninterrupted chain."""
    calls = itertools.count(1)  # not plain data: the resume check cannot read it, and says so

    def log_density(theta, batch):
        if next(calls) == 40:
            os.kill(os.getpid(), signal.SIGINT)
        return -0.5 * (theta * theta).sum()

    kw = dict(num_chains=1, seed=4, progress=False)
    full = sm.sample(lambda th, b: -0.5 * (th * th).sum(), torch.zeros(3), sm.SGLD(0.05), 60, **kw)
    logged = []

    def mine(signum, frame):
        logged.append(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, mine)
    try:
        with pytest.raises(KeyboardInterrupt):
            sm.sample(log_density, torch.zeros(3), sm.SGLD(0.05), 60, out_dir=tmp_path, **kw)
        assert logged == [signal.SIGINT]
        ckpt = RunFolder(tmp_path).load_checkpoint()
        assert ckpt is not None and 35 <= ckpt["run"]["iteration"] <= 45
        err = capfd.readouterr().err
        assert "checkpoint written to" in err and str(tmp_path) in err and "resume=True" in err
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resumed = sm.sample(log_density, torch.zeros(3), sm.SGLD(0.05), 60, out_dir=tmp_path, resume=True, **kw)
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.equal(resumed.samples, full.samples)


def test_an_energy_spike_between_two_reads_is_warned():
    """§13: the energy spiked ×100 between the blow-up checks (every 64 iterations) and came
    back: before, silence; now the running maximum, kept on the device at every iteration,
    is read with the flags and warned about, naming the iterations."""
    calls = itertools.count(1)

    def log_density(theta, batch):
        spike = 1e6 if 20 <= next(calls) <= 25 else 0.0  # a constant: the gradient is unchanged
        return -0.5 * (theta * theta).sum() - spike

    with pytest.warns(UserWarning, match=r"blowing up: up to .* between iterations"):
        sm.sample(log_density, torch.zeros(3), sm.SGLD(0.05), 60, seed=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no spike: no warning
        sm.sample(lambda th, b: -0.5 * (th * th).sum(), torch.zeros(3), sm.SGLD(0.05), 60, seed=0, progress=False)


def test_a_chain_whose_energy_has_not_settled_after_burn_in_is_warned():
    """§14: a chain started far out whose energy is still falling at the last step (before:
    silence) is warned, with the split R-hat and the halves' means; a settled one is not."""
    far = torch.full((4,), 30.0)
    with pytest.warns(UserWarning, match=r"the energy has not settled after burn-in .* split R-hat .* falling"):
        sm.sample(lambda th, b: -0.5 * (th * th).sum(), far, sm.SGLD(1e-3), 400, burn_in=50, seed=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.sample(
            lambda th, b: -0.5 * (th * th).sum(), torch.zeros(4), sm.SGLD(0.1), 400, burn_in=50, seed=0, progress=False
        )


def test_the_health_checks_as_pure_functions():
    from structmc.diagnostics.health import energy_stationarity, stuck_chains, stuck_note

    g = torch.Generator().manual_seed(0)
    flat = torch.randn(4, 500, generator=g)
    assert energy_stationarity(flat)["settled"]
    trend = flat + torch.linspace(10, 0, 500)
    s = energy_stationarity(trend)
    assert not s["settled"] and s["rhat"] > 1.1 and s["second"] < s["first"]
    assert not energy_stationarity(flat[:, :30])["checked"]  # too short to judge
    # §17: 1 of 32 chains accepts nothing after burn-in while the pooled rate reads ~0.55
    acc = (torch.rand(32, 3, 400, generator=g) < 0.57).double()
    acc[7, :, 100:] = 0.0
    out = stuck_chains(acc, burn_in=100)
    assert out["stuck"] == [7] and 0.5 < out["pooled"] < 0.6
    assert "chain 7: 0" in stuck_note(acc, burn_in=100)
    assert stuck_note((torch.rand(32, 3, 400, generator=g) < 0.57).double(), burn_in=100) is None


def test_diagnose_reports_function_space_mixing_and_what_weight_space_rhat_means(tmp_path):
    """§15: the report explains weight-space R-hat in a network and, given the model and
    held-out inputs, gives R-hat and ESS of the predictive; §14 in diagnose too."""
    from support.runs import mlp_energy

    from structmc.diagnostics import diagnose_run

    energy, (X, y) = mlp_energy()
    sm.sample(
        energy, None, sm.SGLD(1e-3), 200, data=(X, y), batch_size=30, burn_in=50, num_chains=3, seed=0,
        out_dir=tmp_path / "run", progress=False,
    )  # fmt: skip
    text = diagnose_run(tmp_path / "run", plots=False, energy=energy, held_out=X[:40])
    assert "expected to look poor" in text and "permutation" in text
    line = next(t for t in text.splitlines() if t.startswith("function space"))
    assert "R-hat median" in line and "ESS median" in line


def test_sgnht_from_a_dispersed_start_is_guarded_and_unchanged_where_the_guard_is_idle():
    """§16: the thermostat after the first step from a dispersed start put the friction factor
    (1 − ξ) below −1, and the momentum grew to NaN within a few iterations. The cap ξ ≤ 1 keeps
    the chain finite; near equilibrium (ξ ≈ a) it never acts: the same chain, bit for bit."""
    logp = lambda th, b: -50.0 * (th * th).sum()  # noqa: E731  (N(0, 0.1²) per coordinate)
    far = torch.full((20,), 1.5)  # 15 sds out: the first step puts ξ at 2.2
    with pytest.raises(sm.DivergenceError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sm.sample(logp, far, sm.SGNHT(0.01, max_friction=None), 400, seed=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        guarded = sm.sample(logp, far, sm.SGNHT(0.01), 4000, burn_in=2000, seed=0, progress=False)
    draws = guarded.samples.reshape(-1, 20)
    assert bool(torch.isfinite(draws).all())
    assert abs(float(draws.mean())) < 0.01 and 0.008 < float(draws.var()) < 0.012  # N(0, 0.01), loosely
    near = torch.zeros(20)
    a = sm.sample(logp, near, sm.SGNHT(0.01), 500, seed=1, progress=False)
    b = sm.sample(logp, near, sm.SGNHT(0.01, max_friction=None), 500, seed=1, progress=False)
    assert float(a.info["thermostat"].max()) < 1.0 and torch.equal(a.samples, b.samples)
    assert "max_friction" not in sm.SGNHT(0.01).config()  # run folders of earlier versions resume
    with pytest.raises(ValueError, match="max_friction"):
        sm.SGNHT(0.01, max_friction=3.0)


cfgmod = types.ModuleType("cfgmod_issue36")  # a user's settings module, read by the log density below
cfgmod.SIGMA = 1.0
G = 1.0


def _lp_module(theta, batch):
    return -0.5 * (theta * theta).sum() / cfgmod.SIGMA**2


def _lp_globals(theta, batch):
    return -0.5 * (theta * theta).sum() / globals()["G"] ** 2


@pytest.mark.parametrize("how", ["module attribute", "globals()"])
def test_resume_sees_a_changed_value_that_a_log_density_reads_through_a_module_or_globals(tmp_path, how):
    """§1: `cfgmod.SIGMA = 10.0` (or globals()["G"]) between a run and its resume was accepted
    in silence; the values read are fingerprinted now, and the resume is refused naming the
    log density."""
    global G
    lp = _lp_module if how == "module attribute" else _lp_globals
    kw = dict(num_chains=1, seed=0, progress=False, out_dir=tmp_path, checkpoint_every=10)
    sm.sample(lp, torch.zeros(2), sm.SGLD(0.1), 20, **kw)
    old = (cfgmod.SIGMA, G)
    try:
        cfgmod.SIGMA, G = 10.0, 10.0
        with pytest.raises(ValueError, match="cannot resume: the target changed.*log density"):
            sm.sample(lp, torch.zeros(2), sm.SGLD(0.1), 40, resume=True, **kw)
    finally:
        cfgmod.SIGMA, G = old
    sm.sample(lp, torch.zeros(2), sm.SGLD(0.1), 40, resume=True, **kw)  # unchanged: resumes


def test_a_kernel_whose_state_lacks_theta_is_refused_at_set_up_naming_the_member():
    """§19: a dict state failed with AttributeError deep in the run loop."""

    class DictKernel(sm.SGLD):
        def init(self, theta, generator=None):
            return {"theta": theta.clone()}

    with pytest.raises(TypeError, match=r"DictKernel.init must return a state whose .theta .* without a .theta"):
        sm.sample(lambda th, b: -(th * th).sum(), torch.zeros(2), DictKernel(0.1), 5, progress=False)

    class NoStep:
        name, lr = "x", None

    with pytest.raises(TypeError, match="lacks target_energy, prepare, init, step"):
        sm.sample(lambda th, b: -(th * th).sum(), torch.zeros(2), NoStep(), 5, progress=False)


def test_a_bfloat16_sgld_chain_whose_steps_round_away_is_warned_at_set_up():
    """§8: a bfloat16 module with SGLD(1e-5): every gradient step is rounded away, in silence
    before; the check runs once at set-up (energy_checks.warn_below_resolution)."""
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to(torch.bfloat16)
    X, y = torch.randn(200, 4).bfloat16(), torch.randint(0, 3, (200,))
    energy = sm.ModuleEnergy(net, "categorical", prior_std=1.0)
    with pytest.warns(UserWarning, match="rounded away"):
        sm.sample(energy, None, sm.SGLD(1e-5), 2, data=(X, y), progress=False)
