"""``structmc sample``'s settings: defaults, then a config file (TOML, YAML or JSON), then
the flags, each checked (type, range) and named by its flag or config key in errors; the
sampler config they give (:func:`sampler_config`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import MODEL_FLAGS, SAMPLER_FLAGS, UsageError, _sample_models

SAMPLE_DEFAULTS: dict[str, Any] = {
    "dataset": "breast_cancer",
    "model": "linear",
    "hidden": [50],
    "activation": "relu",
    "sampler": "sgld",
    "lr": 1e-4,
    "friction": 0.05,
    "a": 0.05,
    "alpha": 0.99,
    "num_leapfrog": 1,
    "temperature": 1.0,
    "schedule": None,
    "gradient": "minibatch",
    "prior_std": 1.0,
    "noise_std": None,
    "num_steps": 5000,
    "burn_in": 1000,
    "thin": 5,
    "num_chains": 2,
    "batch_size": 32,
    "seed": 0,
    "checkpoint_every": None,
    "data_dir": None,
    # independent chains as tasks (structmc.executors.run_chains): None or "serial" = one batched run
    "executor": None,
    "workers": None,
    # torch's intra-op threads for the run (None: torch's default)
    "threads": None,
}


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
    parse: Callable[[str], Any]
    errors: tuple[type[Exception], ...]
    if p.suffix == ".toml":
        import tomllib  # Python >= 3.11 (pyproject's requires-python)

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
_INT_KEYS = {
    "num_leapfrog": 1,
    "num_steps": 1,
    "burn_in": 0,
    "thin": 1,
    "num_chains": 1,
    "seed": 0,
    "checkpoint_every": 1,
    "workers": 1,
    "threads": 1,
}  # key -> minimum (batch_size: rows or a fraction, see _batch_value)
_STR_KEYS = ("dataset", "model", "activation", "sampler", "gradient", "data_dir", "executor")
_OPTIONAL_KEYS = ("schedule", "noise_std", "checkpoint_every", "data_dir", "executor", "workers", "threads")
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
    out: dict = {}
    written: dict = {}
    unknown: list = []
    for key, value in cfg.items():
        setting = by_name.get(str(key).replace("-", "_"))
        if setting is None:
            unknown.append(key)
        elif setting in out:
            raise UsageError(f"{path} sets {setting} twice, as {written[setting]!r} and {key!r}: keep one")
        else:
            out[setting], written[setting] = value, key
    if unknown:
        raise UsageError(
            f"unknown keys in {path}: {sorted(map(str, unknown))}; allowed: the flags' names "
            f"({', '.join(sorted(_flag(k)[2:] for k in SAMPLE_DEFAULTS))}), with - or _"
        )
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
            if (
                not isinstance(widths, (list, tuple))
                or not widths
                or any(isinstance(w, bool) or not isinstance(w, int) for w in widths)
            ):
                raise UsageError(f"{where} must be a list of layer widths (integers), e.g. [50, 50], got {value!r}")
            if min(widths) < 1:
                raise UsageError(f"{where}: layer widths must be >= 1, got {list(widths)}")
            out[key] = list(widths)
        elif key == "schedule":
            if not isinstance(value, dict):
                raise UsageError(
                    f'{where} must be a table such as {{kind = "step_decay", every = 2000}}, got {_type_name(value)}'
                )
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
        raise UsageError(
            f"{name('burn_in')} must be smaller than {name('num_steps')}: pass a smaller --burn-in "
            f"(e.g. --burn-in {steps // 5}) or more --steps"
        )
    if (steps - burn_in) // thin < 1:
        raise UsageError(
            f"no draw would be kept with {name('num_steps')}, {name('burn_in')} and {name('thin')}: "
            f"(steps - burn-in) // thin = 0; pass a smaller --thin or more --steps"
        )


def _refuse_unused(s: dict, explicit: dict) -> None:
    """A sampler or model setting the chosen sampler / model does not take would be dropped
    silently (``--friction`` with ``--sampler sgld``, ``--hidden`` with ``--model linear``):
    refuse it, naming the flag (or config key) and what takes it."""
    from ..samplers import SAMPLERS, sampler_keys

    accepted = set(sampler_keys(s["sampler"]))
    for key in SAMPLER_FLAGS:
        if key in explicit and key not in accepted:
            takers = [n for n in SAMPLERS.names() if key in sampler_keys(n)]
            raise UsageError(
                f"{explicit[key]} is not used by --sampler {s['sampler']} (it takes "
                f"{', '.join(k for k in sampler_keys(s['sampler']) if k in SAMPLER_FLAGS or k == 'lr')}): "
                f"drop it, or choose a sampler that takes it ({', '.join(takers)})"
            )
    taken = _model_keys(s["model"])
    for key in MODEL_FLAGS:
        if key in explicit and key not in taken:
            takers = [n for n in _sample_models() if key in _model_keys(n)]
            raise UsageError(
                f"{explicit[key]} is not used by --model {s['model']}: drop it, or choose a model that "
                f"takes it ({', '.join(takers)})"
            )


def _model_keys(name: str) -> set[str]:
    """The ``MODEL_FLAGS`` that model ``name``'s builder takes."""
    import inspect

    from ..models import MODELS

    params = inspect.signature(MODELS.get(name).build).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return set(MODEL_FLAGS)
    return {k for k in MODEL_FLAGS if k in params}


def sampler_config(s: dict) -> dict:
    """The sampler settings as one :func:`structmc.samplers.sampler_from_config` dict: name,
    ``lr`` (a number, or the ``schedule`` table with ``lr`` from ``--lr`` unless it gives its
    own) and those of the hyperparameter flags (``SAMPLER_FLAGS``) the sampler accepts."""
    import dataclasses

    from ..samplers import sampler_keys
    from ..schedules import SCHEDULES

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
