"""How stable is MAMBA-KSD's choice of arm on mamba-pmf's converged problem (MovieLens-100K, the preset's
80/20 split, d = 20, the MAP as start and CV centre, the paper's grids, R = 10 s or the R given)? One
tuning run per tuner seed. Evidence for RECORD.md, not part of the experiment.

Usage: STRUCTMC_DATA=... python probe_batch_choice.py SAMPLER FIRST_SEED LAST_SEED [R]"""

import json
import sys
import time
import warnings

import torch

from structmc_papers import _mamba as M
from structmc_papers import mamba_pmf as m
from structmc.optimize import find_map
from structmc.run import Budget
from structmc.tuning import Problem
from structmc.zoo import energy_for

torch.set_num_threads(1)
warnings.simplefilter("ignore")
cfg = m.PRESETS["converged"]
ds, source = m.load_data(cfg)
x, y, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
n_train = int(y.shape[0])
energy = energy_for(
    "pmf",
    num_data=n_train,
    num_users=ds.meta["num_users"],
    num_items=ds.meta["num_items"],
    dim=cfg.latent_dim,
    mean_rating=ds.meta["mean_rating"],
)
theta_map = find_map(
    energy,
    energy.model.init(seed=cfg.seed),
    data=(x, y),
    batch_size=max(1, int(cfg.map_batch * n_train)),
    num_steps=cfg.map_steps,
    lr=cfg.map_lr,
    seed=cfg.seed,
)
spec = sys.argv[1]
R = float(sys.argv[4]) if len(sys.argv) > 4 else cfg.R
for seed in range(int(sys.argv[2]), int(sys.argv[3])):
    problem = Problem(
        energy, theta_map, data=(x, y), centre=theta_map, batching=cfg.batching, validation=(x_te, y_te), seed=seed
    )
    s = M.TuningSettings(
        log10_h=cfg.log10_h,
        batch_fractions=cfg.batches,
        R=R,
        budget_kind=cfg.budget_kind,
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
