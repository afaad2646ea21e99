"""Step-size schedules ``t -> lr_t`` (t = 0, 1, ... counts sampler iterations).

Every sampler accepts a float or one of these for ``lr``. Schedules are small frozen
dataclasses, so they are printed, saved in run reports and compared by value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


def check_number(name: str, value) -> float:
    """``value`` as a float; ``None``, a bool, a string or anything else that is not a real
    number is a ``TypeError`` naming the argument (``float("0.1")`` would let a string through)."""
    if value is None or isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError) as err:  # RuntimeError: a tensor of several elements
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from err


def check_int(name: str, value, minimum: int | None = None) -> int:
    """``value`` as an int, refusing what ``int()`` would silently truncate: a bool, a string
    or ``None`` is a ``TypeError``, a non-integral number (``2.5``) or one below ``minimum`` a
    ``ValueError``; both name the argument. Integral floats (``2000.0``) are accepted."""
    if value is None or isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    try:
        as_int = int(value)
        integral = as_int == value
    except (TypeError, ValueError, OverflowError, RuntimeError) as err:
        if isinstance(err, (ValueError, OverflowError)):  # NaN, inf
            raise ValueError(f"{name} must be an integer, got {value!r}") from err
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from err
    if not integral:
        raise ValueError(f"{name} must be an integer, got {value!r} (not truncated to {as_int})")
    if minimum is not None and as_int < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return as_int


def _positive(name: str, value: float) -> float:
    value = check_number(name, value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


class Schedule:
    # the value changes only now and then (a constant, a step decay): the compiled step
    # (structmc.compiled) compiles once per value; one that changes every iteration runs eagerly
    piecewise_constant = False

    def __call__(self, t: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Schedule):
    lr: float
    piecewise_constant = True

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
        if not 0 <= check_number("gamma", self.gamma) <= 1:
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
    piecewise_constant = True

    def __post_init__(self):
        _positive("lr", self.lr)
        check_int("every", self.every, 1)
        if not 0 < check_number("factor", self.factor) <= 1:
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
        if check_int("num_cycles", self.num_cycles, 1) > check_int("num_steps", self.num_steps, 1):
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
    if lr is None or isinstance(lr, (bool, str, bytes)):
        raise TypeError(
            f"lr must be a positive number or a structmc.schedules.Schedule, got {lr!r} ({type(lr).__name__})"
        )
    return Constant(check_number("lr", lr))


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
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in cfg and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"schedule {kind!r} needs {', '.join(missing)}")
    return cls(**cfg)
