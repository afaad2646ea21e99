"""Parameter space: one flat vector θ ∈ R^P and the named tensors it stands for.

Every chain position in structmc is a flat tensor (``[P]`` for one chain, ``[C, P]`` for a
batch of chains). :class:`ParamSpace` records where each named parameter lives in that
vector (offset, shape) and the model's layer structure, and gives zero-copy views.

The layer structure (:attr:`ParamSpace.layers`, records of :mod:`structmc.layers`) is read
once: from module types by :meth:`ParamSpace.from_module`, from parameter names otherwise.
Partitions (:mod:`structmc.partitions`) and samplers read it from the space.
:meth:`ParamSpace.to_config` / :meth:`ParamSpace.from_config` save and restore a space with
its layers as plain JSON-able data (the older ``[(name, shape), ...]`` list is still read).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from .layers import LayerInfo, ParamInfo, check_layers, layers_from_names, read_layers

_V = TypeVar("_V")


class ParamSpace:
    """Layout of a flat parameter vector: names, shapes and offsets, in module order, and
    its layer structure (:attr:`layers`).

    ``layers`` (optional) are :class:`~structmc.layers.LayerInfo` records covering every
    parameter exactly once; without them the layers are read from the names
    (:func:`~structmc.layers.layers_from_names`) when first needed.
    """

    def __init__(self, shapes: Iterable[tuple[str, tuple[int, ...]]], layers: Sequence[LayerInfo] | None = None):
        infos, offset = [], 0
        for name, shape in shapes:
            info = ParamInfo(name, tuple(int(s) for s in shape), offset)
            infos.append(info)
            offset += info.numel
        names = [i.name for i in infos]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        self.params: tuple[ParamInfo, ...] = tuple(infos)
        self.dim: int = offset
        self._by_name = {i.name: i for i in infos}
        self._layers: tuple[LayerInfo, ...] | None = None if layers is None else check_layers(layers, self.params)
        self._unit_cache: tuple[Tensor, Tensor] | None = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_module(cls, module: nn.Module) -> ParamSpace:
        """Parameters of ``module`` that require grad, in ``named_parameters`` order; layers
        read from the module types (:func:`~structmc.layers.read_layers`)."""
        space = cls((n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad)
        space._layers = read_layers(module, space.params)
        return space

    @classmethod
    def flat(cls, dim: int, name: str = "theta") -> ParamSpace:
        """A space of one unnamed vector (user log densities)."""
        return cls([(name, (int(dim),))])

    @classmethod
    def from_config(cls, config: Mapping | Sequence) -> ParamSpace:
        """Inverse of :meth:`to_config`; also reads a bare ``[(name, shape), ...]`` list (the
        older format; layers then come from the names)."""
        if isinstance(config, Mapping):
            layers = config.get("layers")
            return cls(
                [(n, tuple(s)) for n, s in config["params"]],
                None if layers is None else [LayerInfo.from_config(d) for d in layers],
            )
        return cls([(n, tuple(s)) for n, s in config])

    def to_config(self, *, layers: bool = True) -> dict:
        """JSON-able ``{"params": [[name, shape], ...], "layers": [record dicts]}`` (without
        ``"layers"`` when ``layers=False``)."""
        out: dict = {"params": [[i.name, list(i.shape)] for i in self.params]}
        if layers:
            out["layers"] = [rec.to_config() for rec in self.layers]
        return out

    # -- layer structure ----------------------------------------------------------------
    @property
    def layers(self) -> tuple[LayerInfo, ...]:
        """Layer records covering every parameter once, in flat-vector order (see
        :mod:`structmc.layers`)."""
        if self._layers is None:
            self._layers = layers_from_names(self.params)
        return self._layers

    @property
    def num_units(self) -> int:
        """Units over all layers (an ``"other"`` layer's every element is one)."""
        return sum(rec.num_units for rec in self.layers)

    def layer_index(self, name: str) -> int:
        """Index in :attr:`layers` of the layer holding parameter ``name``."""
        for k, rec in enumerate(self.layers):
            if name in rec.params:
                return k
        raise KeyError(name)

    def unit_rows(self, layer: int | LayerInfo) -> Tensor:
        """Flat indices of the layer's units, ``[num_units, k]``: row ``u`` is unit ``u``'s
        incoming weights (row-major) then its bias; one element per row for ``"other"``."""
        rec = self.layers[layer] if isinstance(layer, int) else layer
        if not rec.structured:
            return torch.cat([torch.arange(self[p].offset, self[p].offset + self[p].numel) for p in rec.other]).view(
                rec.num_units, 1
            )
        cols = []
        if rec.weight is not None:
            w = self[rec.weight]
            cols.append(torch.arange(w.offset, w.offset + w.numel).view(rec.num_units, rec.fan_in))
        if rec.bias is not None:
            b = self[rec.bias]
            cols.append(torch.arange(b.offset, b.offset + b.numel).view(rec.num_units, 1))
        return torch.cat(cols, 1)

    def _units(self) -> tuple[Tensor, Tensor]:
        if self._unit_cache is None:
            layer = torch.empty(self.dim, dtype=torch.long)
            unit = torch.empty(self.dim, dtype=torch.long)
            for k, rec in enumerate(self.layers):
                rows = self.unit_rows(rec)
                layer[rows.flatten()] = k
                unit[rows] = torch.arange(rec.num_units).unsqueeze(1)
            self._unit_cache = (layer, unit)
        return self._unit_cache

    def layer_ids(self) -> Tensor:
        """``[P]`` long: index in :attr:`layers` of each element's layer."""
        return self._units()[0].clone()

    def unit_ids(self, *, within_layer: bool = False) -> Tensor:
        """``[P]`` long: each element's unit, numbered over all layers in order (or, with
        ``within_layer=True``, within its layer)."""
        layer, unit = self._units()
        if within_layer:
            return unit.clone()
        first = torch.tensor([0] + [rec.num_units for rec in self.layers]).cumsum(0)
        return unit + first[layer]

    # -- queries ------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [i.name for i in self.params]

    def __getitem__(self, name: str) -> ParamInfo:
        return self._by_name[name]

    def __len__(self) -> int:
        return len(self.params)

    def __repr__(self) -> str:
        body = ", ".join(f"{i.name}{list(i.shape)}" for i in self.params)
        return f"ParamSpace(dim={self.dim}: {body})"

    def match(self, pattern: str) -> list[ParamInfo]:
        """Parameters whose name matches a shell-style pattern (``"fc1.*"``)."""
        return [i for i in self.params if fnmatch.fnmatchcase(i.name, pattern)]

    def per_param_vector(self, values: float | Mapping[str, float], *, like: Tensor | None = None) -> Tensor:
        """Expand a scalar or ``{name pattern: value}`` map into a length-P vector.

        Patterns are tried in insertion order, the first match wins; a ``"*"`` entry (or a
        plain scalar) gives the default. Every parameter must be matched, and every pattern
        must match some parameter name (a typo next to ``"*"`` is an error, not a silent
        fallback to the default).
        """
        out = torch.empty(
            self.dim, dtype=None if like is None else like.dtype, device=None if like is None else like.device
        )
        if not isinstance(values, Mapping):
            return out.fill_(float(values))
        self.check_patterns(values)
        self.check_not_shadowed(values)
        for info, v in self.first_match(values, "add a '*' default"):
            out[info.slice] = float(v)
        return out

    def check_patterns(self, patterns: Mapping[str, object] | Iterable[str]) -> None:
        """Raise ``ValueError`` naming every pattern that matches no parameter name, with the
        parameter names."""
        unused = [p for p in patterns if not any(fnmatch.fnmatchcase(i.name, p) for i in self.params)]
        if unused:
            names = self.names
            shown = ", ".join(names[:40]) + (f", ... ({len(names) - 40} more)" if len(names) > 40 else "")
            which = "pattern " + repr(unused[0]) if len(unused) == 1 else "patterns " + ", ".join(map(repr, unused))
            raise ValueError(
                f"{which} in {list(patterns)} match{'es' if len(unused) == 1 else ''} no parameter; "
                f"the parameters are: {shown}"
            )

    def check_not_shadowed(self, patterns: Mapping[str, object] | Iterable[str], what: str = "pattern") -> None:
        """Raise ``ValueError`` for a pattern that matches only parameters an earlier pattern
        already took: with first-match-wins it would be ignored silently (``{"*": 0.01,
        "*.bias": 10}`` would give the biases 0.01)."""
        patterns = list(patterns)
        taken: set[str] = set()
        for k, pattern in enumerate(patterns):
            hits = [i.name for i in self.params if fnmatch.fnmatchcase(i.name, pattern)]
            if hits and all(n in taken for n in hits):
                earlier = [p for p in patterns[:k] if any(fnmatch.fnmatchcase(n, p) for n in hits)]
                fixed = [pattern] + [p for p in patterns if p != pattern]
                raise ValueError(
                    f"{what} {pattern!r} in {patterns} matches only parameters that earlier "
                    f"pattern{'s' if len(earlier) > 1 else ''} {', '.join(map(repr, earlier))} "
                    f"already took (the first matching pattern wins), so it would be ignored: put "
                    f"the more specific pattern first, e.g. in the order {fixed}"
                )
            taken.update(hits)

    def first_match(self, patterns: Mapping[str, _V], hint: str = "") -> list[tuple[ParamInfo, _V]]:
        """``(param, value)`` for every parameter, value of the first pattern matching its
        name (insertion order); a parameter matching none is an error."""
        out = []
        for info in self.params:
            for pattern, v in patterns.items():
                if fnmatch.fnmatchcase(info.name, pattern):
                    out.append((info, v))
                    break
            else:
                raise ValueError(f"parameter {info.name!r} matches no pattern in {list(patterns)}; {hint}".rstrip("; "))
        return out

    # -- views --------------------------------------------------------------------------
    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """Zero-copy named views of ``theta`` (``[..., P]`` -> ``{name: [..., *shape]}``)."""
        if theta.shape[-1] != self.dim:
            raise ValueError(f"expected last dimension {self.dim}, got shape {tuple(theta.shape)}")
        lead = theta.shape[:-1]
        return {i.name: theta[..., i.slice].view((*lead, *i.shape)) for i in self.params}  # () for a scalar

    def flatten(self, tensors: Mapping[str, Tensor] | nn.Module) -> Tensor:
        """Concatenate named tensors (or a module's parameters) into one flat vector."""
        if isinstance(tensors, nn.Module):
            tensors = dict(tensors.named_parameters())
        missing = [n for n in self.names if n not in tensors]
        if missing:
            raise ValueError(f"missing parameters {missing}")
        parts = []
        for info in self.params:
            t = tensors[info.name]
            if tuple(t.shape[-len(info.shape) :] if info.shape else ()) != info.shape:
                raise ValueError(f"{info.name}: expected shape {info.shape}, got {tuple(t.shape)}")
            lead = t.shape[: t.dim() - len(info.shape)]
            parts.append(t.detach().reshape(*lead, info.numel))
        return torch.cat(parts, dim=-1)
