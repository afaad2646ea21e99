"""MAMBA's out_dir: one atomic commit of the progress per round (a kill at any file operation
resumes to the uninterrupted result), and resume refusing a changed target."""

from __future__ import annotations

import builtins
import io
import json
import os
from pathlib import Path

import pytest
import torch
from support.tuning import InterruptedKSD, linreg

from structmc import Budget
from structmc.tuning import TuningResult, grid, mamba

ARMS = grid("sgld", lr=[0.02, 0.05, 0.1], batch_size=[None, 6, 3])  # 9 arms, eta 3: rounds of 9 and 3


def _tune(out_dir, data=None, resume=False, metric="ksd", energy=None):
    e, d, _ = linreg(N=12, d=2)
    return mamba(
        energy or e,
        torch.zeros(2, dtype=torch.float64),
        ARMS,
        Budget(iterations=360),
        data=data or d,
        seed=5,
        thin=1,
        out_dir=out_dir,
        resume=resume,
        progress=False,
        metric=metric,
    )


def _trace(res: TuningResult):
    """The trace without wall-clock times."""
    return (
        res.best_index,
        [
            [{k: v for k, v in x.items() if not k.endswith("_s") and k != "seconds"} for x in r["results"]]
            for r in res.rounds
        ],
        [r["kept"] for r in res.rounds],
    )


class _Killed(BaseException):
    """The process dies here: nothing after it runs (not even cleanup)."""


class _CrashAt:
    """Counts the file operations that write under ``root`` (open for writing, replace, rename,
    unlink, torch.save to a path) and dies at the ``k``-th and every one after it."""

    def __init__(self, monkeypatch, root: Path, k: int):
        self.root, self.k, self.count, self.dead = str(root), k, 0, False
        real_open, real_replace, real_rename, real_unlink, real_save = (
            builtins.open,
            os.replace,
            os.rename,
            os.unlink,
            torch.save,
        )

        def op(path, what):
            if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).startswith(self.root + os.sep):
                return
            self.count += 1
            if self.dead or self.count >= self.k:
                self.dead = True
                raise _Killed(f"killed at operation {self.count}: {what} {path}")

        def open_(file, mode="r", *a, **kw):
            if any(c in mode for c in "wax+"):
                op(file, "open")
            return real_open(file, mode, *a, **kw)

        def replace(src, dst, *a, **kw):
            op(dst, "replace")
            return real_replace(src, dst, *a, **kw)

        def rename(src, dst, *a, **kw):
            op(dst, "rename")
            return real_rename(src, dst, *a, **kw)

        def unlink(path, *a, **kw):
            op(path, "unlink")
            return real_unlink(path, *a, **kw)

        def save(obj, f, *a, **kw):
            if isinstance(f, (str, os.PathLike)):
                op(f, "torch.save")
            return real_save(obj, f, *a, **kw)

        for target, name, fake in (
            (builtins, "open", open_),
            (io, "open", open_),
            (os, "replace", replace),
            (os, "rename", rename),
            (os, "unlink", unlink),
            (os, "remove", unlink),
            (torch, "save", save),
        ):
            monkeypatch.setattr(target, name, fake)


def test_a_kill_at_any_file_operation_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    full = _tune(tmp_path / "full")
    k = 1
    while True:
        out = tmp_path / f"kill{k}"
        with monkeypatch.context() as m:
            crash = _CrashAt(m, out, k)
            try:
                _tune(out)
                killed = False
            except _Killed:
                killed = True
        if not killed:
            assert k > 8, k  # at least two rounds' saves were interrupted at every operation
            break
        resumed = _tune(out, resume=True)
        assert _trace(resumed) == _trace(full), f"killed at file operation {k} of {crash.count}"
        on_disk = TuningResult.load(out / "trace.json")
        assert on_disk.complete and _trace(on_disk) == _trace(full)
        k += 1


def _interrupted_after_round_0(out):
    with pytest.raises(KeyboardInterrupt):
        _tune(out, metric=InterruptedKSD(at=len(ARMS) + 1))
    assert len(json.loads((out / "trace.json").read_text())["rounds"]) == 1


def test_resume_refuses_changed_data_or_energy(tmp_path):
    import structmc as sm

    _interrupted_after_round_0(tmp_path)
    _, (X, y), _ = linreg(N=12, d=2)
    with pytest.raises(ValueError, match=r"cannot resume: the target changed since the tuning run .*: the data"):
        _tune(tmp_path, data=(X * 3, 1 - y), resume=True)
    y2 = y.clone()
    y2[7] += 1e-3
    with pytest.raises(ValueError, match=r"the target changed .*: the data \(data: entry 1 of 2"):
        _tune(tmp_path, data=(X, y2), resume=True)
    energy, _, _ = linreg(N=12, d=2)
    wider = sm.ModuleEnergy(energy.module, "gaussian", noise_std=energy.likelihood.noise_std, prior_std=10.0)
    with pytest.raises(ValueError, match=r"the target changed .*: the prior"):
        _tune(tmp_path, energy=wider, resume=True)
    full = _tune(tmp_path / "full")
    assert _trace(_tune(tmp_path, resume=True)) == _trace(full)  # the same target still resumes


def test_a_folder_written_before_progress_files_still_resumes(tmp_path):
    """structmc 0.1 wrote trace.json (no target fingerprint) and arm_states.pt."""
    full = _tune(tmp_path / "full")
    part = tmp_path / "part"
    _interrupted_after_round_0(part)
    saved = torch.load(part / "progress.pt", weights_only=False)
    old = TuningResult.from_dict(saved["trace"])
    old.target = None
    old.save(part / "trace.json")
    torch.save(saved["states"], part / "arm_states.pt")
    (part / "progress.pt").unlink()
    (part / "manifest.json").unlink()  # structmc 0.1 wrote none
    with pytest.warns(UserWarning, match="before targets were fingerprinted"):
        resumed = _tune(part, resume=True)
    assert _trace(resumed) == _trace(full)
    assert (part / "progress.pt").exists() and not (part / "arm_states.pt").exists()
    assert TuningResult.load(part / "trace.json").target == full.target


def test_grid_search_resume_refuses_changed_data(tmp_path):
    from structmc.tuning import grid_search

    energy, (X, y), _ = linreg(N=12, d=2)
    kw = dict(batch_size=None, thin=1, out_dir=tmp_path, progress=False)
    first = grid_search(energy, torch.zeros(2, dtype=torch.float64), ARMS[:3], Budget(iterations=20), data=(X, y), **kw)
    with pytest.raises(ValueError, match=r"the target changed .*: the data"):
        grid_search(
            energy,
            torch.zeros(2, dtype=torch.float64),
            ARMS[:3],
            Budget(iterations=20),
            data=(X, -y),
            resume=True,
            **kw,
        )
    again = grid_search(
        energy, torch.zeros(2, dtype=torch.float64), ARMS[:3], Budget(iterations=20), data=(X, y), resume=True, **kw
    )
    assert _trace(again) == _trace(first)
