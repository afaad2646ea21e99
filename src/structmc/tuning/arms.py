"""Arms: one sampler configuration each, and grids of them.

An :class:`Arm` is everything that changes between the configurations a tuner compares: the
sampler and its hyperparameters (a :func:`~structmc.samplers.sampler_from_config` dict: step
size ``lr``, ``num_leapfrog``, ``friction``, thermostat ``a``, ...), the minibatch size, the
gradient estimator (plain minibatch or control variate) and, for structured SGMCMC, the
structured energy (partition, number of groups, mask law, ρ, K). An arm is plain data (JSON
round-trips through :meth:`Arm.to_dict`), so it travels to any executor and into traces.

Step sizes follow docs/conventions.md: the MAMBA paper and its code write SGLD as
``θ + h∇log π + √(2h)ξ``, so their h is our ε/2 (``lr = 2h``); their SGHMC/SGNHT ``dt`` is our
η (``lr = h``). :func:`lr_from_paper` converts.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..samplers import SAMPLERS, sampler_from_config, sampler_keys
from ..structured.energies import MASK_KEYS

GRADIENTS = ("minibatch", "control_variate")
_GRADIENT_ALIASES = {"minibatch": "minibatch", "cv": "control_variate", "control_variate": "control_variate"}
# An arm's structured settings are the structured energy's own (StructuredEnergy.config() keys,
# its mask laws' fields from MASK_KEYS, flat so that a grid can span them) plus the partition the
# arm builds (config() records only its number of groups). The mask given as a name.
STRUCTURED_KEYS = (
    "partition",
    "num_groups",
    "chunk_size",
    "mask",
    *dict.fromkeys(k for ks in MASK_KEYS.values() for k in ks),
    "num_copies",
    "history",
    "seed",
    "warmup_steps",
    "split_batch",
)
_MASK_NEEDS = {"bernoulli": ("rho",), "uniform": (), "beta": ("a", "b")}  # an arm names these (no default rho)
_PARTITIONS_WITH_NUM_GROUPS = ("random", "round_robin")  # other kinds derive M from the space
_HISTORY_KEYS = ("capacity", "mode", "thin", "dtype")  # ChainHistory's settings, as config() writes them
_RENAMED = {"alpha": "a", "beta": "b"}  # older traces spelt the Beta mask's a, b as alpha, beta: the one alias


def lr_from_paper(sampler: str, h: float) -> float:
    """Our ``lr`` for the MAMBA paper's step size ``h``: ``2h`` for SGLD and pSGLD (their
    ``θ + h∇log π + √(2h)ξ`` is our ``θ − (ε/2)∇U + √ε ξ`` with ε = 2h), ``h`` for SGHMC and
    SGNHT (their ``dt`` is our η)."""
    name = SAMPLERS.resolve(sampler)
    return 2.0 * float(h) if name in ("sgld", "psgld") else float(h)


def _plain(x):
    """JSON-friendly copy (tuples -> lists), raising on what JSON cannot hold."""
    return json.loads(json.dumps(x))


@dataclass(frozen=True)
class Arm:
    """One configuration: ``sampler`` (a sampler config dict with ``name``), ``batch_size``
    (an int, a fraction of N in (0, 1) as a float, or ``None``/1.0 for the full batch),
    ``gradient`` (``"minibatch"`` or ``"control_variate"``/``"cv"``) and ``structured``
    (``None``, or the structured energy in its own terms, the keys of
    :meth:`StructuredEnergy.config() <structmc.structured.StructuredEnergy.config>`: ``partition``
    (a :func:`~structmc.partitions.make_partition` kind, default ``"random"``, with
    ``num_groups`` or ``chunk_size``), ``mask`` (``None`` for S-SGMCMC, else
    ``"bernoulli"``/``"uniform"``/``"beta"``) with its law's fields flat (``rho``,
    ``at_least_one``; ``a``, ``b``), ``num_copies`` K, ``history`` (a capacity, or ``{"capacity",
    "mode", "thin", "dtype"}``), ``seed``, ``warmup_steps``, ``split_batch`` (bool: each copy
    sees n/K rows of the minibatch, see :class:`~structmc.structured.StructuredEnergy`)). A
    ``config()`` dict plus ``partition`` is taken as is (nested mask and history); an older
    trace's ``alpha``/``beta`` read as ``a``/``b``.
    Validated on construction: an unknown hyperparameter is a ``ValueError`` naming the ones
    the sampler accepts."""

    sampler: Mapping[str, Any]
    batch_size: int | float | None = None
    gradient: str = "minibatch"
    structured: Mapping[str, Any] | None = None
    label: str = field(default="", compare=False)

    def __post_init__(self):
        if not isinstance(self.sampler, Mapping) or "name" not in self.sampler:
            raise ValueError(f"Arm.sampler must be a sampler config with a 'name', got {self.sampler!r}")
        sampler = _plain(dict(self.sampler))
        object.__setattr__(self, "sampler", sampler)
        sampler_from_config(sampler)  # unknown keys, bad values: a clear error now, before any compute
        b = self.batch_size
        if isinstance(b, bool) or (b is not None and not isinstance(b, (int, float))):
            raise ValueError(f"batch_size must be an int, a fraction in (0, 1] or None, got {b!r}")
        if isinstance(b, float):
            if not 0.0 < b <= 1.0:
                raise ValueError(f"a fractional batch_size must lie in (0, 1], got {b}")
            if b == 1.0:
                object.__setattr__(self, "batch_size", None)
        elif isinstance(b, int) and b < 1:
            raise ValueError(f"batch_size must be >= 1, got {b}")
        if self.gradient not in _GRADIENT_ALIASES:
            raise ValueError(f"gradient must be one of {sorted(_GRADIENT_ALIASES)}, got {self.gradient!r}")
        object.__setattr__(self, "gradient", _GRADIENT_ALIASES[self.gradient])
        if self.structured is not None:
            object.__setattr__(self, "structured", _check_structured(self.structured))
        if not self.label:
            object.__setattr__(self, "label", self.describe())

    # -- description ------------------------------------------------------------------------
    @property
    def sampler_name(self) -> str:
        return SAMPLERS.resolve(self.sampler["name"])

    def describe(self) -> str:
        """Short label: ``sgld-cv lr=1e-05 b=1% L=5``."""
        name = self.sampler_name + ("-cv" if self.gradient == "control_variate" else "")
        if self.structured is not None:
            s = self.structured
            name = ("sd-" if s.get("mask") else "s-") + name
        parts = [name]
        for k, v in self.sampler.items():
            if k == "name":
                continue
            key = {"num_leapfrog": "L"}.get(k, k)
            parts.append(f"{key}={v:.3g}" if isinstance(v, float) else f"{key}={v}")
        b = self.batch_size
        parts.append("b=full" if b is None else (f"b={b:.3g}" if isinstance(b, int) else f"b={100 * b:.3g}%"))
        if self.structured is not None:
            for k, v in self.structured.items():
                if k in ("partition", "mask", "num_groups", "rho", "num_copies", "chunk_size"):
                    parts.append(f"{k}={v}")
                elif k == "split_batch" and v:
                    parts.append("split")
        return " ".join(parts)

    def to_dict(self) -> dict:
        return {
            "sampler": dict(self.sampler),
            "batch_size": self.batch_size,
            "gradient": self.gradient,
            "structured": None if self.structured is None else dict(self.structured),
            "label": self.label,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Arm:
        return cls(
            d["sampler"], d.get("batch_size"), d.get("gradient", "minibatch"), d.get("structured"), d.get("label", "")
        )

    def replace(self, **changes) -> Arm:
        d = self.to_dict()
        d.update(changes)
        if "label" not in changes:
            d["label"] = ""
        return Arm.from_dict(d)

    # -- building ---------------------------------------------------------------------------
    def batch_count(self, num_data: int | None) -> int | None:
        """The minibatch size in rows for ``num_data`` points (``None``: full batch), the
        ``batch_size=`` to pass to :func:`structmc.sample` to run this arm."""
        if num_data is None:
            return None
        try:
            return batch_rows(self.batch_size, num_data)
        except ValueError as err:
            raise ValueError(f"arm {self.label!r}: {err}") from None

    def build_sampler(self):
        return sampler_from_config(self.sampler)


def batch_rows(batch_size: int | float | None, num_data: int) -> int | None:
    """Rows per minibatch for ``num_data`` points: an int as is, a fraction ``b`` in (0, 1] as
    ``max(1, ⌊b·N⌋)``; ``None`` (the full data) when that is all N rows."""
    b = batch_size
    if b is None:
        return None
    n = b if isinstance(b, int) else max(1, int(math.floor(b * num_data)))
    if n > num_data:
        raise ValueError(f"batch_size {n} exceeds the number of data points ({num_data})")
    return None if n == num_data else n


def _check_structured(settings: Mapping[str, Any]) -> dict:
    """An arm's structured settings, checked and in one form: from that form, from
    ``StructuredEnergy.config()`` (plus ``partition``; see :func:`_from_config`) or from an older
    trace (``alpha``/``beta`` for the Beta mask's ``a``/``b``)."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"Arm.structured must be a mapping, got {settings!r}")
    s: dict[str, Any] = _plain(dict(settings))
    if "kind" in s or isinstance(s.get("mask"), Mapping) or isinstance(s.get("history"), Mapping):
        s = _from_config(s)
    for old, new in _RENAMED.items():
        if old in s:
            if new in s:
                raise ValueError(f"structured: give {new!r} or its old name {old!r}, not both")
            s = {(new if k == old else k): v for k, v in s.items()}
    unknown = set(s) - set(STRUCTURED_KEYS)
    if unknown:
        raise ValueError(f"unknown structured key(s) {sorted(unknown)}; accepted: {', '.join(STRUCTURED_KEYS)}")
    s.setdefault("partition", "random")
    mask = s.get("mask")
    if mask is not None and mask not in _MASK_NEEDS:
        raise ValueError(f"structured mask must be None (S-SGMCMC) or one of {sorted(_MASK_NEEDS)}, got {mask!r}")
    if mask is None and s.get("num_copies") is not None:
        raise ValueError("num_copies (K) applies to Sd-SGMCMC: give a mask")
    if mask is not None:
        s.setdefault("num_copies", 1)
        for k in _MASK_NEEDS[mask]:
            if k not in s:
                raise ValueError(f"the {mask} mask needs {k!r}")
        if "rho" in s and not 0.0 < float(s["rho"]) <= 1.0:
            raise ValueError(f"rho must lie in (0, 1], got {s['rho']}")
    for key in ("split_batch", "at_least_one"):
        if key in s and not isinstance(s[key], bool):
            raise ValueError(f"structured {key} must be true or false, got {s[key]!r}")
    for key, lo in (("num_groups", 1), ("num_copies", 1), ("history", 1), ("chunk_size", 1), ("warmup_steps", 0)):
        if s.get(key) is not None and not isinstance(s[key], dict):
            s[key] = _integer(key, s[key], lo)
    if isinstance(s.get("history"), dict):
        s["history"] = {
            **s["history"],
            "capacity": _integer("history capacity", s["history"]["capacity"], 1),
            "thin": _integer("history thin", s["history"]["thin"], 1),
        }
    if s["partition"] in _PARTITIONS_WITH_NUM_GROUPS and s.get("num_groups") is None:
        raise ValueError(f"partition {s['partition']!r} needs num_groups >= 1")
    return s


def _integer(key: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < lo:
        raise ValueError(f"structured {key} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _from_config(c: dict) -> dict:
    """The flat form of ``StructuredEnergy.config()`` (with the arm's ``partition`` added): the
    mask ``{"law": "BernoulliMask", "rho": ...}`` as ``mask="bernoulli", rho=...``, a plain
    window history as its capacity, ``kind`` checked against the mask and dropped, and an
    S-SGMCMC ``num_copies`` (= M, derived) dropped. Keys in :data:`STRUCTURED_KEYS` order."""
    c = dict(c)
    kind = c.pop("kind", None)
    mask = c.get("mask")
    if isinstance(mask, Mapping):
        mask = dict(mask)
        law = str(mask.pop("law", "")).lower().removesuffix("mask")
        clash = sorted(set(mask) & set(c))
        if clash:
            raise ValueError(f"structured: the mask's {clash} given twice (in mask and at the top level)")
        c.update(mask)
        c["mask"] = mask = law
    if kind is not None:
        if kind not in ("S-SGMCMC", "Sd-SGMCMC") or (kind == "S-SGMCMC") != (mask is None):
            raise ValueError(
                f"structured kind {kind!r} does not match mask {mask!r} (S-SGMCMC has no mask, Sd-SGMCMC has one)"
            )
        if mask is None and "num_copies" in c:
            copies = c.pop("num_copies")
            if c.get("num_groups") is not None and copies != c["num_groups"]:
                raise ValueError(
                    f"S-SGMCMC runs one copy per group: num_copies={copies} != num_groups={c['num_groups']}"
                )
    history = c.get("history")
    if isinstance(history, Mapping):
        unknown = sorted(set(history) - set(_HISTORY_KEYS))
        if unknown or "capacity" not in history:
            raise ValueError(
                f"structured history must be a capacity or a mapping with capacity (and mode, thin, "
                f"dtype), got {history!r}"
            )
        h = {
            "capacity": history["capacity"],
            "mode": history.get("mode", "window"),
            "thin": history.get("thin", 1),
            "dtype": history.get("dtype"),
        }
        c["history"] = h["capacity"] if (h["mode"], h["thin"], h["dtype"]) == ("window", 1, None) else h
    return {k: c[k] for k in sorted(c, key=lambda k: STRUCTURED_KEYS.index(k) if k in STRUCTURED_KEYS else -1)}


def _history(h):
    """``history`` as StructuredEnergy takes it: a capacity, or a ChainHistory of the mapping."""
    if not isinstance(h, Mapping):
        return int(h)
    import torch

    from ..structured import ChainHistory

    dtype = h.get("dtype")
    if dtype is not None:
        dtype = getattr(torch, str(dtype).removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"structured history dtype must name a torch dtype, got {h.get('dtype')!r}")
    return ChainHistory(int(h["capacity"]), mode=h.get("mode", "window"), thin=h.get("thin", 1), dtype=dtype)


def structured_energy(base, settings: Mapping[str, Any]):
    """The :class:`~structmc.structured.StructuredEnergy` an arm's ``structured`` settings
    describe (any form :class:`Arm` takes: its own, ``StructuredEnergy.config()`` plus
    ``partition``, an older trace's); its ``config()`` read back by :class:`Arm` gives it again."""
    from ..partitions import make_partition
    from ..structured import StructuredEnergy, make_mask

    s = _check_structured(settings)
    kind = s["partition"]
    kwargs = {k: s[k] for k in ("chunk_size", "seed") if k in s}
    if kind in _PARTITIONS_WITH_NUM_GROUPS:
        kwargs["num_groups"] = s["num_groups"]
    partition = make_partition(kind, base.space, **kwargs)
    if s.get("num_groups") is not None and partition.num_groups != s["num_groups"]:
        raise ValueError(
            f"structured num_groups={s['num_groups']}, but partition {kind!r} of this target has "
            f"{partition.num_groups} groups"
        )
    mask = s.get("mask")
    mask_obj = None if mask is None else make_mask(mask, **{k: s[k] for k in MASK_KEYS[mask] if k in s})
    return StructuredEnergy(
        base,
        partition,
        _history(s.get("history", 1000)),
        mask=mask_obj,
        num_copies=None if mask is None else int(s["num_copies"]),
        seed=int(s.get("seed", 0)),
        warmup_steps=int(s.get("warmup_steps", 0)),
        split_batch=bool(s.get("split_batch", False)),
    )


def grid(
    sampler: str,
    *,
    batch_size: Sequence | Any = (None,),
    gradient: Sequence[str] | str = ("minibatch",),
    structured: Mapping[str, Sequence] | None = None,
    **hyperparameters,
) -> list[Arm]:
    """Arms from the product of value lists, e.g.
    ``grid("sghmc", lr=[1e-5, 1e-6], num_leapfrog=[5, 10], batch_size=[0.1, 0.01])`` (8 arms).

    Every keyword is a hyperparameter of ``sampler`` (checked against
    :func:`~structmc.samplers.sampler_keys`: an unknown name is a ``ValueError`` listing the
    accepted ones) given as a list of values or one value; ``structured`` maps structured
    settings to value lists (``{"rho": [0.5, 0.7], "num_copies": [2, 4], "mask":
    ["bernoulli"], "num_groups": [10]}``). The order is that of :func:`itertools.product`."""
    name = SAMPLERS.resolve(sampler)
    accepted = sampler_keys(name)
    unknown = [k for k in hyperparameters if k not in accepted]
    if unknown:
        raise ValueError(f"sampler {name!r} has no hyperparameter(s) {unknown}; it accepts {', '.join(accepted)}")

    def values(v):
        if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Iterable):
            return [v]
        v = list(v)
        if not v:
            raise ValueError("a grid axis is empty: every hyperparameter needs at least one value")
        return v

    keys = list(hyperparameters)
    axes = [values(hyperparameters[k]) for k in keys]
    s_given: Mapping[str, Sequence] = structured or {}
    s_keys = list(s_given)
    s_axes = [values(s_given[k]) for k in s_keys]
    arms = []
    for b, g, combo, s_combo in itertools.product(
        values(batch_size), values(gradient), itertools.product(*axes), itertools.product(*s_axes)
    ):
        cfg = {"name": name, **dict(zip(keys, combo))}
        arms.append(Arm(cfg, b, g, dict(zip(s_keys, s_combo)) if structured else None))
    return arms


def edge_of_grid(arms: Sequence[Arm], chosen: Arm | None) -> list[str]:
    """Warnings for a ``chosen`` arm whose step size ``lr`` is the smallest or the largest of the
    grid (among arms of its sampler with a number as ``lr``, at least two distinct): the best
    step size may lie beyond the grid, which should be extended past that end."""
    if chosen is None or not isinstance(chosen.sampler.get("lr"), (int, float)):
        return []
    lrs = sorted(
        {
            float(a.sampler["lr"])
            for a in arms
            if a.sampler_name == chosen.sampler_name
            and isinstance(a.sampler.get("lr"), (int, float))
            and not isinstance(a.sampler["lr"], bool)
        }
    )
    lr = float(chosen.sampler["lr"])
    if len(lrs) < 2 or lr not in (lrs[0], lrs[-1]):
        return []
    end, way = ("smallest", "smaller") if lr == lrs[0] else ("largest", "larger")
    return [
        f"the chosen arm's lr={lr:.3g} is the {end} step size tried ({len(lrs)} from {lrs[0]:.3g} to "
        f"{lrs[-1]:.3g}): the best may be {way}; extend the grid past it and tune again"
    ]


def as_arms(arms) -> list[Arm]:
    """A list of :class:`Arm` from arms or their dicts; an empty list is a ``ValueError``."""
    if isinstance(arms, Arm):
        arms = [arms]
    arms = [a if isinstance(a, Arm) else Arm.from_dict(a) for a in arms]
    if not arms:
        raise ValueError("no arms to tune: the grid is empty")
    return arms


__all__ = ["Arm", "grid", "as_arms", "batch_rows", "edge_of_grid", "lr_from_paper", "structured_energy", "GRADIENTS"]
