"""Layer and unit structure of a flat parameter vector — read once, attached to the space.

The records of a :class:`~structmc.space.ParamSpace`: :class:`ParamInfo` (one named tensor of
the flat vector) and :class:`LayerInfo` (one layer). This module imports no other module of
structmc, so the space builds on it and it never on the space.

A model's structure is a tuple of :class:`LayerInfo` records, one per layer, in the order of
their first parameter in the flat vector. Every parameter of the space belongs to exactly one
record. Two kinds of record:

* **structured** (``kind`` ``"linear"``, ``"conv"``, ``"norm"``): ``num_units`` output units
  (neurons, conv output channels, norm channels). Unit ``u`` is ``weight[u]`` — viewed as
  ``[num_units, fan_in]``, a contiguous row of ``fan_in`` numbers in the flat vector, for
  ``Linear`` (out × in), ``Conv`` (out × in/groups × k…) and norms (``fan_in`` 1) alike —
  together with ``bias[u]``: "a neuron's incoming weights and its bias", the reference
  codes' node block. ``weight`` or ``bias`` is ``None`` when absent or frozen.
* **other** (``kind == "other"``): parameters without unit structure, listed in ``other``;
  every element is a unit of its own (``num_units`` = their total size, ``fan_in`` 1).

Two ways to read the records:

* :func:`read_layers` — from **module types**, for :meth:`ParamSpace.from_module
  <structmc.space.ParamSpace.from_module>`: ``nn.Linear`` / ``nn.Bilinear`` ("linear"),
  ``nn.Conv1d/2d/3d`` ("conv"), affine ``BatchNorm`` / ``GroupNorm`` / ``InstanceNorm`` /
  ``LayerNorm`` / ``RMSNorm`` ("norm"). Every other trainable parameter (custom modules,
  ``nn.Embedding``, transposed convolutions — whose output channel is *not* ``weight[u]`` —,
  extra parameters of a ``Linear`` subclass) is one ``"other"`` record each, whatever its name.
* :func:`layers_from_names` — from **parameter names and shapes** alone, for spaces built
  without a module (``ParamSpace([(name, shape), ...])``, a space reloaded from a run folder
  without its layer records, :meth:`ParamSpace.flat <structmc.space.ParamSpace.flat>`):
  ``<prefix>.weight`` and ``<prefix>.bias`` form one layer; it has units (rows of the weight)
  when the weight has at least one dimension and the bias, if any, has shape
  ``(weight.shape[0],)``, its kind then guessed from the weight's rank (1: ``"norm"``, 2:
  ``"linear"``, more: ``"conv"``); any other group (and every other name) is one ``"other"``
  record. This is the rule partitions used before the records existed, so for Linear / Conv /
  BatchNorm / GroupNorm models both readers give the same layers.

Records are plain data: :meth:`LayerInfo.to_config` / :meth:`LayerInfo.from_config` convert
to and from JSON-able dicts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from torch import Tensor, nn

KINDS = ("linear", "conv", "norm", "other")

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORM = tuple(
    t
    for t in (
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.BatchNorm3d,
        nn.GroupNorm,
        nn.InstanceNorm1d,
        nn.InstanceNorm2d,
        nn.InstanceNorm3d,
        nn.LayerNorm,
        getattr(nn, "RMSNorm", None),
    )
    if t is not None
)


@dataclass(frozen=True)
class ParamInfo:
    """One named parameter tensor inside the flat vector (re-exported by :mod:`structmc.space`,
    its documented home; defined here, below the space, so that the layer records need no
    import of the space)."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.numel)


@dataclass(frozen=True)
class LayerInfo:
    """One layer: module path (or name prefix), kind (``"linear"``, ``"conv"``, ``"norm"``,
    ``"other"``), weight and bias parameter names (``None`` when absent or frozen; always
    ``None`` for ``"other"``), output units, weights per unit, and for ``"other"`` records the
    parameters they hold (every element a unit). See the module docstring."""

    name: str
    kind: str
    weight: str | None
    bias: str | None
    num_units: int
    fan_in: int
    other: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"layer kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "other" and (self.weight is not None or self.bias is not None):
            raise ValueError(f"an 'other' layer lists its parameters in `other`, not weight/bias ({self.name!r})")
        if self.kind != "other" and self.other:
            raise ValueError(f"only 'other' layers hold `other` parameters ({self.name!r})")
        object.__setattr__(self, "other", tuple(self.other))

    @property
    def params(self) -> tuple[str, ...]:
        """Names of the layer's parameters in the space (weight, bias, or the ``other`` ones)."""
        return tuple(p for p in (self.weight, self.bias) if p is not None) + self.other

    @property
    def structured(self) -> bool:
        """``True`` when units are weight rows (+ bias entries), ``False`` for ``"other"``."""
        return self.kind != "other"

    def to_config(self) -> dict:
        """A JSON-able dict (inverse: :meth:`from_config`)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "weight": self.weight,
            "bias": self.bias,
            "num_units": self.num_units,
            "fan_in": self.fan_in,
            "other": list(self.other),
        }

    @classmethod
    def from_config(cls, d: Mapping) -> LayerInfo:
        return cls(
            str(d["name"]),
            str(d["kind"]),
            d.get("weight"),
            d.get("bias"),
            int(d["num_units"]),
            int(d["fan_in"]),
            tuple(d.get("other", ())),
        )


def _other(name: str, infos: Sequence[ParamInfo]) -> LayerInfo:
    return LayerInfo(name, "other", None, None, sum(i.numel for i in infos), 1, tuple(i.name for i in infos))


def _module_record(name: str, m: nn.Module, names: AbstractSet[str]) -> LayerInfo | None:
    prefix = f"{name}." if name else ""
    if isinstance(m, nn.Linear):
        kind, units, fan_in = "linear", m.out_features, m.in_features
    elif isinstance(m, nn.Bilinear):
        kind, units, fan_in = "linear", m.out_features, m.in1_features * m.in2_features
    elif isinstance(m, _CONV):
        kind, units, fan_in = "conv", m.out_channels, math.prod(m.weight.shape[1:])
    elif isinstance(m, _NORM):
        w, b = getattr(m, "weight", None), getattr(m, "bias", None)
        ref = w if isinstance(w, Tensor) else b if isinstance(b, Tensor) else None
        if ref is None:
            return None
        kind, units, fan_in = "norm", ref.numel(), 1
    else:
        return None
    weight = f"{prefix}weight" if f"{prefix}weight" in names else None
    bias = f"{prefix}bias" if f"{prefix}bias" in names else None
    if weight is None and bias is None:
        return None
    return LayerInfo(name, kind, weight, bias, int(units), int(fan_in))


def _order(params: Sequence[ParamInfo], owner: Mapping[str, LayerInfo], fallback) -> tuple[LayerInfo, ...]:
    """Records in order of their first parameter; ``fallback(info)`` for unowned params."""
    out, seen = [], set()
    for info in params:
        rec = owner.get(info.name)
        if rec is None:
            rec = fallback(info)
        if id(rec) not in seen:
            seen.add(id(rec))
            out.append(rec)
    return tuple(out)


def read_layers(module: nn.Module, params: Sequence[ParamInfo]) -> tuple[LayerInfo, ...]:
    """Layer records of ``module`` from its module types, covering every parameter in
    ``params`` (a :class:`~structmc.space.ParamSpace`'s ``params``; those not in a
    recognised layer get one ``"other"`` record each), in flat-vector order."""
    by_name = {i.name: i for i in params}
    owner: dict[str, LayerInfo] = {}
    for name, m in module.named_modules():
        rec = _module_record(name, m, by_name.keys())
        if rec is None or any(p in owner for p in rec.params):
            continue
        if not consistent(rec, by_name):  # e.g. a Linear subclass storing its weight differently
            continue
        for p in rec.params:
            owner[p] = rec
    return _order(params, owner, lambda info: _other(info.name, [info]))


def layers_from_names(params: Sequence[ParamInfo]) -> tuple[LayerInfo, ...]:
    """Layer records from parameter names and shapes alone (see the module docstring)."""
    groups: OrderedDict[str, list] = OrderedDict()
    for info in params:
        prefix, _, leaf = info.name.rpartition(".")
        key = prefix if leaf in ("weight", "bias") and prefix else info.name
        groups.setdefault(key, []).append(info)
    out = []
    for key, infos in groups.items():
        by_leaf = {i.name.rpartition(".")[2]: i for i in infos}
        w, b = by_leaf.get("weight"), by_leaf.get("bias")
        if (
            w is None
            or len(w.shape) == 0
            or (b is not None and b.shape != (w.shape[0],))
            or len(infos) != 1 + (b is not None)
        ):
            out.append(_other(key, infos))
            continue
        kind = {1: "norm", 2: "linear"}.get(len(w.shape), "conv")
        out.append(LayerInfo(key, kind, w.name, None if b is None else b.name, w.shape[0], w.numel // w.shape[0]))
    return tuple(out)


def consistent(rec: LayerInfo, by_name: Mapping[str, ParamInfo]) -> bool:
    """Whether ``rec``'s parameters exist in ``by_name`` with sizes matching its units."""
    if any(p not in by_name for p in rec.params):
        return False
    if rec.num_units < 0 or rec.fan_in < 0:
        return False
    if not rec.structured:
        return rec.num_units == sum(by_name[p].numel for p in rec.other)
    if rec.weight is not None and by_name[rec.weight].numel != rec.num_units * rec.fan_in:
        return False
    return rec.bias is None or by_name[rec.bias].numel == rec.num_units


def check_layers(layers: Sequence[LayerInfo], params: Sequence[ParamInfo]) -> tuple[LayerInfo, ...]:
    """Validate that ``layers`` cover every parameter exactly once with consistent sizes;
    returns them in flat-vector order (raises ``ValueError`` otherwise)."""
    by_name = {i.name: i for i in params}
    owner: dict[str, LayerInfo] = {}
    for rec in layers:
        if not isinstance(rec, LayerInfo):
            raise ValueError(f"layers must be LayerInfo records, got {type(rec).__name__}")
        if not consistent(rec, by_name):
            raise ValueError(f"layer {rec.name!r} does not fit the parameters: {rec}")
        for p in rec.params:
            if p in owner:
                raise ValueError(f"parameter {p!r} is in two layers ({owner[p].name!r}, {rec.name!r})")
            owner[p] = rec
    missing = [n for n in by_name if n not in owner]
    if missing:
        raise ValueError(f"parameters {missing[:10]} belong to no layer")
    if len({id(r) for r in owner.values()}) != len(layers):
        raise ValueError("every layer needs at least one parameter")
    return _order(params, owner, None)
