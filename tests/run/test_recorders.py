"""The recorder seam (structmc.recorders, structmc.checkpointing): a user's recorder in
``sample(recorders=...)`` is checkpointed with the run and ends, after an interrupted run is
resumed, exactly as in the uninterrupted run; the thinning keeper keeps evenly spaced draws and
round-trips its state; a caller's accumulators are restored in place; bad recorders are refused
before any compute."""

from __future__ import annotations

import pytest
import torch

import structmc as sm
from structmc.recorders import Carry, Recorder, ThinningKeeper

X = torch.linspace(-1, 1, 30, dtype=torch.float64).unsqueeze(1)
Y = 0.5 * X[:, 0]


def log_prob(theta, batch):
    x, y = batch
    return -0.5 * ((y - x[:, 0] * theta[0]) ** 2).sum() - 0.5 * (theta**2).sum()


class RunningMean(Recorder):
    """The running mean of θ and the iterations seen: state a resume must restore."""

    def __init__(self):
        self.total, self.count, self.seen = None, 0, []

    def on_step(self, iteration, state, info):
        theta = state.theta.detach()
        self.total = theta.clone() if self.total is None else self.total + theta
        self.count += 1
        self.seen.append(iteration)

    def state_dict(self):
        return {"total": self.total, "count": self.count, "seen": list(self.seen)}

    def load_state_dict(self, state):
        self.total, self.count, self.seen = state["total"], state["count"], list(state["seen"])


def run(out_dir=None, recorder=None, stop_at=None, resume=False):
    def stop(t, state):
        if t == stop_at:
            raise KeyboardInterrupt

    return sm.sample(
        log_prob,
        torch.zeros(2, dtype=torch.float64),
        sm.SGLD(1e-2),
        40,
        data=(X, Y),
        batch_size=6,
        num_chains=2,
        seed=5,
        out_dir=out_dir,
        checkpoint_every=7 if out_dir else None,
        resume=resume,
        callback=stop if stop_at else None,
        recorders={"mean": recorder},
        progress=False,
    )


def test_a_user_recorder_resumes_to_the_uninterrupted_state(tmp_path):
    whole = RunningMean()
    chain = run(recorder=whole)
    assert whole.count == 40 and whole.seen == list(range(1, 41))
    cut = RunningMean()
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, cut, stop_at=17)  # Ctrl-C at 17: a checkpoint at 17, the recorder's state with it
    assert cut.count == 17
    again = RunningMean()  # a new process: the recorder starts empty and is restored
    resumed = run(tmp_path, again, resume=True)
    assert again.count == 40 and again.seen == list(range(1, 41))
    torch.testing.assert_close(again.total, whole.total, rtol=0, atol=0)
    torch.testing.assert_close(resumed.samples, chain.samples, rtol=0, atol=0)


def test_recorders_must_be_named_recorder_objects():
    with pytest.raises(TypeError, match="recorders must map names to structmc.recorders.Recorder"):
        sm.sample(log_prob, torch.zeros(2), sm.SGLD(1e-2), 5, data=(X.float(), Y.float()), recorders={"f": print})


def test_thinning_keeper_keeps_evenly_spaced_draws_and_round_trips():
    keeper = ThinningKeeper(1, 2)
    for t in range(1, 13):
        keeper.add(torch.tensor([float(t)]), t, 0.1 * t)
    # 1..4 kept, full at 4 -> [2, 4], thin 2; 6, 8 -> full -> [4, 8], thin 4; 12 -> [4, 8, 12]
    assert keeper.steps == [4, 8, 12] and keeper.thin == 4
    assert [float(d) for d in keeper.draws] == [4.0, 8.0, 12.0]
    assert keeper.times == pytest.approx([0.4, 0.8, 1.2])
    copy = ThinningKeeper(1, 2)
    copy.load_state_dict(keeper.state_dict())
    for k in (keeper, copy):
        for t in range(13, 25):
            k.add(torch.tensor([float(t)]), t)
    assert copy.steps == keeper.steps == [8, 16, 24] and copy.thin == keeper.thin == 8


def test_carry_restores_lists_in_place():
    data = {"trace": [torch.ones(2)], "n": 1}
    state = Carry(data).state_dict()
    target = {"trace": [], "n": 0}
    held = target["trace"]
    Carry(target).load_state_dict(state)
    assert held is target["trace"] and len(held) == 1 and target["n"] == 1
