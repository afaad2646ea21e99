"""kill -9 at several moments of a run with a run folder, then resume: the chain is bit for bit
the uninterrupted one, and the folder verifies (manifest checksums)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import structmc as sm
from support.runs import gaussian_log_prob

TESTS = str(Path(__file__).resolve().parents[1])
SETTINGS = dict(num_steps=120, thin=2, chunk_draws=7, checkpoint_every=10, seed=4, num_chains=2)

SCRIPT = """
import os, signal, sys, torch
import structmc as sm
from support.runs import gaussian_log_prob
out, kill_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["resume"]

def killer(t, state):
    if t == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.05, num_leapfrog=2), {num_steps}, thin={thin},
          chunk_draws={chunk_draws}, checkpoint_every={checkpoint_every}, seed={seed}, num_chains={num_chains},
          out_dir=out, progress=False, callback=killer, resume=resume)
""".format(**SETTINGS)


def _run(out, **kw):
    s = dict(SETTINGS)
    return sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.05, num_leapfrog=2), s.pop("num_steps"),
                     out_dir=out, progress=False, **s, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("ref"))


def _killed(out, kill_at, *extra):
    env = {**os.environ, "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out), str(kill_at), *extra], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr


# before the first checkpoint; just before a checkpoint is written (the callback runs first);
# just after one; at a chunk boundary (7 draws = 14 iterations); near the end
@pytest.mark.parametrize("kill_at", [3, 20, 21, 28, 119])
def test_kill_9_then_resume_gives_the_uninterrupted_chain(tmp_path, reference, kill_at):
    _killed(tmp_path, kill_at)
    resumed = _run(tmp_path, resume=True)
    assert torch.equal(resumed.samples, reference.samples)
    assert torch.equal(resumed.draw_steps, reference.draw_steps)
    assert torch.equal(sm.load_chain(tmp_path).samples, reference.samples)  # checksums verify


def test_killed_twice_in_a_row(tmp_path, reference):
    _killed(tmp_path, 25)
    _killed(tmp_path, 57, "resume")  # the resumed run is killed too
    assert torch.equal(_run(tmp_path, resume=True).samples, reference.samples)
