"""gibbs-xor `full`: the reference code's defect (rejected blocks kept in the proposal vector, eeyore's
Gibbs.draw; MetropolisWithinGibbs(reference_defect=True)) on approx-shallow, which the experiment runs only
with the correct kernel: the same seed (initial points, batches, random numbers), 10 chains, 110,000
sweeps. Evidence for RECORD.md, not part of the experiment (probe_reference_defect.jsonl: its output).
The experiment itself runs exact-deep-defect since 34b94b8.

Usage: STRUCTMC_DATA=... python probe_reference_defect.py OUT"""

import json
import sys
from pathlib import Path

import torch

from structmc_papers import gibbs_xor as G

torch.set_num_threads(1)
cfg = G.PRESETS["full"]
data, source = G.load_data(cfg)
G.SETTINGS["approx-shallow-defect"] = ("mlp_xor", True)
G.REFERENCE_DEFECT["approx-shallow-defect"] = "approx-shallow"
out = Path(sys.argv[1])
for name in ["approx-shallow-defect"]:
    r = G._run_setting(name, list(G.SETTINGS).index(name), cfg, data, out, False, True)
    print(
        json.dumps(
            {
                "setting": name,
                "chains": r["num_chains"],
                "seed": r["seed"],
                "sampling_s": round(r["sampling_seconds"]),
                "accuracy_median": r["accuracy_median"],
                "accuracy": r["accuracy"],
                "node_median_pct": [round(100 * x, 2) for x in r["node_summary"]["median"]],
                "layer_mean_pct": [round(100 * x, 2) for x in r["layer_summary"]["mean"]],
                "chain_acceptance": r["chain_acceptance"],
            }
        ),
        flush=True,
    )
