"""One sweep of blocked Metropolis-within-Gibbs: the generic path vs the incremental one.

Problem (the paper's FNBG): MLP(784, 10, 10, 10, 10) with sigmoid hidden layers (8,180
parameters), first-layer nodes cut into chunks of 10 (810 blocks per sweep, the reference
code's layout), class-stratified batches of 3,000 MNIST-shaped points, the paper's
per-layer proposal variances. Both paths run the same chain (tests/gibbs); we time sweeps
side by side in interleaved rounds, report ms per sweep, the speed-up, and chains × sweeps per
second for 1 and 10 chains, on the CPU and on CUDA when present.

    python bench/bench_gibbs.py            # a few minutes on 2 CPU cores
    python bench/bench_gibbs.py --quick    # seconds, for smoke runs
"""

from __future__ import annotations

import argparse

import torch
from _timing import interleaved_seconds_per_step, write_json

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import by_finer_nodes
from structmc.zoo import energy_for


def make_run(
    device: str, evaluator: str, num_chains: int, batch_size: int, num_data: int, chunk: int, execution: str = "eager"
):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(num_data, 784, generator=g)
    y = torch.randint(0, 10, (num_data,), generator=g)
    energy = energy_for("mlp_gibbs", seed=0).to(device)
    sampler = MetropolisWithinGibbs(
        by_finer_nodes(energy.space, chunk), [1e-2, 1e-4, 1e-4, 1e-5], evaluator=evaluator, record="layer"
    )
    run = sm.Run(
        energy,
        None,
        sampler,
        data=(X, y),
        batch_size=batch_size,
        batching="stratified",
        num_chains=num_chains,
        seed=0,
        execution=execution,
    )

    def sweeps(n: int) -> None:
        for _ in run.iterate(n):
            pass
        if device == "cuda":
            torch.cuda.synchronize()

    return sweeps


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sweeps", type=int, default=3, help="incremental sweeps per timed block")
    ap.add_argument("--batch-size", type=int, default=3000)
    ap.add_argument("--num-data", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=10, help="first-layer sub-block size (10: 810 blocks)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--execution",
        default="eager",
        help="eager, or eager,compiled: also the incremental sweep compiled (one graph a sweep; a CUDA graph on "
        "CUDA), timed beside the eager one (the compile happens in the warm-up sweep)",
    )
    ap.add_argument("--chains", default="1,10")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.sweeps, args.batch_size, args.num_data, args.chunk = 1, 1, 200, 1000, 100
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = {}
    for device in devices:
        for chains in [int(c) for c in args.chains.split(",")]:
            contenders = {
                f"{ev} {device} C={chains}": make_run(device, ev, chains, args.batch_size, args.num_data, args.chunk)
                for ev in ("generic", "incremental")
            }
            if "compiled" in args.execution:
                contenders[f"incremental compiled {device} C={chains}"] = make_run(
                    device, "incremental", chains, args.batch_size, args.num_data, args.chunk, "compiled"
                )
            # the generic path is slow: time it on one sweep per block, the incremental on --sweeps
            generic = interleaved_seconds_per_step(
                {k: v for k, v in contenders.items() if k.startswith("generic")}, 1, args.rounds, warmup=1
            )
            incremental = interleaved_seconds_per_step(
                {k: v for k, v in contenders.items() if k.startswith("incremental")}, args.sweeps, args.rounds, warmup=1
            )
            g, i = next(iter(generic.values())), incremental[f"incremental {device} C={chains}"]
            rows[f"{device} C={chains}"] = {
                "generic_ms_per_sweep": 1e3 * g,
                "incremental_ms_per_sweep": 1e3 * i,
                "speedup": g / i,
                "chain_sweeps_per_s_incremental": chains / i,
                "chain_sweeps_per_s_generic": chains / g,
            }
            if "compiled" in args.execution:
                c = incremental[f"incremental compiled {device} C={chains}"]
                rows[f"{device} C={chains}"].update(compiled_ms_per_sweep=1e3 * c, compiled_to_incremental=c / i)
    blocks = by_finer_nodes(energy_for("mlp_gibbs").space, args.chunk).num_groups
    print(
        f"MLP(784,10,10,10,10), {blocks} blocks, batch {args.batch_size}, {torch.get_num_threads()} CPU threads, "
        f"median of {args.rounds} rounds"
    )
    print(f"{'':12s} {'generic ms':>11s} {'incr. ms':>9s} {'speed-up':>9s} {'chain-sweeps/s':>15s}")
    for k, r in rows.items():
        print(
            f"{k:12s} {r['generic_ms_per_sweep']:11.1f} {r['incremental_ms_per_sweep']:9.1f} {r['speedup']:9.1f} "
            f"{r['chain_sweeps_per_s_incremental']:15.2f}"
            + (
                f"   compiled {r['compiled_ms_per_sweep']:.1f} ms ({r['compiled_to_incremental']:.2f}x incremental)"
                if "compiled_ms_per_sweep" in r
                else ""
            )
        )
    write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
