"""The one run loop: a :class:`Run` advanced by :meth:`Run.iterate` (:func:`structmc.sample` composes it
with recorders and a checkpointer; all its names are importable from :mod:`structmc.run`).

:class:`Run` holds everything a chain needs between iterations — the energy (a private copy
when it keeps state), the sampler and its state, the gradient oracle, the minibatch stream
and the run's single ``torch.Generator`` — and yields ``(iteration, state, info)`` one
iteration at a time, for a :class:`Budget` (iterations, seconds of sampling, gradient
evaluations) or until a predicate holds. How an iteration is computed (eagerly, compiled, over
a process group) is its :class:`~structmc.execution.Execution`'s business, not the loop's.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from . import checkpointing, fingerprint
from .batching import default_stream
from .chain import Chain
from .divergence import DivergenceError, divergence_error  # noqa: F401  (its home for `from .runner import`)
from .energy import Energy, StatefulEnergy, draw_space_of, to_draws_of
from .energy_checks import warn_below_resolution
from .execution import Execution
from .gradients import ControlVariate, Minibatch, as_estimator
from .oracle import Oracle
from .recording import InfoLog, Progress
from .run_inputs import (
    Budget,
    _as_budget,
    as_execution,
    check_int,
    check_kernel_state,
    check_run_options,
    check_sampler,
    prepared_target,
    run_settings,
)
from .samplers.kernel import Kernel


class Run:
    """A prepared chain (``num_chains`` chains batched), advanced one iteration at a time.

    Arguments as in :func:`sample`. Everything is validated and set up here, before any
    sampling compute; the energy's ``num_data`` is set to ``len(data)`` when it is ``None``,
    and an energy that keeps state across iterations (structured SGMCMC) is replaced by a
    ``fresh()`` copy, so the caller's objects are never mutated and two runs never share
    state. ``run.energy``, ``run.sampler`` (prepared copy), ``run.state``, ``run.iteration``
    (iterations done), ``run.elapsed`` (seconds in steps), ``run.grad_evals`` describe it.
    ``execution`` says how an iteration is computed (:mod:`structmc.execution`: ``"eager"``,
    ``"compiled"``); ``distributed=True`` (or a :class:`~structmc.distributed.Distributed`):
    the ranks of the initialised process group compute each gradient together, and
    ``run.distributed`` is its context (rank, world size, ``comm_seconds``).
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
        distributed=None,
        execution: str | Execution | None = None,
    ):
        check_sampler(sampler)
        seed, num_chains, self.check_every = check_run_options(seed, num_chains, check_every, batching)
        self.execution = run_as = as_execution(execution, distributed)
        prep = prepared_target(
            target, init, data, batch_size, batching, num_chains, lambda e, src, d: run_as.check(sampler, e, src, d)
        )
        energy, theta0, data, source, batch_size = prep.energy, prep.theta0, prep.data, prep.source, prep.batch_size
        self._theta0, self._data = theta0, prep.checked_data  # read to explain a divergence at 1
        energy = sampler.target_energy(energy)
        sampler = sampler.prepare(energy)
        warn_below_resolution(energy, sampler, theta0, prep.checked_data)  # float16/bfloat16 SGLD
        estimator = copy.copy(as_estimator(gradient))  # prepared per run: never the caller's object
        if prep.on_dataset and not isinstance(estimator, Minibatch):
            raise ValueError(
                "a control variate needs the full-data gradient: give the data as in-memory tensors, not a Dataset"
            )
        # set-up, in the order that fixes the random stream (generator, stream, init draws)
        device = theta0.device
        data = None if data is None else tuple(t.to(device) for t in data)
        self.energy, self.sampler, self.estimator = energy, sampler, estimator
        self.num_chains, self.seed = num_chains, seed
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.stream = run_as.stream(data, batch_size, num_chains, self.generator, batching) or default_stream(
            source, data, batch_size, num_chains, self.generator, batching, device
        )
        # isinstance on a runtime Protocol costs ~13 µs: decide once, not per iteration
        self._observe = energy.observe if isinstance(energy, StatefulEnergy) else None
        if self._observe is not None:
            energy.start(theta0)
        run_as.setup(energy, sampler, estimator, theta0, data, seed, batch_size, batching)
        estimator.prepare(energy, data, theta0)
        self.oracle: Oracle = run_as.oracle(energy, estimator, self.stream, self.generator)
        self.state = sampler.init(theta0, self.generator)
        check_kernel_state(sampler, self.state, theta0)
        self.iteration, self.elapsed = 0, 0.0
        self._unchecked: list[tuple[Tensor, object, float | None]] = []  # (total, energy, lr) per iteration
        self._settings = {
            **run_settings(energy, sampler, estimator, theta0, seed, batch_size, batching),
            **run_as.settings(),
        }
        # the target's fingerprint (resume refuses another target), at the first settings(): the
        # data's bytes (~0.2 s per 188 MB) and the energy's parts (2.5 ms of a one-step MLP sample();
        # a tuner's runs never ask), but now for an energy the run itself changes (buffers, state)
        changes = energy.has_buffers or self._observe is not None
        self._pending_target: tuple | None = (self._energy_fingerprint() if changes else None, *prep.described)
        run_as.bind(self)

    # -- advancing ---------------------------------------------------------------------------
    @property
    def distributed(self):
        """A distributed run's process-group context (rank, world size), else ``None``."""
        return self.execution.context

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
        t0 = time.perf_counter()
        self.state, info = self.execution.step(self, lr)
        if self._observe is not None:
            self._observe(self.state.theta)
        self.elapsed += time.perf_counter() - t0
        self.iteration = t + 1
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
        finite = torch.isfinite(torch.stack([p[0] for p in pending]))
        if bool(finite.all()):
            pending.clear()
            return
        bad = int((~finite).nonzero()[0, 0])
        iteration = self.iteration - len(pending) + bad + 1
        _, energy, lr = pending[bad]
        pending.clear()
        raise divergence_error(self.sampler.name, iteration, energy, lr, self.energy, self._theta0, self._data)

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
        try:
            yield from self._iterate(budget, until, it0, sec0, ev0)
        finally:  # the run stops here (its budget, until, a break, an error): nothing computed ahead
            self.execution.settle(self)

    def _iterate(self, budget, until, it0, sec0, ev0):
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
        to_draws, draw_space = to_draws_of(self.energy), draw_space_of(self.energy)
        try:
            for t, state, info in self.iterate(segment):
                log.append(info)
                k = t - start - burn_in
                if k > 0 and k % thin == 0:
                    theta = state.theta.detach()
                    draws.append(theta.clone() if to_draws is None else to_draws(theta))
                    steps.append(t)
                bar.update(t, info)
        finally:
            bar.close()
        samples = torch.stack(draws, 1) if draws else self.state.theta.new_empty(self.num_chains, 0, draw_space.dim)
        return Chain(samples, draw_space, torch.tensor(steps, dtype=torch.long), log.upto(), self.config())

    # -- description and checkpoints -----------------------------------------------------------
    def config(self) -> dict:
        """Sampler and gradient-estimator settings, for reports and run folders."""
        return copy.deepcopy(self._settings["config"])

    def settings(self) -> dict:
        """Everything that defines the run (resume refuses a mismatch)."""
        if self._settings["target"] is None:
            assert self._pending_target is not None  # cleared only once the target is filled in
            energy_fps, data, source, probe = self._pending_target
            energy_fp, legacy_energy = energy_fps or self._energy_fingerprint()
            self._settings["target"] = fingerprint.target_fingerprint(
                energy_fp,
                fingerprint.data_fingerprint(data, source),
                {**fingerprint.legacy_data_fingerprint(data, source, probe), **legacy_energy},
            )
            self._pending_target = None
        return copy.deepcopy(self._settings)

    def _energy_fingerprint(self) -> tuple[dict, dict]:
        return fingerprint.energy_fingerprint(self.energy), fingerprint.legacy_energy_fingerprint(self.energy)

    def state_dict(self) -> dict:
        """The run's state after ``iteration`` iterations, on the CPU, from each component's
        own ``state_dict`` (:func:`structmc.checkpointing.run_state_dict`)."""
        self.execution.settle(self)
        return checkpointing.run_state_dict(self)

    def load_state_dict(self, d: dict) -> None:
        self.execution.settle(self)
        checkpointing.load_run_state(self, d)


Run.__module__ = "structmc.run"  # its documented home, and the name pickles carry (executors)
