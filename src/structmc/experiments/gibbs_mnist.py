"""Papamarkou (2023), "Approximate blocked Gibbs sampling for Bayesian neural networks":
minibatch finer-node-blocked Gibbs (FNBG) for MLP(784, 10, 10, 10, 10) on MNIST and
Fashion-MNIST — Table 2 (accuracy by batch size), Table 3 (accuracy by chain length),
Tables 5–6 (acceptance per layer), Fig. 5 (traces) and Fig. 8 (posterior predictive
probabilities of test images).

Setting (paper Sect. 5 and the reference code, ``/work/shared/papers/reference-code-notes.md``):

* model ``structmc.zoo.energy_for("mlp_gibbs")``: sigmoid hidden layers, linear output with a
  softmax (categorical) likelihood, prior N(0, 10) on every parameter; log target = log prior
  + summed log-likelihood of the batch, no N/n rescaling (``scaling="none"``);
* inputs flattened to 784 and standardised by one global pixel mean / std of the training
  set (the test set by the same statistics; the reference code standardises the test set by
  its own, which changes MNIST's numbers by ~0.1 %);
* class-stratified minibatches (``batching="stratified"``) of 600 / 1,800 / 3,000 / 4,200 with
  the reference proposal variances per layer (:data:`PROPOSAL_VARS`);
* blocks: ``Config.blocks = "reference"`` — the reference code's 810 blocks (each first-layer
  node's 785 parameters in chunks of 10, :func:`structmc.partitions.by_finer_nodes`), or
  ``"paper"`` — the paper's text, Sect. 4.4, each first-layer node split into 10 sub-blocks of
  78/79 (:func:`paper_partition`, 130 blocks); node blocks in the later layers in both;
* one chain per (data set, batch size), initial point drawn from the prior with an explicit
  generator; 110,000 sweeps (one sweep = one Metropolis step per block), the first 10,000
  burn-in; acceptance over the post-burn-in sweeps; predictions average the softmax
  probabilities over the last 10,000 sweeps (Table 3: the last 1k / 10k / 20k / 30k).

Presets: ``full`` is the paper's setting (all four batch sizes, 110,000 sweeps, the paper's
130 blocks, ~1 h per chain at 0.03 s a sweep on one CPU thread; ``blocks="reference"`` runs the
reference code's 810, ~5 h); ``quick`` (~3 min) runs MNIST and
FMNIST at batch 3,000 for 2,000 sweeps with the paper's 130 blocks (a fifth of the cost per
sweep, so more sweeps in the same time), windows scaled down; ``tiny`` (seconds) 100 test
images, 200 training images, 12 sweeps, a synthetic stand-in when the files are missing. The
run sets torch to ``num_threads`` (1) intra-op threads and restores it after: a sweep is ~10³
tiny operations, which extra threads slow down on a busy machine.

Draws are kept only inside the longest prediction window, every ``thin``-th sweep, so memory
is bounded; acceptance is recorded per layer and sweep (``record="layer"``). The ``full``
preset writes each chain's run folder under ``out_dir/chains`` with checkpoints and resumes
from them. The paper gives numbers in its text only for batch 3,000 (Table 2: 90.75 % MNIST,
80.89 % FMNIST; Fig. 8's probabilities); Tables 3, 5 and 6 are compared through the
orderings the paper states. Each row's verdict follows the rule in :class:`Config`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import Tensor

from ..zoo import energy_for
from . import resolve_preset
from ._common import (
    ACCURACY_GAP,
    BLOCKS_NOTE,
    DATASET_LABELS,
    PAPER_ACCURACY,
    PROPOSAL_VARS,
    accuracy_comparison,
    accuracy_verdict,
    check_windows,
    load_images,
    make_partition,
    paper_partition,
    pct,
    proposal_var_for,
    reduction_note,
    reductions,
    run_chain,
    standardize,
    write_fnbg_report,
)
from ._common import FNBGConfig as Config
from ._shared import jsonable as _jsonable
from ._shared import pyplot as _pyplot
from ._shared import restores_globals, threads, versions

# -- what the paper publishes ------------------------------------------------------------------
#: Fig. 8: posterior predictive probabilities of four correctly classified test images per set.
PAPER_FIG8 = {
    "mnist": "0: 0.98, 7: 0.97 (confident); 9: 0.35 vs 4: 0.28 and a similar fourth (uncertain)",
    "fashion-mnist": "trousers: 0.99, bag: 0.96 (confident); shirt: 0.33 vs pullover: 0.32 and a similar fourth",
}
CLASS_NAMES = {
    "mnist": [str(i) for i in range(10)],
    "fashion-mnist": ["T-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"],
}
PRESETS = {
    "tiny": Config(
        datasets=("mnist",),
        batch_sizes=(50,),
        num_steps=12,
        burn_in=2,
        windows=(2, 5, 10),
        predict_window=5,
        data="auto",
        num_train=200,
        num_test=100,
        proposal_var={50: PROPOSAL_VARS[600]},
    ),
    # the paper's 130 blocks: a sweep costs ~1/5 of the reference's 810 (0.03 s vs 0.16 s at batch 3,000 on
    # one CPU thread), so ~5x more sweeps fit in the same minutes; the later layers' node blocks, whose tiny
    # proposal variances make them the slow part of the transient, are the same in both
    "quick": Config(blocks="paper", num_steps=2000, burn_in=200, windows=(20, 200, 400, 600), predict_window=200),
    # the paper's protocol: its §4.4 blocks (β₁ = 10, 130 blocks); blocks="reference" gives the
    # reference code's 810
    "full": Config(
        blocks="paper",
        batch_sizes=(600, 1800, 3000, 4200),
        num_steps=110_000,
        burn_in=10_000,
        windows=(1_000, 10_000, 20_000, 30_000),
        predict_window=10_000,
        thin=10,
        rule="tolerance",
        checkpoint_every=1_000,
        resume=True,
    ),
    # issue 24: the paper's length (110,000 sweeps, its 130 blocks, its windows) for the one batch size
    # whose accuracy the paper prints (Table 2: 3,000), both data sets, ~40 min each on one thread;
    # the other three batch sizes (Table 2's ordering) are the cut
    "converged": Config(
        blocks="paper",
        batch_sizes=(3000,),
        num_steps=110_000,
        burn_in=10_000,
        windows=(1_000, 10_000, 20_000, 30_000),
        predict_window=10_000,
        thin=10,
        rule="tolerance",
        checkpoint_every=1_000,
        resume=True,
    ),
}


# ---------------------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# one chain
# ---------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------
# verdicts
# ---------------------------------------------------------------------------------------
def increases(accs: Sequence[float]) -> bool:
    """Table 3 (Sect. 5.7): "predictive accuracy increases (both for MNIST and FMNIST) as chain
    length increases": every longer window strictly more accurate than the shorter one before it
    (no slack: a flat or falling step is not an increase). ``ValueError`` for fewer than two."""
    if len(accs) < 2:
        raise ValueError("needs at least two windows")
    return all(b > a for a, b in zip(accs, accs[1:]))


def batch_order(acc_by_batch: Mapping) -> bool:
    """Table 2 (Sect. 5.6): "predictive accuracy increases as batch size increases. However,
    predictive accuracy decreases when batch size increases from 3000 to 4200": over the batch
    sizes run, accuracy strictly increasing up to 3,000 and every larger batch strictly below
    3,000 (3,000 the most accurate). Keys may be JSON strings. ``ValueError`` without batch
    3,000 and another size."""
    acc = {int(b): float(a) for b, a in acc_by_batch.items()}
    if 3000 not in acc or len(acc) < 2:
        raise ValueError("needs batch 3,000 and another batch size")
    up = [acc[b] for b in sorted(acc) if b <= 3000]
    return all(b > a for a, b in zip(up, up[1:])) and all(a < acc[3000] for b, a in acc.items() if b > 3000)


def _outcome(test, *args) -> str:
    """An old-style row verdict ("agrees" / "differs" / "n/a (...)") from a test above."""
    try:
        return "agrees" if test(*args) else "differs"
    except ValueError as err:
        return f"n/a ({err})"


def length_verdict(accs: list[float]) -> str:
    return _outcome(increases, accs) + " (strictly increasing with window length)"


def acceptance_verdict(rates: list[float], minimum: float) -> str:
    low = min(rates)
    return f"{'agrees' if low >= minimum else 'differs'} (every layer ≥ {100 * minimum:.0f} %: min {100 * low:.1f} %)"


def batch_verdict(acc_by_batch: Mapping[int, float]) -> str:
    """The paper's Table 2 ordering (:func:`batch_order`)."""
    return _outcome(batch_order, acc_by_batch) + " (paper: 600 < 1,800 < 3,000 > 4,200)"


# ---------------------------------------------------------------------------------------
# the experiment
# ---------------------------------------------------------------------------------------


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/gibbs-mnist",
    progress: bool | None = None,
    *,
    seed: int | None = None,
    resume: bool | None = None,
) -> dict:
    """Run the experiment; write ``report.json`` and ``report.md`` (the common format of
    :mod:`structmc.experiments._report`; every number under ``numbers``) and the figures to
    ``out_dir``; return the report. ``seed`` overrides the config's; ``resume`` its
    ``resume`` (chains checkpoint under ``out_dir/chains`` every ``checkpoint_every`` sweeps,
    1,000 when the config has none)."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    if resume is not None:  # keeps the preset's name in the report
        cfg = replace(cfg, resume=bool(resume), checkpoint_every=cfg.checkpoint_every or 1_000)
    with threads(cfg.num_threads):
        return _run(cfg, preset, out_dir, progress)


def _run(cfg: Config, preset: str, out_dir: str | Path, progress: bool | None) -> dict:
    wall0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ws = check_windows(cfg, cfg.windows, cfg.predict_window)
    energy = energy_for("mlp_gibbs", seed=cfg.seed)  # its module's own init is unused: chains start at prior draws
    partition = make_partition(energy.space, cfg)
    sizes = partition.sizes()
    assert partition.layer_names is not None  # both partitions are read off the space's layers
    layer_sizes = {
        name: sorted(set(sizes[partition.layer == k].tolist())) for k, name in enumerate(partition.layer_names)
    }
    data_info, runs, examples = {}, {}, {}
    for d_i, name in enumerate(cfg.datasets):
        data = load_images(name, cfg)
        x_tr, x_te, stats = standardize(data.x_train, data.x_test, cfg.test_stats)
        data_info[name] = {
            "source": data.source,
            "data_dir": data.data_dir,
            "num_train": len(data.y_train),
            "num_test": len(data.y_test),
            **stats,
        }
        for b_i, batch in enumerate(cfg.batch_sizes):
            if batch > len(data.y_train):
                raise ValueError(f"batch size {batch} exceeds the {len(data.y_train)} training images of {name}")
            var, var_from = proposal_var_for(cfg, batch)
            key = f"{name}/b{batch}"
            folder = out / "chains" / f"{name}-b{batch}"
            r = run_chain(
                energy,
                partition,
                var,
                x_tr,
                data.y_train,
                x_te,
                data.y_test,
                cfg=cfg,
                batch_size=batch,
                windows=ws,
                seed=cfg.seed + 1000 * d_i + b_i,
                folder=folder,
                progress=progress,
            )
            probs = r.pop("probs")[cfg.predict_window]
            r.update(
                dataset=name,
                batch_size=batch,
                proposal_var_source=var_from,
                metrics=r["by_window"][cfg.predict_window],
                synthetic=data.source == "synthetic",
            )
            runs[key] = r
            if b_i == _headline_index(cfg):
                examples[name] = _examples(probs, data.y_test, data.x_test, cfg.num_examples)
    report = {
        "experiment": "gibbs-mnist: minibatch FNBG, MLP(784, 10, 10, 10, 10) on MNIST / Fashion-MNIST "
        "(Papamarkou 2023, Tables 2, 3, 5, 6; Figs. 5, 8)",
        "preset": preset,
        "config": _jsonable(asdict(cfg)),
        "seed": cfg.seed,
        "versions": versions(),
        "partition": {
            "blocks": cfg.blocks,
            "kind": partition.kind,
            "num_blocks": partition.num_groups,
            "block_sizes_per_layer": layer_sizes,
        },
        "data": data_info,
        "runs": runs,
        "examples": {k: v["rows"] for k, v in examples.items()},
        "paper": {
            "accuracy_batch3000": {k[0]: v for k, v in PAPER_ACCURACY.items()},
            "fig8": PAPER_FIG8,
            "sweeps": 110_000,
            "burn_in": 10_000,
            "predict_window": 10_000,
        },
        "reduced": reductions(cfg, preset, PRESETS["full"]),
    }
    report["tables"] = _tables(report, cfg)
    comparisons = table_comparisons(report["tables"], cfg)
    report["wall_time_s"] = time.perf_counter() - wall0
    _plots(out, report, examples, cfg)
    return write_fnbg_report(
        out, "gibbs-mnist", report, cfg, preset, comparisons, _markdown(report, cfg), reduction_note(report["reduced"])
    )


# ---------------------------------------------------------------------------------------
# the common report format (structmc.experiments._report)
# ---------------------------------------------------------------------------------------
def comparisons(cfg: Config, tables: Mapping, synthetic: Collection[str] = ()) -> list:
    """The report's rows from the numbers of :func:`_tables`, in its row order (accuracy, chain
    length, acceptance, batch ordering); pure, so a test feeds it numbers and a finished run's
    ``report.json`` (``numbers["tables"]``, JSON's string keys included) is judged again.
    ``synthetic``: data sets whose images are the synthetic stand-in (accuracy not comparable).

    * accuracy at batch 3,000 (Table 2): ``Tolerance(abs=cfg.tolerance)`` (2 pp, below the 9.86 pp
      between the paper's MNIST and FMNIST cells); other batch sizes: no published value;
    * chain length (Table 3): accuracy strictly increasing with the window (:func:`increases`);
    * batch size (Table 2): 600 < 1,800 < 3,000 > 4,200 over the sizes run (:func:`batch_order`);
    * acceptance per layer (Tables 5, 6): every layer ≥ ``min_acceptance``, a check (true by the
      choice of σ² per layer, which the paper tunes for it), not tallied."""
    from ._report import Claim, Comparison

    out = []
    for r in tables["accuracy"]:
        label = f"{DATASET_LABELS.get(r['dataset'], r['dataset'])}, batch {int(r['batch_size']):,}"
        note = f"NLL {r['nll']:.3f}, ECE {r['ece']:.3f}" if "nll" in r and "ece" in r else ""
        out.append(
            accuracy_comparison(
                f"{label}: test accuracy (Table 2)", r["ours"], r["paper"], cfg, r["dataset"] in synthetic, note=note
            )
        )
    for r in tables["chain_length"]:
        label = f"{DATASET_LABELS.get(r['dataset'], r['dataset'])}, batch {int(r['batch_size']):,}"
        out.append(
            Comparison(
                f"{label}: accuracy by window {list(r['windows'])} (Table 3)",
                list(r["ours"]),
                "accuracy increases with chain length",
                Claim("strictly increasing with the window (no slack)", increases),
                unit="accuracy",
            )
        )
    for r in tables["acceptance"]:
        label = f"{DATASET_LABELS.get(r['dataset'], r['dataset'])}, batch {int(r['batch_size']):,}"
        out.append(
            Comparison(
                f"{label}: acceptance per layer (Tables 5, 6)",
                list(r["ours"]),
                "non-vanishing in every layer",
                Claim(f"every layer ≥ {cfg.min_acceptance:g}", lambda v, m=cfg.min_acceptance: min(v) >= m),
                unit="rate",
                note=f"proposal σ² per layer {list(r['proposal_var'])}, chosen for this acceptance (a check, not "
                "tallied: it holds by the choice of σ²)",
                check=True,
            )
        )
    for r in tables["batch_ordering"]:
        label = DATASET_LABELS.get(r["dataset"], r["dataset"])
        by_b = {int(b): a for b, a in r["accuracy_by_batch"].items()}
        out.append(
            Comparison(
                f"{label}: accuracy by batch size {sorted(by_b)} (Table 2)",
                [by_b[b] for b in sorted(by_b)],
                "600 < 1,800 < 3,000 > 4,200: batch 3,000 the most accurate",
                Claim(
                    "strictly increasing up to batch 3,000, every larger batch below 3,000 (no slack)",
                    lambda _v, by_b=by_b: batch_order(by_b),
                ),
                unit="accuracy",
            )
        )
    return out


def table_comparisons(tables: dict, cfg: Config) -> list:
    """:func:`comparisons` of the run's tables, each row's ``verdict`` replaced by its
    Comparison's (the common vocabulary)."""
    synthetic = {r["dataset"] for r in tables["accuracy"] if str(r.get("verdict", "")).startswith("n/a (synthetic")}
    out = comparisons(cfg, tables, synthetic)
    rows = [r for key in ("accuracy", "chain_length", "acceptance", "batch_ordering") for r in tables[key]]
    for r, c in zip(rows, out, strict=True):
        r["verdict"] = c.verdict
    return out


def _headline_index(cfg: Config) -> int:
    return list(cfg.batch_sizes).index(3000) if 3000 in cfg.batch_sizes else 0


def _examples(probs: Tensor, y: Tensor, x: Tensor, k: int) -> dict:
    """Fig. 8: half the most confident, half the least confident correctly classified images."""
    pred = probs.argmax(1)
    correct = torch.nonzero(pred == y).flatten()
    if correct.numel() == 0 or k <= 0:
        return {"rows": [], "images": None}
    conf = probs[correct].max(1).values
    order = correct[conf.argsort(descending=True)]
    n_hi = min((k + 1) // 2, order.numel())
    hi = order[:n_hi].tolist()
    lo = [i for i in reversed(order[n_hi:].tolist())][: k - n_hi]  # least confident first
    picks = hi + lo
    rows = []
    for i in picks:
        top = probs[i].topk(min(3, probs.shape[1]))
        rows.append(
            {
                "index": int(i),
                "label": int(y[i]),
                "predicted": int(pred[i]),
                "top": [[int(c), float(p)] for p, c in zip(top.values, top.indices)],
                "probs": probs[i].tolist(),
            }
        )
    return {"rows": rows, "images": x[picks].reshape(len(picks), 28, 28) if x[0].numel() == 784 else None}


def _tables(report: dict, cfg: Config) -> dict:
    runs = report["runs"]
    acc_rows, len_rows, accept_rows, batch_rows = [], [], [], []
    for _key, r in runs.items():
        name, batch = r["dataset"], r["batch_size"]
        ours = r["metrics"]["accuracy"]
        paper = PAPER_ACCURACY.get((name, batch))
        acc_rows.append(
            {
                "dataset": name,
                "batch_size": batch,
                "paper": paper,
                "ours": ours,
                "nll": r["metrics"]["nll"],
                "ece": r["metrics"]["ece"],
                "verdict": accuracy_verdict(ours, paper, cfg.rule, cfg.tolerance, r["synthetic"]),
            }
        )
        accs = [r["by_window"][w]["accuracy"] for w in sorted(r["by_window"])]
        len_rows.append(
            {
                "dataset": name,
                "batch_size": batch,
                "windows": sorted(r["by_window"]),
                "ours": accs,
                "paper": None,
                "verdict": length_verdict(accs),
            }
        )
        accept_rows.append(
            {
                "dataset": name,
                "batch_size": batch,
                "proposal_var": r["proposal_var"],
                "ours": r["acceptance_per_layer"],
                "paper": None,
                "verdict": acceptance_verdict(r["acceptance_per_layer"], cfg.min_acceptance),
            }
        )
    for name in dict.fromkeys(r["dataset"] for r in runs.values()):
        by_b = {r["batch_size"]: r["metrics"]["accuracy"] for r in runs.values() if r["dataset"] == name}
        batch_rows.append({"dataset": name, "accuracy_by_batch": by_b, "verdict": batch_verdict(by_b)})
    return {"accuracy": acc_rows, "chain_length": len_rows, "acceptance": accept_rows, "batch_ordering": batch_rows}


def _markdown(report: dict, cfg: Config) -> str:
    t = report["tables"]
    p = report["partition"]
    synthetic = any(d["source"] == "synthetic" for d in report["data"].values())
    lines = [
        "# Blocked Gibbs (FNBG) on MNIST / Fashion-MNIST — Papamarkou (2023), Tables 2, 3, 5, 6",
        "",
        f"Preset **{report['preset']}**, seed {report['seed']}, wall time {report['wall_time_s']:.0f} s. "
        f"MLP(784, 10, 10, 10, 10) sigmoid, categorical likelihood, prior N(0, 10), log target = log prior + batch "
        f"log-likelihood (no N/n), class-stratified batches, {cfg.num_chains} chain(s) per setting started from a "
        f"prior draw. Blocks: **{p['blocks']}** ({p['num_blocks']} blocks; sizes per layer "
        f"{p['block_sizes_per_layer']}). {cfg.num_steps:,} sweeps (paper 110,000), acceptance over sweeps "
        f"{cfg.burn_in + 1:,}–{cfg.num_steps:,} (paper 10,001–110,000), accuracy from the last "
        f"{cfg.predict_window:,} sweeps (paper 10,000), thin {cfg.thin}.",
        "",
    ]
    if report["preset"] != "full":
        lines += [
            "**Reduced run.** The paper ran ~110,000 sweeps per chain; this one ran "
            f"{cfg.num_steps:,}, so the chain is still in its initial transient and the accuracies are expected "
            "*lower* than the paper's (Table 3 of the paper: accuracy grows with chain length), and windows that "
            "reach back into the early transient average worse draws, so the chain-length ordering can fail here "
            "although it holds deep into a long chain. The accuracy verdict rule "
            f"is therefore `{cfg.rule}`. Changed from the full setting: "
            + ("; ".join(report["reduced"]) or "nothing")
            + ".",
            "",
        ]
        if cfg.blocks == "paper":
            lines += [BLOCKS_NOTE, ""]
    if synthetic:
        lines += [
            "**Synthetic stand-in data** (the MNIST files were not found): numbers only exercise the pipeline; "
            "no comparison with the paper is meaningful.",
            "",
        ]
    lines += [
        "## Test accuracy (Table 2)",
        "",
        "| data | batch | paper % | ours % | NLL | ECE | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in t["accuracy"]:
        lines.append(
            f"| {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {r['batch_size']} | {pct(r['paper'])} | "
            f"{pct(r['ours'])} | {r['nll']:.3f} | {r['ece']:.3f} | {r['verdict']} |"
        )
    lines += [
        "",
        "The paper's text states only the batch-3,000 cells (90.75 % MNIST, 80.89 % FMNIST) and that "
        "3,000 is the best batch size (accuracy rises from 600 to 3,000 and falls at 4,200).",
        "",
    ]
    if any(len(r["accuracy_by_batch"]) > 1 for r in t["batch_ordering"]):
        lines += ["| data | accuracy by batch size | verdict |", "|---|---|---|"]
        for r in t["batch_ordering"]:
            cells = ", ".join(f"{b}: {pct(a)} %" for b, a in r["accuracy_by_batch"].items())
            lines.append(f"| {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {cells} | {r['verdict']} |")
        lines.append("")
    ws = t["chain_length"][0]["windows"] if t["chain_length"] else []
    lines += [
        "## Accuracy vs chain length (Table 3)",
        "",
        "Accuracy (%) from the last W sweeps. The paper's values are not in our copy of its text; it states that "
        "accuracy increases with the window, with diminishing gains (windows 1k, 10k, 20k, 30k).",
        "",
        "| data | batch | " + " | ".join(f"last {w:,}" for w in ws) + " | verdict |",
        "|---|---|" + "---|" * len(ws) + "---|",
    ]
    for r in t["chain_length"]:
        lines.append(
            f"| {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {r['batch_size']} | "
            + " | ".join(pct(a) for a in r["ours"])
            + f" | {r['verdict']} |"
        )
    lines += [
        "",
        "## Acceptance per layer (Tables 5–6)",
        "",
        "Per-layer acceptance (%) over the post-burn-in sweeps. The paper's values are not in our copy of its "
        "text; it states that with these proposal variances acceptance does not vanish in deeper layers and "
        "drops as the batch grows.",
        "",
        "| data | batch | σ² per layer | layer 1 | layer 2 | layer 3 | output | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in t["acceptance"]:
        lines.append(
            f"| {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {r['batch_size']} | "
            f"{', '.join(f'{v:g}' for v in r['proposal_var'])} | "
            + " | ".join(f"{100 * a:.1f}" for a in r["ours"])
            + f" | {r['verdict']} |"
        )
    lines += [
        "",
        "## Posterior predictive probabilities of test images (Fig. 8)",
        "",
        "Two of the most and two of the least confident correctly classified test images of the headline "
        "chain. Paper (different images): "
        + "; ".join(f"{DATASET_LABELS[k]}: {v}" for k, v in PAPER_FIG8.items())
        + ".",
        "",
        "| data | test index | label | top-3 (class: probability) |",
        "|---|---|---|---|",
    ]
    for name, rows in report["examples"].items():
        cls = CLASS_NAMES.get(name, [str(i) for i in range(10)])
        for e in rows:
            top = ", ".join(f"{cls[c]}: {pr:.2f}" for c, pr in e["top"])
            lines.append(f"| {DATASET_LABELS.get(name, name)} | {e['index']} | {cls[e['label']]} | {top} |")
    lines += ["", "## Cost", "", "| run | blocks | sweeps/s | sampling s | prediction s |", "|---|---|---|---|---|"]
    for key, r in report["runs"].items():
        lines.append(
            f"| {key} | {r['num_blocks']} | {r['sweeps_per_second']:.2f} | {r['seconds']:.1f} | "
            f"{r['seconds_predict']:.1f} |"
        )
    lines += [
        "",
        "Verdict rules (from the config): accuracy at batch 3,000 — |ours − paper| ≤ "
        f"{100 * cfg.tolerance:.1f} pp in every preset (below the {100 * ACCURACY_GAP:.2f} pp between the paper's "
        "MNIST and FMNIST cells; Table 2's other cells and Table 3's are not in our copy of the text, so the "
        "comparisons across batch sizes and windows are strict orderings, not tolerances); a reduced run also "
        f"notes chance < ours ≤ paper + {100 * cfg.tolerance:.1f} pp (this run: `{cfg.rule}`); chain length — "
        "accuracy strictly increasing with the window; batch size — strictly increasing up to 3,000 and "
        f"lower at every larger batch; acceptance — every layer ≥ {100 * cfg.min_acceptance:.0f} % (a check: "
        "σ² is chosen for it).",
        "",
        "![accuracy vs chain length](accuracy_vs_length.png)",
        "",
        "![acceptance](acceptance.png)",
        "",
        "![predictive examples](predictive_examples.png)",
        "",
        "![traces](traces.png)",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------


def _plots(out: Path, report: dict, examples: dict, cfg: Config) -> None:
    plt = _pyplot()
    if plt is None:  # pragma: no cover
        return
    runs = report["runs"]
    # accuracy vs window
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    ax.set_xscale("log")
    all_ws = sorted({w for r in runs.values() for w in r["by_window"]})
    for key, r in runs.items():
        ws = sorted(r["by_window"])
        ax.plot(ws, [100 * r["by_window"][w]["accuracy"] for w in ws], "o-", label=key)
    ax.set_xticks(all_ws, [f"{w:,}" for w in all_ws])
    ax.minorticks_off()
    for (name, b), v in PAPER_ACCURACY.items():
        if name in cfg.datasets:
            ax.axhline(100 * v, ls="--", lw=0.8, color="k")
            ax.text(
                0.01,
                100 * v,
                f"paper {DATASET_LABELS[name]}, batch {b}, last 10,000 of 110,000",
                fontsize=7,
                va="bottom",
                transform=ax.get_yaxis_transform(),
            )
    ax.set(xlabel="last W sweeps", ylabel="test accuracy %", title="accuracy vs chain length")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over a curve
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_length.png", dpi=100)
    plt.close(fig)
    # acceptance per layer
    fig, ax = plt.subplots(figsize=(6, 3.8))
    keys = list(runs)
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        rates = runs[key]["acceptance_per_layer"]
        ax.bar([j + i * width for j in range(len(rates))], [100 * a for a in rates], width, label=key)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(4)], ["layer 1", "layer 2", "layer 3", "output"])
    ax.set(ylabel="acceptance %", title="acceptance per layer (post burn-in)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "acceptance.png", dpi=100)
    plt.close(fig)
    # Fig. 8
    names = [n for n in examples if examples[n]["rows"]]
    k = max((len(examples[n]["rows"]) for n in names), default=0)
    if k:
        fig, axes = plt.subplots(2 * len(names), k, figsize=(2.4 * k, 4.4 * len(names)), squeeze=False)
        for r_i, name in enumerate(names):
            cls = CLASS_NAMES.get(name, [str(i) for i in range(10)])
            ex = examples[name]
            for c in range(k):
                ax_img, ax_bar = axes[2 * r_i, c], axes[2 * r_i + 1, c]
                if c >= len(ex["rows"]):
                    ax_img.axis("off")
                    ax_bar.axis("off")
                    continue
                row = ex["rows"][c]
                if ex["images"] is not None:
                    ax_img.imshow(ex["images"][c].numpy(), cmap="gray")
                ax_img.set_title(f"{DATASET_LABELS.get(name, name)} #{row['index']}: {cls[row['label']]}", fontsize=8)
                ax_img.axis("off")
                ax_bar.bar(range(10), row["probs"], color=["C1" if j == row["label"] else "C0" for j in range(10)])
                ax_bar.set_xticks(range(10), cls, rotation=90, fontsize=6)
                ax_bar.set_ylim(0, 1)
                ax_bar.set_title(f"p̂({cls[row['label']]}) = {row['probs'][row['label']]:.2f}", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "predictive_examples.png", dpi=90)
        plt.close(fig)
    # Fig. 5 traces (the headline runs)
    heads = [k for k, r in runs.items() if r["batch_size"] == cfg.batch_sizes[_headline_index(cfg)]]
    if heads and runs[heads[0]]["trace"]["values"]:
        params = runs[heads[0]]["trace"]["params"]
        fig, axes = plt.subplots(
            len(params) + 1, len(heads), figsize=(4.5 * len(heads), 1.8 * (len(params) + 1)), squeeze=False, sharex=True
        )
        for c, key in enumerate(heads):
            en = runs[key]["energy_trace"]
            axes[0, c].plot(en["steps"][: len(en["values"][0])], en["values"][0], lw=0.6, color="C3")
            axes[0, c].set(yscale="log", title=key)
            axes[0, c].set_ylabel("−log target\n(batch)", fontsize=8)
            tr = runs[key]["trace"]
            vals = torch.tensor(tr["values"])[0]  # chain 0: [S, 4]
            for r_i, pnum in enumerate(tr["params"]):
                ax = axes[r_i + 1, c]
                ax.plot(tr["steps"], vals[:, r_i].numpy(), lw=0.6)
                ax.set_ylabel(f"θ_{pnum}", fontsize=8)
            axes[-1, c].set_xlabel("sweep")
        fig.tight_layout()
        fig.savefig(out / "traces.png", dpi=90)
        plt.close(fig)


__all__ = [
    "Config",
    "PRESETS",
    "run",
    "load_images",
    "paper_partition",
    "make_partition",
    "standardize",
    "run_chain",
    "PAPER_ACCURACY",
    "PAPER_FIG8",
    "PROPOSAL_VARS",
    "DATASET_LABELS",
    "CLASS_NAMES",
]
