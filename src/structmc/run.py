"""The one run loop: a :class:`Run` advanced by :meth:`Run.iterate`, and :func:`sample`.

:class:`Run` holds everything a chain needs between iterations — the energy (a private copy
when it keeps state), the sampler and its state, the gradient oracle, the minibatch stream
and the run's single ``torch.Generator`` — and yields ``(iteration, state, info)`` one
iteration at a time, for a :class:`Budget` (iterations, seconds of sampling, gradient
evaluations) or until a predicate holds. Its final state stays in memory: a tuner can run an
arm for a budget, score it and continue it. :func:`sample` is the thin wrapper that adds the
draw recorder, the run folder (chunks, checkpoints, exact resume) and the progress bar.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from .batching import MODES, DataSource, DatasetStream, MinibatchStream, TransformedStream
from .chain import Chain
from .energy import Energy, StatefulEnergy, as_energy, validate_data
from .gradients import ControlVariate, Minibatch, as_estimator
from .oracle import Oracle
from .recording import DrawRecorder, InfoLog, Progress
from .samplers.base import Sampler
from .storage import RunFolder

CHECKPOINT_FORMAT = 2


class DivergenceError(FloatingPointError):
    """The chain produced NaN/Inf. ``.chain`` holds the draws kept before it happened."""

    def __init__(self, message: str, step: int, chain: Chain | None = None):
        super().__init__(message)
        self.step = step
        self.chain = chain

    def __reduce__(self):  # pickles across processes (executors) with its step and chain
        return (type(self), (str(self), self.step, self.chain))


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
            if v is not None and (isinstance(v, bool) or int(v) != v or v < 0):
                raise ValueError(f"Budget.{name} must be a non-negative integer, got {v!r}")
        if self.seconds is not None and not (self.seconds >= 0 and math.isfinite(self.seconds)):
            raise ValueError(f"Budget.seconds must be >= 0 and finite, got {self.seconds!r}")


def _as_budget(budget) -> Budget | None:
    if budget is None or isinstance(budget, Budget):
        return budget
    if isinstance(budget, int) and not isinstance(budget, bool):
        return Budget(iterations=budget)
    raise TypeError(f"budget must be a Budget or a number of iterations, got {budget!r}")


class Run:
    """A prepared chain (``num_chains`` chains batched), advanced one iteration at a time.

    Arguments as in :func:`sample`. Everything is validated and set up here, before any
    sampling compute; the energy's ``num_data`` is set to ``len(data)`` when it is ``None``,
    and an energy that keeps state across iterations (structured SGMCMC) is replaced by a
    ``fresh()`` copy, so the caller's objects are never mutated and two runs never share
    state. ``run.energy``, ``run.sampler`` (prepared copy), ``run.state``, ``run.iteration``
    (iterations done), ``run.elapsed`` (seconds in steps), ``run.grad_evals`` describe it.
    """

    def __init__(self, target: Energy | Callable, init: Tensor | None, sampler: Sampler, *,
                 data: Sequence[Tensor] | None = None, batch_size: int | None = None, batching: str = "epoch",
                 seed: int = 0, num_chains: int = 1, gradient: str | Minibatch | ControlVariate = "minibatch",
                 check_every: int = 32):
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a structmc sampler (SGLD(...), ...), got {type(sampler).__name__}")
        num_chains = _check_int("num_chains", num_chains, 1)
        self.check_every = _check_int("check_every", check_every, 1)
        seed = _check_int("seed", seed, 0)
        if seed >= 2 ** 64:
            raise ValueError(f"seed must be below 2**64 (a torch.Generator seed), got {seed}")
        if batching not in MODES:
            raise ValueError(f"batching must be one of {MODES}, got {batching!r}")
        source, data = _as_source(data)  # a Dataset (or a per-batch transform): DataSource; tensors: data
        data_fingerprint = _data_fingerprint(data) if source is None or source.tensors is None else None
        if source is not None and source.dataset is not None:
            probe = source.probe()
            data_fingerprint = [{"dataset": type(source.dataset).__name__, "len": len(source)}] + \
                _data_fingerprint(probe)
        num_points = None if data is None and source is None else (len(source) if source is not None
                                                                   else int(data[0].shape[0]))
        if batch_size is not None:
            batch_size = _check_int("batch_size", batch_size, 1)
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
        try:  # dtypes, widths, labels: a clear error before any compute (a Dataset: on its first items)
            validate_data(energy, probe if on_dataset else data)
        except (ValueError, TypeError) as err:
            if on_dataset:
                raise type(err)(f"the Dataset's items do not match the energy: {err}") from None
            raise
        check_batch = getattr(energy, "check_batch_size", None)  # e.g. split-batch structured energies
        if check_batch is not None:
            check_batch(batch_size, batching, num_points)
        theta0 = _initial_positions(energy, init, num_chains)
        if not bool(torch.isfinite(theta0).all()):
            raise ValueError("init contains NaN or Inf")
        e = energy
        while e is not None:  # a prior whose support excludes the start: an error before any compute
            check_init = getattr(e, "check_init", None)
            if check_init is not None:
                check_init(theta0)
            e = getattr(e, "base", None)
        self._theta0, self._data = theta0, (probe if on_dataset else data)  # read to explain a divergence at 1
        energy = sampler.target_energy(energy)
        sampler = sampler.prepare(energy)
        estimator = copy.copy(as_estimator(gradient))  # prepared per run: never the caller's object
        if on_dataset and not isinstance(estimator, Minibatch):
            raise ValueError("a control variate needs the full-data gradient: give the data as in-memory tensors, "
                             "not a Dataset")

        # set-up, in the order that fixes the random stream (generator, stream, init draws)
        device = theta0.device
        if data is not None:
            data = tuple(t.to(device) for t in data)
        self.energy, self.sampler, self.estimator = energy, sampler, estimator
        self.num_chains, self.seed = num_chains, seed
        self.generator = torch.Generator(device=device).manual_seed(seed)
        if on_dataset:
            self.stream = DatasetStream(source, batch_size, num_chains, self.generator, batching, device)
        elif data is not None and source is not None and source.transform is not None:
            self.stream = TransformedStream(data, batch_size, num_chains, self.generator, batching, source.transform)
        else:
            self.stream = MinibatchStream(data, batch_size, num_chains, self.generator, batching) \
                if data is not None else None
        # isinstance on a runtime Protocol costs ~13 µs: decide once, not per iteration
        self._observe = energy.observe if isinstance(energy, StatefulEnergy) else None
        if self._observe is not None:
            energy.start(theta0)
        estimator.prepare(energy, data, theta0)
        self.oracle = Oracle(energy, estimator, self.stream, self.generator)
        self.state = sampler.init(theta0, self.generator)
        self.iteration = 0
        self.elapsed = 0.0
        self._unchecked: list[tuple[Tensor, object, float | None]] = []  # (total, energy, lr) per iteration
        self._settings = {
            "seed": seed, "num_chains": num_chains, "batch_size": batch_size, "batching": batching,
            "num_data": energy.num_data, "dim": energy.space.dim,
            "space": [(i.name, list(i.shape)) for i in energy.space.params],
            "layers": energy.space.to_config()["layers"],
            "config": {"sampler": sampler.config(), "gradient": estimator.config()},
            "target": {"data": data_fingerprint, **_energy_fingerprint(energy)},
        }

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
        t0 = time.perf_counter()
        self.state, info = self.sampler.step(self.state, self.oracle, lr, self.generator)
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
            raise DivergenceError(f"{name}: the energy or its gradient is NaN/Inf at the initial point, before any "
                                  "step: check init, the data and the prior (the step size is not the cause)", 1)
        if energy is not None and not bool(torch.isfinite(energy).all()):
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

    def iterate(self, budget: Budget | int | None = None, *,
                until: Callable[[int, object, dict], bool] | None = None) -> Iterator[tuple[int, object, dict]]:
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
            if (budget is not None and budget.grad_evals is not None and budget.iterations is None
                    and budget.seconds is None and self.oracle.grad_evals == ev0):
                raise ValueError(f"{self.sampler.name} computes no gradients, so a Budget of grad_evals alone never "
                                 "ends: give iterations or seconds")
            yield self.iteration, self.state, info
            if until is not None and until(self.iteration, self.state, info):
                self.check_finite()
                return
            if budget is not None and (
                    (budget.iterations is not None and self.iteration - it0 >= budget.iterations)
                    or (budget.seconds is not None and self.elapsed - sec0 >= budget.seconds)
                    or (budget.grad_evals is not None and self.oracle.grad_evals - ev0 >= budget.grad_evals)):
                self.check_finite()
                return

    def sample(self, budget: Budget | int, *, thin: int = 1, burn_in: int = 0, progress: bool | None = False) -> Chain:
        """Continue the chains in memory for ``budget`` and return this segment's draws: every
        ``thin``-th iteration after the first ``burn_in`` of the segment (``draw_steps`` count
        over the whole run; ``info`` covers the segment)."""
        budget = _as_budget(budget)
        thin, burn_in = _check_int("thin", thin, 1), _check_int("burn_in", burn_in, 0)
        start = self.iteration
        draws, steps = [], []
        log = InfoLog()
        bar = Progress(progress, budget.iterations or 0, 0, self.sampler.name)
        try:
            for t, state, info in self.iterate(budget):
                log.append(info)
                k = t - start - burn_in
                if k > 0 and k % thin == 0:
                    draws.append(state.theta.detach().clone())
                    steps.append(t)
                bar.update(t, info)
        finally:
            bar.close()
        samples = torch.stack(draws, 1) if draws else self.state.theta.new_empty(self.num_chains, 0, self.energy.space.dim)
        return Chain(samples, self.energy.space, torch.tensor(steps, dtype=torch.long), log.upto(), self.config())

    # -- description and checkpoints -----------------------------------------------------------
    def config(self) -> dict:
        """Sampler and gradient-estimator settings, for reports and run folders."""
        return copy.deepcopy(self._settings["config"])

    def settings(self) -> dict:
        """Everything that defines the run (resume refuses a mismatch)."""
        return copy.deepcopy(self._settings)

    def state_dict(self) -> dict:
        """The run's state after ``iteration`` iterations, on the CPU, from each component's
        own ``state_dict`` (sampler state, generator, minibatch stream, gradient estimator,
        stateful energy)."""
        return {
            "iteration": self.iteration, "elapsed": self.elapsed,
            "grad_evals": self.oracle.grad_evals, "value_evals": self.oracle.value_evals,
            "sampler_state": {k: (v.cpu() if isinstance(v, Tensor) else v)
                              for k, v in self.sampler.state_dict(self.state).items()},
            "generator": self.generator.get_state(),
            "stream": self.stream.state_dict() if self.stream is not None else None,
            "estimator": self.estimator.state_dict(),
            "energy": self.energy.state_dict() if isinstance(self.energy, StatefulEnergy) else None,
        }

    def load_state_dict(self, d: dict) -> None:
        device = self.state.theta.device
        self.iteration, self.elapsed = int(d["iteration"]), float(d["elapsed"])
        self.oracle.grad_evals, self.oracle.value_evals = int(d["grad_evals"]), int(d["value_evals"])
        self.state = self.sampler.load_state({k: (v.to(device) if isinstance(v, Tensor) else v)
                                              for k, v in d["sampler_state"].items()})
        self.generator.set_state(d["generator"])
        if self.stream is not None:
            self.stream.load_state_dict(d["stream"])
        self.estimator.load_state_dict(d["estimator"], device)
        if isinstance(self.energy, StatefulEnergy):
            self.energy.load_state_dict(d["energy"], device)


def iterate(target: Energy | Callable, init: Tensor | None, sampler: Sampler, budget: Budget | int | None = None,
            *, until=None, **run_options) -> Iterator[tuple[int, object, dict]]:
    """``Run(target, init, sampler, **run_options).iterate(budget, until=until)``."""
    return Run(target, init, sampler, **run_options).iterate(budget, until=until)


def sample(
    target: Energy | Callable,
    init: Tensor | None,
    sampler: Sampler,
    num_steps: int,
    *,
    data: Sequence[Tensor] | None = None,
    batch_size: int | None = None,
    burn_in: int = 0,
    thin: int = 1,
    seed: int = 0,
    num_chains: int = 1,
    gradient: str | Minibatch | ControlVariate = "minibatch",
    batching: str = "epoch",
    out_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    chunk_draws: int = 1000,
    resume: bool = False,
    overwrite: bool = False,
    keep_in_memory: bool = True,
    progress: bool | None = None,
    callback: Callable[[int, object], None] | None = None,
    on_blowup: str = "warn",
    check_every: int = 32,
) -> Chain:
    """Run ``num_chains`` chains of ``sampler`` on ``target`` and return the kept draws.

    Parameters
    ----------
    target : an :class:`~structmc.energy.Energy` (e.g. :class:`~structmc.energy.ModuleEnergy`)
        or a log density ``log_prob(theta [P], batch) -> scalar``.
    init : ``[P]`` (shared by all chains) or ``[num_chains, P]``; ``None`` takes the energy's
        ``initial_position()`` (a module's current parameters).
    num_steps : sampler iterations in total, burn-in included. An iteration of SGHMC/SGNHT is
        ``num_leapfrog`` updates. Draws are kept after iterations ``burn_in + thin·k``
        (k = 1, 2, ...), so ``(num_steps - burn_in) // thin`` draws are kept.
    data, batch_size, batching : the data tensors (same first dimension N), the minibatch size
        (``None``: full batch) and how batches are drawn (see :mod:`structmc.batching`). Each
        chain gets its own minibatches. If the energy's ``num_data`` is ``None`` it is set to N.
    gradient : ``"minibatch"`` or :class:`~structmc.gradients.ControlVariate` (SGLD-CV etc.).
    seed : seeds the run's single ``torch.Generator`` (noise, batches); same seed, same chain.
    out_dir : stream draws to ``out_dir/samples`` in chunks of ``chunk_draws`` and write
        checkpoints every ``checkpoint_every`` iterations (and at the end). ``resume=True``
        continues from the last checkpoint and yields exactly the chain an uninterrupted run
        would; ``num_steps`` may be raised to extend a finished run. A new run refuses an
        ``out_dir`` that is not empty unless ``resume=True`` or ``overwrite=True`` (which first
        removes the previous run's files; a folder holding anything else is refused). Every
        chunk and checkpoint is recorded with its digest in ``out_dir/manifest.json`` and
        checked on resume and on loading. Ctrl-C (``KeyboardInterrupt``) during a run with an
        ``out_dir`` finishes the current iteration, writes a checkpoint and re-raises, so
        ``resume=True`` continues from there.
    keep_in_memory : keep draws in ``Chain.samples`` (otherwise read them back from ``out_dir``).
    progress : tqdm bar; ``None`` shows it only when stderr is a terminal.
    callback : ``callback(iteration, state)`` after every iteration.
    on_blowup : ``"warn"`` (default), ``"raise"`` or ``"ignore"``: what to do when the minibatch
        energy grows past 1000 times its initial magnitude (checked every 64 iterations), a chain
        blowing up without (yet) becoming NaN; ``"raise"`` raises :class:`DivergenceError` as for NaN.
    check_every : iterations between reads of the NaN/Inf flags (one device-to-host transfer
        each; see :meth:`Run.step`). The flags are also read before every write to ``out_dir``
        and at the end, so a divergence still names its first iteration exactly and no
        non-finite draw is kept or written; ``1`` checks after every iteration (a
        ``callback`` then never sees a non-finite state).

    ``Chain.info`` holds every iteration's records: the sampler's (``energy [C, S]``, ...),
    ``lr``, ``grad_evals`` and ``time`` (seconds in sampler steps). For budgets, scoring and
    continuing in memory use :class:`Run` directly.

    Raises
    ------
    ValueError before any computation for invalid arguments; :class:`DivergenceError` naming
    the iteration and sampler when the energy or the parameters become NaN/Inf (its ``.chain``
    holds the draws kept so far, also written to ``out_dir``).
    """
    num_steps, burn_in, thin = _check_int("num_steps", num_steps, 1), _check_int("burn_in", burn_in, 0), _check_int("thin", thin, 1)
    chunk_draws = _check_int("chunk_draws", chunk_draws, 1)
    num_draws = _check_draws(num_steps, burn_in, thin)
    if checkpoint_every is not None:
        checkpoint_every = _check_int("checkpoint_every", checkpoint_every, 1)
    if on_blowup not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_blowup must be 'warn', 'raise' or 'ignore', got {on_blowup!r}")
    if resume and overwrite:
        raise ValueError("resume=True and overwrite=True contradict each other: choose one")
    for flag, needs in ((checkpoint_every is not None, "checkpoint_every needs out_dir"),
                        (resume, "resume=True needs out_dir"), (overwrite, "overwrite=True needs out_dir"),
                        (not keep_in_memory, "keep_in_memory=False needs out_dir (draws would be lost)")):
        if flag and out_dir is None:
            raise ValueError(needs)
    run = Run(target, init, sampler, data=data, batch_size=batch_size, batching=batching, seed=seed,
              num_chains=num_chains, gradient=gradient, check_every=check_every)
    settings = {"num_steps": num_steps, "burn_in": burn_in, "thin": thin, **run.settings()}
    folder = RunFolder(out_dir) if out_dir is not None else None
    if folder is not None and not resume:
        if overwrite:
            folder.clear()
        elif not folder.is_empty():
            raise ValueError(f"out_dir {folder.path} is not empty (it holds a previous run): pass resume=True to "
                             "continue that run, or overwrite=True to replace it")
    ckpt = _load_checkpoint(folder, settings, num_steps) if resume else None
    if folder is not None:
        if resume and (folder.path / "diverged.json").exists():
            (folder.path / "diverged.json").unlink()
        folder.create(settings)
    draws = DrawRecorder(num_chains, run.energy.space.dim, num_draws, dtype=run.theta.dtype, device=run.theta.device,
                         keep_in_memory=keep_in_memory, folder=folder, chunk_draws=chunk_draws)
    log = InfoLog(folder, keep=keep_in_memory)
    draws.before_write = log.before_write = run.check_finite  # nothing non-finite reaches the disk
    if ckpt is not None:
        run.load_state_dict(ckpt["run"])
        if "info_chunks" in ckpt["draws"]:  # records streamed to out_dir/info
            draws.restore(ckpt["draws"], ckpt["draws"]["info_chunks"])
            log.restore(ckpt["draws"], run.iteration, ckpt["info"])
        else:  # older checkpoints hold the records
            draws.restore(ckpt["draws"], 0)
            log.load(ckpt["info"], run.iteration)
    elif resume and folder is not None:  # nothing to resume from: start afresh, without stale chunks
        folder.drop_chunks_from(0, 0)

    def checkpoint() -> None:
        run.check_finite()
        draws.flush()  # the records: info chunks on disk plus the tail not yet in one
        folder.save_checkpoint({"format": CHECKPOINT_FORMAT, "settings": settings, "run": run.state_dict(),
                                "draws": {**draws.state_dict(), **log.state_dict()}, "info": log.tail()})

    watch = _BlowupWatch(run, on_blowup) if on_blowup != "ignore" else None
    # Ctrl-C: finish the iteration, checkpoint, re-raise (a second Ctrl-C stops at once)
    interrupted: list[bool] = []
    previous = None
    if (folder is not None and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        def on_sigint(signum, frame):
            interrupted.append(True)
            signal.signal(signal.SIGINT, signal.default_int_handler)

        previous = signal.signal(signal.SIGINT, on_sigint)
    recorded = False  # iteration t is fully recorded (log, draws): a consistent point to checkpoint
    bar = Progress(progress, num_steps, run.iteration, run.sampler.name)
    try:
        for t, state, info in run.iterate(num_steps - run.iteration):
            log.append(info)
            if t > burn_in and (t - burn_in) % thin == 0:
                draws.add(state.theta, t)
            recorded = True
            if watch is not None and (watch.scale is None or t % _BlowupWatch.EVERY == 0 or t == num_steps):
                watch.check(t, info)
            if callback is not None:
                callback(t, state)
            if checkpoint_every is not None and t % checkpoint_every == 0:
                checkpoint()
            bar.update(t, info)
            if interrupted:
                raise KeyboardInterrupt
            recorded = False
    except DivergenceError as err:
        _keep_finite_records(err, run, draws, log, folder)
        raise
    except KeyboardInterrupt:
        if folder is not None and recorded:
            try:
                checkpoint()
            except DivergenceError as err:  # the run had diverged before the Ctrl-C: say so
                _keep_finite_records(err, run, draws, log, folder)
                raise err from None
        raise
    finally:
        bar.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if folder is not None:
        checkpoint()
    chain = draws.chain(run.energy.space, log.upto(), run.config())
    chain.buffers = _chain_buffers(run.energy, num_chains)
    return chain


def _keep_finite_records(err: DivergenceError, run: Run, draws: DrawRecorder, log: InfoLog,
                         folder: RunFolder | None) -> None:
    """After a divergence: drop the draws and records of the iterations from the first
    non-finite one on (found up to ``check_every`` iterations late; a blow-up stop keeps its
    iteration, which is finite), write the rest to the folder and attach them to ``err``."""
    last_good = err.step if getattr(err, "finite", False) else err.step - 1
    draws.truncate(last_good + 1)
    log.truncate(last_good)
    run._unchecked.clear()  # the divergence is known: writing the kept records needs no check
    if folder is not None:
        draws.flush()
        log.write()
        folder.mark_diverged(str(err), err.step)
    err.chain = draws.chain(run.energy.space, log.upto(), run.config())


def _chain_buffers(energy, num_chains: int):
    """Each chain's module buffers (BatchNorm statistics) at the end of the run: ``sample``
    works on a copy of the energy, so the chain carries them for ``predictive``."""
    base = getattr(energy, "cv_base", energy)
    if not getattr(base, "has_buffers", False):
        return None
    if base.buffer_chains not in (None, num_chains):
        return None
    return [{k: v.detach().clone() for k, v in base.chain_buffers(c).items()} for c in range(num_chains)]


class _BlowupWatch:
    """Watches the minibatch energy for a chain blowing up without becoming NaN: every
    ``EVERY`` iterations and at the last (one device read each), whether ``|U_t| > FACTOR · max(|U_1|, P, 1)`` for a
    chain. Only growth counts: the energy falling during burn-in is normal, and the floor
    ``P`` (about the energy's thermal spread) keeps a start near a mode from false alarms."""

    EVERY = 64
    FACTOR = 1e3

    def __init__(self, run: Run, mode: str):
        self.run, self.mode = run, mode
        self.scale: Tensor | None = None
        self.fired = False

    def check(self, t: int, info: dict) -> None:
        energy = info.get("energy")
        if self.fired or not isinstance(energy, Tensor) or not energy.is_floating_point():
            return
        if self.scale is None:
            self.scale = energy.detach().abs().to(torch.float64).clamp(min=max(1.0, float(self.run.energy.space.dim)))
            self.first = energy.detach().to(torch.float64).clone()
            return
        ratio = energy.detach().abs().to(torch.float64) / self.scale
        worst = int(ratio.argmax()) if ratio.numel() > 1 else 0
        growth = float(ratio.reshape(-1)[worst])
        if not (growth > self.FACTOR) or not math.isfinite(growth):
            return
        self.fired = True
        now, first = float(energy.reshape(-1)[worst]), float(self.first.reshape(-1)[worst])
        lr = info.get("lr")
        msg = (f"{self.run.sampler.name}: the minibatch energy is blowing up: {now:.3g} at iteration {t}, "
               f"{growth:.3g} times its initial magnitude ({first:.3g} at iteration 1"
               + (f", chain {worst}" if ratio.numel() > 1 else "") + "). "
               + (f"The step size lr={lr:.3g} may be too large: " if isinstance(lr, float) else "The step size may be too large: ")
               + "lr is ε of each sampler's own parameterisation, against the energy of all N data points "
               "(docs/conventions.md), e.g. SGLD's drift is (ε/2)∇Û with Û scaled by N/n; reduce it.")
        if self.mode == "raise":
            err = DivergenceError(msg, t)
            err.finite = True  # iteration t is finite: its draw and records are kept
            raise err
        warnings.warn(msg, UserWarning, stacklevel=3)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _check_int(name: str, value, minimum: int) -> int:
    try:
        ok = not isinstance(value, bool) and int(value) == value and int(value) >= minimum
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_draws(num_steps: int, burn_in: int, thin: int) -> int:
    if burn_in >= num_steps:
        raise ValueError(f"burn_in ({burn_in}) must be smaller than num_steps ({num_steps})")
    num_draws = (num_steps - burn_in) // thin
    if num_draws < 1:
        raise ValueError(f"no draw would be kept: (num_steps - burn_in) // thin = 0 "
                         f"(num_steps={num_steps}, burn_in={burn_in}, thin={thin})")
    return num_draws


def _as_source(data):
    """``(DataSource or None, in-memory tensors or None)``: a map-style Dataset (not a
    TensorDataset) or a :class:`DataSource` over one goes to the dataset stream; tensors (and a
    DataSource over tensors, which only adds a transform) stay in memory."""
    from torch.utils.data import Dataset

    if isinstance(data, DataSource):
        return data, (_as_data(data.tensors) if data.tensors is not None else None)
    if isinstance(data, Dataset) and not hasattr(data, "tensors"):
        return DataSource(data), None
    return None, _as_data(data)


def _as_data(data) -> tuple[Tensor, ...] | None:
    if data is None:
        return None
    if isinstance(data, Tensor):
        return (data,)
    if hasattr(data, "tensors"):  # torch.utils.data.TensorDataset
        data = data.tensors
    data = tuple(data)
    if not data or not all(isinstance(t, Tensor) for t in data):
        raise ValueError("data must be a tensor, a TensorDataset or a sequence of tensors")
    n = data[0].shape[0] if data[0].dim() > 0 else 0
    if n < 1 or any(t.dim() == 0 or t.shape[0] != n for t in data):
        raise ValueError(f"all data tensors need the same non-zero first dimension, got {[tuple(t.shape) for t in data]}")
    return data


def _initial_positions(energy: Energy, init, num_chains: int) -> Tensor:
    if init is None:
        if not hasattr(energy, "initial_position"):
            raise ValueError(f"init is required: {type(energy).__name__} has no initial_position()")
        init = energy.initial_position()
    if not isinstance(init, Tensor):
        init = torch.as_tensor(init)
    if not init.is_floating_point():
        init = init.to(torch.get_default_dtype())
    init = init.to(device=energy.device or init.device, dtype=energy.dtype or init.dtype)
    P = energy.space.dim
    if init.dim() == 1 and init.shape[0] == P:
        return init.detach().unsqueeze(0).expand(num_chains, P).clone()
    if init.dim() == 2 and init.shape == (num_chains, P):
        return init.detach().clone()
    raise ValueError(f"init must have shape [{P}] or [{num_chains}, {P}] (num_chains={num_chains}), got {tuple(init.shape)}")


def _load_checkpoint(folder: RunFolder, settings: dict, num_steps: int) -> dict | None:
    """The folder's checkpoint in the current format, checked against this run's settings."""
    ckpt = folder.load_checkpoint()
    if ckpt is None:
        return None
    ckpt = _upgrade_checkpoint(ckpt)
    _check_resume_compatible(ckpt["settings"], settings)
    if ckpt["run"]["iteration"] > num_steps:
        raise ValueError(f"the checkpoint is at iteration {ckpt['run']['iteration']}, beyond num_steps={num_steps}")
    return ckpt


def _upgrade_checkpoint(ckpt: dict) -> dict:
    """Format 1 (structmc 0.1.0, no ``format`` key) -> format 2."""
    fmt = ckpt.get("format", 1)
    if fmt == CHECKPOINT_FORMAT:
        return ckpt
    if fmt != 1:
        raise ValueError(f"checkpoint format {fmt} is newer than this structmc understands ({CHECKPOINT_FORMAT})")
    info = dict(ckpt["info"])
    steps = int(ckpt["step"])
    return {
        "format": CHECKPOINT_FORMAT, "settings": ckpt["settings"],
        "run": {"iteration": steps, "elapsed": float(info["time"][-1]) if steps else 0.0,
                "grad_evals": 0, "value_evals": 0, "sampler_state": ckpt["sampler_state"],
                "generator": ckpt["generator"], "stream": ckpt["stream"], "estimator": ckpt.get("estimator") or {},
                "energy": ckpt.get("energy_state")},
        "draws": {"kept": ckpt["kept"], "written": ckpt["written"], "chunks": ckpt["chunks"]},
        "info": info,
    }


def _check_resume_compatible(old: dict, new: dict) -> None:
    for key in ("burn_in", "thin", "seed", "num_chains", "batch_size", "batching", "dim", "space", "config"):
        if json_like(old.get(key)) != json_like(new.get(key)):
            raise ValueError(f"cannot resume: {key} differs from the checkpoint ({old.get(key)!r} vs {new.get(key)!r})")
    if "target" not in old or "target" not in new:  # checkpoints from before target fingerprints
        return
    was, now = old["target"], new["target"]
    # a part the checkpoint does not record (written before it was fingerprinted) is not compared
    changed = [f"{_TARGET_PARTS.get(key, key)} ({key}: {was.get(key)!r} vs {now.get(key)!r})"
               for key in sorted(set(was) | set(now))
               if (key in was or key in _FINGERPRINTED_SINCE_0_1) and json_like(was.get(key)) != json_like(now.get(key))]
    if changed:
        raise ValueError("cannot resume: the target changed since the checkpoint: " + "; ".join(changed))


_FINGERPRINTED_SINCE_0_1 = {"data", "num_data", "energy", "prior", "likelihood", "partition", "log_prob",
                            "log_likelihood", "log_prior"}
_TARGET_PARTS = {"structured": "the structured energy's settings", "hierarchical": "the hierarchical prior", "data": "the data",
                 "num_data": "the energy's num_data", "energy": "the energy's kind", "prior": "the prior", "likelihood": "the likelihood", "partition": "the partition",
                 "log_prob": "the log density", "log_likelihood": "the log-likelihood", "log_prior": "the log prior"}


def _tensor_fingerprint(t: Tensor, samples: int = 4096) -> str:
    """A cheap hash of a tensor's values: blake2b over up to ``samples`` evenly strided elements,
    with its shape and dtype."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    if n > samples:
        flat = flat[torch.arange(samples, device=flat.device) * (n - 1) // (samples - 1)]
    raw = flat.contiguous().cpu()
    raw = raw.view(torch.uint8) if raw.dtype != torch.bool else raw.to(torch.uint8)
    h = hashlib.blake2b(raw.numpy().tobytes(), digest_size=10)
    h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    return h.hexdigest()


def _data_fingerprint(data) -> list | None:
    if data is None:
        return None
    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "hash": _tensor_fingerprint(t)}
            for t in data]


def _energy_fingerprint(energy) -> dict:
    """What defines the target besides the data: the energy's kind (outermost to innermost),
    ``num_data``, and where known the prior, likelihood, log-density functions and partition."""
    out: dict = {"num_data": energy.num_data}
    kinds = []
    e, seen = energy, 0
    while e is not None and seen < 8:
        kinds.append(type(e).__name__)
        part = getattr(e, "partition", None)
        if part is not None and hasattr(part, "num_groups") and "partition" not in out:
            ids = getattr(part, "group_ids", None)
            out["partition"] = {"num_groups": int(part.num_groups),
                                "group_ids": _tensor_fingerprint(ids) if isinstance(ids, Tensor) else None}
        if hasattr(e, "prior_std") and "prior" not in out:
            prec = getattr(e, "_prior_precision", None)
            out["prior"] = {"prior_std": repr(e.prior_std),
                            "precision_sum": float(prec.double().sum()) if isinstance(prec, Tensor) else None}
            spec = getattr(e, "_prior_spec", None)
            if spec is not None:  # a prior= (the default Normal keeps its old fingerprint)
                out["prior"]["prior"] = json_like(spec.describe())
        if type(e).__name__ == "HierarchicalEnergy" and "hierarchical" not in out:
            out["hierarchical"] = json_like(e.config())  # groups and hyperprior
        if type(e).__name__ == "StructuredEnergy" and "structured" not in out:
            out["structured"] = e.config()  # K, mask law, split_batch, history, seed
        lik = getattr(e, "likelihood", None)
        if lik is not None and hasattr(lik, "name") and "likelihood" not in out:
            out["likelihood"] = {"name": lik.name, "noise_std": getattr(lik, "noise_std", None)}
        for name in ("log_prob", "log_likelihood", "log_prior"):
            f = getattr(e, name, None)
            if callable(f) and name not in out:
                out[name] = getattr(f, "__qualname__", type(f).__name__)
        e = getattr(e, "base", None)
        seen += 1
    out["energy"] = kinds
    return out


def json_like(x):
    return json.dumps(x, sort_keys=True, default=str)
