"""Argument checks and input shaping shared by :class:`~structmc.run.Run`, :func:`~structmc.run.sample`
and the tuners' :class:`~structmc.tuning.Problem`: integers, draws, data, initial positions."""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass

import torch
from torch import Tensor

from .batching import DataSource
from .energy import Energy


@dataclass(frozen=True)
class Budget:
    """How far one :meth:`Run.iterate` call goes: it stops after the first iteration that
    reaches any of the limits given (counted from the start of that call). ``seconds`` is
    time spent in sampler steps (set-up, recording and checkpoints excluded); ``grad_evals``
    counts model gradient evaluations per chain (a control variate costs 2 per update,
    S-SGMCMC M, Sd-SGMCMC K)."""

    iterations: int | None = None
    seconds: float | None = None
    grad_evals: int | None = None

    def __post_init__(self):
        if self.iterations is None and self.seconds is None and self.grad_evals is None:
            raise ValueError("a Budget needs iterations, seconds or grad_evals")
        for name in ("iterations", "grad_evals"):
            v = getattr(self, name)
            if v is not None and not (
                isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and int(v) == v and v >= 0
            ):
                raise ValueError(f"Budget.{name} must be a non-negative integer, got {v!r}")
        s = self.seconds
        if s is not None and not (
            isinstance(s, numbers.Real) and not isinstance(s, bool) and s >= 0 and math.isfinite(s)
        ):
            raise ValueError(f"Budget.seconds must be a number >= 0 and finite, got {s!r}")


def _as_budget(budget) -> Budget | None:
    if budget is None or isinstance(budget, Budget):
        return budget
    if isinstance(budget, int) and not isinstance(budget, bool):
        return Budget(iterations=budget)
    raise TypeError(f"budget must be a Budget or a number of iterations, got {budget!r}")


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as an ``int`` >= ``minimum``. Only integers are taken (Python, NumPy or 0-d
    integer tensors): a float such as ``2.0`` or a bool is refused here, with the argument's
    name, rather than failing later inside torch (``torch.empty(2.0, ...)``)."""
    if isinstance(value, (bool, float)) or (isinstance(value, Tensor) and value.is_floating_point()):
        what = "a bool" if isinstance(value, bool) else "a float"
        hint = f": pass {int(value)}" if isinstance(value, float) and value.is_integer() and value >= minimum else ""
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r} ({what}){hint}")
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(number)


def check_draws(num_steps: int, burn_in: int, thin: int) -> int:
    if burn_in >= num_steps:
        raise ValueError(f"burn_in ({burn_in}) must be smaller than num_steps ({num_steps})")
    num_draws = (num_steps - burn_in) // thin
    if num_draws < 1:
        raise ValueError(
            f"no draw would be kept: (num_steps - burn_in) // thin = 0 "
            f"(num_steps={num_steps}, burn_in={burn_in}, thin={thin})"
        )
    return num_draws


def as_source(data):
    """``(DataSource or None, in-memory tensors or None)``: a map-style Dataset (not a
    TensorDataset) or a :class:`DataSource` over one goes to the dataset stream; tensors (and a
    DataSource over tensors, which only adds a transform) stay in memory."""
    from torch.utils.data import Dataset

    if isinstance(data, DataSource):
        return data, (as_data(data.tensors) if data.tensors is not None else None)
    if isinstance(data, Dataset) and not hasattr(data, "tensors"):
        return DataSource(data), None
    return None, as_data(data)


def as_data(data) -> tuple[Tensor, ...] | None:
    if data is None:
        return None
    if isinstance(data, Tensor):
        return (data,)
    if hasattr(data, "tensors"):  # torch.utils.data.TensorDataset
        data = data.tensors
    data = tuple(data)
    if not data or not all(isinstance(t, Tensor) for t in data):
        raise ValueError("data must be a tensor, a TensorDataset or a sequence of tensors")
    meta = [i for i, t in enumerate(data) if t.is_meta]
    if meta:
        raise ValueError(
            f"data tensor {meta[0]} is on the meta device (a shape without values): pass tensors that hold the data"
        )
    n = data[0].shape[0] if data[0].dim() > 0 else 0
    if n < 1 or any(t.dim() == 0 or t.shape[0] != n for t in data):
        raise ValueError(
            f"all data tensors need the same non-zero first dimension, got {[tuple(t.shape) for t in data]}"
        )
    return data


def initial_positions(energy: Energy, init, num_chains: int) -> Tensor:
    if init is None:
        if not hasattr(energy, "initial_position"):
            raise ValueError(f"init is required: {type(energy).__name__} has no initial_position()")
        init = energy.initial_position()
    if not isinstance(init, Tensor):
        init = torch.as_tensor(init)
    if init.is_meta:
        raise ValueError(
            "init is on the meta device (a shape without values): pass positions that hold values, e.g. "
            "energy.initial_position() or torch.zeros(P)"
        )
    if not init.is_floating_point():
        init = init.to(torch.get_default_dtype())
    init = init.to(device=energy.device or init.device, dtype=energy.dtype or init.dtype)
    P = energy.space.dim
    if init.dim() == 1 and init.shape[0] == P:
        return init.detach().unsqueeze(0).expand(num_chains, P).clone()
    if init.dim() == 2 and init.shape == (num_chains, P):
        return init.detach().clone()
    raise ValueError(
        f"init must have shape [{P}] or [{num_chains}, {P}] (num_chains={num_chains}), got {tuple(init.shape)}"
    )


# the names the run loop and the tuners used when these lived in structmc.run
_check_int, _check_draws, _as_source, _as_data, _initial_positions = (
    check_int,
    check_draws,
    as_source,
    as_data,
    initial_positions,
)

__all__ = ["Budget", "check_int", "check_draws", "as_source", "as_data", "initial_positions"]

Budget.__module__ = "structmc.run"  # its documented home
