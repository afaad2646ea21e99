"""How stable is MAMBA-KSD's choice of arm? mamba-logreg's converged problem (N = 10^6, d = 10, the MAP as
start and CV centre), the paper's step and batch grids, eta = 3, KSD on every 10th draw; one tuning run per
tuner seed. R = 1 s is the preset's (the paper's); R = 2.5 s gives each arm about the paper's draw counts,
since an SGLD iteration here takes 2.4-2.7x the time of the paper's Table 5 counts at 1 % and 10 %.
Evidence for RECORD.md, not part of the experiment (the seconds budget makes each run load-dependent).

Usage: python probe_batch_choice.py SAMPLER [FIRST_SEED LAST_SEED R1,R2,...]; one JSON line per tuning run
(probe_batch_choice.jsonl has the runs of 2026-11-26)."""

import json
import sys
import time
import warnings

import torch

from structmc.data.synthetic import logistic_regression_data
from structmc_papers import _mamba as M
from structmc_papers import mamba_logreg as m
from structmc.optimize import find_map
from structmc.run import Budget
from structmc.tuning import Problem

torch.set_num_threads(1)
warnings.simplefilter("ignore")
cfg = m.PRESETS["converged"]
ds = logistic_regression_data(cfg.num_data, cfg.dim, seed=cfg.data_seed, prior_var=cfg.prior_var)
x, y = ds.x_train, ds.y_train
energy = m.make_energy(cfg, int(x.shape[0]))
theta_map = find_map(
    energy,
    torch.zeros(cfg.dim),
    data=(x, y),
    batch_size=int(cfg.map_batch * x.shape[0]),
    num_steps=cfg.map_steps,
    lr=cfg.map_lr,
    seed=cfg.seed,
)
spec = sys.argv[1]
seeds = range(int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1, 2)
Rs = tuple(float(r) for r in sys.argv[4].split(",")) if len(sys.argv) > 4 else (1.0, 2.5)
for seed in seeds:
    for R in Rs:
        problem = Problem(
            energy,
            theta_map,
            data=(x, y),
            centre=theta_map,
            batching=cfg.batching,
            validation=(ds.x_test, ds.y_test),
            seed=seed,
        )
        s = M.TuningSettings(
            log10_h=cfg.log10_h,
            batch_fractions=cfg.batches,
            R=R,
            budget_kind="seconds",
            grid_budget=Budget(iterations=10),
            eta=cfg.eta,
            thin=cfg.thin,
            max_samples=cfg.max_samples,
            min_samples=cfg.min_samples,
            metric_cost=cfg.metric_cost,
            restart=cfg.restart,
            seed=seed,
        )
        t0 = time.perf_counter()
        out = M.tune("M-KSD", spec, s, problem=problem, plot=False)
        a = out["arm"]
        print(
            json.dumps(
                {
                    "spec": spec,
                    "seed": seed,
                    "R": R,
                    "chose": a and a.label,
                    "wall": round(time.perf_counter() - t0, 1),
                    "rounds": [(r["arms"], round(r["best"], 1)) for r in out["rounds"]],
                }
            ),
            flush=True,
        )
