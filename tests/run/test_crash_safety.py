"""kill -9 at several moments of a run with a run folder, then resume: the chain is bit for bit
the uninterrupted one, and the folder verifies (manifest checksums)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.runs import gaussian_log_prob

import structmc as sm

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
    return sm.sample(
        gaussian_log_prob,
        torch.zeros(3),
        sm.SGHMC(0.05, num_leapfrog=2),
        s.pop("num_steps"),
        out_dir=out,
        progress=False,
        **s,
        **kw,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("ref"))


def _killed(out, kill_at, *extra):
    env = {**os.environ, "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), str(kill_at), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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


# ---------------------------------------------------------------------------------------
# a crash at every file operation (issue 21, finding 13): the checkpoint and the manifest are
# written crash-consistently, so resume always works and gives the uninterrupted chain
# ---------------------------------------------------------------------------------------
class _Crash(BaseException):
    """The process dies here (a BaseException: nothing in structmc catches it)."""


class _FaultyOS:
    """``os`` for the modules of :mod:`structmc.storage`, dying at its ``crash_at``-th file replacement or removal
    (and at every one after it: a dead process writes nothing more). ``crash_at=None`` counts."""

    def __init__(self, crash_at=None):
        self.crash_at, self.calls = crash_at, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def _op(self, name, *args, **kw):
        self.calls += 1
        if self.crash_at is not None and self.calls >= self.crash_at:
            raise _Crash(f"crash at file operation {self.crash_at} ({name} {args[0]})")
        return getattr(os, name)(*args, **kw)

    def replace(self, *args, **kw):
        return self._op("replace", *args, **kw)

    def unlink(self, *args, **kw):
        return self._op("unlink", *args, **kw)


def _storage_os(monkeypatch, os_):
    """Put ``os_`` as ``os`` in every module of :mod:`structmc.storage` that does file operations
    (a package since issue 23: the lock and manifest, the atomic writes, the run folder)."""
    import importlib
    import pkgutil

    from structmc import storage

    mods = [importlib.import_module(f"{storage.__name__}.{m.name}") for m in pkgutil.iter_modules(storage.__path__)]
    with_os = [m for m in mods if hasattr(m, "os")]
    assert len(with_os) >= 3, with_os
    for m in with_os:
        monkeypatch.setattr(m, "os", os_)


SMALL = dict(thin=2, chunk_draws=3, checkpoint_every=10, seed=4, num_chains=2, progress=False)


def _small(out, num_steps=30, **kw):
    return sm.sample(
        gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.05, num_leapfrog=2), num_steps, out_dir=out, **SMALL, **kw
    )


@pytest.mark.parametrize("keep", [True, False])
def test_a_crash_at_any_file_operation_resumes_to_the_uninterrupted_chain(tmp_path, monkeypatch, keep):
    from structmc.recording import InfoLog

    monkeypatch.setattr(InfoLog, "WRITE_EVERY", 7)  # info chunks are written too
    counter = _FaultyOS()
    _storage_os(monkeypatch, counter)
    reference = _small(tmp_path / "ref", keep_in_memory=keep)
    ops = counter.calls
    assert ops >= 20  # run.json, manifests, sample and info chunks, 3 checkpoints (each: file, manifest, old one)
    for k in range(1, ops + 1):
        out = tmp_path / str(k)
        _storage_os(monkeypatch, _FaultyOS(k))
        with pytest.raises(_Crash):
            _small(out, keep_in_memory=keep)
        _storage_os(monkeypatch, os)
        resumed = _small(out, resume=True, keep_in_memory=keep)
        back = sm.load_chain(out)  # every file it reads matches the manifest
        for chain in (resumed, back):
            assert torch.equal(chain.samples, reference.samples), k
            assert torch.equal(chain.draw_steps, reference.draw_steps), k
            assert torch.equal(chain.info["energy"], reference.info["energy"]), k
        left = sorted(p.name for p in out.rglob("*") if p.is_file())
        assert not [n for n in left if n.endswith(".tmp") or n == ".structmc.lock"], (k, left)
        assert len([n for n in left if n.startswith("checkpoint")]) == 1, (k, left)  # leftovers removed


def test_a_folder_with_checkpoint_pt_and_an_older_manifest_still_resumes(tmp_path):
    """Folders written before checkpoints were named in the manifest: checkpoint.pt, listed."""
    import json

    from structmc.storage import RunFolder

    reference = _small(tmp_path / "ref")
    out = tmp_path / "run"
    _small(out, num_steps=20)
    m = json.loads((out / "manifest.json").read_text())
    name = m.pop("checkpoint")
    m["files"]["checkpoint.pt"] = m["files"].pop(name)
    del m["files"]["run.json"]  # listed since manifest format 3
    m["format"] = 1
    (out / name).rename(out / "checkpoint.pt")
    (out / "manifest.json").write_text(json.dumps(m))
    settings = json.loads((out / "run.json").read_text())
    del settings["folder_format"]
    (out / "run.json").write_text(json.dumps(settings))
    assert RunFolder(out).load_checkpoint()["run"]["iteration"] == 20
    assert torch.equal(sm.load_chain(out).samples, reference.samples[:, :10])
    resumed = _small(out, resume=True)
    assert torch.equal(resumed.samples, reference.samples)
    assert not (out / "checkpoint.pt").exists() and RunFolder(out).checkpoint_file().name == "checkpoint-00000030.pt"


# ---------------------------------------------------------------------------------------
# resume=True without a checkpoint (finding 7): another run's draws are not deleted
# ---------------------------------------------------------------------------------------
def _shifted_log_prob(theta, batch):
    return -0.5 * ((theta - 1.0) ** 2).sum()


def test_resume_without_a_checkpoint_refuses_to_delete_another_runs_draws(tmp_path):
    kw = dict(thin=2, chunk_draws=3, seed=4, num_chains=2, progress=False, out_dir=tmp_path)
    full = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, **{**kw, "out_dir": None})

    def die(t, state):
        if t == 50:
            raise _Crash  # killed before any checkpoint (checkpoint_every=None)

    with pytest.raises(_Crash):
        sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, callback=die, **kw)
    chunks = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert len(chunks) == 8
    with pytest.raises(ValueError, match=r"holds the draws of another run.*the target changed.*log density"):
        sm.sample(_shifted_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, resume=True, **kw)
    with pytest.raises(ValueError, match=r"holds the draws of another run.*seed differs"):
        sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, resume=True, **{**kw, "seed": 5})
    with pytest.raises(ValueError, match=r"holds the draws of another run.*config differs"):
        sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.07), 60, resume=True, **kw)
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == chunks  # untouched
    # the same run starts afresh (nothing to continue from) and gives the uninterrupted chain
    resumed = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples) and torch.equal(sm.load_chain(tmp_path).samples, full.samples)
