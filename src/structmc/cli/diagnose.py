"""``structmc diagnose RUN_DIR``: summary table and plots for a saved run folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import UsageError


def cmd_diagnose(args: argparse.Namespace) -> int:
    try:
        from ..diagnostics.report import diagnose_run
    except ImportError as err:  # pragma: no cover
        raise UsageError(f"diagnostics are unavailable: {err}") from err
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"no such run folder: {run_dir}")
    if not (run_dir / "run.json").is_file():
        inner = [d for d in (run_dir / "run",) if (d / "run.json").is_file()]
        raise UsageError(
            f"{run_dir} is not a structmc run folder (no run.json)"
            + (
                f"; did you mean {inner[0]}?"
                if inner
                else "; pass the folder a run wrote its draws to (structmc sample --out DIR writes DIR/run)"
            )
        )
    print(diagnose_run(run_dir, args.out))
    return 0
