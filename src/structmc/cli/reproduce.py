"""``structmc reproduce NAME`` (``demo``, and the older spelling ``experiment NAME``): run a
registered experiment's preset; the ``--list`` tables."""

from __future__ import annotations

import argparse
import time

from .common import UsageError, _out_folder


def cmd_experiment(args: argparse.Namespace, name: str | None = None) -> int:
    """``structmc reproduce NAME`` (and its older spelling ``structmc experiment NAME``)."""
    import inspect

    from ..experiments import REGISTRY

    if getattr(args, "list", False):
        print(reproduce_table() if getattr(args, "command", "") == "reproduce" else experiment_table())
        return 0
    if getattr(args, "table", None):
        print(results_table_of(args.table, claims=bool(getattr(args, "claims", False))))
        return 0
    name = name or args.name
    if not name:
        raise ValueError(f"name an experiment ({', '.join(REGISTRY.choices())}) or pass --list")
    exp = REGISTRY.get(name)
    module = exp.load()
    preset = args.preset
    if preset not in module.PRESETS:
        raise UsageError(f"unknown preset {preset!r}; choose from {sorted(module.PRESETS)}")
    options = {
        "device": getattr(args, "device", None),
        "seed": getattr(args, "seed", None),
        "resume": getattr(args, "resume", False) or None,
    }
    device = options["device"] or "cpu"
    if str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA device on this machine")
    accepted = inspect.signature(module.run).parameters
    kwargs = {}
    for key, value in options.items():
        if value is None or (key == "device" and value == "cpu" and key not in accepted):
            continue
        if key not in accepted:
            raise UsageError(f"experiment {exp.name!r} does not take --{key}")
        kwargs[key] = value
    if kwargs.get("seed") is not None and kwargs["seed"] < 0:
        raise UsageError(f"--seed must be >= 0, got {kwargs['seed']}")
    out = _out_folder(
        args.out or (f"runs/{exp.name}/{preset}" if getattr(args, "command", "") == "reproduce" else f"runs/{name}")
    )
    from ..experiments import downloads_allowed

    t0 = time.perf_counter()
    with downloads_allowed(bool(getattr(args, "download", False))):
        report = module.run(preset, out, progress=None if not args.quiet else False, **kwargs)
    if report and report.get("stand_in"):
        print(f"structmc: warning: {exp.name} {preset} ran on stand-in data, not the paper's: {report['stand_in']}")
    print((out / "report.md").read_text())
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0 if report else 1


def results_table_of(folders, claims: bool = False) -> str:
    """The markdown results table (:func:`structmc.experiments._report.results_table`) of every
    ``report.json`` under ``folders``, then the claims not reproduced; with ``claims``, every
    claim of the papers instead, one row each (:func:`~structmc.experiments._report.claims_table`).
    Refuses a folder with none."""
    import json
    from pathlib import Path

    from ..experiments._report import claims_table, results_table, unreproduced_table

    reports = []
    for folder in folders:
        found = sorted(Path(folder).rglob("report.json"))
        if not found:
            raise UsageError(f"--table {folder}: no report.json under it")
        reports += [json.loads(p.read_text()) for p in found]
    if claims:
        return claims_table(reports)
    failing = unreproduced_table(reports)
    out = results_table(reports)
    if failing.count("\n") > 1:  # the header and its rule: a row below them
        out += (
            "\n\nClaims not reproduced (and those reproduced with a smaller margin, tied or not comparable):\n\n"
            + failing
        )
    return out


def reproduce_table() -> str:
    """One line per registered experiment: name, paper, table/figure, what ``quick`` cuts and
    its measured wall time on the 2-core development CPU."""
    from ..experiments import REGISTRY

    rows = [("name", "paper", "figure", "quick on 2 CPU cores", "what quick cuts")]
    for name, exp in REGISTRY.items():
        paper = exp.paper.citation if exp.paper else "- (structmc)"
        seconds = "-" if exp.quick_seconds is None else _duration(exp.quick_seconds)
        rows.append((name, paper, exp.figure or "-", seconds, exp.quick_cuts or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def experiment_table() -> str:
    """One line per registered experiment: name, paper, table/figure, presets, data sets."""
    from ..experiments import REGISTRY

    rows = [("name", "paper", "figure", "presets", "data sets")]
    for name, exp in REGISTRY.items():
        paper = f"{exp.paper.citation} {exp.paper.title}" if exp.paper else "- (structmc)"
        rows.append((name, paper, exp.figure or "-", ", ".join(exp.presets), ", ".join(exp.datasets) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)
