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
import json
import math
import operator
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
from . import fingerprint
from .chain import Chain
from .energy import Energy, StatefulEnergy, as_energy
from .gradients import ControlVariate, Minibatch, as_estimator
from .oracle import Oracle
from .recording import DrawRecorder, InfoLog, Progress
from .samplers.sampler import Sampler
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
        probe = source.probe() if source is not None and source.dataset is not None else None
        given_data = data
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
        theta0 = _initial_positions(energy, init, num_chains)
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
            "num_data": energy.num_data, "dim": energy.space.dim, "dtype": str(theta0.dtype).replace("torch.", ""),
            "space": [(i.name, list(i.shape)) for i in energy.space.params],
            "layers": energy.space.to_config()["layers"],
            "config": {"sampler": sampler.config(), "gradient": estimator.config()},
            "target": None,  # filled by settings(): see below
        }
        # the target's fingerprint (resume refuses another target): the energy's parts now, the
        # data's at the first settings() (every byte is hashed, ~0.2 s per 188 MB; a tuner's runs
        # never ask for it)
        self._pending_target = (fingerprint.energy_fingerprint(energy), fingerprint.legacy_energy_fingerprint(energy),
                                given_data, source, probe)

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
        if self._settings["target"] is None:
            energy_fp, legacy_energy, data, source, probe = self._pending_target
            self._settings["target"] = fingerprint.target_fingerprint(
                energy_fp, fingerprint.data_fingerprint(data, source),
                {**fingerprint.legacy_data_fingerprint(data, source, probe), **legacy_energy})
            self._pending_target = None
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
    seed : seeds the run's single ``torch.Generator`` (noise, batches, masks): same seed and
        same start, same chain. With ``init=None`` the start is the module's weights as you
        built them, which ``seed`` does not draw: build the module after ``torch.manual_seed``
        (or take ``structmc.zoo.energy_for(name, seed=...)``, seeded by default, or
        ``energy.initial_position("prior", generator=...)``) for a start that repeats.
    out_dir : stream draws to ``out_dir/samples`` in chunks of ``chunk_draws`` and write
        checkpoints every ``checkpoint_every`` iterations (and at the end). ``resume=True``
        continues from the last checkpoint and yields exactly the chain an uninterrupted run
        would; ``num_steps`` may be raised to extend a finished run. A new run refuses an
        ``out_dir`` that is not empty unless ``resume=True`` or ``overwrite=True`` (which first
        removes the previous run's files; a folder holding anything else is refused);
        ``resume=True`` with no checkpoint in ``out_dir`` starts afresh, and refuses a folder
        holding another run's draws. One run writes a folder at a time: it holds an exclusive
        lock on it (``out_dir/.structmc.lock``) and a second writer gets
        :class:`~structmc.storage.RunFolderBusy`. Every chunk and checkpoint is recorded with its
        digest in ``out_dir/manifest.json`` (crash-consistently: a kill at any moment leaves a
        folder that resumes) and checked on resume and on loading. Ctrl-C (``KeyboardInterrupt``,
        or SIGINT under a handler the program installed, which is called too) during a run with an
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
    folder = RunFolder(out_dir) if out_dir is not None else None
    # the settings carry the target's fingerprint (every data byte hashed: 0.2 s for MNIST, ~1 s
    # for a 60k-item Dataset): only a run folder needs them
    settings = {"num_steps": num_steps, "burn_in": burn_in, "thin": thin, **run.settings()} if folder is not None else None
    if folder is not None:
        folder.lock()  # one writer per folder (a second gets RunFolderBusy); released on every way out
    try:
        if folder is not None and not resume:
            if overwrite:
                folder.clear()
            elif not folder.is_empty():
                raise ValueError(f"out_dir {folder.path} is not empty (it holds a previous run): pass resume=True to "
                                 "continue that run, or overwrite=True to replace it")
        ckpt = _load_checkpoint(folder, settings, num_steps) if resume else None
        if resume and ckpt is None:  # nothing to resume from: starting afresh removes the folder's draws
            _check_folder_replaceable(folder, settings)
        if folder is not None:
            if resume:
                folder.clear_diverged()
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

        written_at: list[int] = []

        def checkpoint() -> None:
            if written_at and written_at[-1] == run.iteration:
                return  # written at this iteration already (checkpoint_every, then the end or Ctrl-C)
            run.check_finite()
            draws.flush()  # the records: info chunks on disk plus the tail not yet in one
            folder.save_checkpoint({"format": CHECKPOINT_FORMAT, "settings": settings, "run": run.state_dict(),
                                    "draws": {**draws.state_dict(), **log.state_dict()}, "info": log.tail()})
            written_at.append(run.iteration)

        watch = _BlowupWatch(run, on_blowup) if on_blowup != "ignore" else None
        # Ctrl-C: finish the iteration, checkpoint, re-raise (a second Ctrl-C stops at once). A
        # handler the program installed is chained (called on every SIGINT); one ignoring SIGINT
        # (SIG_IGN, e.g. a background job) is kept. Every way out restores the previous handler.
        interrupted: list[bool] = []
        previous, installed = None, False
        recorded = False  # iteration t is fully recorded (log, draws): a consistent point to checkpoint
        bar = None
        try:
            if (folder is not None and threading.current_thread() is threading.main_thread()
                    and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN):
                chained = signal.getsignal(signal.SIGINT)

                def on_sigint(signum, frame):
                    again = bool(interrupted)
                    interrupted.append(True)
                    if callable(chained) and chained is not signal.default_int_handler:
                        chained(signum, frame)
                    if again:
                        raise KeyboardInterrupt

                previous, installed = signal.signal(signal.SIGINT, on_sigint), True
            bar = Progress(progress, num_steps, run.iteration, run.sampler.name)
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
            if bar is not None:
                bar.close()
            if installed:
                signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        if folder is not None:
            checkpoint()
        chain = draws.chain(run.energy.space, log.upto(), run.config())
        chain.buffers = _chain_buffers(run.energy, num_chains)
        return chain
    finally:
        if folder is not None:
            folder.unlock()


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
    base = energy.cv_base
    if not base.has_buffers:  # a declared capability (Energy.has_buffers)
        return None
    if base.buffer_chains not in (None, num_chains):
        return None
    return [{k: v.detach().clone() for k, v in base.chain_buffers(c).items()} for c in range(num_chains)]


class _BlowupWatch:
    """Watches a chain blowing up without (yet) becoming NaN, at the first iteration, every
    ``EVERY`` iterations and at the last (one device read each), on two scales:

    * the minibatch energy against its value at iteration 1 (the start):
      ``|U_t| > FACTOR · max(|U_1|, P, 1)`` for a chain. Only growth counts (the energy falling
      during burn-in is normal); the floor ``P`` (about the energy's thermal spread) keeps a
      start near a mode from false alarms. A posterior chain's per-datum loss does not grow a
      hundredfold from a random start (digits, SGLD lr = 1: ×530 in one step).
    * the position against the prior, where the energy has a prior (``ModuleEnergy``): the
      prior's energy per parameter −log p(θ)/P (½ E[(θ/σ)²] for a Normal prior; about ½ for a
      prior draw) past ``PRIOR_FACTOR`` (RMS θ/σ = 10) and ten times its start. A posterior
      lies inside its prior's mass; |θ| = 853 under an N(0, 1) prior does not.
    """

    EVERY = 64
    FACTOR = 1e2
    PRIOR_FACTOR = 50.0

    def __init__(self, run: Run, mode: str):
        from .energy import ModuleEnergy

        self.run, self.mode = run, mode
        self.scale: Tensor | None = None
        self.fired = False
        e = run.energy
        base = e if isinstance(e, ModuleEnergy) else e.cv_base
        # a structured energy's cv_base is its ModuleEnergy; a hierarchical one is not a ModuleEnergy
        self.prior_of = base.prior_energy if isinstance(base, ModuleEnergy) and base.space.dim == e.space.dim else None
        # at the start θ_0 (the first check sees θ_1, which one bad step has already thrown out)
        self.prior_first = None if self.prior_of is None else self._prior_per_param(run.theta).clamp(min=0.5)

    def _prior_per_param(self, theta: Tensor) -> Tensor:
        return self.prior_of(theta.detach()).to(torch.float64) / theta.shape[-1]

    def check(self, t: int, info: dict) -> None:
        energy = info.get("energy")
        if self.fired or not isinstance(energy, Tensor) or not energy.is_floating_point():
            return
        energy = energy.detach().to(torch.float64).reshape(-1)
        prior = self._prior_per_param(self.run.theta) if self.prior_of is not None else None
        if self.scale is None:
            self.scale = energy.abs().clamp(min=max(1.0, float(self.run.energy.space.dim)))
            self.first = energy.clone()
            return
        ratio = energy.abs() / self.scale
        if prior is not None:  # one read for both scales
            prior_ratio = prior / self.prior_first
            flags = torch.stack([ratio, prior, prior_ratio]).cpu()
            ratio, prior, prior_ratio = flags[0], flags[1], flags[2]
        else:
            ratio = ratio.cpu()
        worst = int(ratio.argmax()) if ratio.numel() > 1 else 0
        growth = float(ratio[worst])
        chain = lambda c: f", chain {c}" if ratio.numel() > 1 else ""  # noqa: E731
        lr = info.get("lr")
        advice = ((f"The step size lr={lr:.3g} may be too large: " if isinstance(lr, float) else
                   "The step size may be too large: ")
                  + "lr is ε of each sampler's own parameterisation, against the energy of all N data points "
                    "(docs/conventions.md), e.g. SGLD's drift is (ε/2)∇Û with Û scaled by N/n; reduce it.")
        msg = None
        if growth > self.FACTOR and math.isfinite(growth):
            now, first = float(energy[worst]), float(self.first[worst])
            msg = (f"{self.run.sampler.name}: the minibatch energy is blowing up: {now:.3g} at iteration {t}, "
                   f"{growth:.3g} times its initial magnitude ({first:.3g} at iteration 1{chain(worst)}). ")
        elif prior is not None:
            far = (prior > self.PRIOR_FACTOR) & (prior_ratio > 10.0)
            if bool(far.any()):
                c = int(torch.where(far, prior, torch.zeros_like(prior)).argmax())
                msg = (f"{self.run.sampler.name}: the chain has left the prior's mass: at iteration {t} the prior "
                       f"energy per parameter −log p(θ)/P is {float(prior[c]):.3g}{chain(c)} (about 0.5 for a draw "
                       f"from the prior; {float(prior[c]) / float(self.prior_first[c]):.3g} times its start; for a "
                       f"Normal prior, RMS θ/σ = {math.sqrt(2 * float(prior[c])):.3g}): the chain is blowing up. ")
        if msg is None:
            return
        self.fired = True
        msg += advice
        if self.mode == "raise":
            err = DivergenceError(msg, t)
            err.finite = True  # iteration t is finite: its draw and records are kept
            raise err
        warnings.warn(msg, UserWarning, stacklevel=3)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _check_int(name: str, value, minimum: int) -> int:
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
    meta = [i for i, t in enumerate(data) if t.is_meta]
    if meta:
        raise ValueError(f"data tensor {meta[0]} is on the meta device (a shape without values): pass tensors that hold "
                         "the data")
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
    if init.is_meta:
        raise ValueError("init is on the meta device (a shape without values): pass positions that hold values, e.g. "
                         "energy.initial_position() or torch.zeros(P)")
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
    check_resume_compatible(ckpt["settings"], settings)
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


def _check_folder_replaceable(folder: RunFolder, settings: dict) -> None:
    """``resume=True`` without a checkpoint (a run killed before its first one) starts afresh and
    removes the draws and records in the folder: refuse when they belong to another run, i.e.
    ``run.json``'s settings differ as a checkpoint's would (target fingerprint included)."""
    if not (folder.chunk_files() or folder.info_files()) or folder.folder_format() is None:
        return
    try:
        check_resume_compatible(folder.settings(), settings, against="the run in out_dir")
    except ValueError as err:
        raise ValueError(f"out_dir {folder.path} holds the draws of another run and no checkpoint: {err}. "
                         "resume=True would delete them; resume with that run's settings and target, or pass "
                         "overwrite=True (without resume) to replace it") from None


def check_resume_compatible(old: dict, new: dict, against: str = "the checkpoint") -> None:
    """Raise ``ValueError`` (naming what differs) unless a run whose :meth:`Run.settings` are
    ``new`` may continue one recorded with settings ``old`` (a checkpoint's or a run folder's
    ``settings``): burn-in, thinning, seed, chains, batching, the parameter space and sampler
    config, the dtype and the target's fingerprint (:mod:`structmc.fingerprint`) must agree.
    ``against`` names ``old``'s origin in the message. ``sample(..., resume=True)`` checks this
    itself; call it when you checkpoint a :class:`Run` yourself (``state_dict`` + ``settings``)."""
    for key in ("burn_in", "thin", "seed", "num_chains", "batch_size", "batching", "dim", "space", "config"):
        if json_like(old.get(key)) != json_like(new.get(key)):
            raise ValueError(f"cannot resume: {key} differs from {against} ({old.get(key)!r} vs {new.get(key)!r})")
    # the chain's dtype (checkpoints written before it was recorded are not compared): the
    # sampler state would be loaded in the checkpoint's dtype and the run go on in it silently
    if "dtype" in old and "dtype" in new and old["dtype"] != new["dtype"]:
        raise ValueError(f"cannot resume: the chain in {against} is {old['dtype']} but this run's is {new['dtype']} "
                         f"(init's dtype, or the module's for a ModuleEnergy): give init, the module and the data in "
                         f"{old['dtype']} as before (e.g. init.to(torch.{old['dtype']})), or start a new run")
    # the target (structmc.fingerprint): a changed part is refused, naming it; what could not be
    # fingerprinted, or was recorded by an older structmc's weaker fingerprint, is a warning
    fingerprint.check(old.get("target"), new["target"], against)


_check_resume_compatible = check_resume_compatible  # the name older code and tests import


def json_like(x):
    return json.dumps(x, sort_keys=True, default=str)
