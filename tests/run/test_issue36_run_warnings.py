"""Issue 36: what a user meets when a run is interrupted, settles badly or blows up."""

from __future__ import annotations

import itertools
import os
import signal
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
