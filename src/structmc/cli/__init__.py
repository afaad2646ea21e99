"""``structmc`` command line: ``demo``, ``sample``, ``tune``, ``reproduce`` (``experiment``), ``diagnose``.

Names come from the library's registries (:mod:`structmc.registry`): ``--sampler`` from
``structmc.samplers.SAMPLERS`` (built by ``sampler_from_config``), ``--model`` from
``structmc.models.MODELS`` (the models sized from a data set), ``--dataset`` from
``structmc.data.DATASETS`` and ``experiment NAME`` from the registry of the papers' companion
package ``structmc_papers`` (found through the entry point group ``structmc.reproductions``;
:mod:`.reproduce`).

This module holds :func:`main` (the argument parser, the dispatch and the error lines); each
command lives in its own module: :mod:`.sample` (its settings in :mod:`.settings`; its
chains as independent tasks, ``--executor``, in :mod:`.many_chains`),
:mod:`.tune`, :mod:`.reproduce` (``demo``, ``experiment``) and :mod:`.diagnose`, with what
they share (:class:`UsageError`, ``--out``, the data set and model) in :mod:`.common`.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..data.files import DataError
from .common import MODEL_FLAGS, SAMPLER_FLAGS, UsageError, _model_energy, _out_folder, _sample_models
from .diagnose import cmd_diagnose
from .reproduce import cmd_experiment, experiment_table, reproduce_table
from .sample import cmd_sample
from .settings import SAMPLE_DEFAULTS, _refuse_unused, sampler_config
from .tune import _budget, _log10_range, cmd_tune

__all__ = [
    "DEBUG_ENV",
    "MODEL_FLAGS",
    "SAMPLER_FLAGS",
    "SAMPLE_DEFAULTS",
    "USER_ERRORS",
    "UsageError",
    "cmd_diagnose",
    "cmd_experiment",
    "cmd_sample",
    "cmd_tune",
    "experiment_table",
    "main",
    "reproduce_table",
    "sampler_config",
    # private helpers the tests reach through structmc.cli (they lived in the one-module cli.py)
    "_budget",
    "_log10_range",
    "_model_energy",
    "_out_folder",
    "_refuse_unused",
]

DEBUG_ENV = "STRUCTMC_DEBUG"
#: errors the library raises for bad user input: printed as one line, exit status 2 (``--debug``
#: or ``$STRUCTMC_DEBUG=1`` shows the traceback instead); any other exception is a bug and
#: propagates with its traceback
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, ImportError, DataError)


def _widths(text: str) -> list[int]:
    """``--hidden 50,50`` -> [50, 50]; every width a positive integer."""
    try:
        widths = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer widths, e.g. 50,50, got {text!r}") from None
    if min(widths) < 1:
        raise argparse.ArgumentTypeError(f"layer widths must be >= 1, got {text!r}")
    return widths


def _dataset_names(source: str) -> list[str]:
    from ..data import DATASETS

    return [name for name, spec in DATASETS.items() if spec.source == source]


def main(argv: list[str] | None = None) -> int:
    from ..models.mlp import ACTIVATIONS
    from ..samplers import SAMPLERS

    ap = argparse.ArgumentParser(prog="structmc", description="Scalable approximate MCMC for Bayesian neural networks.")
    ap.add_argument("--debug", action="store_true", help=f"show the full traceback of an error (also ${DEBUG_ENV}=1)")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="Bayesian linear regression with exact posterior, five samplers (~1 min)")
    p.add_argument("--preset", default="quick", help="tiny | quick (default) | full")
    p.add_argument("--out", help="run folder (default runs/demo)")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser(
        "reproduce",
        help="reproduce a table or figure of the papers, side by side with the published numbers (--list shows them)",
    )
    p.add_argument("name", nargs="?")
    p.add_argument(
        "--list", action="store_true", help="the experiments: paper, table/figure, what quick cuts, its time"
    )
    p.add_argument(
        "--preset",
        default="quick",
        help="tiny | quick (default) | converged (where it exists: the paper's length for the rows that carry "
        "its claim) | full (the paper's settings)",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--out", help="run folder (default runs/NAME/PRESET)")
    p.add_argument(
        "--table",
        nargs="+",
        metavar="FOLDER",
        help="print the markdown results table (the tally of the papers' claims) of every report.json under FOLDER",
    )
    p.add_argument(
        "--claims", action="store_true", help="with --table: every claim of the papers, one row each (preset, time)"
    )
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument(
        "--download",
        action="store_true",
        help="download a missing data file (checked against its registered checksum) where the experiment can; "
        "without it, every preset but tiny refuses to run without the paper's files",
    )
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("experiment", help="the older spelling of `reproduce` (--list shows presets and data sets)")
    p.add_argument("name", nargs="?")
    p.add_argument("--list", action="store_true", help="list the experiments: paper, figure, presets, data sets")
    p.add_argument("--preset", default="quick")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    _D = SAMPLE_DEFAULTS  # the defaults --help shows
    p = sub.add_parser("sample", help="run a sampler on a built-in model / data set")
    p.add_argument(
        "--config",
        help="TOML, YAML or JSON file with any of the flags below, named as the flags "
        "(steps = 1500, burn-in or burn_in = 500; flags win)",
    )
    p.add_argument(
        "--dataset",
        help=f"scikit-learn: {', '.join(_dataset_names('scikit-learn'))}; paper sets: "
        f"{', '.join(_dataset_names('files'))} (see structmc.data.DATASETS)",
    )
    p.add_argument(
        "--data-dir", dest="data_dir", help="local folder with the data files (else $STRUCTMC_DATA, cache, download)"
    )
    p.add_argument("--model", choices=_sample_models())
    p.add_argument("--hidden", type=_widths, help="MLP widths, e.g. 50,50")
    p.add_argument("--activation", choices=sorted(ACTIVATIONS))
    p.add_argument("--sampler", choices=SAMPLERS.names())
    p.add_argument("--lr", type=float, help=f"step size (default {_D['lr']:g})")
    p.add_argument("--friction", type=float)
    p.add_argument("--a", type=float, help="SGNHT diffusion parameter")
    p.add_argument("--alpha", type=float, help="pSGLD RMS decay")
    p.add_argument("--num-leapfrog", dest="num_leapfrog", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--gradient", choices=["minibatch", "cv"])
    p.add_argument("--prior-std", dest="prior_std", type=float)
    p.add_argument("--noise-std", dest="noise_std", type=float)
    p.add_argument(
        "--steps", dest="num_steps", type=int, help=f"iterations, burn-in included (default {_D['num_steps']})"
    )
    p.add_argument(
        "--burn-in", dest="burn_in", type=int, help=f"iterations dropped at the start (default {_D['burn_in']})"
    )
    p.add_argument("--thin", type=int, help=f"keep every THIN-th draw after burn-in (default {_D['thin']})")
    p.add_argument("--chains", dest="num_chains", type=int, help=f"chains (default {_D['num_chains']})")
    p.add_argument(
        "--executor",
        help="run the --chains as independent tasks (structmc.executors.run_chains) on: process, dask, "
        "ray, a Dask scheduler tcp://host:port or a Ray cluster ray://host:port; each chain writes "
        "OUT/chains/chain_I, merged into OUT/run. serial (or none, the default): one batched run",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="under torchrun: one set of chains computed by all the processes, each on its share of "
        "every minibatch (sample(distributed=True)); rank 0 writes --out and the report",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="compile each iteration with torch.compile (sample(execution='compiled'); a CUDA graph on a GPU): "
        "the same random draws, the same chain to float rounding; what cannot be compiled runs eagerly "
        "with a warning saying why",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="with --executor process, dask or ray: the processes (CPUs) of the new local pool or "
        "cluster (default: one per chain, at most one per CPU)",
    )
    p.add_argument(
        "--batch-size",
        dest="batch_size",
        help="rows per minibatch, or a fraction of the training set in (0, 1] (0.01, as structmc tune "
        f"reports it; 1.0: the full data) (default {_D['batch_size']})",
    )
    p.add_argument("--seed", type=int, help=f"seeds the data split and the chains (default {_D['seed']})")
    p.add_argument(
        "--threads",
        type=int,
        help="torch's intra-op CPU threads for this run (torch.set_num_threads; default: torch's, one per "
        "core: on a loaded machine --threads 1 can be much faster)",
    )
    p.add_argument("--checkpoint-every", dest="checkpoint_every", type=int)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the previous run in --out (its files are removed "
        "first; a folder holding anything else is refused)",
    )
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser(
        "tune", help="tune a sampler's step size, batch size, ... by MAMBA, grid search or the heuristic"
    )
    p.add_argument("--method", choices=["mamba", "grid", "heuristic"], default="mamba")
    p.add_argument("--budget", default="10s", help="total budget T: 30s (sampling seconds), 3000it or 1e5grad")
    p.add_argument("--dataset", help="as for structmc sample")
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("--model", choices=_sample_models())
    p.add_argument("--hidden", type=_widths)
    p.add_argument("--activation", choices=sorted(ACTIVATIONS))
    p.add_argument("--prior-std", dest="prior_std", type=float)
    p.add_argument("--noise-std", dest="noise_std", type=float)
    p.add_argument("--sampler", choices=SAMPLERS.names())
    p.add_argument("--lr", help="step sizes in our convention, comma-separated")
    p.add_argument(
        "--log10-h",
        dest="log10_h",
        help="the paper's step sizes h as LOW:HIGH:STEP in log10 (default -7:-3:0.5; converted with lr_from_paper)",
    )
    p.add_argument(
        "--batch-size", dest="batch_size", help="comma-separated: fractions (0.1) or counts (128); default 1.0,0.1,0.01"
    )
    p.add_argument("--num-leapfrog", dest="num_leapfrog", help="comma-separated")
    p.add_argument("--friction", help="comma-separated")
    p.add_argument("--a", help="SGNHT a, comma-separated")
    p.add_argument("--gradient", help="minibatch, cv or minibatch,cv")
    p.add_argument("--metric", choices=["ksd", "fssd"], default="ksd")
    p.add_argument("--eta", type=int, default=3)
    p.add_argument("--executor", help="serial (default), process, dask, ray, or a Dask scheduler tcp://host:port")
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--seed", type=int)
    p.add_argument("--no-map", dest="no_map", action="store_true", help="start from the model's initial weights")
    p.add_argument(
        "--map-steps",
        dest="map_steps",
        type=int,
        default=2000,
        help="Adam steps of the MAP fit that starts every arm (default 2000)",
    )
    p.add_argument(
        "--map-share",
        dest="map_share",
        type=float,
        default=0.2,
        help="with a seconds --budget: the MAP fit's share of it (default 0.2; the tuning gets the rest)",
    )
    p.add_argument("--thin", type=int, default=10, help="keep every THIN-th draw of an arm (default 10)")
    p.add_argument(
        "--min-samples",
        dest="min_samples",
        type=int,
        default=10,
        help="draws each arm is scored on at least (default 10); the budget must keep them at --thin",
    )
    p.add_argument("--resume", action="store_true", help="continue an interrupted tuning run in --out")
    p.add_argument("--overwrite", action="store_true", help="replace the tuning run in --out (else it is refused)")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("diagnose", help="summary table and plots for a saved run folder")
    p.add_argument("run_dir")
    p.add_argument("--out", help="where to write plots (default: RUN_DIR/diagnostics)")

    args = ap.parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    try:
        if args.command == "demo":
            return cmd_experiment(args, "demo")
        if args.command in ("experiment", "reproduce"):
            return cmd_experiment(args)
        if args.command == "sample":
            return cmd_sample(args)
        if args.command == "tune":
            return cmd_tune(args)
        return cmd_diagnose(args)
    except UsageError as err:  # exits with status 2, like argparse's usage errors
        _error(str(err))
        if debug:
            raise RuntimeError(str(err)) from err
        raise
    except USER_ERRORS as err:  # configuration errors: one clear line, no traceback
        if debug:
            raise
        _error(_user_message(err))
        return 2


def _error(message: str) -> None:
    print(f"structmc: error: {message}", file=sys.stderr)


def _user_message(err: BaseException) -> str:
    """One line for an error the user can fix; download failures say which flag to pass."""
    from ..data.files import ENV_DATA, DataError, DownloadError

    text = str(err).strip()
    if isinstance(err, DownloadError):
        first = text.splitlines()[0].rstrip(":") if text else "could not download a data file"
        return (
            f"{first} (offline?); put the file in a folder and pass --data-dir DIR, or set ${ENV_DATA}=DIR "
            f"(run with --debug for the details)"
        )
    if isinstance(err, DataError) and "data_dir=" in text:
        text = text.replace("data_dir=...", "--data-dir DIR").replace("data_dir=<dir>", "--data-dir <dir>")
    if isinstance(err, DataError) and "download=True" in text:
        text = text.replace("pass download=True", "pass download=True (structmc reproduce --download)")
    if isinstance(err, (ModuleNotFoundError, ImportError)) and getattr(err, "name", None):
        text = f"{text} (an optional dependency is missing: pip install {err.name})"
    return " ".join(text.split()) or type(err).__name__
