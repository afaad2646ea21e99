"""Parameter space: one flat vector θ ∈ R^P and the named tensors it stands for.

Every chain position in structmc is a flat tensor (``[P]`` for one chain, ``[C, P]`` for a
batch of chains). :class:`ParamSpace` records where each named parameter lives in that
vector (offset, shape) and the model's layer structure, and gives zero-copy views.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Iterable, Mapping

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ParamInfo:
    """One named parameter tensor inside the flat vector."""

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


class ParamSpace:
    """Layout of a flat parameter vector: names, shapes and offsets, in module order."""

    def __init__(self, shapes: Iterable[tuple[str, tuple[int, ...]]]):
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

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_module(cls, module: nn.Module) -> "ParamSpace":
        """Parameters of ``module`` that require grad, in ``named_parameters`` order."""
        return cls((n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad)

    @classmethod
    def flat(cls, dim: int, name: str = "theta") -> "ParamSpace":
        """A space of one unnamed vector (user log densities)."""
        return cls([(name, (int(dim),))])

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
        plain scalar) gives the default. Every parameter must be matched.
        """
        kw = {} if like is None else {"dtype": like.dtype, "device": like.device}
        out = torch.empty(self.dim, **kw)
        if not isinstance(values, Mapping):
            return out.fill_(float(values))
        for info, v in self.first_match(values, "add a '*' default"):
            out[info.slice] = float(v)
        return out

    def first_match(self, patterns: Mapping[str, object], hint: str = "") -> list[tuple[ParamInfo, object]]:
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
        return {i.name: theta[..., i.slice].view(*lead, *i.shape) for i in self.params}

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
            if tuple(t.shape[-len(info.shape):] if info.shape else ()) != info.shape:
                raise ValueError(f"{info.name}: expected shape {info.shape}, got {tuple(t.shape)}")
            lead = t.shape[: t.dim() - len(info.shape)]
            parts.append(t.detach().reshape(*lead, info.numel))
        return torch.cat(parts, dim=-1)
