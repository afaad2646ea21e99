"""Noisy XOR experiments of Papamarkou (2023), "Approximate blocked Gibbs sampling for
Bayesian neural networks" (Sect. 5.2, 5.3, 5.5; Figs. 3, 4 and 7): node-blocked
Metropolis-within-Gibbs (NBG) on MLP(2, 2, 1) and MLP(2, 2, 2, 2, 2, 2, 2, 1).

Model: sigmoid activations everywhere (output too), Bernoulli likelihood (binary
cross-entropy summed over the batch, no N/n rescaling), prior N(0, 10) on every parameter,
initial point of every chain drawn from that prior (an explicit ``torch.Generator`` seeded
from the config). Blocks: one per node (its incoming weights and bias), visited in order;
one sweep over the 13 (deep) or 3 (shallow) blocks is one iteration. Data: the published
noisy-XOR files (5,000 training / 1,200 test points) when they are found, else the
simulator :func:`structmc.data.noisy_xor_dataset` (the report says which).

Settings, each one batched run of several chains:

* ``approx-deep``: minibatch NBG, batch 100, proposal variance 0.04, deep net (scenario 1
  of Sect. 5.2; Figs. 3a left, 3b, 4, 7 right);
* ``exact-deep``: full-batch (exact) NBG, proposal variance 0.001, deep net, run as a pool of
  ``exact_pool_chains`` chains: the first ``num_chains`` are scenario 2, and the first
  ``num_chains`` whose acceptance rates are >= 5 % or >= 20 % are scenarios 3 and 4 (the
  paper reruns fresh chains until it has 10 such; drawing them from one pool of i.i.d.
  chains is the same procedure, with the three scenarios sharing chains). As in the
  reference code (``torch.all(0.2 <= chain.acceptance_rate())``, per block), a chain
  qualifies when *every* block's rate over the acceptance window reaches the bound;
* ``approx-shallow``: minibatch NBG, batch 100, variance 0.04, shallow net (Fig. 7 left);
* ``exact-shallow``: full-batch NBG, variance 0.001, shallow net (not in the paper; an
  extra, reported without a published number; ``Config.exact_shallow=False`` drops it);
* ``approx-deep-defect``: ``approx-deep`` again (same initial points, batches and random
  numbers) with the reference code's sampler defect, ``MetropolisWithinGibbs(...,
  reference_defect=True)``: the evidence rows below (``Config.reference_defect_run=False``
  drops it);
* ``exact-deep-defect``: exact NBG on the deep net with the same defect, from the initial
  points of the exact pool's first ``num_chains`` chains (scenario 2's): the evidence rows on
  Fig. 3a's node rates (dropped with ``approx-deep-defect``).

Observation 2 (Sect. 5.5, issue 26 §5): "Increasing the network width in initial layers does not
have a negative impact on acceptance rates". The paper shows no figure for it; the width study
(``Config.width_run``) runs approximate Gibbs (batch 100, σ² = 0.04) on MLP(2, w, 1) for
``Config.widths`` (2, 5, 11, 23), ``width_chains`` chains of ``width_steps`` sweeps each, with
every block of 3 parameters (FNBG: the output node's w + 1 in sub-blocks of 3), and judges "does
not fall": between consecutive widths no layer's mean acceptance falls by more than
``evidence_z`` = 2 standard errors (chains independent), with the test's power required
(2 SE below Fig. 4b's smallest fall between layers, 9.62 pp; else "not comparable"). Node blocks
(the output node one block of w + 1) are run beside it as a check: there the output's acceptance
falls with width because its block grows (Sect. 4.4), not because of the width. A first probe
(published files, 10 chains x 1,100 sweeps as in the quick preset, w = 2, 4, 8, 16, 32): layer 1 78.1, 78.7, 84.0, 87.2, 89.6 %; output with node blocks 66.5, 62.5, 60.3, 53.1,
45.2 %, with blocks of 3 parameters 74.1 (w = 8), 76.9 (16), 81.0 % (32). The quick preset's study
(published files, w = 2, 5, 11, 23; 55 s on the loaded machine): FNBG layer 1 75.6, 80.4, 85.6, 88.9 %,
output 65.6, 70.8, 76.9, 78.6 % (does not fall: reproduced); NBG output 65.6, 61.2, 56.5, 49.7 %
(−15.9 ± 1.9 pp from w = 2 to 23: the check holds).

Windows, as in the paper (110,000 iterations): acceptance rates over iterations
``burn_in + 1 .. num_steps`` (paper 10k-110k), predictions from the posterior predictive
averaged over the last ``predict_last`` iterations (paper 100k-110k), class 1 when p > 0.5,
accuracy per chain. The presets scale both windows with the chain length.

Published numbers, checked against the paper's text (the task brief had two of them
attached to the wrong run): exact NBG (scenario 2, *deep* net) median node acceptance 63.83 %
(node 1: first node of hidden layer 1) and 20.72 % (node 13: the output node of the deep
net; nodes are numbered layer by layer, 2 per hidden layer); approximate NBG (deep net)
*mean over the 10 chains* of the acceptance of hidden layers 1-3: 56.31 %, 36.18 %,
26.56 % (Fig. 4b); median test accuracies: approximate deep 98.88 %, approximate shallow
86.75 % (Fig. 7), exact deep 86.92 % (scenario 2), 95.38 % (scenario 3, >= 5 %), 100 %
(scenario 4, >= 20 %) (Fig. 3b); 11 and 23 chains run to retain 10 in scenarios 3 and 4.
There is no exact run on the shallow net in the paper. Qualitative claims (approximate
above exact and less volatile, acceptance falling with depth, deep above shallow, approx
faster) are checked as orderings. Every verdict follows a rule written in the row
(tolerances in :class:`Config`).

Measured on the 2-core development machine, shared with other jobs (load 1.3-2.7): the
``quick`` preset (5,500 sweeps, 10 chains, a 24-chain exact pool) took 350 s (5.8 min;
301 s of it the full-batch exact pool on the deep net; an earlier run under heavier load
took 724 s); ``tiny`` takes about 3 s. ``full`` (110,000 sweeps, 10 chains, a 30-chain
pool) is about 20 times ``quick`` plus the larger pool, a few hours on such a machine; it
checkpoints every ``checkpoint_every`` sweeps and ``run("full", out, resume=True)``
continues an interrupted run. The full-length *approximate* settings alone were run once
(published files, seed 0, one thread; 258 s deep, 47 s shallow): deep-net accuracy median
99.00 % (paper 98.88 %), shallow 84.58 % (paper 86.75 %), deep-net layer means 64.4, 61.3,
64.0, 69.0, 75.4, 81.1 and 79.6 % (output) (paper, layers 1-3: 56.31, 36.18, 26.56 %).

Why the acceptance rates differ: the reference sampler (eeyore's ``Gibbs.draw``) leaves a
rejected block's proposed values in its proposal vector, so every later block of the sweep
is proposed together with all earlier rejected blocks (and its target is evaluated off the
chain's state); structmc's kernel is correct (a rejection leaves no trace), so its rate rows
are expected to differ from the paper's. The experiment runs both: ``approx-deep`` and
``approx-deep-defect`` (the defect as :class:`~structmc.gibbs.MetropolisWithinGibbs`'s
``reference_defect`` compatibility option, tested in tests/gibbs/test_mwg.py against a
transcription of ``Gibbs.draw`` and against an exact Gaussian target), and its evidence rows
(checks, outside the tally of the paper's claims) judge, on the same chains:

* ``defect_depth_fall``: the fall of acceptance from hidden layer 1 to 3 (per chain) is larger
  with the defect than with the correct kernel by more than ``Config.evidence_z`` = 2
  standard errors;
* ``defect_layers_paper``: with the defect every layer 1-3 mean lies within ``tol_rate`` of
  Fig. 4b's, with the correct kernel not every one;

and, on exact NBG (``exact-deep-defect`` against scenario 2's chains, same initial points):

* ``defect_exact_output``: the gap between node 1's and the output node's acceptance (per
  chain) is larger with the defect by more than ``evidence_z`` standard errors;
* ``defect_exact_paper``: with the defect the node 1 and node 13 medians lie within
  ``tol_rate`` of Fig. 3a's 63.83 and 20.72 %, with the correct kernel not both.

At the ``quick`` length (5,500 sweeps, seed 0, published files) the layer means 1-7 were
89.0, 88.8, 88.6, 87.9, 87.0, 84.7, 64.8 % with the correct kernel and 84.9, 79.7, 76.6,
74.6, 71.0, 64.8, 47.4 % with the defect (fall from layer 1 to 3, mean over chains: 0.45
against 8.25 pp, difference 7.8 ± 2.5 pp, 3.1 SE): the fall with depth is the defect's, but the short chains keep every rate
above the paper's, so ``defect_layers_paper`` needs the full length. An earlier emulation of
the defect outside this module (same design, 110,000 sweeps) gave 57.2, 38.3, 29.4, 25.7,
24.1, 23.7, 21.8 % (paper 56.31, 36.18, 26.56 %) against the correct kernel's 64.4, 61.3,
64.0, 69.0, 75.4, 81.1, 79.6 %; the ``full`` preset now measures both with this module's code.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from structmc import predictive, sample
from structmc.data import DataError, noisy_xor_dataset
from structmc.data.checksums import NOISY_XOR
from structmc.data.files import ChecksumError, find
from structmc.data.xor import load_noisy_xor
from structmc.diagnostics import classification_metrics
from structmc.gibbs import MetropolisWithinGibbs, acceptance
from structmc.partitions import by_finer_nodes, by_neuron
from structmc.zoo import energy_for

from . import resolve_preset
from ._report import binomial_se, row_comparison, seed_se, smallest_gap, write_rows_report
from ._shared import default_data_dir, pyplot, restores_globals
from ._shared import versions as _versions

PAPER_STEPS = 110_000  # iterations per chain in the paper
#: the paper's acceptance rates: exact NBG node medians (Fig. 3a: node 1, node 13) and approximate NBG
#: layer means (Fig. 4b: hidden layers 1-3)
PAPER_RATES = (0.6383, 0.2072, 0.5631, 0.3618, 0.2656)
#: the paper's median accuracies on the deep net (Fig. 3b: scenarios 1-4)
PAPER_ACCURACIES_FIG3B = (0.9888, 0.8692, 0.9538, 1.0)
#: Fig. 4b: the paper's mean acceptance of hidden layers 1-3 (approximate NBG, deep net)
PAPER_LAYERS = (0.5631, 0.3618, 0.2656)


@dataclass
class Config:
    num_steps: int = PAPER_STEPS  # sweeps per chain (one sweep = one Metropolis step per node block)
    burn_in: int = 10_000  # acceptance rates over sweeps burn_in+1 .. num_steps (paper: 10k-110k)
    predict_last: int = 10_000  # predictions average the draws of the last sweeps (paper: 100k-110k)
    pred_thin: int = 1  # keep every pred_thin-th draw of that window
    num_chains: int = 10  # chains per setting (paper: m = 10)
    exact_pool_chains: int = 30  # exact deep chains run; scenarios 2-4 are drawn from them in order
    batch_size: int = 100  # approximate (minibatch) NBG
    approx_var: float = 0.04  # proposal variance, approximate NBG
    exact_var: float = 0.001  # proposal variance, exact (full-batch) NBG
    prior_var: float = 10.0  # N(0, 10) prior, also the law of the initial points
    acceptance_bounds: tuple[float, ...] = (0.05, 0.20)  # scenarios 3 and 4
    exact_shallow: bool = True  # the extra exact run on MLP(2, 2, 1) (not in the paper)
    # approx-deep again with the reference code's sampler defect (MetropolisWithinGibbs(...,
    # reference_defect=True)): the evidence rows on where the paper's fall of acceptance with depth comes from
    reference_defect_run: bool = True
    evidence_z: float = 2.0  # the defect's extra fall of acceptance (layer 1 to 3) must exceed this many SE
    batching: str = "epoch"
    data: str = "auto"  # "auto" (files if found, else simulated), "files", "simulated"
    data_seed: int = 0  # seed of the simulator when it is used
    seed: int = 0
    checkpoint_every: int | None = None  # sweeps between checkpoints (None: at the end only)
    # verdict rules (issue 26: each tolerance below the smallest gap between the paper's own numbers, or one
    # method's number passes as another's; checked in __post_init__)
    # acceptance rates, absolute (was 0.10): below the 5.84 pp between the paper's rates (exact node 13,
    # 20.72 %, and approximate layer 3, 26.56 %; PAPER_RATES), so also below Fig. 4b's 9.62 pp (layers 2, 3)
    tol_rate: float = 0.05
    # median accuracies, absolute (was 0.05): below the 1.12 pp between Fig. 3b's scenarios (approximate
    # 98.88 % vs scenario 4, 100 %; PAPER_ACCURACIES_FIG3B). Fig. 7's shallow net (86.75 %) lies 0.17 pp from
    # Fig. 3b's exact scenario 2 (86.92 %), closer than one tolerance: those two are told apart by the
    # ordering rows (deep above shallow, approximate above exact), not by value
    tol_accuracy: float = 0.01
    # chains run per retained chain, relative: 1.1 ± 0.55 and 2.3 ± 1.15, both below the 1.2 between them
    tol_chains_rel: float = 0.5
    # Observation 2 (Sect. 5.5): "Increasing the network width in initial layers does not have a negative impact
    # on acceptance rates" (issue 26 §5). Approximate FNBG (batch 100, σ² = approx_var) on MLP(2, w, 1) for each
    # width w: every block holds 3 parameters (a first-layer node's 2 weights and bias; the output node's w + 1
    # split into (w + 1) / 3 sub-blocks: the paper's finer node blocks, Sect. 4), so width is the only thing that changes;
    # w + 1 must be a multiple of 3. The node-blocked net (output node one block of w + 1) is shown beside it.
    width_run: bool = True
    widths: tuple[int, ...] = (2, 5, 11, 23)
    width_steps: int = 1_100  # sweeps per chain (the paper's 110,000 / 100)
    width_burn_in: int = 100  # acceptance over sweeps width_burn_in+1 .. width_steps
    width_chains: int = 10
    # "does not fall": between consecutive widths, no layer's mean acceptance falls by more than evidence_z
    # standard errors of the difference (chains independent). The test must have the power to see a fall the
    # size of the depth effect the paper contrasts width with: evidence_z·SE must stay below Fig. 4b's smallest
    # fall between consecutive layers, 36.18 − 26.56 = 9.62 pp (smallest_gap(PAPER_LAYERS)); a noisier run is
    # "not comparable", never "reproduced"
    width_power: float = 0.0962

    def __post_init__(self):
        ws = tuple(int(w) for w in self.widths)
        if len(ws) < 2 or any(w < 2 or (w + 1) % 3 for w in ws) or any(b <= a for a, b in zip(ws, ws[1:])):
            raise ValueError(
                f"Config.widths must be at least two increasing widths w >= 2 with w + 1 a multiple of 3 (every "
                f"block of 3 parameters), e.g. (2, 5, 11, 23); got {self.widths!r}"
            )
        if not 0 <= self.width_burn_in < self.width_steps:
            raise ValueError(f"need 0 <= Config.width_burn_in < Config.width_steps, got {self.width_burn_in}")
        if not 0 < self.width_power <= smallest_gap(PAPER_LAYERS):
            raise ValueError(
                f"Config.width_power must lie in (0, {smallest_gap(PAPER_LAYERS):.4g}], the smallest fall of "
                f"acceptance between consecutive layers in Fig. 4b (or a depth-sized fall passes); got {self.width_power}"
            )
        for name, tol, gap in (
            ("tol_rate", self.tol_rate, smallest_gap(PAPER_RATES)),
            ("tol_accuracy", self.tol_accuracy, smallest_gap(PAPER_ACCURACIES_FIG3B)),
            ("tol_chains_rel", self.tol_chains_rel * 2.3, 2.3 - 1.1),
        ):
            if not 0 < tol < gap:
                raise ValueError(
                    f"Config.{name} must be > 0 and keep the tolerance below {gap:.4g}, the smallest gap between "
                    f"the paper's numbers it judges (or one method's number passes as another's); got {tol:.4g}"
                )


def _scaled(factor: int, chains: int, pool: int, **kw) -> Config:
    return Config(
        num_steps=PAPER_STEPS // factor,
        burn_in=10_000 // factor,
        predict_last=10_000 // factor,
        num_chains=chains,
        exact_pool_chains=pool,
        **kw,
    )


PRESETS = {
    # 220 sweeps, for tests (a few seconds); the width study on two widths, 60 sweeps, 3 chains
    "tiny": _scaled(500, 2, 4, widths=(2, 5), width_steps=60, width_burn_in=10, width_chains=3),
    "quick": _scaled(20, 10, 24),  # 5,500 sweeps: the paper's schedule / 20 (a few minutes); width: 1,100 sweeps
    # the paper's 110,000 sweeps, 10 chains; the width study 11,000 sweeps (the paper's / 10)
    "full": Config(checkpoint_every=5_000, width_steps=11_000, width_burn_in=1_000),
}

# name -> (zoo model, approximate?)
SETTINGS = {
    "approx-deep": ("mlp_xor_deep", True),
    "exact-deep": ("mlp_xor_deep", False),
    "approx-shallow": ("mlp_xor", True),
    "exact-shallow": ("mlp_xor", False),
    # the reference code's sampler (rejected blocks kept in its proposal vector: eeyore's Gibbs.draw,
    # MetropolisWithinGibbs(reference_defect=True)) on approx-deep's chains: the same initial points,
    # batches and random numbers, the switch the only difference (issue 26 §3)
    "approx-deep-defect": ("mlp_xor_deep", True),
    # exact-deep's scenario-2 chains (the pool's first num_chains initial points) with the same defect: the
    # evidence on Fig. 3a's node rates (node 13, the output, at 20.72 % in the paper)
    "exact-deep-defect": ("mlp_xor_deep", False),
}
#: setting run with the reference code's defect -> the correct setting it repeats (and takes the seed of)
REFERENCE_DEFECT = {"approx-deep-defect": "approx-deep", "exact-deep-defect": "exact-deep"}

FIGURES = {
    "fig3a": "fig3a_node_acceptance.png",
    "fig3b": "fig3b_accuracy.png",
    "fig3c": "fig3c_runtime.png",
    "fig4": "fig4_mean_acceptance.png",
    "fig7": "fig7_accuracy_depth.png",
}


# -- data ----------------------------------------------------------------------------------------


def load_data(cfg: Config, data_dir=None):
    """``(dataset, source)``: the published files if found (``cfg.data`` "auto" / "files"),
    else the simulator; ``source`` says which, where from, and why."""
    if cfg.data not in ("auto", "files", "simulated"):
        raise ValueError(f"Config.data must be 'auto', 'files' or 'simulated', got {cfg.data!r}")
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    reason = "Config.data='simulated'"
    if cfg.data != "simulated":
        try:
            ds = load_noisy_xor(data_dir=root)
            path = find(NOISY_XOR["training/x.csv"], data_dir=root)
            folder = str(path.parent.parent) if path is not None else str(root)
            return ds, {
                "source": "files",
                "folder": folder,
                "sha256_verified": True,
                "description": "published noisy-XOR files (data2 of papamarkou/dmcl_examples)",
            }
        except ChecksumError:
            raise
        except DataError as err:
            if cfg.data == "files":
                raise
            reason = f"files not found ({err})"
    ds = noisy_xor_dataset(seed=cfg.data_seed)
    return ds, {
        "source": "simulated",
        "seed": cfg.data_seed,
        "reason": reason,
        "description": "structmc.data.noisy_xor_dataset: 1,250 training / 300 test points per corner",
    }


# -- runs ----------------------------------------------------------------------------------------
def _quantiles(t: torch.Tensor) -> dict:
    """Per column of ``t [C, K]``: median, mean, quartiles (over chains)."""
    t = t.to(torch.float64)
    q = torch.quantile(t, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64), dim=0)
    return {"median": q[1].tolist(), "mean": t.mean(0).tolist(), "q25": q[0].tolist(), "q75": q[2].tolist()}


def _median(xs) -> float | None:
    return float(torch.quantile(torch.tensor(xs, dtype=torch.float64), 0.5)) if len(xs) else None


def _iqr(xs) -> float | None:
    if not len(xs):
        return None
    t = torch.tensor(xs, dtype=torch.float64)
    return float(torch.quantile(t, 0.75) - torch.quantile(t, 0.25))


def _run_setting(name: str, index: int, cfg: Config, data, out: Path, progress, resume: bool) -> dict:
    model, approx = SETTINGS[name]
    energy = energy_for(model)
    partition = by_neuron(energy.space)
    chains = cfg.exact_pool_chains if name == "exact-deep" else cfg.num_chains
    defect = name in REFERENCE_DEFECT
    drawn = chains  # initial points drawn; the first `chains` are used
    if defect:  # the correct setting's seed: same initial points (and, same chain count, batches and random numbers)
        index = list(SETTINGS).index(REFERENCE_DEFECT[name])
        drawn = cfg.exact_pool_chains if REFERENCE_DEFECT[name] == "exact-deep" else chains
    seed = cfg.seed * 100 + index
    dtype = data.x_train.dtype
    gen = torch.Generator().manual_seed(seed)
    init = torch.randn(drawn, energy.space.dim, generator=gen, dtype=dtype)[:chains] * math.sqrt(cfg.prior_var)
    sampler = MetropolisWithinGibbs(
        partition, cfg.approx_var if approx else cfg.exact_var, scaling="none", reference_defect=defect
    )
    folder = out / "chains" / name
    if not resume and folder.exists():
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    chain = sample(
        energy,
        init,
        sampler,
        cfg.num_steps,
        data=(data.x_train, data.y_train),
        batch_size=cfg.batch_size if approx else None,
        batching=cfg.batching,
        num_chains=chains,
        burn_in=cfg.num_steps - cfg.predict_last,
        thin=cfg.pred_thin,
        seed=seed,
        out_dir=folder,
        checkpoint_every=cfg.checkpoint_every,
        resume=resume,
        progress=progress,
    )
    wall = time.perf_counter() - t0
    window = (cfg.burn_in + 1, cfg.num_steps)
    node = acceptance(chain, partition, by="node", window=window)  # [C, nodes]
    layer = acceptance(chain, partition, by="layer", window=window)  # [C, layers]
    block = acceptance(chain, partition, by="block", window=window)  # [C, blocks]
    acc, nll = [], []
    for c in range(chains):
        probs = predictive(energy, chain.samples[c], data.x_test)["probs"]
        m = classification_metrics(probs, data.y_test)
        acc.append(m["accuracy"])
        nll.append(m["nll"])
    sampling_seconds = float(torch.as_tensor(chain.info["time"]).reshape(-1)[-1])
    assert partition.layer is not None and partition.unit is not None  # by_neuron: every group is one node
    return {
        "model": model,
        "architecture": "MLP(2, 2, 2, 2, 2, 2, 2, 1)" if model == "mlp_xor_deep" else "MLP(2, 2, 1)",
        "approximate": approx,
        "reference_defect": defect,
        "batch_size": cfg.batch_size if approx else len(data.x_train),
        "proposal_var": cfg.approx_var if approx else cfg.exact_var,
        "num_chains": chains,
        "seed": seed,
        "nodes": [[int(a) + 1, int(b) + 1] for a, b in zip(partition.layer.tolist(), partition.unit.tolist())],
        "node_acceptance": node.tolist(),
        "node_summary": _quantiles(node),
        "layer_acceptance": layer.tolist(),
        "layer_summary": _quantiles(layer),
        "chain_acceptance": block.mean(1).tolist(),
        "chain_min_block_acceptance": block.min(1).values.tolist(),
        "accuracy": acc,
        "nll": nll,
        "accuracy_median": _median(acc),
        "accuracy_mean": float(sum(acc) / len(acc)),
        "sampling_seconds": sampling_seconds,
        "wall_seconds": wall,
        "seconds_per_chain": sampling_seconds / chains,
        "draws_per_chain": int(chain.samples.shape[1]),
    }


def _scenarios(exact: dict, cfg: Config) -> dict:
    """Scenarios 2-4 of Sect. 5.2 from the exact-deep pool (chains in pool order)."""
    n, pool = cfg.num_chains, exact["num_chains"]
    rate, acc = exact["chain_min_block_acceptance"], exact["accuracy"]  # every block >= bound
    out = {"scenario 2": {"bound": None, "retained": list(range(min(n, pool))), "chains_run": min(n, pool)}}
    for k, bound in enumerate(cfg.acceptance_bounds):
        ok = [i for i in range(pool) if rate[i] >= bound]
        kept = ok[:n]
        out[f"scenario {3 + k}"] = {
            "bound": bound,
            "retained": kept,
            "chains_run": kept[-1] + 1 if len(kept) == n else None,
        }
    for s in out.values():
        s["accuracy"] = [acc[i] for i in s["retained"]]
        s["accuracy_median"] = _median(s["accuracy"])
        s["complete"] = len(s["retained"]) == n
    return out


# -- Observation 2: width --------------------------------------------------------------------------
def width_partitions(space, width: int):
    """``(fnbg, nbg)`` partitions of MLP(2, ``width``, 1): every block of 3 parameters (the output
    node's ``width + 1`` in ``(width + 1) / 3`` sub-blocks), and one block per node."""
    return by_finer_nodes(space, num_chunks=[1, (width + 1) // 3]), by_neuron(space)


def _run_width(cfg: Config, data, progress) -> dict:
    """Observation 2's width study: approximate FNBG (and NBG beside it) on MLP(2, w, 1) for each
    ``cfg.widths``; acceptance per layer and chain over sweeps ``width_burn_in + 1 .. width_steps``.
    The two samplers of a width share the seed (initial points drawn from the prior, batches)."""
    out: dict = {
        "widths": list(cfg.widths),
        "architecture": "MLP(2, w, 1)",
        "steps": cfg.width_steps,
        "window": [cfg.width_burn_in + 1, cfg.width_steps],
        "chains": cfg.width_chains,
        "batch_size": cfg.batch_size,
        "proposal_var": cfg.approx_var,
        "fnbg": {"num_blocks": [], "layer_acceptance": []},
        "nbg": {"num_blocks": [], "layer_acceptance": [], "output_block_size": []},
        "sampling_seconds": 0.0,
    }
    dtype = data.x_train.dtype
    for k, w in enumerate(cfg.widths):
        energy = energy_for("mlp_xor", hidden=(int(w),))
        seed = cfg.seed * 100 + 50 + k
        gen = torch.Generator().manual_seed(seed)
        init = torch.randn(cfg.width_chains, energy.space.dim, generator=gen, dtype=dtype) * math.sqrt(cfg.prior_var)
        for kind, part in zip(("fnbg", "nbg"), width_partitions(energy.space, int(w))):
            chain = sample(
                energy,
                init,
                MetropolisWithinGibbs(part, cfg.approx_var, scaling="none"),
                cfg.width_steps,
                data=(data.x_train, data.y_train),
                batch_size=cfg.batch_size,
                batching=cfg.batching,
                num_chains=cfg.width_chains,
                burn_in=cfg.width_steps - 1,
                seed=seed,
                progress=progress,
            )
            out["sampling_seconds"] += float(torch.as_tensor(chain.info["time"]).reshape(-1)[-1])
            rates = acceptance(chain, part, by="layer", window=(cfg.width_burn_in + 1, cfg.width_steps))  # [C, 2]
            out[kind]["num_blocks"].append(part.num_groups)
            out[kind]["layer_acceptance"].append(rates.tolist())
        out["nbg"]["output_block_size"].append(int(w) + 1)
    return out


def width_falls(per_width, z: float, power: float) -> dict:
    """Observation 2's rule on per-chain acceptance ``per_width`` (one ``[C, L]`` nested list per
    width, in increasing width): between consecutive widths, layer by layer, the difference of the
    mean acceptance over chains (wider minus narrower) and its standard error (chains
    independent). ``holds``: no difference below ``-z`` SE; ``None`` when a comparison has fewer
    than 2 chains a side or ``z`` SE reaches ``power`` (too noisy to tell a depth-sized fall)."""
    t = [torch.as_tensor(a, dtype=torch.float64) for a in per_width]
    steps: list[dict] = []
    holds: bool | None = True
    reason = ""
    for k in range(len(t) - 1):
        a, b = t[k], t[k + 1]
        for j in range(a.shape[1]):
            diff = float(b[:, j].mean() - a[:, j].mean())
            se = (
                math.sqrt(float(a[:, j].var()) / len(a) + float(b[:, j].var()) / len(b))
                if len(a) > 1 and len(b) > 1
                else None
            )
            steps.append({"pair": [k, k + 1], "layer": j + 1, "difference": diff, "se": se})
            if se is None:
                holds, reason = None, "fewer than 2 chains: no standard error"
            elif z * se >= power and holds is not None:
                holds, reason = None, f"{z:g} SE = {100 * z * se:.2f} pp >= {100 * power:.2f} pp: too noisy"
            elif holds and diff < -z * se:
                holds = False
    worst = min(steps, key=lambda s: float(s["difference"] / s["se"] if s["se"] else s["difference"]))
    return {"holds": holds, "reason": reason, "steps": steps, "worst": worst}


WIDTH_CLAIM = (
    "Observation 2: acceptance does not fall with the width of the first hidden layer (approx FNBG, MLP(2, w, 1), "
    "every block 3 parameters; mean over chains, %)"
)
BLOCK_CLAIM = (
    "Sect. 4.2: smaller blocks, higher acceptance: the output node in blocks of 3 (FNBG) above the same node as "
    "one block of w + 1 (NBG), at each width w > 2 (approx, MLP(2, w, 1); mean over chains, %)"
)


def _width_rows(width: dict | None, cfg: Config) -> list[dict]:
    """Observation 2 (a claim of the paper, weak: a constant answer does not fall), Sect. 4.2's
    "smaller blocks increase the acceptance rate" on the same chains (FNBG's output blocks of 3
    against NBG's one block of w + 1, per width w > 2: FNBG above by more than
    ``cfg.evidence_z`` SE at every such width) and the node-blocked net's fall with width (our
    control, a check): see :class:`Config` (``widths``, ``width_power``). Pure: numbers in, rows
    out; ``width=None`` (the study not run): the two claims "n/a" with the reason."""
    if width is None:
        why = "the width study is off (Config.width_run=False)"
        return [
            _order_row(
                "width_no_fall",
                WIDTH_CLAIM,
                "Sect. 5.5, Observation 2",
                "does not fall (no negative impact of width)",
                "-",
                None,
                "see the full preset",
                not_run=why,
                weak=True,
            ),
            _order_row(
                "width_blocks",
                BLOCK_CLAIM,
                "Sect. 4.2",
                "smaller blocks increase the acceptance rate",
                "-",
                None,
                "see the full preset",
                not_run=why,
            ),
        ]
    ws = [int(w) for w in width["widths"]]
    fn = width_falls(width["fnbg"]["layer_acceptance"], cfg.evidence_z, cfg.width_power)

    def means(rates) -> list[list[float]]:
        return [torch.as_tensor(r, dtype=torch.float64).mean(0).tolist() for r in rates]

    def show(rates) -> str:
        m = means(rates)
        layers = len(m[0])
        return "; ".join(
            ("output" if j == layers - 1 else f"layer {j + 1}")
            + " "
            + " / ".join(f"{100 * m[k][j]:.1f}" for k in range(len(ws)))
            for j in range(layers)
        )

    w = fn["worst"]
    layers = len(width["fnbg"]["layer_acceptance"][0][0])
    worst = (
        f"least favourable step: {'output' if w['layer'] == layers else 'layer ' + str(w['layer'])}, "
        f"w = {ws[w['pair'][0]]} to {ws[w['pair'][1]]}: {100 * w['difference']:+.2f} pp"
        + ("" if w["se"] is None else f" ({w['difference'] / w['se']:+.1f} SE)")
    )
    claim = _order_row(
        "width_no_fall",
        WIDTH_CLAIM.replace("MLP(2, w, 1),", f"MLP(2, w, 1), w = {', '.join(map(str, ws))},"),
        "Sect. 5.5, Observation 2",
        "does not fall (no negative impact of width)",
        f"{show(width['fnbg']['layer_acceptance'])}; {worst}" + (f"; {fn['reason']}" if fn["reason"] else ""),
        fn["holds"],
        f"no layer's mean acceptance falls between consecutive widths by more than {cfg.evidence_z:g} SE "
        f"(chains independent); {cfg.evidence_z:g} SE must stay below {100 * cfg.width_power:.2f} pp (Fig. 4b's "
        "smallest fall between consecutive layers), else not comparable",
        not_run="" if fn["holds"] is not None else fn["reason"],
        weak=True,
    )
    rates_ok = all(
        _rates_ok(torch.as_tensor(r, dtype=torch.float64).mean(0).tolist(), NEAR_ZERO) and _rates_ok(sum(r, []))
        for r in width["fnbg"]["layer_acceptance"] + width["nbg"]["layer_acceptance"]
    )
    if not rates_ok:
        claim["verdict"] = "differs" if not claim.get("not_run") else claim["verdict"]
    claim["width"] = {"difference_steps": fn["steps"]}
    # the node-blocked net: the output node's one block grows with the width (w + 1 parameters)
    out = [torch.as_tensor(r, dtype=torch.float64)[:, -1] for r in width["nbg"]["layer_acceptance"]]
    diff = float(out[-1].mean() - out[0].mean())
    se = (
        math.sqrt(float(out[0].var()) / len(out[0]) + float(out[-1].var()) / len(out[-1]))
        if len(out[0]) > 1 and len(out[-1]) > 1
        else None
    )
    check = _order_row(
        "width_nbg_output",
        "node blocks (the output node one block of w + 1 parameters): its acceptance falls with the width, "
        "as the block grows (approx NBG, MLP(2, w, 1); mean over chains, %)",
        "Sect. 4.4 (block size), Observation 2",
        "block size, not width, lowers acceptance (Sect. 4.4)",
        f"{show(width['nbg']['layer_acceptance'])}; output, w = {ws[0]} to {ws[-1]}: {100 * diff:+.2f} pp"
        + ("" if se is None else f" ± {100 * se:.2f} pp (SE)"),
        None if se is None else diff < -cfg.evidence_z * se,
        f"output acceptance at the widest below the narrowest by more than {cfg.evidence_z:g} SE",
    )
    check.update(check=True, check_reason=CONTROL_REASON)
    # Sect. 4.2 on the same chains: at each width w > 2, FNBG's output (blocks of 3) above NBG's (one of w + 1)
    gaps: list[str] = []
    holds: bool | None = True
    why = ""
    for k, wd in enumerate(ws):
        if wd + 1 <= 3:
            continue  # w = 2: both partitions are the same 3-parameter block
        f = torch.as_tensor(width["fnbg"]["layer_acceptance"][k], dtype=torch.float64)[:, -1]
        g = torch.as_tensor(width["nbg"]["layer_acceptance"][k], dtype=torch.float64)[:, -1]
        d, e = _welch(f, g)
        gaps.append(f"w = {wd}: {100 * d:+.2f}" + ("" if e is None else f" ± {100 * e:.2f}"))
        if e is None:
            holds, why = None, "fewer than 2 chains: no standard error"
        elif holds is not None and not (
            math.isfinite(d) and d > cfg.evidence_z * e and _rates_ok(f.tolist() + g.tolist())
        ):
            holds = False
    if not gaps:
        holds, why = None, "no width w > 2 (both partitions are the same)"
    blocks = _order_row(
        "width_blocks",
        BLOCK_CLAIM,
        "Sect. 4.2",
        "smaller blocks increase the acceptance rate",
        "output, FNBG minus NBG (pp, ± SE): " + "; ".join(gaps),
        holds,
        f"FNBG's output above NBG's by more than {cfg.evidence_z:g} SE (Welch, chains independent) at every width w > 2",
        not_run=why,
    )
    return [claim, blocks, check]


# -- verdicts ------------------------------------------------------------------------------------
#: the published noisy-XOR test set (1,200 points): the binomial SE of an accuracy on it
PAPER_TEST_POINTS = 1200
K_SE = 3.0  # a published value is reproduced within K_SE combined standard errors (issue 35 §1)
EVIDENCE_REASON = (
    "evidence for an explanation, not a claim of the paper: whether the reference code's sampler defect "
    "(eeyore Gibbs.draw; MetropolisWithinGibbs(reference_defect=True)) gives the paper's acceptance rates"
)
CONTROL_REASON = (
    "our control for Observation 2, not a claim of the paper: with node blocks the output block grows with the "
    "width (w + 1 parameters), so its acceptance is expected to fall for the block size's sake (the paper's Sect. "
    "4.2 claim is judged in the row 'Sect. 4.2: smaller blocks, higher acceptance')"
)


def median_se(values) -> float:
    """The standard error of a median over independent chains: √(π/2)·sd/√n (normal theory;
    :func:`._report.seed_se` × 1.2533); NaN for fewer than 2 values."""
    return math.sqrt(math.pi / 2) * seed_se(list(values))


def chains_ratio_se(run: float, retained: int) -> float:
    """The standard error of "chains run per retained chain" when ``retained`` chains were kept
    out of ``run`` (negative binomial: trials until ``retained`` successes at the rate
    p = retained / run have sd √(retained (1 − p)) / p), divided by ``retained``."""
    p = retained / run
    return math.sqrt(retained * (1 - p)) / p / retained


def _value_row(
    key,
    quantity,
    source,
    paper,
    ours,
    tol,
    stat,
    unit="%",
    *,
    se=None,
    paper_se=0.0,
    se_source="",
    not_run="",
    chains=None,
) -> dict:
    """A published value, judged on the noise of both sides (issue 35 §1): reproduced when
    |ours − paper| ≤ K_SE·√(se² + paper_se²); ``tol`` (the old fixed tolerance) is kept in the
    row for the record only. No value or no noise on either side: "n/a" with ``not_run``.
    ``chains``: the per-chain values the SE comes from; one outside the plausible range (a rate
    or accuracy outside [0, 1]) fails the row (an implausible spread cannot buy a wide SE)."""
    lo, hi = (0.0, 1.0) if unit == "%" else (1.0, math.inf)
    odd = [float(x) for x in (chains or []) if math.isfinite(float(x)) and not lo <= float(x) <= hi]
    if odd and not not_run:
        row = _order_row(
            key,
            quantity,
            source,
            paper,
            ours,
            False,
            f"every per-chain value in [{lo:g}, {hi:g}] (then |ours − paper| ≤ {K_SE:g} combined SEs); "
            f"implausible per-chain value {odd[0]:.4g}",
        )
        row.update(statistic=stat, unit=unit, tol=tol)
        return row
    if isinstance(ours, float) and not math.isfinite(ours) and not not_run:
        # a run that produced NaN / inf: judged (and failed) as such, never "not run"
        se, se_source = abs(paper) or 1.0, "the run produced a non-finite value"
    noise = math.hypot(se, paper_se) if se is not None and math.isfinite(se) else math.nan
    if not not_run and ours is None:
        not_run = "no value from this run"
    if not not_run and not (math.isfinite(noise) and noise > 0):
        not_run = "no spread over chains to judge the value on (fewer than 2 chains, or all alike)"
    if not_run:
        verdict, rule = "n/a", f"|ours − paper| ≤ {K_SE:g} combined SEs; not computable here ({not_run})"
    else:
        ok = math.isfinite(ours) and abs(ours - paper) <= K_SE * noise * (1 + 1e-9)
        verdict = "agrees" if ok and _valid_value(ours, unit) else "differs"
        scale = 100 if unit == "%" else 1
        rule = (
            f"|ours − paper| ≤ {K_SE:g}·√(SE_ours² + SE_paper²) = {K_SE:g}·√({scale * se:.3g}² + "
            f"{scale * paper_se:.3g}²) = {scale * K_SE * noise:.3g}{' pp' if unit == '%' else ''}"
        )
    row = {
        "key": key,
        "quantity": quantity,
        "source": source,
        "statistic": stat,
        "paper": paper,
        "ours": ours,
        "unit": unit,
        "rule": rule,
        "verdict": verdict,
        "kind": "value",
        "tol": tol,
        "comparison_unit": "fraction" if unit == "%" else unit,
        "valid": [0.0, 1.0] if unit == "%" else [1.0, math.inf],  # a rate or accuracy; chains run per retained ≥ 1
    }
    if not_run:
        row["not_run"] = not_run
    else:
        row["se"] = {"ours": se, "paper": paper_se, "k": K_SE, "source": se_source}
    return row


def _valid_value(x: float, unit: str) -> bool:
    return 0.0 <= x <= 1.0 if unit == "%" else x >= 1.0


def _order_row(
    key, quantity, source, paper_text, ours_text, holds: bool | None, rule, *, not_run="", weak=False
) -> dict:
    verdict = "n/a" if holds is None or not_run else ("agrees" if holds else "differs")
    row = {
        "key": key,
        "quantity": quantity,
        "source": source,
        "statistic": "ordering",
        "paper": paper_text,
        "ours": ours_text,
        "unit": "",
        "rule": rule,
        "verdict": verdict,
        "kind": "claim",
    }
    if not_run:
        row["not_run"] = not_run
    if weak:
        row["weak"] = True
    return row


def _finite_all(xs) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def _missing(res: dict, *names: str) -> str:
    gone = [n for n in names if n not in res]
    return f"setting {', '.join(gone)} not run in this run" if gone else ""


def _rows(res: dict, scen: dict, cfg: Config, width: dict | None = None, n_test: int = PAPER_TEST_POINTS) -> list[dict]:
    """Every claim of Figs. 3, 4, 7 and Observation 2 as a row (issue 35 §3): a setting the run
    left out (``res`` without it) makes its rows "n/a" with ``not_run``, never a KeyError. Value
    rows are judged on the noise over chains (:func:`median_se` for a median, ``seed_se`` for a
    mean; accuracies also the binomial SE on the ``n_test`` test points; chains run per retained
    chain the negative-binomial SE of ours and of the paper's 11 and 23)."""
    ad: Any = res.get("approx-deep")
    ed: Any = res.get("exact-deep")
    ash: Any = res.get("approx-shallow")
    s2 = (scen.get("scenario 2") or {}).get("retained") if ed is not None else None
    exact_node = torch.tensor(ed["node_acceptance"], dtype=torch.float64)[s2] if ed is not None and s2 else None
    ex: Any = _quantiles(exact_node) if exact_node is not None else None
    per_layer = (
        torch.tensor(ad["layer_acceptance"], dtype=torch.float64)
        if ad is not None and "layer_acceptance" in ad
        else None
    )
    layer_mean = ad["layer_summary"]["mean"] if ad is not None else None
    no_exact = _missing(res, "exact-deep")
    no_approx = _missing(res, "approx-deep")
    rows = []
    for key, label, j, paper in (
        ("exact_node1", "node 1 (hidden layer 1)", 0, 0.6383),
        ("exact_node13", "node 13 (output node)", 12, 0.2072),
    ):
        rows.append(
            _value_row(
                key,
                f"exact NBG, deep net, {label} acceptance",
                "Sect. 5.2, Fig. 3a",
                paper,
                None if ex is None else ex["median"][j],
                cfg.tol_rate,
                "median over chains",
                se=None if exact_node is None else median_se(exact_node[:, j].tolist()),
                chains=None if exact_node is None else exact_node[:, j].tolist(),
                se_source="SE_ours: √(π/2)·sd/√n over the scenario-2 chains (the SE of a median); SE_paper: none given",
                not_run=no_exact,
            )
        )
    for j, v in enumerate(PAPER_LAYERS):
        rows.append(
            _value_row(
                f"approx_layer{j + 1}",
                f"approx NBG, deep net, hidden layer {j + 1} acceptance",
                "Sect. 5.3, Fig. 4b",
                v,
                None if layer_mean is None else layer_mean[j],
                cfg.tol_rate,
                "mean over chains",
                se=None if per_layer is None else seed_se(per_layer[:, j].tolist()),
                chains=None if per_layer is None else per_layer[:, j].tolist(),
                se_source="SE_ours: sd/√n over the chains (the SE of a mean); SE_paper: none given",
                not_run=no_approx or ("" if per_layer is not None else "no per-chain layer acceptance in this record"),
            )
        )

    def acc_row(key, quantity, source, paper, chains, median, stat, why):
        se = None
        if chains:
            se = math.hypot(median_se(chains) if len(chains) > 1 else math.nan, binomial_se(paper, n_test))
            if not math.isfinite(se):  # one chain: the test set's binomial SE alone
                se = binomial_se(paper, n_test)
        return _value_row(
            key,
            quantity,
            source,
            paper,
            median,
            cfg.tol_accuracy,
            stat,
            se=se,
            chains=chains,
            se_source=f"SE_ours: √((√(π/2)·sd/√n over chains)² + (binomial SE of the paper's value on {n_test:,} "
            "test points)²); SE_paper: none given",
            not_run=why,
        )

    sc = {k: scen.get(k) or {} for k in ("scenario 2", "scenario 3", "scenario 4")}
    rows += [
        acc_row(
            "acc_approx_deep",
            "approx NBG, deep net, test accuracy (scenario 1)",
            "Sect. 5.2/5.5, Figs. 3b, 7",
            PAPER_ACCURACIES_FIG3B[0],
            None if ad is None else ad.get("accuracy"),
            None if ad is None else ad.get("accuracy_median"),
            "median over chains",
            no_approx,
        ),
        acc_row(
            "acc_approx_shallow",
            "approx NBG, shallow net, test accuracy",
            "Sect. 5.5, Fig. 7",
            0.8675,
            None if ash is None else ash.get("accuracy"),
            None if ash is None else ash.get("accuracy_median"),
            "median over chains",
            _missing(res, "approx-shallow"),
        ),
    ]
    for key, skey, quantity, paper in (
        ("acc_exact_deep", "scenario 2", "exact NBG, deep net, test accuracy (scenario 2)", 0.8692),
        (
            "acc_exact_deep_5",
            "scenario 3",
            "exact NBG, deep net, chains with acceptance >= 5 %: test accuracy (scenario 3)",
            0.9538,
        ),
        (
            "acc_exact_deep_20",
            "scenario 4",
            "exact NBG, deep net, chains with acceptance >= 20 %: test accuracy (scenario 4)",
            1.0,
        ),
    ):
        s = sc[skey]
        rows.append(
            acc_row(
                key,
                quantity,
                "Sect. 5.2, Fig. 3b",
                paper,
                s.get("accuracy"),
                s.get("accuracy_median"),
                "median over chains" if skey == "scenario 2" else "median over retained chains",
                no_exact or ("" if s.get("accuracy") or s.get("accuracy_median") is not None else f"no {skey} chain"),
            )
        )
    n = cfg.num_chains
    pool: Any = None if ed is None else ed["num_chains"]
    for key, paper_run in (("scenario 3", 11), ("scenario 4", 23)):
        s = sc[key]
        bound = s.get("bound", cfg.acceptance_bounds[int(key[-1]) - 3])
        paper_ratio = paper_run / 10
        quantity = f"exact NBG, deep net: chains run per retained chain, acceptance >= {100 * bound:g} % ({key})"
        tol = cfg.tol_chains_rel * paper_ratio
        if ed is None or s.get("chains_run") is not None:
            run: Any = None if ed is None else s["chains_run"]
            rows.append(
                _value_row(
                    f"chains_{key[-1]}",
                    quantity,
                    "Sect. 5.2",
                    paper_ratio,
                    None if run is None else run / n,
                    tol,
                    f"chains run / {n} retained",
                    unit="ratio",
                    se=None if run is None else chains_ratio_se(paper_run, 10) * math.sqrt(10 / n),
                    paper_se=chains_ratio_se(paper_run, 10),
                    se_source=f"negative-binomial SE of chains run per retained chain at the paper's qualifying rate "
                    f"10/{paper_run} (ours: {n} retained; the paper's: 10 of {paper_run})",
                    not_run=no_exact,
                )
            )
        else:  # the pool ran out: the ratio is > pool / n
            lower = pool / n
            se_at = chains_ratio_se(paper_run, 10) * math.sqrt(10 / n)
            holds = False if lower - paper_ratio > K_SE * math.hypot(se_at, chains_ratio_se(paper_run, 10)) else None
            row = _order_row(
                f"chains_{key[-1]}",
                quantity,
                "Sect. 5.2",
                f"{paper_ratio:.2f}",
                f"> {lower:.2f} (only {len(s['retained'])} of {pool} pool chains qualify)",
                holds,
                f"ours (> pool / {n}) beyond the paper's by more than {K_SE:g} negative-binomial SEs; n/a when the pool "
                "is too small to tell",
                not_run="" if holds is not None else f"the pool of {pool} chains is too small to tell",
            )
            row["statistic"], row["unit"], row["paper"] = f"chains run / {n} retained", "ratio", paper_ratio
            rows.append(row)
    # qualitative claims
    ap: Any = None if ad is None else ad["node_summary"]
    both = no_approx or no_exact
    if not both:
        assert ap is not None and ex is not None
        nodes = len(ap["median"])
        higher = sum(a > e for a, e in zip(ap["median"], ex["median"]))
        iqr_a = [b - a for a, b in zip(ap["q25"], ap["q75"])]
        iqr_e = [b - a for a, b in zip(ex["q25"], ex["q75"])]
        smaller = sum(a < e for a, e in zip(iqr_a, iqr_e))
    rows.append(
        _order_row(
            "approx_above_exact",
            "approx NBG median acceptance above exact NBG median, per node",
            "Sect. 5.2, Fig. 3a",
            "higher (first observation)",
            "-" if both else f"{higher} of {nodes} nodes",
            None if both else (higher > nodes / 2 and _rates_ok(ap["median"] + ex["median"], NEAR_ZERO)),
            f"holds at a majority of the nodes (every median a rate in [{NEAR_ZERO:g}, 1]: not vanishing)",
            not_run=both,
        )
    )
    rows.append(
        _order_row(
            "approx_less_volatile",
            "approx NBG acceptance less volatile than exact (IQR over chains), per node",
            "Sect. 5.2, Fig. 3a",
            "smaller IQR (second observation)",
            "-" if both else f"{smaller} of {nodes} nodes",
            None
            if both
            else (
                smaller > nodes / 2
                and _rates_ok(ap["q25"] + ap["q75"] + ex["q25"] + ex["q75"])
                and _rates_ok(ap["median"] + ex["median"], NEAR_ZERO)
            ),
            f"holds at a majority of the nodes (quartiles in [0, 1], medians in [{NEAR_ZERO:g}, 1])",
            not_run=both,
        )
    )
    if layer_mean is not None:
        l1, l2, l3 = layer_mean[:3]
    rows.append(
        _order_row(
            "depth_layers",
            "approx NBG, deep net: acceptance falls with depth, layers 1 > 2 > 3",
            "Sect. 5.3, Fig. 4b",
            "56.31 > 36.18 > 26.56",
            "-"
            if layer_mean is None
            else f"{100 * l1:.2f} {'>' if l1 > l2 else '<='} {100 * l2:.2f} {'>' if l2 > l3 else '<='} {100 * l3:.2f}",
            None if layer_mean is None else (l1 > l2 > l3 and _rates_ok(layer_mean[:3], NEAR_ZERO)),
            f"same ordering of the layer means (every one a rate in [{NEAR_ZERO:g}, 1]: not vanishing)",
            not_run=no_approx,
        )
    )
    if ex is not None:
        e1, e13 = ex["median"][0], ex["median"][12]
    rows.append(
        _order_row(
            "depth_exact",
            "exact NBG, deep net: node 1 above node 13",
            "Sect. 5.2, Fig. 3a",
            "63.83 > 20.72",
            "-" if ex is None else f"{100 * e1:.2f} {'>' if e1 > e13 else '<='} {100 * e13:.2f}",
            None if ex is None else (e1 > e13 and _rates_ok([e1, e13], NEAR_ZERO)),
            f"same ordering of the medians (each a rate in [{NEAR_ZERO:g}, 1]: not vanishing)",
            not_run=no_exact,
        )
    )
    da: Any = None if ad is None else ad.get("accuracy_median")
    sa: Any = None if ash is None else ash.get("accuracy_median")
    ea: Any = sc["scenario 2"].get("accuracy_median")
    no_da_sa = _missing(res, "approx-deep", "approx-shallow")
    rows.append(
        _order_row(
            "deep_above_shallow",
            "approx NBG accuracy: deep net above shallow net",
            "Sect. 5.5, Fig. 7",
            "98.88 > 86.75",
            "-" if no_da_sa else f"{100 * da:.2f} {'>' if da > sa else '<='} {100 * sa:.2f}",
            None if no_da_sa else (da > sa and _acc_ok([da, sa])),
            "same ordering of the medians (each an accuracy above chance, 50 %, and ≤ 1)",
            not_run=no_da_sa,
        )
    )
    rows.append(
        _order_row(
            "approx_above_exact_acc",
            "deep net accuracy: approx NBG above exact NBG (scenario 2)",
            "Sect. 5.2, Fig. 3b",
            "98.88 > 86.92",
            "-" if both else f"{100 * da:.2f} {'>' if da > ea else '<='} {100 * ea:.2f}",
            None if both else (da > ea and _acc_ok([da, ea])),
            "same ordering of the medians (each an accuracy above chance, 50 %, and ≤ 1)",
            not_run=both,
        )
    )
    ia: Any = None if ad is None else _iqr(ad["accuracy"])
    ie: Any = None if ed is None else _iqr(sc["scenario 2"].get("accuracy") or [])
    rows.append(
        _order_row(
            "acc_iqr_exact",
            "deep net accuracy IQR: approx NBG below exact NBG (scenario 2)",
            "Sect. 5.2, Fig. 3b",
            "smaller",
            "-" if both or ia is None or ie is None else f"{100 * ia:.2f} vs {100 * ie:.2f} pp",
            None if both or ia is None or ie is None else (ia < ie and _acc_ok([da, ea]) and _rates_ok(ad["accuracy"])),
            "approx IQR < exact IQR (medians above chance, 50 %; accuracies in [0, 1])",
            not_run=both or ("" if ia is not None and ie is not None else "no chains"),
        )
    )
    isw: Any = None if ash is None else _iqr(ash["accuracy"])
    rows.append(
        _order_row(
            "acc_iqr_depth",
            "approx NBG accuracy IQR: deep net below shallow net",
            "Sect. 5.5, Fig. 7",
            "smaller",
            "-" if no_da_sa or ia is None or isw is None else f"{100 * ia:.2f} vs {100 * isw:.2f} pp",
            None
            if no_da_sa or ia is None or isw is None
            else (ia < isw and _acc_ok([da, sa]) and _rates_ok(ad["accuracy"])),
            "deep IQR < shallow IQR (medians above chance, 50 %; accuracies in [0, 1])",
            not_run=no_da_sa or ("" if ia is not None and isw is not None else "no chains"),
        )
    )
    ta: Any = None if ad is None else ad["seconds_per_chain"]
    te: Any = None if ed is None else ed["seconds_per_chain"]
    rows.append(
        _order_row(
            "runtime",
            "deep net runtime per chain: approx NBG below exact NBG",
            "Sect. 5.2, Fig. 3c",
            "shorter",
            "-" if both else f"{ta:.2f} s vs {te:.2f} s",
            None if both else (0 < ta < te),
            "0 < approx < exact (sampling seconds of the batched run / chains)",
            not_run=both,
        )
    )
    # a run that produced NaN / inf: its claim rows say so (not reproduced), never "agrees"
    for r in rows:
        if r["kind"] == "claim" and r["verdict"] == "agrees" and "nan" in str(r["ours"]).lower():
            r["verdict"] = "differs"
    if ad is not None and "approx-deep-defect" in res:
        rows += _defect_rows(ad, res["approx-deep-defect"], cfg)
    if exact_node is not None and "exact-deep-defect" in res:
        rows += _exact_defect_rows(exact_node, res["exact-deep-defect"], cfg)
    rows += _width_rows(width, cfg)  # Observation 2 (issue 26 §5), "n/a" rows when not run
    return rows


#: the lowest acceptance at which the paper keeps a chain (Sect. 5.2, scenario 3): below it a rate "vanishes"
NEAR_ZERO = 0.05
#: chance on noisy XOR (two balanced classes)
CHANCE_XOR = 0.5


def _rates_ok(xs, low: float = 0.0) -> bool:
    """Every value a finite rate in [``low``, 1]: an ordering of absurd values (a rate of 250 %,
    −5 %), of NaN, or (``low``) of vanishing rates / chance-level accuracies does not pass."""
    return _finite_all(xs) and all(low <= float(x) <= 1.0 for x in xs)


def _acc_ok(xs) -> bool:
    """Every accuracy a finite value in (chance, 1]: the paper's are all 67-100 % on two balanced
    classes; an ordering of accuracies at chance or given as fractions of a percent does not pass."""
    return _finite_all(xs) and all(CHANCE_XOR < float(x) <= 1.0 for x in xs)


def _welch(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float | None]:
    """``mean(a) - mean(b)`` and its standard error for independent chains (Welch; ``None``
    with fewer than two chains on a side)."""
    se = math.sqrt(float(a.var()) / len(a) + float(b.var()) / len(b)) if len(a) > 1 and len(b) > 1 else None
    return float(a.mean() - b.mean()), se


def _defect_rows(correct: dict, defect: dict, cfg: Config) -> list[dict]:
    """The evidence rows: approximate NBG on the deep net with the correct kernel (approx-deep)
    and with the reference code's defect (approx-deep-defect, the same chains' initial points,
    batches and random numbers), each row a rule over both. Checks (``check``), not the paper's
    claims: they test our explanation of the paper's acceptance rates, outside the tally.

    * ``defect_depth_fall``: the fall of acceptance from hidden layer 1 to 3, per chain, is
      larger with the defect than without, by more than ``cfg.evidence_z`` standard errors
      (Welch: chains independent; n/a with fewer than 2 chains each);
    * ``defect_layers_paper``: with the defect, the layer 1-3 means all lie within
      ``cfg.tol_rate`` of the paper's (Fig. 4b), and with the correct kernel they do not all."""
    lc = torch.tensor(correct["layer_acceptance"], dtype=torch.float64)  # [C, 7]
    ld = torch.tensor(defect["layer_acceptance"], dtype=torch.float64)
    fall_c, fall_d = lc[:, 0] - lc[:, 2], ld[:, 0] - ld[:, 2]  # per chain, layer 1 - layer 3
    diff, se = _welch(fall_d, fall_c)
    mc, md = lc.mean(0).tolist(), ld.mean(0).tolist()
    layers = {"correct": mc, "reference_defect": md, "paper": list(PAPER_LAYERS)}
    paper_fall = PAPER_LAYERS[0] - PAPER_LAYERS[2]
    fall = _order_row(
        "defect_depth_fall",
        "evidence: acceptance falls from hidden layer 1 to 3 with the reference code's defect, not with the "
        "correct kernel (approx NBG, deep net, same chains)",
        "Sect. 5.3, Fig. 4b; eeyore Gibbs.draw",
        f"{100 * paper_fall:.2f} pp fall (56.31 - 26.56, the reference sampler)",
        f"fall with the defect {100 * float(fall_d.mean()):.2f} pp, correct {100 * float(fall_c.mean()):.2f} pp: "
        f"difference {100 * diff:.2f} pp" + ("" if se is None else f" ± {100 * se:.2f} pp (SE)"),
        None if se is None else (diff > cfg.evidence_z * se and diff > 0),
        f"mean over chains of (layer 1 - layer 3 acceptance): defect minus correct > {cfg.evidence_z:g} SE "
        "(Welch, chains independent)",
    )
    within = lambda means: all(abs(m - p) <= cfg.tol_rate + 1e-12 for m, p in zip(means, PAPER_LAYERS))  # noqa: E731
    near = _order_row(
        "defect_layers_paper",
        "evidence: the reference code's defect, not the correct kernel, gives the paper's layer 1-3 acceptance "
        "(approx NBG, deep net)",
        "Sect. 5.3, Fig. 4b",
        " / ".join(f"{100 * p:.2f}" for p in PAPER_LAYERS),
        f"defect {' / '.join(f'{100 * m:.2f}' for m in md[:3])}; correct {' / '.join(f'{100 * m:.2f}' for m in mc[:3])}",
        within(md[:3]) and not within(mc[:3]),
        f"with the defect every layer-1-3 mean within {100 * cfg.tol_rate:g} pp of the paper's, with the correct "
        "kernel not every one",
    )
    fall.update(
        fall_per_chain={"correct": fall_c.tolist(), "reference_defect": fall_d.tolist()}, difference=diff, se=se
    )
    for row in (fall, near):
        row.update(check=True, check_reason=EVIDENCE_REASON, evidence=True, evidence_of="approx-deep", layers=layers)
    return [fall, near]


def _exact_defect_rows(correct_node: torch.Tensor, defect: dict, cfg: Config) -> list[dict]:
    """The evidence rows on Fig. 3a: exact NBG on the deep net with the correct kernel
    (``correct_node``: scenario 2's chains, ``[C, 13]`` node rates) and with the reference
    code's defect (exact-deep-defect, from the same initial points; its random numbers differ,
    the pool runs more chains). Checks (``check``), outside the tally.

    * ``defect_exact_output``: the gap node 1 minus node 13 (the output), per chain, is larger
      with the defect than without, by more than ``cfg.evidence_z`` standard errors (Welch);
    * ``defect_exact_paper``: with the defect the node 1 and node 13 medians both lie within
      ``cfg.tol_rate`` of the paper's (63.83 %, 20.72 %), with the correct kernel not both."""
    nc = correct_node.to(torch.float64)
    nd = torch.tensor(defect["node_acceptance"], dtype=torch.float64)
    gap_c, gap_d = nc[:, 0] - nc[:, 12], nd[:, 0] - nd[:, 12]
    diff, se = _welch(gap_d, gap_c)
    medc, medd = _quantiles(nc)["median"], _quantiles(nd)["median"]
    paper = (PAPER_RATES[0], PAPER_RATES[1])
    gap = _order_row(
        "defect_exact_output",
        "evidence: exact NBG's output node (13) accepts less than node 1 with the reference code's defect, not "
        "with the correct kernel (deep net, same initial points)",
        "Sect. 5.2, Fig. 3a; eeyore Gibbs.draw",
        f"{100 * (paper[0] - paper[1]):.2f} pp (63.83 - 20.72, medians, the reference sampler)",
        f"node 1 - node 13, mean over chains: defect {100 * float(gap_d.mean()):.2f} pp, correct "
        f"{100 * float(gap_c.mean()):.2f} pp: difference {100 * diff:.2f} pp"
        + ("" if se is None else f" ± {100 * se:.2f} pp (SE)"),
        None if se is None else (diff > cfg.evidence_z * se and diff > 0),
        f"mean over chains of (node 1 - node 13 acceptance): defect minus correct > {cfg.evidence_z:g} SE "
        "(Welch, chains independent)",
    )
    within = lambda m: all(abs(a - b) <= cfg.tol_rate + 1e-12 for a, b in zip(m, paper))  # noqa: E731
    near = _order_row(
        "defect_exact_paper",
        "evidence: the reference code's defect, not the correct kernel, gives the paper's exact NBG node 1 and "
        "node 13 medians (deep net)",
        "Sect. 5.2, Fig. 3a",
        "63.83 / 20.72",
        f"defect {100 * medd[0]:.2f} / {100 * medd[12]:.2f}; correct {100 * medc[0]:.2f} / {100 * medc[12]:.2f}",
        within((medd[0], medd[12])) and not within((medc[0], medc[12])),
        f"with the defect both medians within {100 * cfg.tol_rate:g} pp of the paper's, with the correct kernel "
        "not both",
    )
    gap.update(gap_per_chain={"correct": gap_c.tolist(), "reference_defect": gap_d.tolist()}, difference=diff, se=se)
    nodes = {"correct": medc, "reference_defect": medd, "paper": {"1": paper[0], "13": paper[1]}}
    for row in (gap, near):
        row.update(check=True, check_reason=EVIDENCE_REASON, evidence=True, evidence_of="exact-deep", nodes=nodes)
    return [gap, near]


def comparisons(cfg: Config, res: dict, scen: dict, width: dict | None = None, n_test: int = PAPER_TEST_POINTS) -> list:
    """The report's rows (:func:`_rows`, as :func:`._report.row_comparison` judges them) from the
    settings' numbers ``res`` (:func:`_run_setting`), the scenarios ``scen`` (:func:`_scenarios`)
    and the width study ``width`` (:func:`_run_width`, Observation 2; ``None``: not run); pure, so
    a test feeds it numbers."""
    return [row_comparison(r) for r in _rows(res, scen, cfg, width, n_test)]


def report_config(report) -> Config:
    """The record's config (JSON lists back to tuples) with today's verdict rules: the fields
    that judge (``tol_*``, ``evidence_z``, ``width_power``) take today's defaults."""
    import dataclasses

    rules = ("tol_rate", "tol_accuracy", "tol_chains_rel", "evidence_z", "width_power")
    raw = dict(report["config"])
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        if f.name in raw and f.name not in rules:
            v = raw[f.name]
            kw[f.name] = tuple(v) if isinstance(v, list) else v
    return Config(**kw)


def rerender_details(folder) -> None:
    """After :func:`._report.rejudge_record`: the record's rows (``numbers["rows"]``) rebuilt
    under today's rules with their Comparisons' verdicts, and its report.md's details section
    rendered again from them."""
    import json

    from ._common import replace_details
    from ._report import ROW_VERDICTS

    report = json.loads((Path(folder) / "report.json").read_text())
    n = report["numbers"]
    rows = _rows(n["settings"], n["scenarios"], report_config(report), n.get("width"), int(n.get("num_test") or 1200))
    for r in rows:
        r["verdict"] = row_comparison(r).verdict
    n["rows"] = rows
    comps = [row_comparison(r) for r in rows]
    verdicts = {w: sum(c.verdict.startswith(v) and not c.check for c in comps) for w, v in ROW_VERDICTS.items()}
    legacy = {
        **n,
        "config": report["config"],
        "preset": report["preset"],
        "seed": report["seed"],
        "reduced": report["reductions"],
        "verdicts": verdicts,
    }
    md = _markdown(legacy).replace(
        "Verdicts: ", "Verdicts (agree = reproduced, differ = not reproduced, n/a = not run): "
    )
    replace_details(folder, report, md)


def rejudge(report) -> list:
    """The rows of a written gibbs-xor report judged under today's rules (issue 35 §7), from its
    ``numbers`` (settings, scenarios, width study: every per-chain value) and ``config``."""
    n = report["numbers"]
    return comparisons(
        report_config(report),
        n["settings"],
        n["scenarios"],
        n.get("width"),
        int(n.get("num_test") or PAPER_TEST_POINTS),
    )


# -- entry point -----------------------------------------------------------------------------------


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/gibbs-xor",
    progress: bool | None = None,
    *,
    resume: bool = False,
    data_dir: str | Path | None = None,
    seed: int | None = None,
) -> dict:
    """Run the experiment and write ``report.json``, ``report.md`` and the figures to
    ``out_dir``; the chains go to ``out_dir/chains/<setting>`` (checkpointed every
    ``Config.checkpoint_every`` sweeps). ``resume=True`` continues every setting from its
    last checkpoint (a finished one is read back). ``data_dir``: where to look for the
    ``noisy-xor`` folder (default :func:`default_data_dir`); ``seed`` overrides the config's.
    The report is in the common format of :mod:`structmc_papers._report` (every number
    under ``numbers``)."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    if not 0 <= cfg.burn_in < cfg.num_steps or not 0 < cfg.predict_last <= cfg.num_steps:
        raise ValueError("need 0 <= burn_in < num_steps and 0 < predict_last <= num_steps")
    if cfg.exact_pool_chains < cfg.num_chains:
        raise ValueError("exact_pool_chains must be >= num_chains")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data, source = load_data(cfg, data_dir)
    names = [
        n
        for n in SETTINGS
        if (cfg.exact_shallow or n != "exact-shallow") and (cfg.reference_defect_run or n not in REFERENCE_DEFECT)
    ]
    res = {name: _run_setting(name, list(SETTINGS).index(name), cfg, data, out, progress, resume) for name in names}
    scen = _scenarios(res["exact-deep"], cfg)
    width = _run_width(cfg, data, progress) if cfg.width_run else None
    rows = _rows(res, scen, cfg, width, len(data.x_test))
    report = {
        "experiment": "gibbs-xor: node-blocked Metropolis-within-Gibbs on noisy XOR (Papamarkou 2023, Figs. 3, 4, 7)",
        "preset": preset,
        "config": asdict(cfg),
        "seed": cfg.seed,
        "resumed": resume,
        "data": source,
        "num_train": len(data.x_train),
        "num_test": len(data.x_test),
        "windows": {
            "acceptance": [cfg.burn_in + 1, cfg.num_steps],
            "prediction": [cfg.num_steps - cfg.predict_last + 1, cfg.num_steps],
            "paper_acceptance": [10_001, PAPER_STEPS],
            "paper_prediction": [100_001, PAPER_STEPS],
        },
        "settings": res,
        "scenarios": scen,
        "width": width,
        "rows": rows,
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in ("agrees", "differs", "n/a")},
        "reduced": _reduced(cfg),
        "versions": _versions(),
        "figures": dict(FIGURES),
    }
    report["wall_seconds"] = time.perf_counter() - t0
    _plot(out, res, scen, cfg)
    report["wall_seconds"] = time.perf_counter() - t0
    # a resumed run's work includes the sampling of earlier sittings, restored from the chains'
    # checkpoints: each setting's cumulative sampling seconds beyond what this call spent on it
    # (the earlier sittings' scoring and plotting, seconds at most, are not counted)
    earlier = sum(max(0.0, r["sampling_seconds"] - r["wall_seconds"]) for r in res.values())
    compute_time_s = report["wall_seconds"] + earlier if resume else None
    notes = (
        []
        if source.get("source") == "files"
        else [
            f"DATA: {source.get('source')} noisy XOR (the published files were not found): the paper's numbers are "
            "shown and judged against a simulation of the same design"
        ]
    )
    return write_rows_report(
        out,
        "gibbs-xor",
        preset=preset,
        cfg=asdict(cfg),
        seed=cfg.seed,
        legacy=report,
        rows=rows,
        wall_time_s=report["wall_seconds"],
        compute_time_s=compute_time_s,
        reductions=report["reduced"],
        figures=list(FIGURES.values()),
        markdown=_markdown,
        step_sizes=_step_sizes(cfg),
        notes=notes,
        stand_in=""
        if source.get("source") == "files"
        else f"the noisy-XOR simulator (structmc.data.noisy_xor_dataset, seed {source.get('seed')}), not the "
        f"published files ({source.get('reason')})",
    )


def _step_sizes(cfg: Config) -> list[str]:
    """No gradient step: the proposal variances of the random-walk Metropolis blocks, as the paper's."""
    return [
        "no gradient step: node-blocked Metropolis-within-Gibbs with a Gaussian random-walk proposal per node; "
        "the paper's proposal variances are used as is: approximate NBG σ² = 0.04 at batch 100, exact NBG "
        "σ² = 0.001 on the full batch (Sect. 5.2)",
        f"config: {', '.join(f'{k} = {v}' for k, v in asdict(cfg).items() if 'var' in k or 'batch' in k)}",
    ]


def _reduced(cfg: Config) -> list[str]:
    full = PRESETS["full"]
    notes = []
    if cfg.num_steps != full.num_steps:
        notes.append(
            f"chain length {cfg.num_steps:,} sweeps instead of {full.num_steps:,} (1/{full.num_steps / cfg.num_steps:g}); "
            f"acceptance window {cfg.burn_in + 1:,}-{cfg.num_steps:,} and prediction window the last {cfg.predict_last:,} "
            "sweeps, scaled the same way. Expected effect: chains started from the N(0, 10) prior have had far fewer "
            "sweeps to leave the flat, saturated-sigmoid region and find the XOR solution, so acceptance rates are "
            "expected higher (a flat likelihood accepts most moves), accuracies lower and more spread between chains "
            "(most for the deep net and for exact NBG, whose small steps move slowly), and every per-chain number "
            "noisier; value verdicts are therefore mostly expected to differ, and only the full preset is a test of "
            "the paper's numbers."
        )
    if cfg.num_chains != full.num_chains:
        notes.append(
            f"{cfg.num_chains} chains per setting instead of {full.num_chains}: medians and IQRs over so few "
            "chains are rough."
        )
    if cfg.exact_pool_chains != full.exact_pool_chains:
        notes.append(
            f"exact deep pool of {cfg.exact_pool_chains} chains instead of {full.exact_pool_chains}: scenarios "
            "3 and 4 may run out of qualifying chains (then reported as incomplete)."
        )
    return notes


# -- report -----------------------------------------------------------------------------------------
def _fmt(v, unit) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{100 * v:.2f} %" if unit == "%" else f"{v:.2f}"


def _markdown(report: dict) -> str:
    cfg, res, scen = report["config"], report["settings"], report["scenarios"]
    src = report["data"]
    data_line = (
        f"published files from `{src['folder']}` (SHA-256 verified)"
        if src["source"] == "files"
        else f"simulated (structmc.data.noisy_xor_dataset, seed {src['seed']}; {src['reason']})"
    )
    lines = [
        "# Blocked Gibbs on noisy XOR (Papamarkou 2023, Figs. 3, 4, 7)",
        "",
        f"Preset `{report['preset'] or 'custom'}`; data: {data_line}; {report['num_train']} training / "
        f"{report['num_test']} test points. Node-blocked Metropolis-within-Gibbs, sigmoid MLPs, Bernoulli likelihood "
        f"(summed over the batch), prior N(0, {cfg['prior_var']:g}), chains started from prior draws. Approximate: "
        f"batch {cfg['batch_size']}, σ² = {cfg['approx_var']:g}; exact: full batch, σ² = {cfg['exact_var']:g}. "
        f"{cfg['num_chains']} chains per setting ({cfg['exact_pool_chains']} in the exact deep pool), "
        f"{cfg['num_steps']:,} sweeps; acceptance over sweeps {report['windows']['acceptance'][0]:,}-"
        f"{report['windows']['acceptance'][1]:,}, predictions averaged over sweeps "
        f"{report['windows']['prediction'][0]:,}-{report['windows']['prediction'][1]:,} (paper: 10,001-110,000 and "
        f"100,001-110,000). Seed {report['seed']}; wall time of this invocation {report['wall_seconds']:.1f} s; sampling time "
        f"{sum(r['sampling_seconds'] for r in report['settings'].values()):.1f} s (sampler steps, summed over "
        f"settings and over resumed runs).",
        "",
        "## Paper vs ours",
        "",
        "| quantity | source | statistic | paper | ours | rule | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['quantity']} | {r['source']} | {r['statistic']} | {_fmt(r['paper'], r['unit'])} | "
            f"{_fmt(r['ours'], r['unit'])} | {r['rule']} | **{r['verdict']}** |"
        )
    v = report["verdicts"]
    lines += ["", f"Verdicts: {v['agrees']} agree, {v['differs']} differ, {v['n/a']} n/a.", ""]
    if report["reduced"]:
        lines += [
            "## Reduced run",
            "",
            *[f"- {n}" for n in report["reduced"]],
            "- the verdicts above compare this reduced run with the paper's 110,000-sweep numbers.",
            "",
        ]
    # per-node table
    ad, ed = res["approx-deep"], res["exact-deep"]
    s2 = scen["scenario 2"]["retained"]
    ex = _quantiles(torch.tensor(ed["node_acceptance"], dtype=torch.float64)[s2])
    lines += [
        "## Deep net, acceptance per node (%, over chains)",
        "",
        "| node | layer | approx median | approx mean | approx IQR | exact median | exact mean | exact IQR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ap = ad["node_summary"]
    for k, (layer, _unit) in enumerate(ad["nodes"]):
        lines.append(
            f"| {k + 1} | {layer if layer < 7 else 'output'} | {100 * ap['median'][k]:.2f} | "
            f"{100 * ap['mean'][k]:.2f} | {100 * ap['q25'][k]:.1f}-{100 * ap['q75'][k]:.1f} | "
            f"{100 * ex['median'][k]:.2f} | {100 * ex['mean'][k]:.2f} | "
            f"{100 * ex['q25'][k]:.1f}-{100 * ex['q75'][k]:.1f} |"
        )
    lines += [
        "",
        "## Acceptance per layer (%, mean / median over chains)",
        "",
        "| setting | " + " | ".join(f"layer {j + 1}" for j in range(7)) + " |",
        "|---|" + "---|" * 7,
    ]
    for name, r in res.items():
        s = r["layer_summary"]
        if name == "exact-deep":
            s = _quantiles(torch.tensor(r["layer_acceptance"], dtype=torch.float64)[s2])
        cells = [f"{100 * m:.2f} / {100 * d:.2f}" for m, d in zip(s["mean"], s["median"])]
        cells += ["" for _ in range(7 - len(cells))]
        label = name + (" (scenario 2 chains)" if name == "exact-deep" else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "(last listed layer of each net is its output node)",
        "",
        "## Test accuracy per chain (%)",
        "",
        "| run | chains | per chain | median | mean |",
        "|---|---|---|---|---|",
    ]
    acc_rows = [("approx deep (scenario 1)", ad["accuracy"]), ("approx shallow", res["approx-shallow"]["accuracy"])]
    for key in ("scenario 2", "scenario 3", "scenario 4"):
        s = scen[key]
        bound = "" if s["bound"] is None else f", acceptance >= {100 * s['bound']:g} %"
        run_note = "" if s["chains_run"] is None else f", {s['chains_run']} run"
        acc_rows.append(
            (
                f"exact deep ({key}{bound}{run_note}{'' if s['complete'] else ', incomplete: pool exhausted'})",
                s["accuracy"],
            )
        )
    if "exact-shallow" in res:
        acc_rows.append(("exact shallow (extra, not in the paper)", res["exact-shallow"]["accuracy"]))
    if "approx-deep-defect" in res:
        acc_rows.append(("approx deep, reference code's defect (evidence run)", res["approx-deep-defect"]["accuracy"]))
    if "exact-deep-defect" in res:
        acc_rows.append(("exact deep, reference code's defect (evidence run)", res["exact-deep-defect"]["accuracy"]))
    for label, accs in acc_rows:
        med = _median(accs)
        mean = sum(accs) / len(accs) if accs else None
        lines.append(
            f"| {label} | {len(accs)} | {', '.join(f'{100 * a:.1f}' for a in accs)} | "
            f"{'-' if med is None else f'{100 * med:.2f}'} | {'-' if mean is None else f'{100 * mean:.2f}'} |"
        )
    lines += ["", "## Runtime", "", "| setting | chains | sampling s | s per chain |", "|---|---|---|---|"]
    for name, r in res.items():
        lines.append(f"| {name} | {r['num_chains']} | {r['sampling_seconds']:.1f} | {r['seconds_per_chain']:.2f} |")
    lines += [
        "",
        "Chains of a setting run batched (one vectorised run), so seconds per chain is the batched time "
        "divided by the chains, not a single chain's time.",
        "",
        "Notes: the paper's layer numbers (Fig. 4b) are means over the 10 chains; its node and accuracy numbers "
        "are medians (Figs. 3a, 3b, 7). The exact-NBG node numbers and the exact accuracies belong to the deep net "
        "(Sect. 5.2 runs exact NBG on MLP(2, 2, 2, 2, 2, 2, 2, 1) only); node 13 is its output node. "
        "A chain is retained in scenarios 3 and 4 when every one of its 13 block rates over the acceptance window "
        "reaches the bound (the reference code's check). Scenarios 2-4 are the first qualifying chains of one "
        "pool of exact chains.",
        "",
        "Acceptance rates are not expected to match the paper's closely: the reference sampler has a defect "
        "that structmc's kernel does not (see the evidence section below); the accuracies are the better "
        "comparison.",
        "",
    ]
    lines += _defect_markdown(report)
    lines += _width_markdown(report)
    lines += [f"![{k}]({f})" for k, f in FIGURES.items()] + [""]
    return "\n".join(lines)


def _defect_markdown(report: dict) -> list[str]:
    """The evidence section: acceptance per layer of both samplers and the evidence rows."""
    res = report["settings"]
    if "approx-deep-defect" not in res:
        return _exact_defect_markdown(report)
    mc = res["approx-deep"]["layer_summary"]["mean"]
    md = res["approx-deep-defect"]["layer_summary"]["mean"]
    lines = [
        "## Evidence: where the paper's fall of acceptance with depth comes from",
        "",
        "The reference sampler (eeyore's `Gibbs.draw`) keeps a rejected block's proposed values in its proposal "
        "vector, so each later block of the sweep is proposed jointly with every earlier rejected block and its "
        "target is evaluated off the chain's state. approx-deep is run twice on the same chains (initial points, "
        "batches, random numbers): with structmc's kernel (a rejection leaves no trace) and with "
        "`MetropolisWithinGibbs(..., reference_defect=True)`, that defect. Mean acceptance per layer over chains "
        "(%), acceptance window as above:",
        "",
        "| layer | paper (Fig. 4b) | correct kernel | reference defect | defect - correct |",
        "|---|---|---|---|---|",
    ]
    for j, (c, d) in enumerate(zip(mc, md)):
        paper = f"{100 * PAPER_LAYERS[j]:.2f}" if j < len(PAPER_LAYERS) else "-"
        label = str(j + 1) if j + 1 < len(mc) else f"{j + 1} (output)"
        lines.append(f"| {label} | {paper} | {100 * c:.2f} | {100 * d:.2f} | {100 * (d - c):+.2f} |")
    ev = [r for r in report["rows"] if r.get("evidence") and r.get("evidence_of", "approx-deep") == "approx-deep"]
    lines += _evidence_lines(ev)
    held = [r["verdict"] in ("reproduced", "check (reproduced)") for r in ev]  # a check row's verdict: "check (...)"
    reduced = " (a reduced run: see above)" if report.get("reduced") else ""
    lines += [
        "",
        f"Both rows hold{reduced}: in this run the fall of acceptance with depth comes from the reference code's "
        "defect."
        if all(held)
        else f"{sum(held)} of {len(ev)} evidence rows hold in this run{reduced}: the conclusion that the paper's "
        "fall of acceptance with depth comes from the reference code's defect is "
        + ("supported only in part here." if any(held) else "not supported by this run."),
        "",
    ]
    return lines + _exact_defect_markdown(report)


def _exact_defect_markdown(report: dict) -> list[str]:
    """The evidence section on Fig. 3a: exact NBG's node medians with both kernels."""
    ev = [r for r in report["rows"] if r.get("evidence_of") == "exact-deep"]
    if not ev:
        return []
    nodes = ev[0]["nodes"]
    lines = [
        "## Evidence: exact NBG's node rates (Fig. 3a) with the reference code's defect",
        "",
        "exact-deep-defect runs exact NBG on the deep net from the initial points of scenario 2's chains with "
        "the reference defect (the random numbers differ: the pool runs more chains). Median acceptance per node "
        "over chains (%):",
        "",
        "| node | paper (Fig. 3a) | correct kernel | reference defect |",
        "|---|---|---|---|",
    ]
    for j, (c, d) in enumerate(zip(nodes["correct"], nodes["reference_defect"])):
        paper = nodes["paper"].get(str(j + 1))
        label = str(j + 1) if j + 1 < len(nodes["correct"]) else f"{j + 1} (output)"
        lines.append(f"| {label} | {'-' if paper is None else f'{100 * paper:.2f}'} | {100 * c:.2f} | {100 * d:.2f} |")
    return lines + _evidence_lines(ev) + [""]


def _evidence_lines(rows: list[dict]) -> list[str]:
    """The evidence rows as a list, each with its verdict word only ("check (not reproduced)"):
    its reason would repeat our numbers."""
    lines = ["", "Evidence rows (checks: ours, outside the tally of the paper's claims):", ""]
    for r in rows:
        word = r["verdict"].split(":")[0] + (")" if r["verdict"].startswith("check (") and ":" in r["verdict"] else "")
        lines.append(f"- **{word}**: {r['quantity']}. Ours: {r['ours']}. Rule: {r['rule']}.")
    return lines


def _width_markdown(report: dict) -> list[str]:
    """Observation 2's section: acceptance per layer and width, both block choices."""
    width = report.get("width")
    if not width:
        return []
    lines = [
        "## Observation 2: acceptance against width",
        "",
        f"Approximate Gibbs on {width['architecture']} (batch {width['batch_size']}, σ² = {width['proposal_var']:g}), "
        f"{width['chains']} chains per width from prior draws, {width['steps']:,} sweeps, acceptance over sweeps "
        f"{width['window'][0]:,}-{width['window'][1]:,}; mean over chains (%) ± SE. FNBG: every block 3 parameters "
        "(the output node's w + 1 split in sub-blocks), so only the width changes; NBG: the output node is one "
        "block of w + 1 parameters.",
        "",
        "| width | FNBG blocks | FNBG layer 1 | FNBG output | NBG blocks | NBG layer 1 | NBG output |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(rates, j) -> str:
        t = torch.as_tensor(rates, dtype=torch.float64)[:, j]
        se = float(t.std() / math.sqrt(len(t))) if len(t) > 1 else float("nan")
        return f"{100 * float(t.mean()):.2f} ± {100 * se:.2f}"

    for k, w in enumerate(width["widths"]):
        f, n = width["fnbg"]["layer_acceptance"][k], width["nbg"]["layer_acceptance"][k]
        lines.append(
            f"| {w} | {width['fnbg']['num_blocks'][k]} | {cell(f, 0)} | {cell(f, -1)} | "
            f"{width['nbg']['num_blocks'][k]} | {cell(n, 0)} | {cell(n, -1)} |"
        )
    return lines + [""]


def _plot(out: Path, res: dict, scen: dict, cfg: Config) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - plotting is optional
        return
    blue = {"color": "tab:blue", "linewidth": 2}
    ad, ed, ash = res["approx-deep"], res["exact-deep"], res["approx-shallow"]
    s2 = scen["scenario 2"]["retained"]
    a_node = 100 * torch.tensor(ad["node_acceptance"]).T.numpy()  # [nodes, C]
    e_node = 100 * torch.tensor(ed["node_acceptance"])[s2].T.numpy()
    nodes = a_node.shape[0]

    # Fig. 3a: pairs of boxplots per node (left approx, right exact)
    fig, ax = plt.subplots(figsize=(12, 4.2))
    pos = torch.arange(nodes, dtype=torch.float64) * 3
    b1 = ax.boxplot(list(a_node), positions=(pos - 0.55).tolist(), widths=0.9, patch_artist=True, medianprops=blue)
    b2 = ax.boxplot(list(e_node), positions=(pos + 0.55).tolist(), widths=0.9, patch_artist=True, medianprops=blue)
    for box in b1["boxes"]:
        box.set_facecolor("#f3d37a")
    for box in b2["boxes"]:
        box.set_facecolor("#b9a3d6")
    ax.set_xticks(pos.tolist(), [str(k + 1) for k in range(nodes)])
    ax.set(
        xlabel="node (hidden layers 1-6: nodes 1-12, output: node 13)",
        ylabel="acceptance rate (%)",
        title="Fig. 3a: node acceptance, MLP(2,2,2,2,2,2,2,1); left approximate NBG, right exact NBG",
        ylim=(-2, 102),
    )
    ax.legend([b1["boxes"][0], b2["boxes"][0]], ["approximate (batch 100, σ²=0.04)", "exact (σ²=0.001)"], fontsize=8)
    fig.tight_layout()
    fig.savefig(out / FIGURES["fig3a"], dpi=100)
    plt.close(fig)

    # Fig. 3b: accuracy per chain, four scenarios
    groups = [("approx", ad["accuracy"])]
    for k in ("scenario 2", "scenario 3", "scenario 4"):
        bound = scen[k]["bound"]
        groups.append(("exact" if bound is None else f"exact ≥{100 * bound:g}%", scen[k]["accuracy"]))
    _box_with_points(plt, out / FIGURES["fig3b"], groups, "Fig. 3b: test accuracy per chain, MLP(2,2,2,2,2,2,2,1)")

    # Fig. 3c: runtime (retained chains and discarded ones), from the batched seconds per chain
    fig, ax = plt.subplots(figsize=(6, 4))
    labels, kept, dropped = ["approx"], [ad["seconds_per_chain"] * len(ad["accuracy"])], [0.0]
    for k in ("scenario 2", "scenario 3", "scenario 4"):
        s = scen[k]
        run_ = s["chains_run"] if s["chains_run"] is not None else ed["num_chains"]
        labels.append("exact" if s["bound"] is None else f"exact ≥{100 * s['bound']:g}%")
        kept.append(ed["seconds_per_chain"] * len(s["retained"]))
        dropped.append(ed["seconds_per_chain"] * (run_ - len(s["retained"])))
    ax.bar(labels, kept, color="tab:purple", label="retained chains")
    ax.bar(labels, dropped, bottom=kept, color="tab:gray", label="discarded chains")
    ax.set(ylabel="seconds (batched time / chains x chains)", title="Fig. 3c: runtime")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / FIGURES["fig3c"], dpi=100)
    plt.close(fig)

    # Fig. 4: mean acceptance per node and per layer, approximate NBG on the deep net
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].bar(range(1, nodes + 1), a_node.mean(1), color="tab:purple")
    axes[0].set(xlabel="node", ylabel="mean acceptance rate (%)", title="Fig. 4a: per node", xticks=range(1, nodes + 1))
    layer = 100 * torch.tensor(ad["layer_summary"]["mean"]).numpy()
    axes[1].bar(range(1, len(layer) + 1), layer, color="tab:purple")
    for j, v in enumerate(layer):
        axes[1].text(j + 1, v + 1, f"{v:.1f}", ha="center", fontsize=8)
    if "approx-deep-defect" in res:  # the reference code's defect on the same chains, beside it
        defect = 100 * torch.tensor(res["approx-deep-defect"]["layer_summary"]["mean"]).numpy()
        axes[1].plot(range(1, len(defect) + 1), defect, "o-", color="tab:red", label="reference code's defect")
        axes[1].legend(fontsize=8)
    axes[1].set(xlabel="layer (7 = output)", title="Fig. 4b: per layer", xticks=range(1, len(layer) + 1))
    fig.suptitle(f"approximate NBG, MLP(2,2,2,2,2,2,2,1), mean over {len(ad['accuracy'])} chains")
    fig.tight_layout()
    fig.savefig(out / FIGURES["fig4"], dpi=100)
    plt.close(fig)

    # Fig. 7: accuracy, shallow vs deep, approximate NBG
    _box_with_points(
        plt,
        out / FIGURES["fig7"],
        [("MLP(2,2,1)", ash["accuracy"]), ("MLP(2,2,2,2,2,2,2,1)", ad["accuracy"])],
        "Fig. 7: approximate NBG test accuracy per chain",
    )


def _box_with_points(plt, path: Path, groups, title: str) -> None:
    fig, ax = plt.subplots(figsize=(1.8 * len(groups) + 2.5, 4.2))
    data = [[100 * a for a in accs] if accs else [float("nan")] for _, accs in groups]
    ax.boxplot(data, medianprops={"color": "tab:blue", "linewidth": 2})
    g = torch.Generator().manual_seed(0)
    for i, d in enumerate(data):
        jitter = (torch.rand(len(d), generator=g) - 0.5) * 0.25
        ax.scatter((i + 1 + jitter).tolist(), d, s=12, color="k", alpha=0.6, zorder=3)
    ax.set_xticks(range(1, len(groups) + 1), [f"{n}\n({len(a)} chains)" for n, a in groups])
    ax.set(ylabel="test accuracy (%)", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
