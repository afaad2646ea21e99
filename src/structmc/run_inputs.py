"""Argument checks and input shaping shared by :class:`~structmc.run.Run`, :func:`~structmc.run.sample`
and the tuners' :class:`~structmc.tuning.Problem`: integers, draws, data, initial positions."""

from __future__ import annotations

import copy
import math
import numbers
import operator
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from .batching import DataSource
from .energy import Energy, draw_space_of, from_draws_of
from .execution import Execution


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


def init_width(init) -> int | None:
    """The width of a flat ``init`` (a bare log density's ``dim``); ``None`` for none or a
    mapping of named values."""
    return None if init is None or isinstance(init, Mapping) else torch.as_tensor(init).shape[-1]


def initial_positions(energy: Energy, init, num_chains: int) -> Tensor:
    """θ ``[num_chains, P]`` from ``init``: ``[P]`` or ``[num_chains, P]`` in the draws' space
    (a constrained log density's: mapped to θ through its bijections), a mapping
    ``{name: value}`` over that space's parameters, or ``None`` for the energy's
    ``initial_position()``."""
    space = draw_space_of(energy)
    if isinstance(init, Mapping):
        missing = [n for n in space.names if n not in init]
        unknown = [n for n in init if n not in space.names]
        if missing or unknown:
            raise ValueError(f"init names the parameters {space.names}: missing {missing}, unknown {unknown}")
        init = space.flatten({n: torch.as_tensor(init[n], dtype=torch.get_default_dtype()) for n in space.names})
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
    P = space.dim
    if init.dim() == 1 and init.shape[0] == P:
        theta = from_draws_of(energy, init.detach())
        return theta.unsqueeze(0).expand(num_chains, theta.shape[0]).clone()
    if init.dim() == 2 and init.shape == (num_chains, P):
        return from_draws_of(energy, init.detach()).clone()
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

__all__ = ["Budget", "check_int", "check_draws", "as_source", "as_data", "initial_positions", "init_width"]

Budget.__module__ = "structmc.run"  # its documented home


KERNEL_MEMBERS = ("name", "lr", "target_energy", "prepare", "init", "step", "state_dict", "load_state", "config")


def check_kernel_state(sampler, state, theta0: Tensor) -> None:
    """The state a kernel's ``init`` returns must carry the position as ``state.theta``, a tensor
    shaped like the initial positions ``[chains, parameters]`` (issue 36 §19): the run reads the
    draws from it. Refused at set-up, naming the member."""
    theta = getattr(state, "theta", None)
    if not isinstance(theta, Tensor) or theta.shape != theta0.shape:
        got = (
            f"a {type(state).__name__} without a .theta attribute"
            if theta is None
            else f".theta of {type(theta).__name__}"
            + (f" shaped {list(theta.shape)}" if isinstance(theta, Tensor) else "")
        )
        raise TypeError(
            f"{type(sampler).__name__}.init must return a state whose .theta is the position, a tensor "
            f"[chains, parameters] = {list(theta0.shape)} (e.g. a dataclass with a theta field); got {got}"
        )


def check_sampler(sampler) -> None:
    """A structmc kernel, refused at set-up naming the members it lacks."""
    from .samplers.kernel import Kernel

    if not isinstance(sampler, Kernel):  # the protocol's members, once at set-up
        missing = [m for m in KERNEL_MEMBERS if not hasattr(sampler, m)]
        raise TypeError(
            f"sampler must be a structmc sampler (SGLD(...), MetropolisWithinGibbs(...), ...: a "
            f"structmc.samplers.Kernel), got {type(sampler).__name__}"
            + (f", which lacks {', '.join(missing)}" if missing else "")
        )


def check_run_options(seed, num_chains, check_every, batching) -> tuple[int, int, int]:
    """``(seed, num_chains, check_every)`` checked before any compute."""
    from .batching import MODES

    num_chains = check_int("num_chains", num_chains, 1)
    check_every = check_int("check_every", check_every, 1)
    seed = check_int("seed", seed, 0)
    if seed >= 2**64:
        raise ValueError(f"seed must be below 2**64 (a torch.Generator seed), got {seed}")
    if batching not in MODES:
        raise ValueError(f"batching must be one of {MODES}, got {batching!r}")
    return seed, num_chains, check_every


def check_batch_size(batch_size, num_points) -> int | None:
    """The minibatch size checked against the data (``None``: the full batch)."""
    if batch_size is None:
        return None
    batch_size = check_int("batch_size", batch_size, 1)
    if num_points is None:
        raise ValueError("batch_size was given but there is no data")
    if batch_size > num_points:
        raise ValueError(f"batch_size ({batch_size}) exceeds the number of data points ({num_points})")
    return batch_size


@dataclass
class PreparedTarget:
    """The energy a run samples and what it was checked on (:func:`prepared_target`)."""

    energy: Energy
    theta0: Tensor
    data: tuple[Tensor, ...] | None  # in-memory tensors (None with a Dataset)
    given_data: tuple[Tensor, ...] | None  # as given (fingerprinted)
    source: DataSource | None
    probe: tuple[Tensor, ...] | None  # a Dataset's first items
    batch_size: int | None
    on_dataset: bool

    @property
    def checked_data(self):
        return self.probe if self.on_dataset else self.data

    @property
    def described(self) -> tuple:
        """What the run's data fingerprint is taken from: the data as given, the source, the probe."""
        return self.given_data, self.source, self.probe


def prepared_target(target, init, data, batch_size, batching, num_chains, check) -> PreparedTarget:
    """The run's energy (``num_data`` set to the data's length when ``None``; a stateful one
    replaced by a fresh copy) and initial positions, refused before any compute where the data,
    the start or ``check(energy, source, data)`` (the execution's) says so, then the energy's own
    :meth:`~structmc.energy.Energy.check`."""
    from .energy import StatefulEnergy, as_energy

    source, data = as_source(data)  # a Dataset (or a per-batch transform): DataSource; tensors: data
    on_dataset = source is not None and source.dataset is not None
    probe = source.probe() if on_dataset else None
    num_points = (
        None if data is None and source is None else (len(source) if source is not None else int(data[0].shape[0]))
    )
    batch_size = check_batch_size(batch_size, num_points)
    energy = as_energy(target, init_width(init))
    if num_points is not None and energy.num_data is None:
        energy = energy.with_num_data(num_points)
    elif isinstance(energy, StatefulEnergy):
        energy = energy.fresh()
    if num_points is None and energy.requires_data:
        raise ValueError(f"{type(energy).__name__} has a likelihood and needs data=(inputs..., targets)")
    check(energy, source, data)
    theta0 = initial_positions(energy, init, num_chains)
    if not bool(torch.isfinite(theta0).all()):
        raise ValueError("init contains NaN or Inf")
    # the energy's own checks before any compute: dtypes, widths, labels (a Dataset: its first
    # items), minibatch sizes (split-batch structured energies), a prior excluding the start
    try:
        energy.check(probe if on_dataset else data, theta0, batch_size, batching, num_points=num_points)
    except (ValueError, TypeError) as err:
        if on_dataset and getattr(err, "about_data", False):
            raise type(err)(f"the Dataset's items do not match the energy: {err}") from None
        raise
    return PreparedTarget(energy, theta0, data, data, source, probe, batch_size, on_dataset)


def run_settings(energy, sampler, estimator, theta0: Tensor, seed: int, batch_size, batching) -> dict:
    """What defines a run besides its target (resume refuses a mismatch); ``target`` is filled
    in by :meth:`~structmc.run.Run.settings` (it hashes the data, once)."""
    return {
        "seed": seed,
        "num_chains": int(theta0.shape[0]),
        "batch_size": batch_size,
        "batching": batching,
        "num_data": energy.num_data,
        "dim": energy.space.dim,
        "dtype": str(theta0.dtype).replace("torch.", ""),
        # the layout of the draws (run folders hold them): a constrained log density's draw space
        "space": [(i.name, list(i.shape)) for i in draw_space_of(energy).params],
        "layers": draw_space_of(energy).to_config()["layers"],
        "config": {"sampler": sampler.config(), "gradient": estimator.config()},
        "target": None,
    }


EXECUTIONS = ("eager", "compiled")


def as_execution(execution: str | Execution | None, distributed=None) -> Execution:
    """The run's strategy: ``"eager"`` (or ``None``), ``"compiled"``, an :class:`Execution`
    (copied: one per run), or, with ``distributed`` (``True`` or
    :class:`~structmc.distributed.Distributed`), the data-parallel one."""
    if distributed is not None and distributed is not False:
        from .distributed import DistributedExecution, as_distributed

        options = as_distributed(distributed)
        if options is not None:
            if execution not in (None, "eager") and not isinstance(execution, DistributedExecution):
                raise ValueError(
                    f"execution={execution!r} with distributed=True: a compiled step is not combined with the "
                    "data-parallel one yet; use execution='eager' (the default) with distributed=True"
                )
            return DistributedExecution(options)
    if execution is None or execution == "eager":
        return Execution()
    if execution == "compiled":
        from .compiled import Compiled

        return Compiled()
    if isinstance(execution, Execution):
        return copy.copy(execution)
    raise ValueError(
        f"execution must be one of {EXECUTIONS} or a structmc.execution.Execution (e.g. "
        f"structmc.compiled.Compiled(mode=...)), got {execution!r}"
    )
