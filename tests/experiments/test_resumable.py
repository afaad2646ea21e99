"""experiments._shared.resumable_iterate: an interrupted loop, resumed, ends exactly where the
uninterrupted one does, with the caller's accumulators restored; a changed run is refused."""

from __future__ import annotations

import pytest
import torch

import structmc
from structmc.storage import RunFolder
from structmc_papers._shared import load_result, resumable_iterate, save_result

X = torch.linspace(-1, 1, 40, dtype=torch.float64).unsqueeze(1)
Y = 0.7 * X[:, 0] + 0.1 * torch.sin(7 * X[:, 0])


def log_prob(theta, batch):
    x, y = batch
    return -0.5 * ((y - x[:, 0] * theta[0]) ** 2).sum() - 0.5 * (theta**2).sum()


def make_run(seed=3):
    sampler = structmc.ScaleAdaptedSGHMC(1e-3, 0.2, adapt_steps=4)
    return structmc.Run(
        log_prob, torch.zeros(2, dtype=torch.float64), sampler, data=(X, Y), batch_size=8, seed=seed, num_chains=2
    )


def loop(run, folder, resume, stop_at=None):
    carry = {"trace": [], "count": 0}
    trace = carry["trace"]
    for t, state, _ in resumable_iterate(run, 20, folder, resume=resume, every=3, carry=carry):
        trace.append(state.theta.clone())
        carry["count"] += 1
        if t == stop_at:
            raise KeyboardInterrupt
    return carry


def test_resumed_loop_equals_the_uninterrupted_one(tmp_path):
    whole_run = make_run()
    whole = loop(whole_run, None, False)
    with pytest.raises(KeyboardInterrupt):
        loop(make_run(), tmp_path, False, stop_at=8)  # last checkpoint: iteration 6
    ckpt = RunFolder(tmp_path).load_checkpoint()  # sample()'s format: the one Checkpointer
    carried = ckpt["recorders"]["carry"]
    assert ckpt["format"] == 2 and ckpt["run"]["iteration"] == 6
    assert len(carried["trace"]) == 6 and carried["count"] == 6
    run = make_run()
    resumed = loop(run, tmp_path, True)
    assert resumed["count"] == 20 and len(resumed["trace"]) == 20
    torch.testing.assert_close(torch.stack(resumed["trace"]), torch.stack(whole["trace"]), rtol=0, atol=0)
    torch.testing.assert_close(run.theta, whole_run.theta, rtol=0, atol=0)
    # a different run in the same folder is refused, a fresh start ignores the old checkpoint
    with pytest.raises(ValueError, match="cannot resume: seed differs"):
        loop(make_run(seed=4), tmp_path, True)
    fresh = loop(make_run(), tmp_path, False)
    torch.testing.assert_close(torch.stack(fresh["trace"]), torch.stack(whole["trace"]), rtol=0, atol=0)


def test_a_checkpoint_in_the_experiments_former_format_still_resumes(tmp_path):
    """``checkpoint.pt`` holding ``settings``, ``run`` and ``carry`` (what resumable_iterate wrote
    before the recorder seam) resumes to the uninterrupted loop, and is replaced by the new
    format's checkpoint."""
    whole = loop(make_run(), None, False)
    run = make_run()
    trace = []
    for _, state, _ in run.iterate(6):
        trace.append(state.theta.clone())
    torch.save(
        {"settings": run.settings(), "run": run.state_dict(), "carry": {"trace": trace, "count": 6}},
        tmp_path / "checkpoint.pt",
    )
    resumed = loop(make_run(), tmp_path, True)
    assert resumed["count"] == 20
    torch.testing.assert_close(torch.stack(resumed["trace"]), torch.stack(whole["trace"]), rtol=0, atol=0)
    assert not (tmp_path / "checkpoint.pt").exists() and RunFolder(tmp_path).load_checkpoint()["run"]["iteration"] == 20


def test_results_are_read_back_only_when_resuming(tmp_path):
    save_result(tmp_path, {"accuracy": 0.5, "inf": float("inf")})
    assert load_result(tmp_path, resume=False) is None
    assert load_result(tmp_path, resume=True) == {"accuracy": 0.5, "inf": float("inf")}
    assert load_result(None, resume=True) is None
