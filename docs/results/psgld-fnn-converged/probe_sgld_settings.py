"""psgld-fnn `converged`: where does the paper's SGLD 1.64 % (400-400, Table 2) come from? Our SGLD at the
paper's stated settings (prior σ² = 1, ε = 0.5 halved every 20 epochs, the authors' T = 1/N) reaches 1.43 %.
This runs SGLD at T = 1/N with the settings the paper leaves unstated varied: prior σ² = 100 (pSGLD's), and
no step halving. Evidence for RECORD.md, not part of the experiment.

Usage: STRUCTMC_DATA=... python probe_sgld_settings.py OUT"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from structmc_papers import psgld_fnn as F

torch.set_num_threads(1)
cfg = F.PRESETS["converged"]
data = F.load_data(cfg)
N = len(data.y_train)
steps_per_epoch = N // cfg.batch_size
out = Path(sys.argv[1])
for prior_var, halve_every in ((100.0, 20), (1.0, 10**6), (100.0, 10**6)):
    c = replace(cfg, halve_every_epochs=halve_every)
    energy = F.make_energy(400, prior_var, N, cfg.seed)
    sampler = F.make_sampler("sgld", N, steps_per_epoch, c, "1/N")
    folder = out / f"sgld-var{prior_var:g}-halve{halve_every}"
    r = F.run_one(
        energy, sampler, (data.x_train, data.y_train, data.x_test, data.y_test), c, None, folder=folder, resume=True
    )
    print(
        json.dumps(
            {
                "prior_var": prior_var,
                "halve_every_epochs": halve_every if halve_every < 10**6 else None,
                "test_error_pct": r["test_error_pct"],
                "curve_pct": r["curve_pct"],
            }
        ),
        flush=True,
    )
