"""The one run loop: a :class:`Run` advanced by :meth:`Run.iterate` (:func:`structmc.sample` composes it
with recorders and a checkpointer; all its names are importable from :mod:`structmc.run`).

:class:`Run` holds everything a chain needs between iterations — the energy (a private copy
when it keeps state), the sampler and its state, the gradient oracle, the minibatch stream
and the run's single ``torch.Generator`` — and yields ``(iteration, state, info)`` one
iteration at a time, for a :class:`Budget` (iterations, seconds of sampling, gradient
evaluations) or until a predicate holds. Its final state stays in memory: a tuner can run an
arm for a budget, score it and continue it.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from torch import Tensor

from . import fingerprint
from .batching import MODES, DatasetStream, MinibatchStream, TransformedStream
from .chain import Chain
from .distributed import Context, Distributed, DistributedOracle, ShareStream, as_distributed
from .energy import Energy, StatefulEnergy, as_energy
from .energy.protocols import BufferedEnergy
from .energy_checks import warn_below_resolution
from .gradients import ControlVariate, Minibatch, as_estimator
from .oracle import Oracle
from .recording import InfoLog, Progress
from .run_inputs import Budget, _as_budget, as_source, check_int, initial_positions
from .samplers.kernel import Kernel

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


class DivergenceError(FloatingPointError):
    """The chain produced NaN/Inf. ``.chain`` holds the draws kept before it happened."""

    finite = False  # True for a blow-up stop: its iteration is finite, its draw and records are kept

    def __init__(self, message: str, step: int, chain: Chain | None = None):
        super().__init__(message)
        self.step = step
        self.chain = chain

    def __reduce__(self):  # pickles across processes (executors) with its step and chain
        return (type(self), (str(self), self.step, self.chain))


class Run:
    """A prepared chain (``num_chains`` chains batched), advanced one iteration at a time.

    Arguments as in :func:`sample`. Everything is validated and set up here, before any
    sampling compute; the energy's ``num_data`` is set to ``len(data)`` when it is ``None``,
    and an energy that keeps state across iterations (structured SGMCMC) is replaced by a
    ``fresh()`` copy, so the caller's objects are never mutated and two runs never share
    state. ``run.energy``, ``run.sampler`` (prepared copy), ``run.state``, ``run.iteration``
    (iterations done), ``run.elapsed`` (seconds in steps), ``run.grad_evals`` describe it.
    ``distributed=True`` (or a :class:`~structmc.distributed.Distributed`): the ranks of the
    initialised process group compute each gradient together (:mod:`structmc.distributed`);
    ``run.distributed`` is then its context (rank, world size, ``comm_seconds``).
    """

    def __init__(
        self,
        target: Energy | Callable,
        init: Tensor | None,
        sampler: Kernel,
        *,
        data: Sequence[Tensor] | None = None,
        batch_size: int | None = None,
        batching: str = "epoch",
        seed: int = 0,
        num_chains: int = 1,
        gradient: str | Minibatch | ControlVariate = "minibatch",
        check_every: int = 32,
        distributed: bool | Distributed | None = None,
    ):
        dist_options = as_distributed(distributed)
        if not isinstance(sampler, Kernel):  # the protocol's members, once at set-up
            missing = [m for m in KERNEL_MEMBERS if not hasattr(sampler, m)]
            raise TypeError(
                f"sampler must be a structmc sampler (SGLD(...), MetropolisWithinGibbs(...), ...: a "
                f"structmc.samplers.Kernel), got {type(sampler).__name__}"
                + (f", which lacks {', '.join(missing)}" if missing else "")
            )
        num_chains = check_int("num_chains", num_chains, 1)
        self.check_every = check_int("check_every", check_every, 1)
        seed = check_int("seed", seed, 0)
        if seed >= 2**64:
            raise ValueError(f"seed must be below 2**64 (a torch.Generator seed), got {seed}")
        if batching not in MODES:
            raise ValueError(f"batching must be one of {MODES}, got {batching!r}")
        source, data = as_source(data)  # a Dataset (or a per-batch transform): DataSource; tensors: data
        probe = source.probe() if source is not None and source.dataset is not None else None
        given_data = data
        num_points = (
            None if data is None and source is None else (len(source) if source is not None else int(data[0].shape[0]))
        )
        if batch_size is not None:
            batch_size = check_int("batch_size", batch_size, 1)
            if num_points is None:
                raise ValueError("batch_size was given but there is no data")
            if batch_size > num_points:
                raise ValueError(f"batch_size ({batch_size}) exceeds the number of data points ({num_points})")
        energy = as_energy(target, None if init is None else torch.as_tensor(init).shape[-1])
        if num_points is not None and energy.num_data is None:
            energy = energy.with_num_data(num_points)
        elif isinstance(energy, StatefulEnergy):
            energy = energy.fresh()
        if num_points is None and energy.requires_data:
            raise ValueError(f"{type(energy).__name__} has a likelihood and needs data=(inputs..., targets)")
        on_dataset = source is not None and source.dataset is not None
        context = None if dist_options is None else _distributed_context(dist_options, sampler, energy, source, data)
        theta0 = initial_positions(energy, init, num_chains)
        if not bool(torch.isfinite(theta0).all()):
            raise ValueError("init contains NaN or Inf")
        # the energy's own checks (Energy.check), before any compute: dtypes, widths, labels (a
        # Dataset: on its first items), minibatch sizes (split-batch structured energies), a prior
        # whose support excludes the start
        try:
            energy.check(probe if on_dataset else data, theta0, batch_size, batching, num_points=num_points)
        except (ValueError, TypeError) as err:
            if on_dataset and getattr(err, "about_data", False):
                raise type(err)(f"the Dataset's items do not match the energy: {err}") from None
            raise
        self._theta0, self._data = theta0, (probe if on_dataset else data)  # read to explain a divergence at 1
        energy = sampler.target_energy(energy)
        if context is not None and energy.num_data is None:  # the ranks' shares are averaged: N/n scaling
            raise ValueError(
                "distributed=True averages the ranks' N/n-scaled estimates of the energy, but this sampler asks for "
                "the unscaled minibatch energy (MetropolisWithinGibbs(scaling='none')): use scaling='N/n' (with the "
                "full data, batch_size=None, the two are the same target)"
            )
        sampler = sampler.prepare(energy)
        warn_below_resolution(energy, sampler, theta0, probe if on_dataset else data)  # float16/bfloat16 SGLD
        estimator = copy.copy(as_estimator(gradient))  # prepared per run: never the caller's object
        if on_dataset and not isinstance(estimator, Minibatch):
            raise ValueError(
                "a control variate needs the full-data gradient: give the data as in-memory tensors, not a Dataset"
            )

        # set-up, in the order that fixes the random stream (generator, stream, init draws)
        device = theta0.device
        if data is not None:
            data = tuple(t.to(device) for t in data)
        self.energy, self.sampler, self.estimator = energy, sampler, estimator
        self.num_chains, self.seed = num_chains, seed
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.stream: DatasetStream | TransformedStream | MinibatchStream | None
        if context is not None:
            assert data is not None  # refused without in-memory data by _distributed_context
            self.stream = ShareStream(
                data, batch_size, num_chains, self.generator, batching, context.world_size, context.rank
            )
        elif on_dataset:
            self.stream = DatasetStream(source, batch_size, num_chains, self.generator, batching, device)
        elif data is not None and source is not None and source.transform is not None:
            self.stream = TransformedStream(data, batch_size, num_chains, self.generator, batching, source.transform)
        else:
            self.stream = (
                MinibatchStream(data, batch_size, num_chains, self.generator, batching) if data is not None else None
            )
        # isinstance on a runtime Protocol costs ~13 µs: decide once, not per iteration
        self._observe = energy.observe if isinstance(energy, StatefulEnergy) else None
        if self._observe is not None:
            energy.start(theta0)
        if context is not None:
            _distributed_setup(context, energy, sampler, estimator, theta0, data, seed, batch_size, batching)
        estimator.prepare(energy, data, theta0)
        self.distributed = context
        self._sync_every = 0
        if context is not None:
            assert isinstance(self.stream, ShareStream)
            self.oracle: Oracle = DistributedOracle(energy, estimator, self.stream, self.generator, context)
            self._sync_every = context.options.sync_check_every or self.check_every
        else:
            self.oracle = Oracle(energy, estimator, self.stream, self.generator)
        self.state = sampler.init(theta0, self.generator)
        check_kernel_state(sampler, self.state, theta0)
        self.iteration = 0
        self.elapsed = 0.0
        self._unchecked: list[tuple[Tensor, object, float | None]] = []  # (total, energy, lr) per iteration
        self._settings = {
            "seed": seed,
            "num_chains": num_chains,
            "batch_size": batch_size,
            "batching": batching,
            "num_data": energy.num_data,
            "dim": energy.space.dim,
            "dtype": str(theta0.dtype).replace("torch.", ""),
            "space": [(i.name, list(i.shape)) for i in energy.space.params],
            "layers": energy.space.to_config()["layers"],
            "config": {"sampler": sampler.config(), "gradient": estimator.config()},
            "target": None,  # filled by settings(): see below
        }
        if context is not None:  # absent on one process: the folders of earlier runs still resume
            self._settings["world_size"] = context.world_size
        # the target's fingerprint (resume refuses another target): the energy's parts now, the
        # data's at the first settings() (every byte is hashed, ~0.2 s per 188 MB; a tuner's runs
        # never ask for it)
        self._pending_target: tuple | None = (
            fingerprint.energy_fingerprint(energy),
            fingerprint.legacy_energy_fingerprint(energy),
            given_data,
            source,
            probe,
        )

    # -- advancing ---------------------------------------------------------------------------
    @property
    def grad_evals(self) -> int:
        return self.oracle.grad_evals

    @property
    def theta(self) -> Tensor:
        """Current positions ``[C, P]``."""
        return self.state.theta

    def step(self) -> dict:
        """One iteration; returns its info (the sampler's records plus ``lr``, ``grad_evals``
        and ``time``, the seconds spent in steps so far).

        NaN/Inf is checked without a device-to-host read per iteration: each iteration adds
        ``Σ energy + Σ θ`` (non-finite iff either is) to a list that is read in one transfer
        every ``check_every`` iterations and by :meth:`check_finite`. A divergence therefore
        raises :class:`DivergenceError` up to ``check_every - 1`` iterations late, naming the
        first non-finite iteration (exactly, from the list)."""
        t = self.iteration
        lr = self.sampler.lr(t) if self.sampler.lr is not None else None
        evals = self.oracle.grad_evals
        if self.distributed is not None:
            self.distributed.iteration = t + 1  # named by a failing collective
        t0 = time.perf_counter()
        self.state, info = self.sampler.step(self.state, self.oracle, lr, self.generator)
        if self._observe is not None:
            self._observe(self.state.theta)
        self.elapsed += time.perf_counter() - t0
        self.iteration = t + 1
        if self._sync_every and self.iteration % self._sync_every == 0:
            assert self.distributed is not None  # _sync_every is set with it
            self.distributed.check_in_sync(self.state.theta, self.iteration)
        energy = info.get("energy")
        total = self.state.theta.sum() if energy is None else energy.sum() + self.state.theta.sum()
        self._unchecked.append((total, energy, lr))
        if len(self._unchecked) >= self.check_every:
            self.check_finite()
        if lr is not None:
            info["lr"] = lr
        info["grad_evals"] = self.oracle.grad_evals - evals
        info["time"] = self.elapsed
        return info

    def check_finite(self) -> None:
        """Read the NaN/Inf flags of the iterations not checked yet (one device-to-host
        transfer); raise :class:`DivergenceError` naming the first non-finite iteration.
        The run loop calls it every ``check_every`` iterations, at the end of every
        :meth:`iterate` and before anything is written to a run folder."""
        pending = self._unchecked
        if not pending:
            return
        totals = torch.stack([p[0] for p in pending])
        finite = torch.isfinite(totals)
        if bool(finite.all()):
            pending.clear()
            return
        bad = int((~finite).nonzero()[0, 0])
        iteration = self.iteration - len(pending) + bad + 1
        _, energy, lr = pending[bad]
        pending.clear()
        name = self.sampler.name
        if iteration == 1 and self._non_finite_at_start():
            raise DivergenceError(
                f"{name}: the energy or its gradient is NaN/Inf at the initial point, before any "
                "step: check init, the data and the prior (the step size is not the cause)",
                1,
            )
        if isinstance(energy, Tensor) and not bool(torch.isfinite(energy).all()):
            what = f"non-finite energy at iteration {iteration}"
        else:
            what = f"non-finite parameters after iteration {iteration}"
        hint = f" (lr={lr:.3g}); reduce the step size" if lr is not None else ""
        raise DivergenceError(f"{name}: {what}{hint}", iteration)

    def _non_finite_at_start(self) -> bool:
        """Energy and gradient of the base target at the initial positions on the first rows of
        the data (no random draw: the run's stream is untouched)."""
        base = getattr(self.energy, "cv_base", self.energy)
        batch = None
        if self._data is not None:
            rows = min(64, int(self._data[0].shape[0]))
            batch = tuple(t[:rows].expand(self._theta0.shape[0], *t[:rows].shape) for t in self._data)
        try:
            value, grad = base.value_and_grad(self._theta0, batch)
        except Exception:  # noqa: BLE001  (a diagnosis only: keep the original error path)
            return False
        return not (bool(torch.isfinite(value).all()) and bool(torch.isfinite(grad).all()))

    def iterate(
        self, budget: Budget | int | None = None, *, until: Callable[[int, object, dict], bool] | None = None
    ) -> Iterator[tuple[int, Any, dict]]:
        """Yield ``(iteration, state, info)`` after each iteration (``iteration`` counts from 1
        over the whole run) until ``budget`` (a :class:`Budget` or a number of iterations,
        counted from this call) is used up or ``until(iteration, state, info)`` is true. With
        neither, it runs until the caller stops. The state is live: copy what you keep.

        NaN/Inf is detected every ``check_every`` iterations and when the budget or ``until``
        ends the call (see :meth:`step`): states yielded up to ``check_every - 1`` iterations
        past a divergence can be non-finite, and the :class:`DivergenceError` names the first
        bad iteration. A caller that breaks out early calls :meth:`check_finite` to be sure."""
        budget = _as_budget(budget)
        it0, sec0, ev0 = self.iteration, self.elapsed, self.oracle.grad_evals
        if budget is not None and budget.iterations == 0:
            return
        while True:
            info = self.step()
            if (
                budget is not None
                and budget.grad_evals is not None
                and budget.iterations is None
                and budget.seconds is None
                and self.oracle.grad_evals == ev0
            ):
                raise ValueError(
                    f"{self.sampler.name} computes no gradients, so a Budget of grad_evals alone never "
                    "ends: give iterations or seconds"
                )
            yield self.iteration, self.state, info
            if until is not None and until(self.iteration, self.state, info):
                self.check_finite()
                return
            if budget is not None and (
                (budget.iterations is not None and self.iteration - it0 >= budget.iterations)
                or (budget.seconds is not None and self.elapsed - sec0 >= budget.seconds)
                or (budget.grad_evals is not None and self.oracle.grad_evals - ev0 >= budget.grad_evals)
            ):
                self.check_finite()
                return

    def sample(self, budget: Budget | int, *, thin: int = 1, burn_in: int = 0, progress: bool | None = False) -> Chain:
        """Continue the chains in memory for ``budget`` and return this segment's draws: every
        ``thin``-th iteration after the first ``burn_in`` of the segment (``draw_steps`` count
        over the whole run; ``info`` covers the segment)."""
        segment = _as_budget(budget)
        thin, burn_in = check_int("thin", thin, 1), check_int("burn_in", burn_in, 0)
        start = self.iteration
        draws, steps = [], []
        log = InfoLog()
        if segment is None:
            raise TypeError("Run.sample needs a budget (a Budget or a number of iterations)")
        bar = Progress(progress, segment.iterations or 0, 0, self.sampler.name)
        try:
            for t, state, info in self.iterate(segment):
                log.append(info)
                k = t - start - burn_in
                if k > 0 and k % thin == 0:
                    draws.append(state.theta.detach().clone())
                    steps.append(t)
                bar.update(t, info)
        finally:
            bar.close()
        samples = (
            torch.stack(draws, 1) if draws else self.state.theta.new_empty(self.num_chains, 0, self.energy.space.dim)
        )
        return Chain(samples, self.energy.space, torch.tensor(steps, dtype=torch.long), log.upto(), self.config())

    # -- description and checkpoints -----------------------------------------------------------
    def config(self) -> dict:
        """Sampler and gradient-estimator settings, for reports and run folders."""
        return copy.deepcopy(self._settings["config"])

    def settings(self) -> dict:
        """Everything that defines the run (resume refuses a mismatch)."""
        if self._settings["target"] is None:
            assert self._pending_target is not None  # cleared only once the target is filled in
            energy_fp, legacy_energy, data, source, probe = self._pending_target
            self._settings["target"] = fingerprint.target_fingerprint(
                energy_fp,
                fingerprint.data_fingerprint(data, source),
                {**fingerprint.legacy_data_fingerprint(data, source, probe), **legacy_energy},
            )
            self._pending_target = None
        return copy.deepcopy(self._settings)

    def state_dict(self) -> dict:
        """The run's state after ``iteration`` iterations, on the CPU, from each component's
        own ``state_dict`` (sampler state, generator, minibatch stream, gradient estimator,
        stateful energy) and, for an energy with buffers (a module's BatchNorm statistics),
        ``buffers``: its ``buffer_state_dict()``."""
        d = {
            "iteration": self.iteration,
            "elapsed": self.elapsed,
            "grad_evals": self.oracle.grad_evals,
            "value_evals": self.oracle.value_evals,
            "sampler_state": {
                k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in self.sampler.state_dict(self.state).items()
            },
            "generator": self.generator.get_state(),
            "stream": self.stream.state_dict() if self.stream is not None else None,
            "estimator": self.estimator.state_dict(),
            "energy": self.energy.state_dict() if isinstance(self.energy, StatefulEnergy) else None,
        }
        if self.energy.has_buffers:  # a declared capability (BufferedEnergy): BatchNorm's running
            # statistics move with the chain; a run without buffers keeps the layout it had
            d["buffers"] = cast(BufferedEnergy, self.energy).buffer_state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        device = self.state.theta.device
        self.iteration, self.elapsed = int(d["iteration"]), float(d["elapsed"])
        self.oracle.grad_evals, self.oracle.value_evals = int(d["grad_evals"]), int(d["value_evals"])
        self.state = self.sampler.load_state(
            {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in d["sampler_state"].items()}
        )
        self.generator.set_state(d["generator"])
        if self.stream is not None:
            self.stream.load_state_dict(d["stream"])
        self.estimator.load_state_dict(d["estimator"], device)
        if isinstance(self.energy, StatefulEnergy):
            self.energy.load_state_dict(d["energy"], device)
        if self.energy.has_buffers:  # last: whatever the set-up evaluated, the chain's statistics win
            if d.get("buffers") is None:
                warnings.warn(
                    "the checkpoint holds no module buffers (written before structmc saved them): the "
                    "resumed chain goes on with the module's current ones (BatchNorm running statistics), "
                    "not those of the interrupted run, so its eval-mode predictions differ from an "
                    "uninterrupted run's",
                    stacklevel=2,
                )
            else:
                cast(BufferedEnergy, self.energy).load_buffer_state_dict(d["buffers"])


def _distributed_context(options: Distributed, sampler, energy, source, data) -> Context:
    """The run's process-group context, after refusing what cannot run data-parallel
    (:mod:`structmc.distributed`), before any compute."""
    from .gibbs import MetropolisWithinGibbs
    from .samplers.sampler import Sampler

    full_data_step = isinstance(sampler, MetropolisWithinGibbs) and sampler.full_data_step
    if not isinstance(sampler, Sampler) and not full_data_step:
        raise ValueError(
            f"distributed=True runs gradient samplers (SGLD, pSGLD, SGHMC, SGNHT, ...) and the one-block MALA step "
            f"(MetropolisWithinGibbs(fully_joint(P), mala=True)), not {type(sampler).__name__} with several blocks: "
            "the blocked Gibbs sweep stays single-process (its per-block accept/reject would need one latency-bound "
            "reduction per block); run independent chains on several processes with structmc.run_chains instead"
        )
    if source is not None:
        raise ValueError(
            "distributed=True needs the data as in-memory tensors: a Dataset or a per-batch transform "
            "(DataSource) is not split across ranks yet (a transform's random numbers depend on the share)"
        )
    if data is None:
        raise ValueError("distributed=True splits the minibatch across ranks and needs data=(inputs..., targets)")
    if energy.has_buffers:  # a declared capability: BatchNorm's batch statistics are per share
        raise ValueError(
            f"distributed=True: {type(energy).__name__} has module buffers (BatchNorm statistics), which "
            "would be computed on each rank's share of the batch, not the global batch: use a model without "
            "batch statistics (GroupNorm, LayerNorm, none)"
        )
    from .structured import StructuredEnergy

    if isinstance(energy, StructuredEnergy) and energy.split_batch:
        raise ValueError(
            "distributed=True with a split_batch=True structured energy: the copies' slices would be cut from "
            "each rank's share, not the global batch; use split_batch=False"
        )
    return Context(options)


def _distributed_setup(context: Context, energy, sampler, estimator, theta0, data, seed, batch_size, batching) -> None:
    """Refuse ranks that would not run the same chains (settings, data, start), then compute a
    control variate's centre gradient once, each rank on its rows, reduced."""
    from .checkpointing import json_like
    from .distributed import digest, full_data_grad

    if context.backend == "nccl" and theta0.device.type != "cuda":
        raise ValueError(
            f"distributed=True: the chains are on {theta0.device} but the process group's backend is NCCL, which "
            "reduces GPU tensors only: put the model on this rank's GPU (energy.to('cuda'), or the module before "
            "building the energy) and pass init there; or use the gloo backend for a CPU run"
        )

    context.check_same_setup(
        {
            "sampler": json_like(sampler.config()),
            "gradient": json_like(estimator.config()),
            "seed": seed,
            "num_chains": int(theta0.shape[0]),
            "batch_size": batch_size,
            "batching": batching,
            "initial positions": digest(theta0),
            "data": [digest(t) for t in data],
        }
    )
    if isinstance(estimator, ControlVariate) and estimator.centre_grad is None:
        centre = estimator.centre.unsqueeze(0) if estimator.centre.dim() == 1 else estimator.centre
        if centre.shape[-1] == theta0.shape[-1]:  # else prepare() refuses the centre's shape
            centre = centre.to(theta0)
            context.check_same_setup({"control-variate centre": digest(centre)})
            estimator.centre_grad = full_data_grad(context, energy.cv_base, centre, data, estimator.chunk_size)


def iterate(
    target: Energy | Callable,
    init: Tensor | None,
    sampler: Kernel,
    budget: Budget | int | None = None,
    *,
    until=None,
    **run_options,
) -> Iterator[tuple[int, Any, dict]]:
    """``Run(target, init, sampler, **run_options).iterate(budget, until=until)``."""
    return Run(target, init, sampler, **run_options).iterate(budget, until=until)


# their documented home, and the name pickles carry across processes (executors)
for _cls in (DivergenceError, Run):
    _cls.__module__ = "structmc.run"
del _cls
