"""Shared pieces of the samplers: state saving, noise, validation, the iteration driver.

A sampler owns only its update math (optax/blackjax style, over explicit state):

* ``init(theta [C, P], generator) -> state``;
* ``update(state, grad, lr, generator) -> state``: one diffusion step, where ``grad`` is an
  estimate of ∇Û at ``state.theta`` from any gradient estimator (minibatch, control
  variate, structured energies); it works in place on the state's tensors (like
  ``torch.optim``) and returns the state;
* ``step(state, oracle, lr, generator) -> (state, info)``: one iteration of the chain —
  ``num_leapfrog`` updates, each with a fresh minibatch gradient from the
  :class:`~structmc.oracle.Oracle` — and ``info``, a small dict of what happened (at least
  ``"energy"``, the ``[C]`` minibatch energy at the last gradient; samplers add their own
  records, e.g. SGNHT's thermostat). The run loop adds the step size, the number of
  gradient evaluations and the clock, and stores every record in ``Chain.info``.
* ``prepare(energy) -> sampler``: a copy of the sampler set up for one run on ``energy``
  (pSGLD takes its ``num_data`` from the energy and checks it can give a Hessian diagonal),
  with its own scratch buffers, so copies never share mutable state.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..schedules import Schedule, as_schedule, check_int, check_number
from .adaptation import WindowAdaptation, as_adaptation, window_from_flat, window_to_flat

StepInfo = dict  # {"energy": [C] tensor, ...}: one iteration's records


def normal_like(x: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)


class Drawn:
    """The noise of one update, drawn before a compiled step from the run's generator
    (:mod:`structmc.compiled`): passed where the update takes its generator, it is what the
    update's noise draw returns."""

    __slots__ = ("noise",)

    def __init__(self, noise: Tensor):
        self.noise = noise


@runtime_checkable
class SweepSampler(Protocol):
    """A sampler whose iteration is a sweep over blocks of θ with its random numbers drawn first
    (Metropolis-within-Gibbs): the compiled step (:mod:`structmc.compiled`) draws them eagerly
    and traces :meth:`sweep`, whose decisions are selects (no host reads)."""

    def sweep_draws(self, state, oracle, generator) -> tuple: ...

    def sweep(self, state, draws: tuple, oracle, host_decisions: bool = True) -> tuple[Tensor, Tensor]: ...

    def sweep_info(self, state, energy: Tensor, accept: Tensor, evaluations: int) -> tuple[Any, dict]: ...

    def state_dict(self, state) -> dict: ...

    def load_state(self, d: dict) -> Any: ...


class NoiseBuffer:
    """Standard normal draws into one reused buffer: ``normal_`` in place is ~30% cheaper
    than allocating ``randn`` on CPU. The returned tensor is overwritten by the next draw."""

    def __init__(self):
        self._buf: Tensor | None = None
        self._like: Tensor | None = None  # the tensor the buffer was made for (samplers update in place)

    def __call__(self, x: Tensor, generator: torch.Generator | Drawn | None) -> Tensor:
        if isinstance(generator, Drawn):  # a compiled step: the noise was drawn before it
            return generator.noise
        buf = self._buf
        if x is not self._like and (
            buf is None or buf.shape != x.shape or buf.dtype != x.dtype or buf.device != x.device
        ):
            buf = self._buf = torch.empty_like(x)
        self._like = x
        assert buf is not None  # made above on first use
        return buf.normal_(generator=generator)


def check_nonnegative(name: str, value: float) -> float:
    value = check_number(name, value)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be >= 0 and finite, got {value}")
    return value


def check_positive(name: str, value: float) -> float:
    value = check_number(name, value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be > 0 and finite, got {value}")
    return value


def check_positive_int(name: str, value: int) -> int:
    try:
        return check_int(name, value, 1)
    except ValueError as err:
        raise ValueError(f"{name} must be a positive integer, got {value}") from err


def state_to_dict(state) -> dict[str, Any]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


class Sampler:
    """Base class of the SGMCMC samplers, a :class:`~structmc.samplers.Kernel` built from a
    diffusion: a subclass gives the update rule (``update(state, grad, lr, generator)``, the
    paper's equation, and ``begin`` for momentum resampling); :meth:`step` takes it
    ``num_leapfrog`` times on the gradient estimates of the oracle (the estimator — minibatch or
    control variate — is the oracle's, never the sampler's). Hyperparameters live on the
    sampler (configuration, never changed by a run: :meth:`prepare` copies), positions and
    momenta in its state. ``lr`` is a step-size schedule."""

    name = "sampler"
    State: type
    # a diagonal preconditioner adapted in burn-in windows (structmc.samplers.adaptation): private,
    # so that config() names it only when it is used (run folders written before it resume)
    _preconditioner: WindowAdaptation | None = None
    _layout: tuple | None = None

    def _set_preconditioner(self, value) -> None:
        self._preconditioner = as_adaptation(value)
        self._layout = None if self._preconditioner is None else self._preconditioner.layout()

    @property
    def preconditioner(self) -> WindowAdaptation | None:
        """The adapted diagonal preconditioner, or ``None``."""
        return self._preconditioner

    def __init__(self, lr: float | Schedule, temperature: float = 1.0, num_leapfrog: int = 1):
        self.lr = as_schedule(lr)
        self.temperature = check_nonnegative("temperature", temperature)
        self.num_leapfrog = check_positive_int("num_leapfrog", num_leapfrog)
        self._noise = NoiseBuffer()

    # -- interface ----------------------------------------------------------------------------
    def init(self, theta: Tensor, generator: torch.Generator | None = None):
        raise NotImplementedError

    def update(self, state, grad: Tensor, lr: float, generator: torch.Generator | None):
        raise NotImplementedError

    def begin(self, state, lr: float, generator: torch.Generator | None):
        """Hook before each iteration (momentum resampling); default: nothing."""
        return state

    def begin_changes_state(self) -> bool:
        """Whether :meth:`begin` changes the state (draws): a compiled block of iterations
        (``Compiled(block=k)``) runs only between iterations where it does not."""
        return False

    def records(self, state) -> dict:
        """The sampler's own records of an iteration besides the energy (SGNHT's thermostat)."""
        return {}

    def draws_noise(self, lr: float) -> bool:
        """Whether :meth:`update` at step size ``lr`` draws its one ``[C, P]`` standard normal
        (the compiled step draws it beforehand, in the same order: :mod:`structmc.compiled`)."""
        return self.temperature > 0

    def compile_blocker(self) -> str:
        """Why this sampler's update cannot be traced into a compiled step ("" when it can)."""
        if self._preconditioner is not None:
            return "the preconditioner's adaptation branches on the update count (not traced)"
        return ""

    def step(self, state, oracle, lr: float, generator: torch.Generator | None):
        """One iteration: ``num_leapfrog`` updates, each on a fresh minibatch gradient from
        ``oracle``; returns ``(state, info)`` with ``info["energy"]`` the ``[C]`` minibatch
        energy at the last gradient."""
        state = self.begin(state, lr, generator)
        energy = None
        for _ in range(self.num_leapfrog):
            energy, grad = oracle(state.theta)
            state = self.update(state, grad, lr, generator)
        return state, {"energy": energy, **self.records(state)}

    def prepare(self, energy) -> Sampler:
        """A copy for one run on ``energy``, with its own scratch buffers (never shared with
        the caller's sampler or another run). Subclasses take what they need from the energy
        here and raise ``ValueError`` when it cannot give it."""
        if self.lr is not None:
            lr0 = self.lr(0)
            if not (lr0 > 0 and math.isfinite(lr0)):
                raise ValueError(f"step size must be positive, got {lr0}")
        new = copy.copy(self)
        new._noise = NoiseBuffer()
        return new

    def target_energy(self, energy):
        """The energy this sampler runs on, given the run's (``num_data`` already set): the
        same by default; a Metropolis sampler may ask for the unscaled minibatch target."""
        return energy

    # -- saving -------------------------------------------------------------------------------
    def state_dict(self, state) -> dict[str, Any]:
        return window_to_flat(state_to_dict(state))  # a preconditioner's state, flat

    def load_state(self, d: dict[str, Any]):
        return self.State(**window_from_flat(d))

    def config(self) -> dict[str, Any]:
        """Hyperparameters, for reports and run folders."""
        out: dict[str, Any] = {"sampler": self.name}
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                out[k] = dataclasses.asdict(v) | {"kind": type(v).__name__}
            else:
                out[k] = v
        if self._preconditioner is not None:
            out["preconditioner"] = dataclasses.asdict(self._preconditioner) | {"kind": "WindowAdaptation"}
        return out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"
