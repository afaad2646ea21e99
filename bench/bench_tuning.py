"""Wall time of a whole MAMBA run against its budget T, and where it goes.

Problem: the MAMBA paper's simulated logistic regression (d = 10; N = 10^5 by default,
``--num-data 1000000`` for the paper's size; 80% train), MAP start, SGLD with its grid
(log10 h ∈ {−7.5, …, −1}, batches {100%, 10%, 1%, 0.1%}: 56 arms, η = 3, 3 rounds) and
T chosen so that a surviving arm samples R = 1 s in total, as in the paper
(T = R·rounds / Σ_i 1/|S_i| = 12.5 s). Rows: the reference behaviour (every thinned sample
scored: ``metric_cost=None``), our default (score work ≤ 25% of sampling work), and the
default on a 2-process pool. Each row reports wall/T and the split: sampling, full-data
scores, the KSD itself, set-up, and driver overhead. Target (issue): wall ≤ 1.5 × T.

    python bench/bench_tuning.py                 # ~1.5 min on 2 CPU cores
    python bench/bench_tuning.py --quick         # T = 3 s, smaller grid
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import write_json

import structmc as sm
from structmc import Budget
from structmc.data.synthetic import logistic_regression_data
from structmc.tuning import grid, lr_from_paper, mamba, round_sizes


def log_reg(N: int):
    ds = logistic_regression_data(N, 10, seed=0)
    X, y = ds.x_train, ds.y_train

    def log_lik(theta, batch):
        x, t = batch
        logits = x @ theta
        return (t * logits - torch.nn.functional.softplus(logits)).sum()

    def log_prior(theta):
        return -0.5 * (theta * theta).sum() / 10.0

    energy = sm.LogDensityEnergy(dim=10, log_likelihood=log_lik, log_prior=log_prior, num_data=len(X))
    init = sm.find_map(energy, torch.zeros(10), data=(X, y), batch_size=max(1, len(X) // 100), num_steps=1000)
    return energy, init, (X, y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-data", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    energy, init, data = log_reg(args.num_data // 4 if args.quick else args.num_data)
    steps = [-7.5 + 0.5 * i for i in range(14)] if not args.quick else [-7.0, -6.0, -5.0, -4.0, -3.0]
    arms = grid("sgld", lr=[lr_from_paper("sgld", 10**h) for h in steps], batch_size=[1.0, 0.1, 0.01, 0.001])
    sizes = round_sizes(len(arms))
    R = 0.25 if args.quick else 1.0
    T = R * len(sizes) / sum(1.0 / s for s in sizes)
    print(f"{len(arms)} arms, rounds {sizes}, R = {R} s -> T = {T:.2f} s; N = {len(data[0])}")
    rows = {}
    for name, kw in (
        ("reference scoring (metric_cost=None), serial", dict(metric_cost=None)),
        ("default (metric_cost=0.25), serial", dict()),
        ("default, process pool x2", dict(executor="process")),
    ):
        t0 = time.perf_counter()
        res = mamba(energy, init, arms, Budget(seconds=T), data=data, centre=init, progress=False, **kw)
        wall = time.perf_counter() - t0
        t = res.timing
        row = {
            "T": T,
            "wall": wall,
            "wall_over_T": wall / T,
            "sampling": t["sampling"],
            "scores": t["scores"],
            "metric": t["metric"],
            "setup": t["setup"],
            "overhead": t["overhead"],
            "chosen": res.best.label,
            "scored_per_arm_round0": sum(r["scored"] for r in res.rounds[0]["results"]) / len(arms),
        }
        rows[name] = row
        print(
            f"{name:48s} wall {wall:6.2f} s = {wall / T:4.2f} T | sampling {t['sampling']:6.2f}  scores "
            f"{t['scores']:6.2f}  KSD {t['metric']:5.2f}  set-up {t['setup']:5.2f}  overhead {t['overhead']:5.2f} "
            f"| chosen {res.best.label}"
        )
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
