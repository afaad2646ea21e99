"""A module with buffers (BatchNorm running statistics) resumes exactly: the run's checkpoint
carries the module's own buffers and each chain's (``ModuleEnergy.buffer_state_dict``), so an
interrupted and resumed run ends with the uninterrupted run's draws, statistics and eval-mode
predictions."""

from __future__ import annotations

import pytest
import torch
from support.runs import Interrupt, interrupt_at
from torch import nn

import structmc as sm
from structmc.checkpointing import _upgrade_checkpoint
from structmc.storage import RunFolder


def bn_problem(seed=0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 3, generator=g) * 2 + 1  # far from BatchNorm's initial statistics (0, 1)
    y = (x[:, 0] + x[:, 1] > 2).long()
    return net, (x, y)


def same_buffers(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("make", [lambda: sm.SGLD(1e-3), lambda: sm.SGHMC(1e-3, friction=0.2)])
@pytest.mark.parametrize("num_chains", [1, 3])
def test_a_batchnorm_run_resumes_to_the_uninterrupted_statistics_and_predictions(tmp_path, make, num_chains):
    net, data = bn_problem()
    kwargs = dict(data=data, batch_size=10, seed=2, num_chains=num_chains, thin=4, progress=False)
    # a new energy per run, as a resumed process builds it: fresh running statistics
    full = sm.sample(sm.ModuleEnergy(net, prior_std=1.0), None, make(), 30, **kwargs)
    with pytest.raises(Interrupt):
        sm.sample(
            sm.ModuleEnergy(net, prior_std=1.0),
            None,
            make(),
            30,
            out_dir=tmp_path,
            checkpoint_every=10,
            callback=interrupt_at(17),
            **kwargs,
        )
    assert RunFolder(tmp_path).load_checkpoint()["run"]["iteration"] == 10
    energy = sm.ModuleEnergy(net, prior_std=1.0)
    resumed = sm.sample(energy, None, make(), 30, out_dir=tmp_path, checkpoint_every=10, resume=True, **kwargs)
    assert torch.equal(resumed.samples, full.samples)
    assert full.buffers is not None and resumed.buffers is not None and len(resumed.buffers) == num_chains
    for c in range(num_chains):
        assert same_buffers(resumed.buffers[c], full.buffers[c]), c
        # the statistics moved away from BatchNorm's start: a fresh module would not match
        assert not torch.equal(full.buffers[c]["1.running_mean"], torch.zeros(8))
    x_test = torch.randn(25, 3, generator=torch.Generator().manual_seed(9)) * 2 + 1
    p_full = sm.predictive(energy, full, x_test)["probs"]
    p_resumed = sm.predictive(energy, resumed, x_test)["probs"]
    assert torch.equal(p_resumed, p_full)


def test_the_checkpoint_of_a_run_without_buffers_has_no_buffers_entry(tmp_path):
    """Energies without buffers keep the checkpoint layout they had."""
    sm.sample(lambda t, b: -0.5 * (t * t).sum(), torch.zeros(2), sm.SGLD(0.1), 5, out_dir=tmp_path, progress=False)
    assert "buffers" not in RunFolder(tmp_path).load_checkpoint()["run"]


def test_a_checkpoint_without_buffers_resumes_with_the_modules_statistics_and_says_so(tmp_path):
    """A checkpoint written before the run held the buffers: the resumed chain goes on with the
    module's current statistics, with a warning (not silently)."""
    net, data = bn_problem()
    kwargs = dict(data=data, batch_size=10, seed=2, progress=False)
    sm.sample(sm.ModuleEnergy(net, prior_std=1.0), None, sm.SGLD(1e-3), 10, out_dir=tmp_path, **kwargs)
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    del ckpt["run"]["buffers"]
    folder.save_checkpoint(ckpt)
    with pytest.warns(UserWarning, match="BatchNorm"):
        sm.sample(sm.ModuleEnergy(net, prior_std=1.0), None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kwargs)


def test_the_experiments_carried_statistics_are_read_as_the_runs():
    """Checkpoints of ssgmcmc_resnet written while it carried BatchNorm's statistics itself (under
    its carry's ``buffers``) hand them to the run."""
    saved = {"own": {"w": torch.ones(2)}, "chains": None}
    ckpt = {"format": 2, "settings": {}, "run": {"iteration": 4}, "recorders": {"carry": {"buffers": [saved], "x": []}}}
    up = _upgrade_checkpoint(ckpt)
    assert up["run"]["buffers"] is saved and up["recorders"]["carry"] == {"x": []}


def test_restoring_another_modules_buffers_is_refused_naming_them():
    net, _ = bn_problem()
    energy = sm.ModuleEnergy(net, prior_std=1.0)
    state = energy.buffer_state_dict()
    assert state["chains"] is None and set(state["own"]) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    other = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    with pytest.raises(ValueError, match="running_mean"):
        other.load_buffer_state_dict(state)
    with pytest.raises(ValueError, match="has_buffers is False"):
        sm.ModuleEnergy(nn.Linear(3, 2)).buffer_state_dict()
