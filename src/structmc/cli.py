"""``structmc`` command line: ``demo``, ``sample``, ``tune``, ``reproduce`` (``experiment``), ``diagnose``.

Names come from the library's registries (:mod:`structmc.registry`): ``--sampler`` from
``structmc.samplers.SAMPLERS`` (built by ``sampler_from_config``), ``--model`` from
``structmc.models.MODELS`` (the models sized from a data set), ``--dataset`` from
``structmc.data.DATASETS`` and ``experiment NAME`` from ``structmc.experiments.REGISTRY``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .data.files import DataError

DEBUG_ENV = "STRUCTMC_DEBUG"
#: errors the library raises for bad user input: printed as one line, exit status 2 (``--debug``
#: or ``$STRUCTMC_DEBUG=1`` shows the traceback instead); any other exception is a bug and
#: propagates with its traceback
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, ImportError, DataError)

SAMPLE_DEFAULTS = {
    "dataset": "breast_cancer", "model": "linear", "hidden": [50], "activation": "relu",
    "sampler": "sgld", "lr": 1e-4, "friction": 0.05, "a": 0.05, "alpha": 0.99, "num_leapfrog": 1,
    "temperature": 1.0, "schedule": None, "gradient": "minibatch", "prior_std": 1.0, "noise_std": None,
    "num_steps": 5000, "burn_in": 1000, "thin": 5, "num_chains": 2, "batch_size": 32, "seed": 0,
    "checkpoint_every": None, "data_dir": None,
}


class UsageError(SystemExit):
    """A mistake in the command line or a config file: exits with status 2 (argparse's code
    for usage errors) after :func:`main` prints ``structmc: error: <message>`` on stderr.
    A ``SystemExit`` so that it ends the program like argparse's own errors; ``str()`` is
    the message."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _load_config(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file not found: {path}" if not p.exists() else f"config {path} is not a file")
    if p.suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise UsageError(f"config must be .toml, .yaml/.yml or .json, got {path}")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read config {path}: {err}") from err
    if p.suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib
        parse, errors = tomllib.loads, (tomllib.TOMLDecodeError,)
    elif p.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:
            raise UsageError("YAML configs need pyyaml: pip install 'structmc[yaml]'") from err
        parse, errors = (lambda t: yaml.safe_load(t) or {}), (yaml.YAMLError,)
    else:
        parse, errors = json.loads, (json.JSONDecodeError,)
    try:
        cfg = parse(text)
    except errors as err:
        reason = " ".join(str(err).split())  # parsers' messages span lines
        raise UsageError(f"cannot parse config {path}: {reason}") from err
    if not isinstance(cfg, dict):
        raise UsageError(f"config {path} must hold a table of settings (key = value), got a {type(cfg).__name__}")
    return cfg


# the type each sample setting takes (in config files; the flags are typed by argparse)
_FLOAT_KEYS = ("lr", "friction", "a", "alpha", "temperature", "prior_std", "noise_std")
_INT_KEYS = {"num_leapfrog": 1, "num_steps": 1, "burn_in": 0, "thin": 1, "num_chains": 1,
             "seed": 0, "checkpoint_every": 1}  # key -> minimum (batch_size: rows or a fraction, see _batch_value)
_STR_KEYS = ("dataset", "model", "activation", "sampler", "gradient", "data_dir")
_OPTIONAL_KEYS = ("schedule", "noise_std", "checkpoint_every", "data_dir")
_MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer
_FLAGS = "the command line"
_FLAG_NAMES = {"num_steps": "--steps", "num_chains": "--chains"}  # where the flag is not --key-with-dashes


def _flag(key: str) -> str:
    """The flag of setting ``key``: ``burn_in`` -> ``--burn-in``, ``num_steps`` -> ``--steps``."""
    return _FLAG_NAMES.get(key, "--" + key.replace("_", "-"))


def _config_keys(cfg: dict, path: str) -> tuple[dict, dict]:
    """A config file's keys as settings: the flags' names (``steps``, ``burn-in``,
    ``batch-size``), with hyphens or underscores (``burn_in``), and the settings' own names
    (``num_steps``, ``num_chains``) all work. Returns ``(settings, {setting: key as written})``;
    an unknown key, or two keys for one setting, is a :class:`UsageError`."""
    by_name = {}
    for key in SAMPLE_DEFAULTS:
        by_name[key] = key
        by_name[_flag(key)[2:].replace("-", "_")] = key  # steps -> num_steps
    out, written, unknown = {}, {}, []
    for key, value in cfg.items():
        setting = by_name.get(str(key).replace("-", "_"))
        if setting is None:
            unknown.append(key)
        elif setting in out:
            raise UsageError(f"{path} sets {setting} twice, as {written[setting]!r} and {key!r}: keep one")
        else:
            out[setting], written[setting] = value, key
    if unknown:
        raise UsageError(f"unknown keys in {path}: {sorted(map(str, unknown))}; allowed: the flags' names "
                         f"({', '.join(sorted(_flag(k)[2:] for k in SAMPLE_DEFAULTS))}), with - or _")
    return out, written


def _batch_value(value, where: str):
    """``--batch-size``: a number of rows (an integer >= 1) or a fraction of the training set in
    (0, 1] (a float, as ``structmc tune`` prints it: ``0.01``; ``1.0`` is the full data)."""
    what = f"{where} must be a number of rows (e.g. 32) or a fraction of the training set in (0, 1] (e.g. 0.01)"
    num = value
    if isinstance(value, str):
        text = value.strip()
        try:
            num = int(text) if text.lstrip("+").isdigit() else float(text)
        except ValueError:
            raise UsageError(f"{what}, got {value!r}") from None
    if isinstance(num, bool) or not isinstance(num, (int, float)):
        raise UsageError(f"{what}, got {_type_name(value)}")
    if isinstance(num, float):
        if 0.0 < num <= 1.0:
            return num
        if num > 1 and num.is_integer():  # TOML's 1e3
            return int(num)
        raise UsageError(f"{what}, got {value!r}")
    if num < 1:
        raise UsageError(f"{what}, got {value!r}")
    return int(num)


def _type_name(value) -> str:
    return f"{value!r} (a string)" if isinstance(value, str) else f"{value!r} ({type(value).__name__})"


def _check_settings(s: dict, source: str, written: dict | None = None) -> dict:
    """Settings of the expected types and ranges, else a :class:`UsageError` naming the key, the
    expected type and where the value came from (``source``: the config file or the flags;
    ``written``: the config's spelling of each key). Numbers written as strings that parse as
    numbers are accepted (YAML reads ``1e-4`` as a string); integral floats (TOML's ``5e3``)
    are accepted for integer keys."""
    out = dict(s)
    written = written or {}
    for key, value in s.items():
        where = f"{written.get(key, key)} (in {source})" if source != _FLAGS else _flag(key)
        if value is None and key in _OPTIONAL_KEYS:
            continue
        if key in _FLOAT_KEYS:
            num = value
            if isinstance(value, str):
                try:
                    num = float(value)
                except ValueError:
                    raise UsageError(f"{where} must be a number, got {value!r}") from None
            if isinstance(num, bool) or not isinstance(num, (int, float)):
                raise UsageError(f"{where} must be a number, got {_type_name(value)}")
            out[key] = float(num)
        elif key in _INT_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{where} must be an integer, got {_type_name(value)}")
            if isinstance(value, float) and not (value == value and abs(value) != float("inf") and value == int(value)):
                raise UsageError(f"{where} must be an integer, got {value}")
            value = out[key] = int(value)
            if value < _INT_KEYS[key]:
                raise UsageError(f"{where} must be an integer >= {_INT_KEYS[key]}, got {value}")
            if key == "seed" and value > _MAX_SEED:
                raise UsageError(f"{where} must be at most 2**63 - 1, got {value}")
        elif key == "batch_size":
            out[key] = _batch_value(value, where)
        elif key in _STR_KEYS:
            if not isinstance(value, str):
                raise UsageError(f"{where} must be a string, got {_type_name(value)}")
        elif key == "hidden":
            widths = [value] if isinstance(value, int) and not isinstance(value, bool) else value
            if not isinstance(widths, (list, tuple)) or not widths or \
                    any(isinstance(w, bool) or not isinstance(w, int) for w in widths):
                raise UsageError(f"{where} must be a list of layer widths (integers), e.g. [50, 50], got {value!r}")
            if min(widths) < 1:
                raise UsageError(f"{where}: layer widths must be >= 1, got {list(widths)}")
            out[key] = list(widths)
        elif key == "schedule":
            if not isinstance(value, dict):
                raise UsageError(f"{where} must be a table such as {{kind = \"step_decay\", every = 2000}}, "
                                 f"got {_type_name(value)}")
    return out


def _sample_settings(args: argparse.Namespace, explicit: dict | None = None) -> dict:
    """The sample settings: defaults, then the config file, then the flags. ``explicit``
    (filled in when given) maps each setting the user gave to where it came from: the flag
    (``--friction``; argparse's defaults are ``None``, so an unset flag is never taken for a
    set one) or the config key (``friction (in run.toml)``)."""
    settings = dict(SAMPLE_DEFAULTS)
    explicit = {} if explicit is None else explicit
    if args.config:
        cfg, written = _config_keys(_load_config(args.config), args.config)
        settings.update(_check_settings(cfg, args.config, written))
        explicit.update({key: f"{written[key]} (in {args.config})" for key, value in cfg.items() if value is not None})
    flags = {key: getattr(args, key) for key in SAMPLE_DEFAULTS if getattr(args, key, None) is not None}
    settings.update(_check_settings(flags, _FLAGS))
    explicit.update({key: _flag(key) for key in flags})
    return settings


def _check_lengths(s: dict, explicit: dict) -> None:
    """``--steps``, ``--burn-in`` and ``--thin`` must keep a draw: refused before any compute,
    naming the flags (or config keys, or the defaults) they came from."""
    def name(key):
        return f"{explicit[key]} = {s[key]}" if key in explicit else f"{_flag(key)} = {s[key]} (the default)"

    steps, burn_in, thin = s["num_steps"], s["burn_in"], s["thin"]
    if burn_in >= steps:
        raise UsageError(f"{name('burn_in')} must be smaller than {name('num_steps')}: pass a smaller --burn-in "
                         f"(e.g. --burn-in {steps // 5}) or more --steps")
    if (steps - burn_in) // thin < 1:
        raise UsageError(f"no draw would be kept with {name('num_steps')}, {name('burn_in')} and {name('thin')}: "
                         f"(steps - burn-in) // thin = 0; pass a smaller --thin or more --steps")


def _refuse_unused(s: dict, explicit: dict) -> None:
    """A sampler or model setting the chosen sampler / model does not take would be dropped
    silently (``--friction`` with ``--sampler sgld``, ``--hidden`` with ``--model linear``):
    refuse it, naming the flag (or config key) and what takes it."""
    from .samplers import SAMPLERS, sampler_keys

    accepted = set(sampler_keys(s["sampler"]))
    for key in SAMPLER_FLAGS:
        if key in explicit and key not in accepted:
            takers = [n for n in SAMPLERS.names() if key in sampler_keys(n)]
            raise UsageError(f"{explicit[key]} is not used by --sampler {s['sampler']} (it takes "
                             f"{', '.join(k for k in sampler_keys(s['sampler']) if k in SAMPLER_FLAGS or k == 'lr')}): "
                             f"drop it, or choose a sampler that takes it ({', '.join(takers)})")
    taken = _model_keys(s["model"])
    for key in MODEL_FLAGS:
        if key in explicit and key not in taken:
            takers = [n for n in _sample_models() if key in _model_keys(n)]
            raise UsageError(f"{explicit[key]} is not used by --model {s['model']}: drop it, or choose a model that "
                             f"takes it ({', '.join(takers)})")


def _model_keys(name: str) -> set[str]:
    """The ``MODEL_FLAGS`` that model ``name``'s builder takes."""
    import inspect

    from .models import MODELS

    params = inspect.signature(MODELS.get(name).build).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return set(MODEL_FLAGS)
    return {k for k in MODEL_FLAGS if k in params}


SAMPLER_FLAGS = ("friction", "a", "alpha", "num_leapfrog", "temperature")  # each goes to the samplers that take it
MODEL_FLAGS = ("hidden", "activation")


def sampler_config(s: dict) -> dict:
    """The sampler settings as one :func:`structmc.samplers.sampler_from_config` dict: name,
    ``lr`` (a number, or the ``schedule`` table with ``lr`` from ``--lr`` unless it gives its
    own) and those of the hyperparameter flags (``SAMPLER_FLAGS``) the sampler accepts."""
    import dataclasses

    from .samplers import sampler_keys
    from .schedules import SCHEDULES

    lr = s["lr"]
    if s["schedule"]:  # e.g. {kind = "step_decay", every = 2000}
        sched = dict(s["schedule"])
        kind = sched.get("kind", "constant")
        cls = SCHEDULES.get(kind) or {c.__name__: c for c in SCHEDULES.values()}.get(kind)
        if cls is not None and "lr" in {f.name for f in dataclasses.fields(cls)}:
            sched.setdefault("lr", lr)
        lr = sched
    accepted = set(sampler_keys(s["sampler"]))
    return {"name": s["sampler"], "lr": lr, **{k: s[k] for k in SAMPLER_FLAGS if k in accepted}}


def _model_energy(s: dict, data):
    """The ``--model`` of :data:`structmc.models.MODELS` sized from ``data``, as an energy with
    the likelihood of the data's task, ``--prior-std`` and ``--noise-std`` (Gaussian: 0.7
    unless given)."""
    import inspect

    import torch

    from .models import MODELS
    from .models.catalogue import likelihood_for_task
    from .zoo import energy_for

    spec = MODELS.get(s["model"])
    if spec.from_data is None:
        raise ValueError(f"model {s['model']!r} is not sized from a data set; structmc sample takes "
                         f"{', '.join(_sample_models())}")
    params = inspect.signature(spec.build).parameters
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: s[k] for k in MODEL_FLAGS if k in params or open_kw}
    likelihood = spec.likelihood or likelihood_for_task(data.task)
    if s["noise_std"] is not None and likelihood != "gaussian":
        raise UsageError(f"--noise-std (noise_std) is the observation noise of a regression model, but "
                         f"{s['dataset']!r} is a {data.task} data set ({likelihood} likelihood, which has no noise "
                         f"scale): drop it")
    noise_std = s["noise_std"] if s["noise_std"] is not None else (0.7 if likelihood == "gaussian" else None)
    # --seed draws the initial weights (as torch.manual_seed(seed) just before building would)
    # and then seeds the global random state for everything that follows.
    energy = energy_for(s["model"], data=data, likelihood=likelihood, prior_std=s["prior_std"],
                        noise_std=noise_std, seed=s["seed"], **kwargs)
    torch.manual_seed(s["seed"])
    return energy


def _sample_models() -> list[str]:
    from .models import MODELS

    return [name for name, spec in MODELS.items() if spec.from_data is not None]


def cmd_sample(args: argparse.Namespace) -> int:
    from . import ControlVariate, find_map, predictive, sample
    from .diagnostics import classification_metrics, regression_metrics
    from .samplers import sampler_from_config

    explicit: dict = {}
    s = _sample_settings(args, explicit)
    if s["gradient"] not in ("minibatch", "cv", "control_variate"):
        raise UsageError(f"unknown gradient {s['gradient']!r}; choose minibatch or cv")
    _refuse_unused(s, explicit)
    _check_lengths(s, explicit)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite contradict each other: choose one")
    out = _out_folder(args.out or f"runs/sample-{time.strftime('%Y%m%d-%H%M%S')}", "run")
    from .storage import RunFolder

    if args.resume and RunFolder(out / "run").checkpoint_file() is None:
        run_dir = out / "run"
        if _holds_run(run_dir):
            raise UsageError(f"--resume: nothing to resume in {run_dir}: the run there stopped before its first "
                             f"checkpoint (no checkpoint); pass --overwrite instead of --resume to start it again "
                             f"(--checkpoint-every N writes checkpoints sooner)")
        raise UsageError(f"--resume: nothing to resume in {out / 'run'} (no checkpoint); "
                         + ("pass the --out folder of the run to continue" if args.out else
                            "pass --out with the folder of the run to continue") + ", or drop --resume")
    if not args.resume and not args.overwrite and RunFolder(out / "run").checkpoint_file() is None and \
            _holds_run(out / "run"):
        raise UsageError(f"--out {out} holds a run that stopped before its first checkpoint (in {out / 'run'}, no "
                         f"checkpoint to resume from): pass --overwrite to replace it, or another --out")
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    sampler = sampler_from_config(sampler_config(s))
    train = (data.x_train, data.y_train)
    from .tuning.arms import batch_rows

    batch_size = batch_rows(s["batch_size"], len(data.x_train))  # a fraction of N -> rows, as structmc tune
    init = energy.initial_position()
    gradient = "minibatch"
    if s["gradient"] in ("cv", "control_variate"):
        init = find_map(energy, init, data=train, batch_size=min(len(data.x_train), 128), num_steps=2000)
        gradient = ControlVariate(init)
    t0 = time.perf_counter()
    try:
        chain = sample(energy, init, sampler, s["num_steps"], data=train, batch_size=batch_size,
                       burn_in=s["burn_in"], thin=s["thin"], seed=s["seed"], num_chains=s["num_chains"],
                       gradient=gradient, out_dir=out / "run", checkpoint_every=s["checkpoint_every"],
                       resume=args.resume, overwrite=args.overwrite, progress=None if not args.quiet else False)
    except ValueError as err:  # sample()'s messages name its keyword arguments: name the flags
        text = _flag_words(str(err))
        if text == str(err):
            raise
        try:
            new = type(err)(text)
        except Exception:  # noqa: BLE001  (an exception class with another signature)
            new = ValueError(text)
        raise new from err
    seconds = time.perf_counter() - t0
    pred = predictive(energy, chain, data.x_test)
    metrics = {"seconds": seconds, "num_draws": chain.num_draws * chain.num_chains}
    if data.task == "regression":
        reg = regression_metrics(pred["mean"].double(), pred["var"].double(), data.y_test.double())
        metrics.update(test_rmse=reg["rmse"] * _y_scale(data), test_nll=reg["nll"])
    else:
        cls = classification_metrics(pred["probs"].double(), data.y_test.long())
        metrics.update({f"test_{k}": v for k, v in cls.items()})
    report = {"settings": s, "batch_rows": batch_size or len(data.x_train), "sampler": sampler.config(),
              "metrics": metrics, "run_dir": str(out / "run")}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    md = [f"# structmc sample: {s['sampler']} on {s['dataset']} ({s['model']})", "",
          "| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    (out / "report.md").write_text("\n".join(md) + "\n")
    _trace_plot(out / "trace.png", chain)
    print("\n".join(md))
    print(f"\nwrote {out}/report.json, report.md, trace.png and the draws in {out}/run")
    return 0


#: sample()'s keyword arguments in its run-folder messages -> the flags of `structmc sample`
_FLAG_WORDS = (("resume=True", "--resume"), ("overwrite=True", "--overwrite"), ("out_dir", "--out"),
               ("checkpoint_every", "--checkpoint-every"), ("num_steps", "--steps"), ("burn_in", "--burn-in"),
               ("num_chains", "--chains"), ("batch_size", "--batch-size"))


def _flag_words(text: str) -> str:
    """``"... pass resume=True ..., or overwrite=True ..."`` -> ``"... pass --resume ..., or
    --overwrite ..."``: library messages shown by the command line name its flags."""
    import re

    text = re.sub(r"(?<![\w-])out_dir (?=[/.~\w])", "the run folder ", text)  # "out_dir <path>": --out/run
    for word, flag in _FLAG_WORDS:
        text = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w=])", flag, text)
    return text


def _holds_run(run_dir: Path) -> bool:
    """``run_dir`` is a folder holding files of a run (its lock file aside)."""
    return run_dir.is_dir() and any(p.name != ".structmc.lock" for p in run_dir.iterdir())


def _out_folder(path: str | Path, *inside: str) -> Path:
    """``--out`` as a folder: refuse (before any compute) a path that is a file, or lies under
    one, and the sub-folders ``inside`` it that the command writes to when they are files."""
    out = Path(path)
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        where = "is a file" if p == out else f"lies inside {p}, which is a file"
        raise UsageError(f"--out {out} {where}: pass a folder (a new one, or the folder of an earlier run)")
    for name in inside:
        if (out / name).exists() and not (out / name).is_dir():
            raise UsageError(f"--out {out}: {out / name} is a file, but the run writes its draws into a folder "
                             f"there: pass another --out, or move the file")
    return out


def _values(text: str, cast=float) -> list:
    """``"1e-5,1e-4"`` -> [1e-05, 0.0001]."""
    try:
        return [cast(v) for v in str(text).split(",") if v.strip()]
    except ValueError as err:
        raise ValueError(f"expected a comma-separated list, got {text!r}") from err


def _log10_range(text: str) -> list[float]:
    """``"-7.5:-1:0.5"`` -> 10^-7.5, 10^-7, ..., 10^-1 (both ends included)."""
    try:
        lo, hi, step = (float(v) for v in text.split(":"))
    except ValueError as err:
        raise ValueError(f"--log10-h takes LOW:HIGH:STEP, e.g. -7.5:-1:0.5, got {text!r}") from err
    if step <= 0 or hi < lo:
        raise ValueError(f"--log10-h needs LOW <= HIGH and STEP > 0, got {text!r}")
    n = int(round((hi - lo) / step)) + 1
    return [10.0 ** (lo + i * step) for i in range(n)]


def _budget(text: str):
    """``"30s"`` (seconds of sampling), ``"3000it"`` (iterations), ``"1e5grad"`` (gradient evaluations)."""
    from . import Budget

    t = str(text).strip().lower()
    for suffix, key, cast in (("grad", "grad_evals", lambda v: int(float(v))), ("it", "iterations", lambda v: int(float(v))),
                              ("s", "seconds", float)):
        if t.endswith(suffix):
            try:
                value = cast(t[: -len(suffix)])
            except ValueError:
                break
            try:
                return Budget(**{key: value})
            except ValueError as err:
                raise ValueError(f"bad --budget {text!r}: {err}") from err
    raise ValueError(f"--budget takes e.g. 30s, 3000it or 1e5grad, got {text!r}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune a sampler's hyperparameters on a built-in model / data set (MAMBA, grid search or
    the heuristic) and write the trace, the plot and a report with the chosen arm.

    The MAP fit that starts every arm (the paper's choice; ``--no-map`` skips it) is bounded
    and reported: with a seconds budget T it gets at most ``--map-share`` of T (default 20%)
    and the tuning the rest, T·(1 − share), so the whole run stays within T plus set-up; its
    time is printed on stderr before and after (terminal or not) and written in report.md."""
    from . import Budget, find_map
    from .tuning import grid, grid_search, heuristic, lr_from_paper, mamba
    from .tuning.arms import edge_of_grid
    from .tuning.mamba import _check_eta, check_scorable, num_rounds, round_budget

    s = dict(SAMPLE_DEFAULTS)
    for key in ("dataset", "model", "hidden", "activation", "prior_std", "noise_std", "seed", "data_dir", "sampler"):
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    s = _check_settings(s, _FLAGS)
    budget = _budget(args.budget)
    if args.lr and args.log10_h:
        raise ValueError("give --lr or --log10-h, not both")
    for flag, value in (("--thin", args.thin), ("--min-samples", args.min_samples), ("--map-steps", args.map_steps)):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    if not 0 < args.map_share < 1:
        raise ValueError(f"--map-share must lie in (0, 1) (the MAP fit's share of a seconds --budget), got "
                         f"{args.map_share}")
    lrs = _values(args.lr) if args.lr else [lr_from_paper(s["sampler"], h) for h in _log10_range(args.log10_h or "-7:-3:0.5")]
    hyper = {"lr": lrs}
    for flag, cast in (("num_leapfrog", int), ("friction", float), ("a", float)):
        if getattr(args, flag):
            hyper[flag] = _values(getattr(args, flag), cast)
    batches = [int(b) if float(b) >= 1 and float(b) == int(float(b)) and "." not in b else float(b)
               for b in (args.batch_size or "1.0,0.1,0.01").split(",")]
    gradients = (args.gradient or "minibatch").split(",")
    arms = grid(s["sampler"], batch_size=batches, gradient=gradients, **hyper)
    map_cap = None
    if not args.no_map and budget.seconds is not None:  # the MAP fit's share of T, the rest for tuning
        map_cap = budget.seconds * args.map_share
        budget = Budget(seconds=budget.seconds - map_cap)
    scored = min(args.min_samples, 256)  # mamba() / grid_search() score at most max_samples = 256
    try:  # the check mamba() / grid_search() make, here before the data, the model and the MAP fit
        if args.method == "mamba":
            _check_eta(args.eta)
            R = num_rounds(len(arms), args.eta)
            check_scorable(round_budget(budget, len(arms), R), args.thin, scored, arms=len(arms), rounds=R,
                           total=budget)
        else:
            check_scorable(budget, args.thin, scored, arms=len(arms) if args.method == "grid" else 1, rounds=1,
                           total=budget)
    except ValueError as err:
        raise ValueError(_tune_flag_words(str(err))) from None
    out = _out_folder(args.out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}")
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    train = (data.x_train, data.y_train)
    N = len(data.x_train)
    t0 = time.perf_counter()
    init = energy.initial_position()
    map_line = "MAP fit: skipped (--no-map); every arm starts from the model's initial weights"
    if not args.no_map:  # the paper starts every arm from the MAP (also the control-variate centre)
        rows = max(1, N // 100)
        bound = (f", at most {map_cap:.1f} s (--map-share {args.map_share:g} of --budget {args.budget})"
                 if map_cap else "")
        _note(args, f"MAP fit: up to {args.map_steps} Adam steps on batches of {rows} rows{bound} ...")
        info: dict = {}
        init = find_map(energy, init, data=train, batch_size=rows, num_steps=args.map_steps, seed=s["seed"],
                        max_seconds=map_cap, info=info)
        map_line = (f"MAP fit: {info['steps']} of {args.map_steps} Adam steps in {info['seconds']:.1f} s"
                    + (f" (stopped at its {map_cap:.1f} s share of the budget: raise --map-share or --budget, or "
                       f"lower --map-steps)" if info["stopped_early"] else "")
                    + (f"; tuning gets {budget.seconds:.1f} s" if map_cap else ""))
        _note(args, map_line)
    common = dict(data=train, metric=args.metric, executor=args.executor, seed=s["seed"], num_chains=args.chains,
                  centre=init, out_dir=out, resume=args.resume, progress=None if not args.quiet else False,
                  thin=args.thin, min_samples=args.min_samples)
    if args.method == "mamba":
        result = mamba(energy, init, arms, budget, eta=args.eta, **common)
    elif args.method == "grid":
        result = grid_search(energy, init, arms, budget, **common)
    else:
        extra = {k: v[0] for k, v in hyper.items() if k != "lr"}
        arm = heuristic(N, s["sampler"], gradient=gradients[0], **extra)
        result = grid_search(energy, init, [arm], budget, batch_size=None, **common)
    seconds = time.perf_counter() - t0
    best = result.best
    for warning in edge_of_grid(result.arms, best):
        print(f"structmc: warning: {warning}", file=sys.stderr)
    md = [f"# structmc tune: {args.method} for {s['sampler']} on {s['dataset']} ({s['model']})", "",
          "```", result.summary(), "```", "",
          f"chosen arm: `{best.label}` (batch {best.batch_count(N) or N} of {N} rows: structmc sample --batch-size "
          f"{best.batch_count(N) or N})", "", "```json", json.dumps(best.to_dict(), indent=1), "```", "",
          map_line, "",
          f"wall time {seconds:.1f} s (MAP included); trace: {out / 'trace.json'}"]
    (out / "report.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def _note(args: argparse.Namespace, line: str) -> None:
    """A progress line on stderr (terminal or not; ``--quiet`` silences it)."""
    if not args.quiet:
        print(line, file=sys.stderr, flush=True)


def _tune_flag_words(text: str) -> str:
    """The tuning library's budget message, in ``structmc tune``'s flags."""
    import re

    text = text.replace("lower thin / min_samples", "lower --thin / --min-samples")
    text = re.sub(r"budget iterations=(\d+)", r"budget --budget \1it", text)
    text = re.sub(r"budget grad_evals=(\d+)", r"budget --budget \1grad", text)
    text = re.sub(r"(?<![\w-])min_samples=", "--min-samples ", text)
    text = re.sub(r"(?<![\w-])thin=", "--thin ", text)
    text = re.sub(r"\bat least iterations=(\d+)", r"at least --budget \1it", text)
    text = re.sub(r"\bat least grad_evals=(\d+)", r"at least --budget \1grad", text)
    return text


def _load_dataset(s: dict):
    """A data set of :data:`structmc.data.DATASETS`: scikit-learn and synthetic sets are split
    with ``--seed``; the papers' sets come from their files (``--data-dir``)."""
    from .data import DATASETS

    spec = DATASETS.get(s["dataset"])
    if spec.source == "files":
        ds = spec.load(**({"data_dir": s["data_dir"]} if s["data_dir"] else {}))
    else:
        ds = spec.load(seed=s["seed"])
    if ds.task not in ("regression", "binary", "multiclass") or ds.x_test is None:
        raise ValueError(f"structmc sample needs a classification or regression set with a test split; "
                         f"{s['dataset']!r} is {ds.task!r}" + ("" if ds.x_test is not None else " without one"))
    return ds


def _y_scale(data) -> float:
    return float(getattr(data, "y_scale", None) or data.meta.get("y_std", 1.0))


def _trace_plot(path: Path, chain) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for c in range(chain.num_chains):
        axes[0].plot(chain.info["energy"][c].numpy(), lw=0.5, label=f"chain {c}")
        axes[1].plot(chain.draw_steps.numpy(), chain.samples[c, :, 0].numpy(), lw=0.6)
    axes[0].set(xlabel="iteration", ylabel="minibatch energy", yscale="symlog")
    axes[1].set(xlabel="iteration", ylabel=f"{chain.space.names[0]}[0]")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cmd_experiment(args: argparse.Namespace, name: str | None = None) -> int:
    """``structmc reproduce NAME`` (and its older spelling ``structmc experiment NAME``)."""
    import inspect

    from .experiments import REGISTRY

    if getattr(args, "list", False):
        print(reproduce_table() if getattr(args, "command", "") == "reproduce" else experiment_table())
        return 0
    name = name or args.name
    if not name:
        raise ValueError(f"name an experiment ({', '.join(REGISTRY.choices())}) or pass --list")
    exp = REGISTRY.get(name)
    module = exp.load()
    preset = args.preset
    if preset not in module.PRESETS:
        raise UsageError(f"unknown preset {preset!r}; choose from {sorted(module.PRESETS)}")
    options = {"device": getattr(args, "device", None), "seed": getattr(args, "seed", None),
               "resume": getattr(args, "resume", False) or None}
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
    out = _out_folder(args.out or (f"runs/{exp.name}/{preset}" if getattr(args, "command", "") == "reproduce"
                                   else f"runs/{name}"))
    t0 = time.perf_counter()
    report = module.run(preset, out, progress=None if not args.quiet else False, **kwargs)
    print((out / "report.md").read_text())
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0 if report else 1


def reproduce_table() -> str:
    """One line per registered experiment: name, paper, table/figure, what ``quick`` cuts and
    its measured wall time on the 2-core development CPU."""
    from .experiments import REGISTRY

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
    from .experiments import REGISTRY

    rows = [("name", "paper", "figure", "presets", "data sets")]
    for name, exp in REGISTRY.items():
        paper = f"{exp.paper.citation} {exp.paper.title}" if exp.paper else "- (structmc)"
        rows.append((name, paper, exp.figure or "-", ", ".join(exp.presets), ", ".join(exp.datasets) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def cmd_diagnose(args: argparse.Namespace) -> int:
    try:
        from .diagnostics.report import diagnose_run
    except ImportError as err:  # pragma: no cover
        raise UsageError(f"diagnostics are unavailable: {err}") from err
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"no such run folder: {run_dir}")
    if not (run_dir / "run.json").is_file():
        inner = [d for d in (run_dir / "run",) if (d / "run.json").is_file()]
        raise UsageError(f"{run_dir} is not a structmc run folder (no run.json)"
                         + (f"; did you mean {inner[0]}?" if inner else
                            "; pass the folder a run wrote its draws to (structmc sample --out DIR writes DIR/run)"))
    print(diagnose_run(run_dir, args.out))
    return 0


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
    from .data import DATASETS

    return [name for name, spec in DATASETS.items() if spec.source == source]


def main(argv: list[str] | None = None) -> int:
    from .models.mlp import ACTIVATIONS
    from .samplers import SAMPLERS

    ap = argparse.ArgumentParser(prog="structmc", description="Scalable approximate MCMC for Bayesian neural networks.")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error "
                    f"(also ${DEBUG_ENV}=1)")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="Bayesian linear regression with exact posterior, five samplers (~1 min)")
    p.add_argument("--preset", default="quick", help="tiny | quick (default) | full")
    p.add_argument("--out", help="run folder (default runs/demo)")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("reproduce", help="reproduce a table or figure of the papers, side by side with the "
                       "published numbers (--list shows them)")
    p.add_argument("name", nargs="?")
    p.add_argument("--list", action="store_true", help="the experiments: paper, table/figure, what quick cuts, its time")
    p.add_argument("--preset", default="quick", help="tiny | quick (default) | full (the paper's settings)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--out", help="run folder (default runs/NAME/PRESET)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument("--seed", type=int, help="override the experiment's seed")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("experiment", help="the older spelling of `reproduce` (--list shows presets and data sets)")
    p.add_argument("name", nargs="?")
    p.add_argument("--list", action="store_true", help="list the experiments: paper, figure, presets, data sets")
    p.add_argument("--preset", default="quick")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("sample", help="run a sampler on a built-in model / data set")
    p.add_argument("--config", help="TOML, YAML or JSON file with any of the flags below, named as the flags "
                   "(steps = 1500, burn-in or burn_in = 500; flags win)")
    p.add_argument("--dataset", help=f"scikit-learn: {', '.join(_dataset_names('scikit-learn'))}; paper sets: "
                   f"{', '.join(_dataset_names('files'))} (see structmc.data.DATASETS)")
    p.add_argument("--data-dir", dest="data_dir", help="local folder with the data files (else $STRUCTMC_DATA, cache, download)")
    p.add_argument("--model", choices=_sample_models())
    p.add_argument("--hidden", type=_widths, help="MLP widths, e.g. 50,50")
    p.add_argument("--activation", choices=sorted(ACTIVATIONS))
    p.add_argument("--sampler", choices=SAMPLERS.names())
    p.add_argument("--lr", type=float)
    p.add_argument("--friction", type=float)
    p.add_argument("--a", type=float, help="SGNHT diffusion parameter")
    p.add_argument("--alpha", type=float, help="pSGLD RMS decay")
    p.add_argument("--num-leapfrog", dest="num_leapfrog", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--gradient", choices=["minibatch", "cv"])
    p.add_argument("--prior-std", dest="prior_std", type=float)
    p.add_argument("--noise-std", dest="noise_std", type=float)
    p.add_argument("--steps", dest="num_steps", type=int)
    p.add_argument("--burn-in", dest="burn_in", type=int)
    p.add_argument("--thin", type=int)
    p.add_argument("--chains", dest="num_chains", type=int)
    p.add_argument("--batch-size", dest="batch_size", help="rows per minibatch (32), or a fraction of the training "
                   "set in (0, 1] (0.01, as structmc tune reports it; 1.0: the full data)")
    p.add_argument("--seed", type=int)
    p.add_argument("--checkpoint-every", dest="checkpoint_every", type=int)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the previous run in --out (its files are removed "
                   "first; a folder holding anything else is refused)")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("tune", help="tune a sampler's step size, batch size, ... by MAMBA, grid search or the heuristic")
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
    p.add_argument("--log10-h", dest="log10_h", help="the paper's step sizes h as LOW:HIGH:STEP in log10 "
                   "(default -7:-3:0.5; converted with lr_from_paper)")
    p.add_argument("--batch-size", dest="batch_size", help="comma-separated: fractions (0.1) or counts (128); "
                   "default 1.0,0.1,0.01")
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
    p.add_argument("--map-steps", dest="map_steps", type=int, default=2000, help="Adam steps of the MAP fit that "
                   "starts every arm (default 2000)")
    p.add_argument("--map-share", dest="map_share", type=float, default=0.2, help="with a seconds --budget: the MAP "
                   "fit's share of it (default 0.2; the tuning gets the rest)")
    p.add_argument("--thin", type=int, default=10, help="keep every THIN-th draw of an arm (default 10)")
    p.add_argument("--min-samples", dest="min_samples", type=int, default=10, help="draws each arm is scored on at "
                   "least (default 10); the budget must keep them at --thin")
    p.add_argument("--resume", action="store_true", help="continue an interrupted tuning run in --out")
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
    from .data.files import DataError, DownloadError, ENV_DATA

    text = str(err).strip()
    if isinstance(err, DownloadError):
        first = text.splitlines()[0].rstrip(":") if text else "could not download a data file"
        return (f"{first} (offline?); put the file in a folder and pass --data-dir DIR, or set ${ENV_DATA}=DIR "
                f"(run with --debug for the details)")
    if isinstance(err, DataError) and "data_dir=" in text:
        text = text.replace("data_dir=...", "--data-dir DIR").replace("data_dir=<dir>", "--data-dir <dir>")
    if isinstance(err, (ModuleNotFoundError, ImportError)) and getattr(err, "name", None):
        text = f"{text} (an optional dependency is missing: pip install {err.name})"
    return " ".join(text.split()) or type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
