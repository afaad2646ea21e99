"""SGMCMC samplers: each owns only its update rule; gradients come from an estimator.

:data:`SAMPLERS` is the registry of sampler classes by name and :func:`sampler_from_config`
the one way a sampler is built from a config dict (the CLI's flags and config files go
through it too)::

    sampler_from_config({"name": "sghmc", "lr": 1e-4, "friction": 0.1})
    sampler_from_config({"name": "sgld", "lr": {"kind": "step_decay", "lr": 1e-3, "every": 2000}})
    sampler_from_config(sampler.config())   # a sampler's own config round-trips

Register a sampler of your own with ``SAMPLERS.register("name", MySampler)`` (a subclass of
:class:`Sampler` with a ``name`` and a ``State``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..registry import Registry
from .adaptation import WindowAdaptation
from .kernel import Kernel
from .psgld import PSGLD, PSGLDState
from .sampler import Sampler
from .sghmc import SGHMC, ScaleAdaptedSGHMC, ScaleAdaptedSGHMCState, SGHMCState
from .sgld import SGLD, SGLDState
from .sgnht import SGNHT, SGNHTState


def _check_sampler(name: str, entry):
    if not (isinstance(entry, type) and issubclass(entry, Sampler)):
        raise TypeError(f"sampler {name!r} must be a subclass of structmc.samplers.Sampler, got {entry!r}")
    return entry


SAMPLERS: Registry[type[Sampler]] = Registry(
    "sampler",
    {"sgld": SGLD, "psgld": PSGLD, "sghmc": SGHMC, "sgnht": SGNHT, "scale_adapted_sghmc": ScaleAdaptedSGHMC},
    validate=_check_sampler,
)


def _parameters(fn) -> tuple[dict[str, inspect.Parameter], bool]:
    params = dict(list(inspect.signature(fn).parameters.items())[1:])  # drop self
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {k: p for k, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}, open_kw


def sampler_keys(sampler: str | type[Sampler]) -> list[str]:
    """The config keys (constructor arguments) a sampler accepts, e.g. ``["lr", "temperature"]``
    for ``"sgld"``."""
    cls = SAMPLERS.get(sampler) if isinstance(sampler, str) else sampler
    return list(_parameters(cls.__init__)[0])


def _fixed_keys(cls: type[Sampler]) -> dict[str, Any]:
    """Hyperparameters of :class:`Sampler` that ``cls`` does not take (SGLD's and pSGLD's
    ``num_leapfrog``) with the value they are fixed at: ``config()`` reports them."""
    base, _ = _parameters(Sampler.__init__)
    own, _ = _parameters(cls.__init__)
    return {k: p.default for k, p in base.items() if k not in own and p.default is not p.empty}


def sampler_from_config(cfg: Mapping[str, Any]) -> Sampler:
    """Build a sampler from ``{"name": ..., "lr": ..., **hyperparameters}``.

    ``name`` (or ``sampler``, the key :meth:`Sampler.config` writes) picks the class in
    :data:`SAMPLERS`; ``lr`` is a number, a :class:`~structmc.schedules.Schedule` or a
    schedule config (:func:`~structmc.schedules.schedule_from_config`); every other key must
    be one of the sampler's constructor arguments (:func:`sampler_keys`) — an unknown key is a
    ``ValueError`` naming the accepted ones. Keys a sampler reports in ``config()`` but does
    not take are accepted at their fixed value (``num_leapfrog=1`` for SGLD and pSGLD).
    """
    from ..schedules import schedule_from_config

    if not isinstance(cfg, Mapping):
        raise ValueError(f"a sampler config is a mapping like {{'name': 'sgld', 'lr': 1e-4}}, got {cfg!r}")
    cfg = dict(cfg)
    name, label = cfg.pop("name", None), cfg.pop("sampler", None)
    if name is not None and label is not None and name != label:
        raise ValueError(f"sampler config names two samplers: name={name!r}, sampler={label!r}")
    name = name if name is not None else label
    if name is None:
        raise ValueError(f"a sampler config needs 'name' (one of {', '.join(SAMPLERS.choices())})")
    cls = SAMPLERS.get(name)
    accepted, open_kw = _parameters(cls.__init__)
    fixed = _fixed_keys(cls)
    unknown, wrong = [], []
    for key in list(cfg):
        if key in accepted or open_kw:
            continue
        if key in fixed:
            if cfg[key] != fixed[key]:
                wrong.append(f"{key}={cfg[key]!r} (fixed at {fixed[key]!r})")
            del cfg[key]
            continue
        unknown.append(key)
    if unknown or wrong:
        what = (
            (f"unknown key(s) {sorted(unknown)}" if unknown else "")
            + ("; " if unknown and wrong else "")
            + (f"unsupported {', '.join(wrong)}" if wrong else "")
        )
        raise ValueError(f"sampler {name!r}: {what}; it accepts {', '.join(accepted)}")
    missing = [k for k, p in accepted.items() if p.default is p.empty and k not in cfg]
    if missing:
        raise ValueError(f"sampler {name!r} needs {', '.join(missing)}")
    if "lr" in cfg:
        cfg["lr"] = schedule_from_config(cfg["lr"])
    return cls(**cfg)


__all__ = [
    "WindowAdaptation",
    "Kernel",
    "Sampler",
    "SGLD",
    "PSGLD",
    "SGHMC",
    "SGNHT",
    "ScaleAdaptedSGHMC",
    "SAMPLERS",
    "sampler_from_config",
    "sampler_keys",
    "SGLDState",
    "PSGLDState",
    "SGHMCState",
    "SGNHTState",
    "ScaleAdaptedSGHMCState",
]
