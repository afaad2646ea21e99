"""sample(data=Dataset): the same chain as the in-memory tensors for every batching law, exact
resume, prefetch in a background thread, seeded per-batch transforms, clear errors."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

import structmc as sm

F64 = torch.float64


class Rows(Dataset):
    """A plain map-style dataset over tensors (not a TensorDataset: the dataset stream runs)."""

    def __init__(self, x, y, targets=False):
        self.x, self.y = x, y
        self.threads: list[str] = []
        if targets:
            self.targets = y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.threads.append(threading.current_thread().name)
        return self.x[i], self.y[i]


def _setup(n=60):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=F64)
    y = torch.randint(0, 3, (n,), generator=g)
    torch.manual_seed(1)
    energy = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3)).double(), "categorical")
    return energy, x, y


@pytest.mark.parametrize("batching", ["epoch", "with_replacement", "without_replacement", "stratified"])
@pytest.mark.parametrize("chains", [1, 3])
def test_a_dataset_gives_the_chain_of_its_tensors(batching, chains):
    energy, x, y = _setup()
    kw = dict(batch_size=8, batching=batching, num_chains=chains, seed=4, progress=False)
    a = sm.sample(energy, None, sm.SGLD(1e-3), 30, data=(x, y), **kw)
    ds = Rows(x, y, targets=True)
    b = sm.sample(energy, None, sm.SGLD(1e-3), 30, data=ds, **kw)
    assert torch.equal(a.samples, b.samples)
    c = sm.sample(energy, None, sm.SGLD(1e-3), 30, data=torch.utils.data.TensorDataset(x, y), **kw)
    assert torch.equal(a.samples, c.samples)  # a TensorDataset: its tensors, in memory
    if batching == "epoch":  # 7 batches per epoch: the 6 after each epoch's first are prefetched
        assert any(t.startswith("structmc-prefetch") for t in ds.threads)


def test_full_batch_and_psgld_and_resume(tmp_path):
    energy, x, y = _setup()
    full_a = sm.sample(energy, None, sm.PSGLD(1e-4), 10, data=(x, y), seed=1, progress=False)
    full_b = sm.sample(energy, None, sm.PSGLD(1e-4), 10, data=Rows(x, y), seed=1, progress=False)
    assert torch.equal(full_a.samples, full_b.samples)
    kw = dict(batch_size=8, num_chains=2, seed=2, progress=False)
    whole = sm.sample(energy, None, sm.SGHMC(1e-4), 40, data=Rows(x, y), **kw)
    sm.sample(energy, None, sm.SGHMC(1e-4), 17, data=Rows(x, y), out_dir=tmp_path, checkpoint_every=5, **kw)
    resumed = sm.sample(
        energy, None, sm.SGHMC(1e-4), 40, data=Rows(x, y), out_dir=tmp_path, checkpoint_every=5, resume=True, **kw
    )
    assert torch.equal(whole.samples, resumed.samples)


def _flip(batch, generator):
    x, y = batch
    sign = torch.where(torch.rand(x.shape[:2], generator=generator, device=x.device) < 0.5, -1.0, 1.0)
    return x * sign.unsqueeze(-1).to(x), y


def test_per_batch_transforms_are_seeded_by_the_run():
    energy, x, y = _setup()
    kw = dict(batch_size=8, num_chains=2, seed=5, progress=False)
    on_ds = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=sm.DataSource(Rows(x, y), transform=_flip), **kw)
    again = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=sm.DataSource(Rows(x, y), transform=_flip), **kw)
    in_memory = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=sm.DataSource((x, y), transform=_flip), **kw)
    plain = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=(x, y), **kw)
    assert torch.equal(on_ds.samples, again.samples) and torch.equal(on_ds.samples, in_memory.samples)
    assert not torch.equal(on_ds.samples, plain.samples)  # the transform does act


def test_bad_datasets_are_refused_before_any_compute():
    energy, x, y = _setup()

    class Wide(Rows):
        def __getitem__(self, i):
            return torch.cat([self.x[i], self.x[i]]), self.y[i]

    with pytest.raises(ValueError, match="the Dataset's items do not match the energy"):
        sm.Run(energy, None, sm.SGLD(1e-3), data=Wide(x, y), batch_size=4)

    class Dicts(Rows):
        def __getitem__(self, i):
            return {"x": self.x[i], "y": self.y[i]}

    with pytest.raises(ValueError, match="collate into a tuple of tensors"):
        sm.Run(energy, None, sm.SGLD(1e-3), data=Dicts(x, y), batch_size=4)
    with pytest.raises(ValueError, match="control variate needs the full-data gradient"):
        sm.Run(
            energy,
            None,
            sm.SGLD(1e-3),
            data=Rows(x, y),
            batch_size=4,
            gradient=sm.ControlVariate(energy.initial_position()),
        )
    with pytest.raises(ValueError, match="stratified batching over a Dataset needs its class labels"):
        sm.Run(energy, None, sm.SGLD(1e-3), data=Rows(x, y), batch_size=6, batching="stratified")
    with pytest.raises(ValueError, match="batch_size \\(61\\) exceeds the number of data points \\(60\\)"):
        sm.Run(energy, None, sm.SGLD(1e-3), data=Rows(x, y), batch_size=61)
