"""The run loop: checkpoint/resume, extending a run, streaming to disk, Chain save/load."""

from __future__ import annotations

import pytest
import torch
from support.runs import ALL_SAMPLERS, gaussian_log_prob, mlp_energy

import structmc as sm
from structmc.storage import RunFolder


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("make", ALL_SAMPLERS + [lambda: sm.SGLD(sm.Cyclical(1e-3, num_steps=40, num_cycles=3))])
@pytest.mark.parametrize("num_chains", [1, 2])
def test_resume_gives_the_uninterrupted_chain(tmp_path, make, num_chains):
    energy, data = mlp_energy()
    kwargs = dict(data=data, batch_size=20, seed=3, num_chains=num_chains, burn_in=5, thin=3, progress=False)
    full = sm.sample(energy, None, make(), 40, **kwargs)

    def interrupt(t, state):
        if t == 23:
            raise Interrupt

    with pytest.raises(Interrupt):
        sm.sample(
            energy, None, make(), 40, out_dir=tmp_path, checkpoint_every=10, chunk_draws=2, callback=interrupt, **kwargs
        )
    resumed = sm.sample(
        energy, None, make(), 40, out_dir=tmp_path, checkpoint_every=10, chunk_draws=2, resume=True, **kwargs
    )
    assert torch.equal(resumed.samples, full.samples)
    assert torch.equal(resumed.draw_steps, full.draw_steps)
    assert torch.equal(resumed.info["lr"], full.info["lr"])
    assert torch.equal(resumed.info["energy"], full.info["energy"])
    on_disk = sm.load_chain(tmp_path)
    assert torch.equal(on_disk.samples, full.samples)


def test_resume_with_control_variates(tmp_path):
    energy, data = mlp_energy()
    centre = energy.initial_position() + 0.01
    kwargs = dict(data=data, batch_size=30, seed=1, progress=False, gradient=sm.ControlVariate(centre))
    full = sm.sample(energy, None, sm.SGLD(1e-3), 20, **kwargs)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, out_dir=tmp_path, **kwargs)
    longer = sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kwargs)
    assert torch.equal(longer.samples, full.samples)


def test_extend_a_finished_run(tmp_path):
    kwargs = dict(seed=4, num_chains=2, progress=False)
    full = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 30, **kwargs)
    sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 17, out_dir=tmp_path, **kwargs)
    extended = sm.sample(
        gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 30, out_dir=tmp_path, resume=True, **kwargs
    )
    assert torch.equal(extended.samples, full.samples)


def test_resume_refuses_changed_settings(tmp_path):
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="cannot resume"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.2), 20, out_dir=tmp_path, resume=True, progress=False)
    with pytest.raises(ValueError, match="cannot resume"):
        sm.sample(
            gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 20, out_dir=tmp_path, resume=True, seed=1, progress=False
        )


# ---------------------------------------------------------------------------------------
# storage
# ---------------------------------------------------------------------------------------
def test_streaming_to_disk_without_memory(tmp_path):
    full = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 25, thin=2, progress=False)
    streamed = sm.sample(
        gaussian_log_prob,
        torch.zeros(2),
        sm.SGLD(0.1),
        25,
        thin=2,
        progress=False,
        out_dir=tmp_path,
        keep_in_memory=False,
        chunk_draws=5,
    )
    assert len(RunFolder(tmp_path).chunk_files()) == 3  # 12 draws in chunks of 5, 5, 2
    assert torch.equal(streamed.samples, full.samples)


def test_chain_save_load_roundtrip(tmp_path):
    energy, data = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-4), 6, data=data, progress=False)
    sm.save_chain(chain, tmp_path / "c")
    back = sm.load_chain(tmp_path / "c")
    assert torch.equal(back.samples, chain.samples)
    assert back.space.names == chain.space.names
    assert back.config["sampler"]["sampler"] == "sgld"


def test_run_folders_and_saved_chains_keep_the_layer_structure(tmp_path):
    """Layers read from module types survive the round trip (a custom module's parameters
    named weight/bias are not a layer; the name rule alone would make one)."""
    from torch import nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(2, 3)), nn.Parameter(torch.zeros(2))

        def forward(self, x):
            return x @ self.weight.T + self.bias

    net = nn.Sequential(nn.Linear(3, 3), Scale())
    energy = sm.ModuleEnergy(net, "categorical")
    X, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 4, data=(X, y), out_dir=tmp_path / "run", progress=False)
    sm.save_chain(chain, tmp_path / "saved")
    for back in (sm.load_chain(tmp_path / "run"), sm.load_chain(tmp_path / "saved")):
        assert back.space.to_config() == energy.space.to_config()
    assert [rec.kind for rec in energy.space.layers] == ["linear", "other", "other"]


def test_a_noisy_gradient_energy_resumes_exactly_and_repeats_its_chain(tmp_path):
    """The simulated gradient noise (pSGLD paper, Fig. 1) has its own generator: it is part of
    the run's state. Before, a resumed run drew other noise than the uninterrupted one, and a
    second run on the same energy object continued the first one's noise (same seed, another
    chain)."""
    import structmc as sm

    def log_prob(theta, batch):
        return -0.5 * (theta * theta).sum(-1)

    energy = sm.NoisyGradientEnergy(sm.LogDensityEnergy(log_prob, 2, vectorized=True), 0.5, seed=3)
    kw = dict(num_chains=2, seed=1, progress=False)
    whole = sm.sample(energy, torch.zeros(2), sm.SGLD(0.05), 40, **kw)
    again = sm.sample(energy, torch.zeros(2), sm.SGLD(0.05), 40, **kw)
    assert torch.equal(whole.samples, again.samples)
    sm.sample(energy, torch.zeros(2), sm.SGLD(0.05), 15, out_dir=tmp_path, checkpoint_every=5, **kw)
    resumed = sm.sample(energy, torch.zeros(2), sm.SGLD(0.05), 40, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, whole.samples)
