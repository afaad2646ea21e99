"""One chain over several processes (torch.distributed): seconds per step by world size, with the
communication split out, against the same chain on one process without a process group.

For each world size W, W processes are spawned (gloo on CPU, NCCL on ``--device cuda`` with one
GPU per rank), each with ``--threads`` torch threads; every rank builds the same model and data
(synthetic, MNIST- or CIFAR-shaped) and runs ``structmc.Run(..., distributed=Distributed(timing=True))``
with SGLD on a global batch of ``--batch`` rows (``--batch / W`` per rank). Rows, side by side in
one run:

* ``one process``: the same Run without a process group (the reference of every ratio);
* ``W ranks``: median seconds per step over ``--rounds`` blocks of ``--steps``, of which
  ``comm``: the seconds inside the gradient's all-reduce (waiting for the slower rank
  included: on one device that is where load imbalance shows) and ``compute`` the rest;
* ``all-reduce alone``: the collective on a tensor of the gradient's size ``[C, P]``, repeated,
  without the model (the floor of ``comm``);
* with ``--dataset``, structmc's runs read the rows from a map-style Dataset (``__getitems__``,
  each rank its share of each batch) instead of tensors; the hand loop keeps the tensors;
* ``hand loop``: the data-parallel SGLD loop a careful PyTorch user writes (:class:`HandLoop`:
  the rank's share of each global batch, one ``all_reduce`` of the flattened gradients, foreach
  updates), timed in the same rounds; ``structmc / hand loop`` is the ratio of the two
  (one chain: the hand loop handles exactly that case).

    python bench/bench_distributed.py                         # MLP 784-400-400-10, 1 vs 2 ranks, CPU
    python bench/bench_distributed.py --model resnet20 --batch 128 --steps 10
    python bench/bench_distributed.py --device cuda --world-sizes 1   # one GPU: the cost of the
                                                                       # all-reduce against the step

On this 2-core machine two ranks of one thread each use both cores, the one-process row one
core: the ratio is what splitting a step over cores buys on CPU, not a GPU cluster's scaling.
Ranks on one GPU are not meaningful (NCCL refuses them); with one GPU the table gives the
all-reduce's cost per step against the step, from which a multi-GPU run's cost follows (ring
all-reduce moves 2(W-1)/W x the gradient's bytes per rank).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def make_problem(model: str, num_data: int, device: str):
    from structmc.zoo import energy_for

    g = torch.Generator().manual_seed(0)
    if model == "resnet20":  # no normalisation layer: BatchNorm's batch statistics are per share
        energy = energy_for("resnet20", norm=None, seed=0)
        x = torch.randn(num_data, 3, 32, 32, generator=g)
    else:
        hidden = {"mlp": (400, 400), "mlp-small": (50, 50)}[model]
        energy = energy_for("mlp", in_features=784, hidden=hidden, num_outputs=10, likelihood="categorical", seed=0)
        x = torch.randn(num_data, 784, generator=g)
    y = torch.randint(0, 10, (num_data,), generator=g)
    return energy.to(device), (x.to(device), y.to(device))


class Items(torch.utils.data.Dataset):
    """``--dataset``: the same rows as a map-style Dataset read with ``__getitems__`` (one call a
    batch, the rows collated), so each rank reads only its share of each batch."""

    def __init__(self, x, y):
        self.x, self.y = x.cpu(), y.cpu()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __getitems__(self, indices):
        return [(self.x[i], self.y[i]) for i in indices]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class HandLoop:
    """The data-parallel SGLD loop a careful PyTorch user writes (the reference of the ratios):
    the same global permutation on every rank (a shared seed), the rank's contiguous share of
    each global batch gathered with ``index_select``, the share's loss scaled by N/B (the global
    batch) so that the ranks' gradients sum to the global estimate, one ``all_reduce`` of the
    gradients flattened into one buffer, the N(0, 1) prior's gradient added once, and the
    update as ``torch._foreach_*`` ops with one flat ``randn`` (the same on every rank)."""

    def __init__(self, model, X, y, batch: int, lr: float, seed: int, world: int = 1, rank: int = 0):
        import torch.nn.functional as F

        self.F = F
        self.model, self.X, self.y, self.B, self.lr = model, X, y, batch, lr
        self.g = torch.Generator(X.device).manual_seed(seed)
        self.params = list(model.parameters())
        self.numels = [p.numel() for p in self.params]
        self.total = sum(self.numels)
        self.world = world
        base, extra = divmod(batch, world)
        self.lo = rank * base + min(rank, extra)
        self.hi = self.lo + base + (1 if rank < extra else 0)
        self.perm, self.pos = None, X.shape[0]

    def __call__(self, steps: int) -> None:
        X, y, B, lr, params = self.X, self.y, self.B, self.lr, self.params
        N = X.shape[0]
        for _ in range(steps):
            if self.pos + B > N:
                self.perm, self.pos = torch.randperm(N, generator=self.g, device=X.device), 0
            idx = self.perm[self.pos + self.lo : self.pos + self.hi]
            self.pos += B
            loss = (N / B) * self.F.cross_entropy(
                self.model(X.index_select(0, idx)), y.index_select(0, idx), reduction="sum"
            )
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                if self.world > 1:
                    flat = torch.cat([g.reshape(-1) for g in grads])
                    dist.all_reduce(flat)
                    grads = [t.view_as(p) for t, p in zip(flat.split(self.numels), params)]
                noise = torch.randn(self.total, generator=self.g, device=X.device).split(self.numels)
                torch._foreach_add_(grads, params)  # the prior's gradient, once
                torch._foreach_add_(params, grads, alpha=-0.5 * lr)
                torch._foreach_add_(params, [n.view_as(p) for n, p in zip(noise, params)], alpha=lr**0.5)


def measure(args, distributed: bool, device: str) -> dict:
    import structmc
    from structmc.distributed import Distributed

    torch.manual_seed(0)
    energy, data = make_problem(args.model, args.num_data, device)
    init = energy.initial_position().to(device)
    run = structmc.Run(
        energy,
        init,
        structmc.SGLD(1e-6),
        data=Items(*data) if args.dataset else data,
        batch_size=args.batch,
        num_chains=args.chains,
        seed=0,
        distributed=Distributed(timing=True) if distributed else None,
    )
    import copy

    world = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0
    hand = HandLoop(copy.deepcopy(energy.module), *data, args.batch, 1e-6, seed=0, world=world, rank=rank)
    for _ in range(args.warmup):
        run.step()
    hand(args.warmup)
    _sync(device)
    per_step, comm_per_step, hand_per_step = [], [], []
    for _ in range(args.rounds):  # the same order on every rank: the collectives match
        comm0 = run.oracle.comm_seconds if distributed else 0.0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            run.step()
        _sync(device)
        per_step.append((time.perf_counter() - t0) / args.steps)
        comm_per_step.append(((run.oracle.comm_seconds if distributed else 0.0) - comm0) / args.steps)
        t0 = time.perf_counter()
        hand(args.steps)
        _sync(device)
        hand_per_step.append((time.perf_counter() - t0) / args.steps)
    run.check_finite()
    out = {
        "seconds_per_step": statistics.median(per_step),
        "comm_per_step": statistics.median(comm_per_step),
        "hand_loop_seconds_per_step": statistics.median(hand_per_step),
        "dim": run.energy.space.dim,
        "gradient_mb": args.chains * run.energy.space.dim * run.theta.element_size() / 2**20,
    }
    if distributed:  # the collective alone, on the gradient's size
        buf = torch.zeros(args.chains, run.energy.space.dim, device=device, dtype=run.theta.dtype)
        for _ in range(5):
            dist.all_reduce(buf)
        _sync(device)
        t0 = time.perf_counter()
        reps = max(20, args.steps)
        for _ in range(reps):
            dist.all_reduce(buf)
        _sync(device)
        out["allreduce_alone"] = (time.perf_counter() - t0) / reps
    return out


def rank_main(rank: int, world: int, init_file: str, args, result_file: str) -> None:
    torch.set_num_threads(args.threads)
    device = "cpu"
    backend = "gloo"
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device, backend = f"cuda:{rank}", "nccl"
    dist.init_process_group(
        backend, init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    try:
        res = measure(args, True, device)
        if rank == 0:
            Path(result_file).write_text(json.dumps(res))
    finally:
        dist.destroy_process_group()


def one_process(args) -> dict:
    torch.set_num_threads(args.threads)
    return measure(args, False, "cuda:0" if args.device == "cuda" else "cpu")


def run_world(world: int, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        mp.start_processes(rank_main, args=(world, os.path.join(tmp, "init"), args, result), nprocs=world, join=True,
                           start_method="spawn")  # fmt: skip
        return json.loads(Path(result).read_text())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "mlp-small", "resnet20"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--world-sizes", default="1,2", help="comma-separated world sizes")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--batch", type=int, default=1000, help="global minibatch (rows per chain)")
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--num-data", dest="num_data", type=int, default=10_000)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dataset", action="store_true", help="structmc reads the rows from a map-style Dataset")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    worlds = [int(w) for w in args.world_sizes.split(",") if w]
    if args.device == "cuda" and max(worlds) > torch.cuda.device_count():
        raise SystemExit(f"--world-sizes {args.world_sizes}: only {torch.cuda.device_count()} GPU(s), one per rank")
    rows = {"one process": one_process(args)}
    for w in worlds:
        rows[f"{w} ranks"] = run_world(w, args)
    base = rows["one process"]["seconds_per_step"]
    dev = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU, {args.threads} thread(s) per process"
    print(
        f"\n{args.model} (P = {rows['one process']['dim']:,}), {args.chains} chain(s), global batch {args.batch}, "
        f"{dev}; gradient all-reduce {rows['one process']['gradient_mb']:.2f} MiB per step"
        + ("; structmc reads a Dataset (each rank its share; the hand loop: tensors)" if args.dataset else "")
    )
    print(
        "| run | ms / step | comm ms / step | compute ms / step | comm share | all-reduce alone ms | speed-up "
        "| hand loop ms / step | structmc / hand loop |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        s, c, h = r["seconds_per_step"], r["comm_per_step"], r["hand_loop_seconds_per_step"]
        alone = f"{1e3 * r['allreduce_alone']:.3f}" if "allreduce_alone" in r else "–"
        print(
            f"| {name} | {1e3 * s:.2f} | {1e3 * c:.3f} | {1e3 * (s - c):.2f} | {100 * c / s:.1f} % | {alone} "
            f"| {base / s:.2f}x | {1e3 * h:.2f} | {s / h:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "device": dev, "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
