"""``structmc reproduce NAME`` (``demo``, and the older spelling ``experiment NAME``): run a
registered experiment's preset; the ``--list`` tables.

The papers' reproductions are a companion package (``structmc_papers``, in the repository's
``papers/``; issue 38), which the library never imports: it is found through the entry point
group :data:`ENTRY_POINT_GROUP`, whose entry names a module holding ``REGISTRY`` (a
:class:`~structmc.registry.Registry` of experiment records), ``downloads_allowed(allowed)`` and
the report tables ``results_table``, ``unreproduced_table`` and ``claims_table``. Without it,
``structmc reproduce`` says how to install it; ``structmc demo`` (:mod:`structmc.demo`) needs
only the library."""

from __future__ import annotations

import argparse
import contextlib
import time
from types import ModuleType

from .common import UsageError, _out_folder

#: the entry point group under which a companion package registers its reproductions
ENTRY_POINT_GROUP = "structmc.reproductions"
#: what to run when no companion is installed
INSTALL_HINT = (
    "the papers' reproductions are a companion package, structmc-papers: install it with "
    "`pip install -e ./papers` from a clone of the structmc repository (or `pip install structmc-papers`)"
)


def reproductions() -> ModuleType:
    """The companion's module named by the first entry point of :data:`ENTRY_POINT_GROUP`
    (loaded on first use); :class:`UsageError` saying how to install it when there is none."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    if not found:
        raise UsageError(f"structmc reproduce: {INSTALL_HINT}")
    return found[0].load()


def cmd_experiment(args: argparse.Namespace, name: str | None = None) -> int:
    """``structmc reproduce NAME`` (and its older spelling ``structmc experiment NAME``)."""
    import inspect

    if getattr(args, "list", False):
        print(reproduce_table() if getattr(args, "command", "") == "reproduce" else experiment_table())
        return 0
    if getattr(args, "table", None):
        print(results_table_of(args.table, claims=bool(getattr(args, "claims", False))))
        return 0
    name = name or args.name
    if name == "demo" and getattr(args, "command", "") == "demo":
        # the library's own demo: no companion needed (the README's first command)
        from .. import demo as module

        exp_name, downloads = "demo", None
    else:
        companion = reproductions()
        if not name:
            raise ValueError(f"name an experiment ({', '.join(companion.REGISTRY.choices())}) or pass --list")
        exp = companion.REGISTRY.get(name)
        module, exp_name, downloads = exp.load(), exp.name, companion.downloads_allowed
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
            raise UsageError(f"experiment {exp_name!r} does not take --{key}")
        kwargs[key] = value
    if kwargs.get("seed") is not None and kwargs["seed"] < 0:
        raise UsageError(f"--seed must be >= 0, got {kwargs['seed']}")
    out = _out_folder(
        args.out or (f"runs/{exp_name}/{preset}" if getattr(args, "command", "") == "reproduce" else f"runs/{name}")
    )
    allowed = bool(getattr(args, "download", False))
    t0 = time.perf_counter()
    with downloads(allowed) if downloads is not None else contextlib.nullcontext():
        report = module.run(preset, out, progress=None if not args.quiet else False, **kwargs)
    if report and report.get("stand_in"):
        print(f"structmc: warning: {exp_name} {preset} ran on stand-in data, not the paper's: {report['stand_in']}")
    print((out / "report.md").read_text())
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0 if report else 1


def results_table_of(folders, claims: bool = False) -> str:
    """The markdown results table (the companion's ``results_table``,
    ``structmc_papers.results_table``) of every ``report.json`` under ``folders``, then the
    claims not reproduced; with ``claims``, every claim of the papers instead, one row each
    (``claims_table``). Refuses a folder with none."""
    import json
    from pathlib import Path

    companion = reproductions()
    reports = []
    for folder in folders:
        found = sorted(Path(folder).rglob("report.json"))
        if not found:
            raise UsageError(f"--table {folder}: no report.json under it")
        reports += [json.loads(p.read_text()) for p in found]
    if claims:
        return str(companion.claims_table(reports))
    failing = companion.unreproduced_table(reports)
    out = str(companion.results_table(reports))
    if failing.count("\n") > 1:  # the header and its rule: a row below them
        out += (
            "\n\nClaims not reproduced (and those reproduced with a smaller margin, tied or not comparable):\n\n"
            + failing
        )
    return out


def reproduce_table() -> str:
    """One line per registered experiment: name, paper, table/figure, what ``quick`` cuts and
    its measured wall time on the 2-core development CPU."""
    rows = [("name", "paper", "figure", "quick on 2 CPU cores", "what quick cuts")]
    for name, exp in reproductions().REGISTRY.items():
        paper = exp.paper.citation if exp.paper else "- (structmc)"
        seconds = "-" if exp.quick_seconds is None else _duration(exp.quick_seconds)
        rows.append((name, paper, exp.figure or "-", seconds, exp.quick_cuts or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def experiment_table() -> str:
    """One line per registered experiment: name, paper, table/figure, presets, data sets."""
    rows = [("name", "paper", "figure", "presets", "data sets")]
    for name, exp in reproductions().REGISTRY.items():
        paper = f"{exp.paper.citation} {exp.paper.title}" if exp.paper else "- (structmc)"
        rows.append((name, paper, exp.figure or "-", ", ".join(exp.presets), ", ".join(exp.datasets) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)
