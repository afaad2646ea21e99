"""Checkpointer(every_seconds=...): checkpoints at the iteration cadence, at most one per that
many seconds (a large state — structured SGMCMC's θ̃ history of a ResNet — is not rewritten
every epoch); the chain does not depend on where it was checkpointed."""

from __future__ import annotations

import pytest
import torch

import structmc as sm
from structmc.checkpointing import Checkpointer
from structmc.storage import RunFolder


def _run():
    target = lambda theta, batch: -0.5 * (theta * theta).sum()  # noqa: E731
    return sm.Run(target, torch.zeros(3), sm.SGLD(0.1), seed=1)


def _written(tmp_path, every_seconds, steps=10, clock=None):
    run = _run()
    folder = RunFolder(tmp_path)
    folder.path.mkdir(parents=True, exist_ok=True)
    ckpt = Checkpointer(folder, run.settings(), every=2, every_seconds=every_seconds)
    written = []
    for t, _, _ in run.iterate(steps):
        ckpt.step(run, t)
        if ckpt.written_at == t:
            written.append(t)
    return written, run


def test_every_seconds_gates_the_iteration_cadence(tmp_path):
    assert _written(tmp_path / "a", None)[0] == [2, 4, 6, 8, 10]
    assert _written(tmp_path / "b", 0.0)[0] == [2, 4, 6, 8, 10]
    assert _written(tmp_path / "c", 3600.0)[0] == []  # an hour has not passed: none until asked


def test_the_gate_opens_when_the_seconds_have_passed(tmp_path, monkeypatch):
    import structmc.checkpointing as cp

    now = [1000.0]
    monkeypatch.setattr(cp.time, "monotonic", lambda: now[0])
    run = _run()
    folder = RunFolder(tmp_path)
    folder.path.mkdir(parents=True, exist_ok=True)
    ckpt = Checkpointer(folder, run.settings(), every=2, every_seconds=60.0)
    written = []
    for t, _, _ in run.iterate(12):
        now[0] += 25.0  # 25 s per iteration: 60 s pass between checkpoints at even iterations
        ckpt.step(run, t)
        if ckpt.written_at == t:
            written.append(t)
    assert written == [4, 8, 12]


def test_every_seconds_is_checked():
    run = _run()
    with pytest.raises(ValueError, match="every_seconds"):
        Checkpointer(None, run.settings(), every=2, every_seconds=-1.0)
