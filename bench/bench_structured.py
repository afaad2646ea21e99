"""Cost of structured SGMCMC steps relative to the base sampler's step, side by side.

MLP 784-50-50-10, batch 500 of N = 10,000 MNIST-shaped points, SGLD, one chain, CPU.
Sd-SGLD with K = 2, 4, 8 Bernoulli(0.5) masks over a round-robin partition (M = 64) and
S-SGLD with M = 4, 8 groups evaluate K (or M) mixed parameter vectors per step in one
vmapped call. Targets (issue 4): Sd ≤ 1.15·K and S ≤ 1.15·M times the base step.
"Sd-SGLD K=k split" (``split_batch=True``): the same K copies, each on n/K = 500/K rows of the
minibatch, so their model evaluations cost about one base step (target ratio ≈ 1; drawing θ̃
and mixing the K copies still cost O(K·P) on top). K = 8 does not divide 500:
that row uses batches of 504 (0.8% more rows than the base step).
Also: drawing θ̃ for a fully factorized partition (M = P = 42,310) from a 5,000-sample window.

    python bench/bench_structured.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import interleaved_seconds_per_step, write_json
from bench_samplers import make_problem

import structmc as sm
from structmc.structured import BernoulliMask, ChainHistory, StructuredEnergy, fully_factorized, round_robin


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (every timed block ends with a synchronize)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--execution",
        default="eager",
        help="comma list of eager,compiled: compiled adds base and Sd-SGLD rows of a warmed-up compiled Run "
        "(a CUDA graph on CUDA), each Sd row's ratio taken to the compiled base step",
    )
    ap.add_argument("--copies", default="2,4,8", help="the Sd rows' K (comma list)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 4, 1
    executions = {e.strip() for e in args.execution.split(",") if e.strip()}
    if not executions <= {"eager", "compiled"}:
        ap.error(f"--execution: a comma list of eager,compiled, got {args.execution!r}")
    copies = [int(k) for k in args.copies.split(",") if k.strip()]
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device")
    X, y, model = make_problem(10_000, device=args.device)
    energy = sm.ModuleEnergy(model, "categorical", prior_std=1.0)
    P = energy.space.dim
    contenders = {}
    batch = {}  # batch size per contender (default 500)
    if "eager" in executions:
        contenders["base SGLD"] = (energy, 1)
        for K in copies:
            contenders[f"Sd-SGLD K={K}"] = (
                StructuredEnergy(energy, round_robin(P, 64), ChainHistory(100), mask=BernoulliMask(0.5), num_copies=K),
                K,
            )
        for K in copies:
            contenders[f"Sd-SGLD K={K} split"] = (
                StructuredEnergy(
                    energy,
                    round_robin(P, 64),
                    ChainHistory(100),
                    mask=BernoulliMask(0.5),
                    num_copies=K,
                    split_batch=True,
                ),
                K,
            )
            batch[f"Sd-SGLD K={K} split"] = 500 if 500 % K == 0 else 504
        for M in (4, 8):
            contenders[f"S-SGLD M={M}"] = (StructuredEnergy(energy, round_robin(P, M), ChainHistory(100)), M)
    compiled = {}  # name -> (Run, copies): made once, traced at the warm-up call
    if "compiled" in executions:
        for K in [1, *copies]:
            target = (
                energy
                if K == 1
                else StructuredEnergy(
                    energy, round_robin(P, 64), ChainHistory(100), mask=BernoulliMask(0.5), num_copies=K
                )
            )
            name = "base SGLD compiled" if K == 1 else f"Sd-SGLD K={K} compiled"
            compiled[name] = (sm.Run(target, None, sm.SGLD(1e-5), data=(X, y), batch_size=500, execution="compiled"), K)

    def run(target, n, batch_size=500):
        sm.sample(
            target,
            None,
            sm.SGLD(1e-5),
            n,
            data=(X, y),
            batch_size=batch_size,
            thin=n,
            progress=False,
            on_blowup="ignore",
        )
        if args.device == "cuda":
            torch.cuda.synchronize()

    def stepped(r, n):
        for _ in r.iterate(n):
            pass
        if args.device == "cuda":
            torch.cuda.synchronize()

    timed = {k: (lambda n, t=t, b=batch.get(k, 500): run(t, n, b)) for k, (t, _) in contenders.items()}
    timed.update({k: (lambda n, r=r: stepped(r, n)) for k, (r, _) in compiled.items()})
    per_step = interleaved_seconds_per_step(timed, args.steps, args.rounds, warmup=2)
    base = per_step["base SGLD"] if "eager" in executions else per_step["base SGLD compiled"]
    rows = {}
    print(
        f"MLP 784-50-50-10, batch 500, device {args.device}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds x {args.steps} steps"
    )
    print(
        f"{'step':22s} {'ms/step':>9s} {'x base':>7s} {'copies':>6s} {'x base / copies':>15s}  "
        f"target <= 1.15 (split: x base ~ 1)"
    )
    for name, (_target, k) in [*contenders.items(), *compiled.items()]:
        t = per_step[name]
        # a compiled Sd row against the compiled base step (issue 37: Sd K = 8 / base, compiled)
        ref = per_step["base SGLD compiled"] if name in compiled else base
        rows[name] = {
            "ms_per_step": 1e3 * t,
            "ratio_to_base": t / ref,
            "copies": k,
            "ratio_per_copy": t / ref / k,
            "batch_size": batch.get(name, 500),
        }
        if name in compiled:
            rows[name]["fallback"] = compiled[name][0].execution.fallback  # "" while compiled
        print(f"{name:22s} {1e3 * t:9.3f} {t / ref:7.2f} {k:6d} {t / ref / k:15.3f}")

    # θ̃ draws from a window of past samples: a fully factorized partition (M = P, one
    # element per group: a K·P gather) and the 64 round-robin groups above (padded rows)
    W = 5000 if not args.quick else 200
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for label, part, window in (("factorized", fully_factorized(P), W), ("round-robin 64", round_robin(P, 64), 100)):
        hist = ChainHistory(window)
        hist.reset(torch.randn(1, P, device=args.device), None if label == "factorized" else part.group_ids)
        hist.buffer.normal_()
        hist.count = window
        g = torch.Generator(device=args.device).manual_seed(0)
        for K in (1, 8):
            hist.draw(K, part.group_ids, part.num_groups, g)
            sync()
            t0 = time.perf_counter()
            reps = 20 if not args.quick else 2
            for _ in range(reps):
                hist.draw(K, part.group_ids, part.num_groups, g)
            sync()
            t = (time.perf_counter() - t0) / reps
            rows[f"draw theta~ {label} K={K}"] = {"ms": 1e3 * t, "ratio_to_base_step": t / base}
            print(
                f"draw θ̃, {label} (M = {part.num_groups}), window {window}, K={K}: {1e3 * t:.3f} ms "
                f"({t / base:.2f} x base step); window memory {hist.memory_bytes() / 2**20:.0f} MiB"
            )
    write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
