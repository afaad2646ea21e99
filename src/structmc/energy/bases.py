"""The declared members' defaults (:class:`EnergyBase`), the one way to wrap an energy
(:class:`WrappedEnergy`), and the small helpers the energies share."""

from __future__ import annotations

import copy
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, Self, cast

import torch
from torch import Tensor

from .. import fingerprint
from ..space import ParamSpace
from .protocols import Batch, BufferedEnergy, CompilableEnergy, DrawSpaceEnergy, Energy, draw_space_of, from_draws_of


class EnergyBase:
    """The defaults of the members an :class:`Energy` declares (see there); subclass it and
    define ``space``, ``num_data``, ``value_and_grad``, ``value`` and ``with_num_data``.

    One model evaluation per call, no likelihood (``requires_data = False``), computes
    wherever θ lives, is its own control-variate base, keeps no per-chain buffers, checks
    nothing, and describes itself by a fingerprint of its class (code included) and
    attributes (``energy_object``)."""

    if TYPE_CHECKING:  # read-only members of Energy, which a subclass may define as properties

        @property
        def evaluations_per_call(self) -> int: ...

        @property
        def requires_data(self) -> bool: ...

        @property
        def device(self) -> torch.device | None: ...

        @property
        def dtype(self) -> torch.dtype | None: ...

        @property
        def has_buffers(self) -> bool: ...

        @property
        def buffer_chains(self) -> int | None: ...

        @property
        def compilable(self) -> bool: ...
    else:  # class attributes: a subclass may also set them on the instance
        evaluations_per_call = 1
        requires_data = False
        device = None  # computes wherever θ lives
        dtype = None
        has_buffers = False  # no per-chain buffers: buffer_chains is None, chain_buffers refuses
        buffer_chains = None
        # value_and_grad traces into one torch.compile graph (structmc.compiled): pure tensor code,
        # no Python-side state changed per call; an energy that is says so
        compilable = False

    @property
    def cv_base(self: Energy) -> Energy:
        return self

    # the draws are θ itself (DrawSpaceEnergy: a constrained log density's differ)
    @property
    def draw_space(self) -> ParamSpace:
        return cast(ParamSpace, getattr(self, "space"))  # noqa: B009  (every subclass defines space)

    def to_draws(self, theta: Tensor) -> Tensor:
        return theta

    def from_draws(self, x: Tensor, what: str = "init") -> Tensor:
        return x

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        raise ValueError(f"{type(self).__name__} keeps no per-chain buffers (has_buffers is False)")

    def buffer_state_dict(self) -> dict:
        raise ValueError(f"{type(self).__name__} keeps no buffers (has_buffers is False): nothing to save")

    def load_buffer_state_dict(self, state: dict) -> None:
        raise ValueError(f"{type(self).__name__} keeps no buffers (has_buffers is False): nothing to restore")

    def check(
        self,
        data: Sequence[Tensor] | None = None,
        init: Tensor | None = None,
        batch_size: int | None = None,
        batching: str | None = None,
        *,
        num_points: int | None = None,
    ) -> None:
        """Refuse, before any compute, what this energy cannot run on (see :class:`Energy`);
        by default nothing is checked."""

    def describe(self) -> dict:
        """What defines this energy (see :class:`Energy`): its class, code included, and its
        attributes (a wrapper's ``base`` apart), hashed as ``energy_object``."""
        part, unchecked = fingerprint.object_fingerprint(
            self, f"the energy {type(self).__qualname__}", exclude=("base",)
        )
        return _described(self, {"energy_object": part}, unchecked)

    def describe_v1(self) -> dict:
        """This level's parts of the version-1 fingerprint (what structmc 0.1 recorded, still
        compared against checkpoints it wrote: :func:`structmc.fingerprint.legacy_energy_fingerprint`);
        none by default."""
        return {}

    def levels(self) -> list:
        """This energy, then the energies it wraps, outermost first."""
        return [self]


class _Leveled(Protocol):
    """An energy that lists its levels (every :class:`EnergyBase`; version-1 fingerprints)."""

    def levels(self) -> list: ...


def _described(energy, parts: dict, unchecked: Sequence[str] = (), base: Energy | None = None) -> dict:
    """A ``describe()`` dict: kind, ``num_data``, ``parts``, what was not fingerprinted, the base's."""
    out = {"kind": type(energy).__name__, "num_data": energy.num_data, **parts}
    if unchecked:
        out["unfingerprintable"] = list(unchecked)
    if base is not None:
        out["base"] = base.describe()
    return out


class WrappedEnergy(EnergyBase):
    """An energy defined on top of another, ``base``: it forwards, by declaration, what the
    base defines — ``space`` (override the property where the wrapper changes the parameter
    space), ``num_data``, ``device``, ``dtype``, ``requires_data``, ``evaluations_per_call``,
    ``has_buffers``/``buffer_chains``/``chain_buffers``/``buffer_state_dict``/
    ``load_buffer_state_dict``, ``check`` and ``value`` /
    ``value_and_grad`` — and rebuilds itself around ``base.with_num_data(N)`` for
    ``with_num_data`` (through :meth:`with_base`: override it where a copy must not share
    state). ``describe()`` nests the base's under ``base``. ``cv_base`` is the wrapper itself
    (a control variate's centre term is the wrapped energy's), unless a subclass says otherwise.
    """

    def __init__(self, base: Energy):
        self.base = base

    @property
    def space(self) -> ParamSpace:
        return self.base.space

    @property
    def num_data(self) -> int | None:
        return self.base.num_data

    # the base's draws where the wrapper keeps its space (override both with ``space``)
    @property
    def draw_space(self) -> ParamSpace:
        return draw_space_of(self.base) if self.space is self.base.space else self.space

    def to_draws(self, theta: Tensor) -> Tensor:
        if self.space is not self.base.space or not isinstance(self.base, DrawSpaceEnergy):
            return theta
        return self.base.to_draws(theta)

    def from_draws(self, x: Tensor, what: str = "init") -> Tensor:
        if self.space is not self.base.space:
            return x
        return from_draws_of(self.base, x, what)

    @property
    def device(self) -> torch.device | None:
        return self.base.device

    @property
    def dtype(self) -> torch.dtype | None:
        return self.base.dtype

    @property
    def requires_data(self) -> bool:
        return self.base.requires_data

    @property
    def evaluations_per_call(self) -> int:
        return self.base.evaluations_per_call

    @property
    def has_buffers(self) -> bool:
        return self.base.has_buffers

    @property
    def compilable(self) -> bool:
        return isinstance(self.base, CompilableEnergy) and self.base.compilable

    @property
    def buffer_chains(self) -> int | None:
        return cast(BufferedEnergy, self.base).buffer_chains

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        return cast(BufferedEnergy, self.base).chain_buffers(chain)

    def buffer_state_dict(self) -> dict:
        return cast(BufferedEnergy, self.base).buffer_state_dict()

    def load_buffer_state_dict(self, state: dict) -> None:
        cast(BufferedEnergy, self.base).load_buffer_state_dict(state)

    def levels(self) -> list:
        return [self, *cast(_Leveled, self.base).levels()]

    def with_base(self, base: Energy) -> Self:
        """A copy of this wrapper around ``base`` (a shallow copy by default)."""
        new = copy.copy(self)
        new.base = base
        return new

    def with_num_data(self, num_data) -> Self:
        return self.with_base(self.base.with_num_data(num_data))

    def check(
        self,
        data: Sequence[Tensor] | None = None,
        init: Tensor | None = None,
        batch_size: int | None = None,
        batching: str | None = None,
        *,
        num_points: int | None = None,
    ) -> None:
        """The base's checks."""
        self.base.check(data, init, batch_size, batching, num_points=num_points)

    def describe(self) -> dict:
        """:meth:`EnergyBase.describe` of the wrapper (its own attributes), the base's under ``base``."""
        out = super().describe()
        out["base"] = self.base.describe()
        return out

    def value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return self.base.value_and_grad(theta, batch)

    def value(self, theta: Tensor, batch: Batch) -> Tensor:
        return self.base.value(theta, batch)


def _as_num_data(num_data) -> int | None:
    """``num_data`` as a positive int (``None`` stays ``None``); a non-integer N (``100.5``)
    or a bool is an error, never a truncation."""
    if num_data is None:
        return None
    if isinstance(num_data, (bool, str, bytes)):
        raise ValueError(f"num_data must be a positive integer, got {num_data!r}")
    try:
        n = operator.index(num_data)
    except TypeError:
        try:
            f = float(num_data)
        except (TypeError, ValueError):
            raise ValueError(f"num_data must be a positive integer, got {num_data!r}") from None
        if not f.is_integer():
            raise ValueError(
                f"num_data must be a positive integer (the number of data points), got {num_data!r}"
            ) from None
        n = int(f)
    if n < 1:
        raise ValueError(f"num_data must be positive, got {num_data!r}")
    return int(n)
