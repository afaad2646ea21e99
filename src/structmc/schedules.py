"""Step-size schedules ``t -> lr_t`` (t = 0, 1, ... counts sampler iterations).

Every sampler accepts a float or one of these for ``lr``. Schedules are small frozen
dataclasses, so they are printed, saved in run reports and compared by value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


class Schedule:
    def __call__(self, t: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Schedule):
    lr: float

    def __post_init__(self):
        _positive("lr", self.lr)

    def __call__(self, t: int) -> float:
        return self.lr


@dataclass(frozen=True)
class Polynomial(Schedule):
    """``a (b + t)^(-gamma)`` (Welling & Teh 2011; gamma in (0.5, 1] for convergence)."""

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __post_init__(self):
        _positive("a", self.a)
        _positive("b", self.b)
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must lie in [0, 1], got {self.gamma}")

    def __call__(self, t: int) -> float:
        return self.a * (self.b + t) ** (-self.gamma)


@dataclass(frozen=True)
class StepDecay(Schedule):
    """``lr * factor^floor(t / every)``; the pSGLD experiments halve every 20 epochs, i.e.
    ``every = 20 * steps_per_epoch(N, batch_size)``."""

    lr: float
    every: int
    factor: float = 0.5

    def __post_init__(self):
        _positive("lr", self.lr)
        if int(self.every) < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        if not 0 < self.factor <= 1:
            raise ValueError(f"factor must lie in (0, 1], got {self.factor}")

    def __call__(self, t: int) -> float:
        return self.lr * self.factor ** (t // int(self.every))


@dataclass(frozen=True)
class Cyclical(Schedule):
    """Cosine cycles of Zhang et al. (2020), eq. 1:
    ``lr_t = lr/2 · (cos(π · (t mod L) / L) + 1)`` with ``L = ceil(num_steps / num_cycles)``."""

    lr: float
    num_steps: int
    num_cycles: int = 4

    def __post_init__(self):
        _positive("lr", self.lr)
        if int(self.num_cycles) < 1 or int(self.num_steps) < int(self.num_cycles):
            raise ValueError("need 1 <= num_cycles <= num_steps")

    @property
    def cycle_length(self) -> int:
        return math.ceil(self.num_steps / self.num_cycles)

    def __call__(self, t: int) -> float:
        L = self.cycle_length
        return 0.5 * self.lr * (math.cos(math.pi * (t % L) / L) + 1.0)


def steps_per_epoch(num_data: int, batch_size: int) -> int:
    """Iterations in one epoch of :func:`structmc.sample`'s epoch batching (last partial batch dropped)."""
    return max(1, int(num_data) // int(batch_size))


def as_schedule(lr: float | Schedule) -> Schedule:
    if isinstance(lr, Schedule):
        return lr
    if callable(lr):
        raise TypeError("pass a structmc.schedules.Schedule (or a float), not a bare function")
    return Constant(float(lr))


SCHEDULES = {"constant": Constant, "polynomial": Polynomial, "step_decay": StepDecay, "cyclical": Cyclical}


def schedule_from_config(cfg: float | dict | Schedule) -> Schedule:
    """``0.01``, a :class:`Schedule`, or ``{"kind": "step_decay", "lr": 5e-4, "every": 12000}``.

    ``kind`` is a key of :data:`SCHEDULES` or a class name (``"StepDecay"``), so the
    ``{"kind": "StepDecay", ...}`` that ``Sampler.config()`` writes for its ``lr`` reads back.
    """
    if isinstance(cfg, Schedule):
        return cfg
    if isinstance(cfg, (int, float)) and not isinstance(cfg, bool):
        return Constant(float(cfg))
    if not isinstance(cfg, dict):
        raise ValueError(f"a schedule is a number or a dict with 'kind', got {cfg!r}")
    cfg = dict(cfg)
    kind = cfg.pop("kind", "constant")
    by_class = {cls.__name__: cls for cls in SCHEDULES.values()}
    cls = SCHEDULES.get(kind) or by_class.get(kind)
    if cls is None:
        raise ValueError(f"unknown schedule {kind!r}; choose from {sorted(SCHEDULES)}")
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(cfg) - set(fields))
    if unknown:
        raise ValueError(f"schedule {kind!r}: unknown key(s) {unknown}; it accepts {', '.join(fields)}")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in cfg
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"schedule {kind!r} needs {', '.join(missing)}")
    return cls(**cfg)
