"""One SGLD chain computed by several processes (torch.distributed): the chain of one process.

Every process runs this script; each computes the gradient on its share of the global
minibatch and one all-reduce per step gives the global estimate (structmc.distributed). Rank 0
writes the run folder, then runs the same chain on one process and compares: the two agree
to float rounding (the global sum is split differently), and the plot overlays their traces.

Data: two interleaved half-moons with label noise (N = 4,000, synthetic: no download).
Model: MLP 2-64-64-2 (tanh), categorical likelihood, prior N(0, 1). Sampler: SGLD, 2 chains,
global minibatch of 200 rows (100 per rank with 2 processes), float64.

    torchrun --nproc-per-node 2 examples/distributed_sgld.py [--steps 2000] [--out DIR] [--dataset]
    python examples/distributed_sgld.py          # one process: the reference chain alone

``--dataset``: the data as a map-style ``torch.utils.data.Dataset`` instead of tensors, as for
a data set past one machine's memory: each rank reads from it only the items of its share of
each global minibatch (the Dataset counts them; rank 0 prints its count).

On a machine with several GPUs, ``torchrun --nproc-per-node <GPUs>`` with ``--device cuda``
puts rank r on GPU r (NCCL).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
from torch import nn

import structmc as sm
from structmc.diagnostics import save_figure


def make_data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g) * math.pi
    label = torch.randint(0, 2, (n,), generator=g)
    x = torch.stack([torch.cos(t) + label, torch.sin(t) * (1 - 2 * label) + 0.5 * label], 1)
    x = x + 0.15 * torch.randn(n, 2, generator=g)
    flip = torch.rand(n, generator=g) < 0.05
    return x.double(), torch.where(flip, 1 - label, label)


class Items(torch.utils.data.Dataset):
    """The items ``(x_i, y_i)``, read one at a time (a stand-in for files on disk), counting
    the reads."""

    def __init__(self, x, y):
        self.x, self.y, self.reads = x, y, 0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.reads += 1
        return self.x[i], self.y[i]


def energy(seed: int = 0) -> sm.ModuleEnergy:
    torch.manual_seed(seed)  # the same start on every rank (the run checks it)
    net = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)).double()
    return sm.ModuleEnergy(net, "categorical", prior_std=1.0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2_000)
    p.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU per rank)")
    p.add_argument("--out", default="runs/examples")
    p.add_argument("--dataset", action="store_true", help="the data as a Dataset, read by shares")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    distributed = "RANK" in os.environ  # started by torchrun
    rank, world = sm.distributed.init() if distributed else (0, 1)
    device = torch.device(a.device, int(os.environ.get("LOCAL_RANK", 0))) if a.device == "cuda" else "cpu"
    x, y = make_data(4_000, seed=0)
    items = Items(x, y)  # --dataset: read on the CPU, each batch moved to the device
    data = items if a.dataset else (x.to(device), y.to(device))
    options = dict(data=data, batch_size=200, num_chains=2, seed=1, thin=10, burn_in=a.steps // 2)
    model = energy().to(device)  # the chains run where the module is
    init = model.initial_position()
    out = Path(a.out)
    t0 = time.perf_counter()
    chain = sm.sample(
        model,
        init,
        sm.SGLD(2e-5),
        a.steps,
        distributed=distributed,
        out_dir=out / f"distributed_sgld-{world}-ranks",
        overwrite=True,
        progress=False,
        **options,
    )
    seconds = time.perf_counter() - t0
    result: dict = {"world_size": world, "seconds": seconds, "num_draws": chain.num_draws, "items_read": items.reads}
    if rank == 0:
        # the reference: the same chain on this one process (no process group involved)
        t0 = time.perf_counter()
        single = sm.sample(energy().to(device), init, sm.SGLD(2e-5), a.steps, progress=False, **options)
        result["single_seconds"] = time.perf_counter() - t0
        diff = (chain.samples - single.samples).abs().max().item()
        scale = single.samples.abs().max().item()
        result["max_abs_difference"] = diff
        png = plot(chain, single, out / "distributed_sgld.png", world)
        result["png"] = None if png is None else str(png)
        wrote = f"wrote {png}" if png is not None else "no plot (matplotlib is not installed: pip install matplotlib)"
        read = f"; rank 0 read {result['items_read']} items of the Dataset" if a.dataset else ""
        print(
            f"{world} process(es): {seconds:.1f} s; one process: {result['single_seconds']:.1f} s; "
            f"max |θ(ranks) − θ(one process)| = {diff:.2e} (θ up to {scale:.2f}){read}; {wrote}"
        )
    if distributed:
        torch.distributed.destroy_process_group()
    return result


def plot(chain, single, path: Path, world: int) -> Path | None:
    """The traces of three parameters, both runs overlaid; ``None`` without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    steps = chain.draw_steps.cpu().numpy()
    for ax, k in zip(axes, (0, 100, 4000)):
        ax.plot(steps, single.samples[0, :, k].cpu().numpy(), lw=3, alpha=0.4, label="one process")
        ax.plot(steps, chain.samples[0, :, k].cpu().numpy(), lw=1, color="k", label=f"{world} ranks")
        ax.set_title(f"parameter {k}")
        ax.set_xlabel("iteration")
    axes[0].legend()
    fig.suptitle("SGLD on the half-moons MLP: one chain over torch.distributed ranks vs one process")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
