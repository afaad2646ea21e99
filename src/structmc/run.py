"""The one run loop's front door: :func:`sample`, a composition of a :class:`Run`
(:mod:`structmc.runner`), its recorders (:mod:`structmc.recorders`: draws and info, the blow-up
watch, a callback) and, with a run folder, one :class:`~structmc.checkpointing.Checkpointer`
(chunks, checkpoints, exact resume); and the names of the run loop, re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from .chain import Chain
from .checkpointing import (  # noqa: F401  (their old home)
    CHECKPOINT_FORMAT,
    Checkpointer,
    InterruptGuard,
    _check_resume_compatible,
    check_folder_replaceable,
    check_resume_compatible,
    json_like,
)
from .distributed import Distributed
from .energy import Energy, draw_space_of, to_draws_of
from .execution import Execution
from .gradients import ControlVariate, Minibatch
from .recorders import BlowupWatch, Callback, Recorder, RunRecords
from .recording import Progress
from .run_inputs import _as_data, _as_source, _check_draws, _check_int, _initial_positions, check_draws, check_int  # noqa: F401  (their old home)
from .runner import Budget, DivergenceError, Run, _as_budget  # noqa: F401
from .samplers.kernel import Kernel
from .storage import RunFolder

_BlowupWatch = BlowupWatch  # its name when it lived here


def sample(
    target: Energy | Callable,
    init: Tensor | None,
    sampler: Kernel,
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
    recorders: Mapping[str, Recorder] | None = None,
    on_blowup: str = "warn",
    check_every: int = 32,
    distributed: bool | Distributed | None = None,
    execution: str | Execution | None = None,
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
    recorders : ``{name: recorder}``, your own :class:`~structmc.recorders.Recorder` objects
        (traces, running statistics, a keeper of draws): each gets ``on_step(iteration, state,
        info)`` after every iteration, after the draws and info are recorded; with ``out_dir``
        its ``state_dict()`` is part of every checkpoint (under its name) and ``resume=True``
        restores it, so it ends as if the run had not stopped.
    on_blowup : ``"warn"`` (default), ``"raise"`` or ``"ignore"``: what to do when the minibatch
        energy grows past 100 times its initial magnitude (``BlowupWatch.FACTOR``; watched at every
        iteration on the device, read every 64), a chain
        blowing up without (yet) becoming NaN; ``"raise"`` raises :class:`DivergenceError` as for NaN.
    check_every : iterations between reads of the NaN/Inf flags (one device-to-host transfer
        each; see :meth:`Run.step`). The flags are also read before every write to ``out_dir``
        and at the end, so a divergence still names its first iteration exactly and no
        non-finite draw is kept or written; ``1`` checks after every iteration (a
        ``callback`` then never sees a non-finite state).
    distributed : ``True`` (or :class:`structmc.distributed.Distributed` for options): every
        process of the initialised ``torch.distributed`` process group calls ``sample`` with the
        same arguments, and the ranks compute each gradient estimate together, each on its
        share of the global minibatch of ``batch_size`` rows (one weighted all-reduce per
        estimate; see :mod:`structmc.distributed`): the chain of one process with the same
        global batch, to float rounding. With a ``Dataset`` (or a ``DataSource`` over one) each
        rank reads only the items of its share of each batch. Rank 0 writes ``out_dir``; with
        ``out_dir`` every rank returns rank 0's chain. Resume needs the same number of processes.
    execution : how each iteration is computed (:mod:`structmc.execution`): ``"eager"`` (the
        default, op by op) or ``"compiled"`` (:class:`structmc.compiled.Compiled`: the iteration
        as one ``torch.compile`` graph, a CUDA graph on CUDA; the same random draws as the eager
        run, so the same chain to float rounding; what it cannot compile runs eagerly with a
        :class:`~structmc.compiled.CompileFallbackWarning` naming why). A run folder resumes in
        either mode.

    ``Chain.info`` holds every iteration's records: the sampler's (``energy [C, S]``, ...),
    ``lr``, ``grad_evals`` and ``time`` (seconds in sampler steps). For budgets, scoring and
    continuing in memory use :class:`Run` directly.

    Raises
    ------
    ValueError before any computation for invalid arguments; :class:`DivergenceError` naming
    the iteration and sampler when the energy or the parameters become NaN/Inf (its ``.chain``
    holds the draws kept so far, also written to ``out_dir``).
    """
    num_steps, burn_in, thin, chunk_draws, num_draws, checkpoint_every, user = _checked_options(
        num_steps, burn_in, thin, chunk_draws, checkpoint_every, on_blowup, resume, overwrite, keep_in_memory,
        out_dir, recorders,
    )  # fmt: skip
    run = Run(
        target, init, sampler, data=data, batch_size=batch_size, batching=batching, seed=seed,
        num_chains=num_chains, gradient=gradient, check_every=check_every, distributed=distributed,
        execution=execution,
    )  # fmt: skip
    loop = functools.partial(
        _sample_into, run, num_steps, burn_in=burn_in, thin=thin, num_draws=num_draws, keep_in_memory=keep_in_memory,
        chunk_draws=chunk_draws, progress=progress, callback=callback, on_blowup=on_blowup,
        checkpoint_every=checkpoint_every, user=user,
    )  # fmt: skip
    if out_dir is None:
        chain = loop(None, None)
        assert chain is not None  # only a follower (a rank other than 0 with a folder) returns None
        return chain
    context = run.distributed
    if context is not None and context.rank != 0:  # rank 0 writes the folder; the others follow it
        return _follow_rank0(context, loop)
    announced: list[bool] = []

    def announce(start) -> None:  # a distributed run: the other ranks start from what rank 0 read
        if context is not None:
            context.broadcast_object(("start", start))
        announced.append(True)

    try:
        folder = RunFolder(out_dir)
        # the settings carry the target's fingerprint (every data byte hashed: 0.2 s for MNIST, ~1 s
        # for a 60k-item Dataset): only a run folder needs them
        settings = {"num_steps": num_steps, "burn_in": burn_in, "thin": thin, **run.settings()}
        folder.lock()  # one writer per folder (a second gets RunFolderBusy); released on every way out
        try:
            if not resume:
                if overwrite:
                    folder.clear()
                elif not folder.is_empty():
                    raise ValueError(
                        f"out_dir {folder.path} is not empty (it holds a previous run): pass resume=True to "
                        "continue that run, or overwrite=True to replace it"
                    )
            chain = loop(folder, settings, resume=resume, announce=announce)
        finally:
            folder.unlock()
    except Exception as err:
        if context is not None and not announced:  # the other ranks wait for rank 0's start: tell them
            context.broadcast_object(("error", _picklable(err)))
        raise
    assert chain is not None  # rank 0 records
    if context is not None:
        context.broadcast_object(chain)
    return chain


def _follow_rank0(context, loop) -> Chain:
    """A distributed run's rank other than 0 with a run folder: start from the state rank 0
    read (or raise rank 0's error), record nothing, and return rank 0's chain."""
    kind, start = context.broadcast_object(None)
    if kind == "error":
        raise start
    loop(None, None, start=start, follow=True)
    return context.broadcast_object(None)


def _picklable(err: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001  (an exception that does not travel: its message does)
        return RuntimeError(f"rank 0: {type(err).__name__}: {err}")


def _checked_options(
    num_steps,
    burn_in,
    thin,
    chunk_draws,
    checkpoint_every,
    on_blowup,
    resume,
    overwrite,
    keep_in_memory,
    out_dir,
    recorders,
):
    """:func:`sample`'s own options, checked before any compute (the run's are :class:`Run`'s)."""
    num_steps, burn_in, thin = (
        check_int("num_steps", num_steps, 1),
        check_int("burn_in", burn_in, 0),
        check_int("thin", thin, 1),
    )
    chunk_draws = check_int("chunk_draws", chunk_draws, 1)
    num_draws = check_draws(num_steps, burn_in, thin)
    if checkpoint_every is not None:
        checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
    if on_blowup not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_blowup must be 'warn', 'raise' or 'ignore', got {on_blowup!r}")
    if resume and overwrite:
        raise ValueError("resume=True and overwrite=True contradict each other: choose one")
    for flag, needs in (
        (checkpoint_every is not None, "checkpoint_every needs out_dir"),
        (resume, "resume=True needs out_dir"),
        (overwrite, "overwrite=True needs out_dir"),
        (not keep_in_memory, "keep_in_memory=False needs out_dir (draws would be lost)"),
    ):
        if flag and out_dir is None:
            raise ValueError(needs)
    user = dict(recorders or {})
    for name, recorder in user.items():
        if not isinstance(name, str) or not isinstance(recorder, Recorder):
            raise TypeError(
                f"recorders must map names to structmc.recorders.Recorder objects, got {name!r}: "
                f"{type(recorder).__name__}"
            )
    return num_steps, burn_in, thin, chunk_draws, num_draws, checkpoint_every, user


def _sample_into(
    run: Run,
    num_steps: int,
    folder: RunFolder | None,
    settings: dict | None,
    *,
    burn_in: int,
    thin: int,
    num_draws: int,
    keep_in_memory: bool,
    chunk_draws: int,
    progress,
    callback,
    on_blowup: str,
    checkpoint_every: int | None,
    resume: bool = False,
    user: dict[str, Recorder] | None = None,
    announce: Callable[[dict | None], None] | None = None,
    start: dict | None = None,
    follow: bool = False,
) -> Chain | None:
    """:func:`sample`'s loop: the run, its recorders (records, blow-up watch, callback,
    progress) and, with a folder, one :class:`~structmc.checkpointing.Checkpointer`."""
    checkpointer, ckpt = None, None
    if folder is not None:
        assert settings is not None  # given with the folder
        checkpointer = Checkpointer(folder, settings, every=checkpoint_every, recorders=user)
        ckpt = checkpointer.read(num_steps) if resume else None  # refused here if it is another run's
        if resume and ckpt is None:  # nothing to resume from: starting afresh removes the folder's draws
            check_folder_replaceable(folder, settings)
        if resume:
            folder.clear_diverged()
        folder.create(settings)
        if announce is not None:
            announce(None if ckpt is None else {"run": ckpt["run"], "recorders": ckpt.get("recorders", {})})
    if start is not None:  # a distributed run's rank other than 0, resuming from rank 0's checkpoint
        run.load_state_dict(start["run"])
        for name, recorder in (user or {}).items():
            if name in start["recorders"]:
                recorder.load_state_dict(start["recorders"][name])
    if run.distributed is not None and run.distributed.rank != 0:
        progress = False  # one bar per job, rank 0's
    records = (
        None
        if follow
        else RunRecords(
            run.num_chains,
            draw_space_of(run.energy).dim,
            num_draws,
            burn_in=burn_in,
            thin=thin,
            dtype=run.theta.dtype,
            device=run.theta.device,
            keep_in_memory=keep_in_memory,
            folder=folder,
            chunk_draws=chunk_draws,
            before_write=run.check_finite,
            to_draws=to_draws_of(run.energy),
        )
    )
    if folder is not None and checkpointer is not None:
        checkpointer.records = records
        if ckpt is not None:
            checkpointer.restore(ckpt, run)
        elif resume:  # start afresh, without stale chunks
            folder.drop_chunks_from(0, 0)
    # what an iteration records (checkpointed: the draws and info, then the user's recorders), then
    # what watches it (the blow-up watch, the callback), in this order
    recording: list[Recorder] = [*([] if records is None else [records]), *(user or {}).values()]
    watching: list[Recorder] = []
    if on_blowup != "ignore":
        watching.append(BlowupWatch(run, on_blowup, last=num_steps))
    if callback is not None:
        watching.append(Callback(callback))
    recorded = False  # iteration t is fully recorded: a consistent point to checkpoint
    bar = None
    with InterruptGuard(active=folder is not None) as guard:
        try:
            bar = Progress(progress, num_steps, run.iteration, run.sampler.name)
            for t, state, info in run.iterate(num_steps - run.iteration):
                for recorder in recording:
                    recorder.on_step(t, state, info)
                recorded = True
                for recorder in watching:
                    recorder.on_step(t, state, info)
                if checkpointer is not None:
                    checkpointer.step(run, t)
                bar.update(t, info)
                if guard.interrupted:
                    raise KeyboardInterrupt
                recorded = False
        except DivergenceError as err:
            if records is not None:
                _keep_finite_records(err, run, records, folder)
            raise
        except KeyboardInterrupt:
            if checkpointer is not None and recorded:
                try:
                    checkpointer.save(run)
                except DivergenceError as err:  # the run had diverged before the Ctrl-C: say so
                    assert records is not None  # a checkpointer comes with a folder and its records
                    _keep_finite_records(err, run, records, folder)
                    raise err from None
                _say_resumable(folder, run.iteration, num_steps)
            raise
        finally:
            if bar is not None:
                bar.close()
            for recorder in (*recording, *watching):
                recorder.close()
    if checkpointer is not None:
        checkpointer.save(run)
    if records is None:  # a follower: rank 0's chain arrives by broadcast
        return None
    chain = records.chain(draw_space_of(run.energy), run.config())
    chain.buffers = _chain_buffers(run.energy, run.num_chains)
    _warn_unhealthy(chain, burn_in, run.sampler.name)
    return chain


def _warn_unhealthy(chain: Chain, burn_in: int, name: str) -> None:
    """Warn when the run's own records show it is not sampling the target yet (issue 36 §14,
    §17): an energy trace still moving after burn-in, a Metropolis chain stuck."""
    from .diagnostics.health import ConvergenceWarning, stationarity_note, stuck_note

    info = chain.info or {}
    for key, note in (("energy", stationarity_note), ("accept", stuck_note)):
        values = info.get(key)
        if isinstance(values, Tensor) and values.numel():
            line = note(values, burn_in)
            if line:
                warnings.warn(f"{name}: {line}", ConvergenceWarning, stacklevel=4)


def _say_resumable(folder: RunFolder | None, iteration: int, num_steps: int) -> None:
    """Ctrl-C wrote a checkpoint: say where and how to continue (issue 36 §20)."""
    if folder is None:
        return
    sys.stderr.write(
        f"structmc: interrupted after iteration {iteration} of {num_steps}; checkpoint written to {folder.path}. "
        f"Continue with the same call and resume=True (structmc sample: the same flags and --resume).\n"
    )
    sys.stderr.flush()


def _keep_finite_records(err: DivergenceError, run: Run, records: RunRecords, folder: RunFolder | None) -> None:
    """After a divergence: drop the draws and records of the iterations from the first
    non-finite one on (found up to ``check_every`` iterations late; a blow-up stop keeps its
    iteration, which is finite), write the rest to the folder and attach them to ``err``."""
    last_good = err.step if getattr(err, "finite", False) else err.step - 1
    records.truncate(last_good)
    run._unchecked.clear()  # the divergence is known: writing the kept records needs no check
    if folder is not None:
        records.write()
        folder.mark_diverged(str(err), err.step)
    err.chain = records.chain(draw_space_of(run.energy), run.config())


def _chain_buffers(energy, num_chains: int):
    """Each chain's module buffers (BatchNorm statistics) at the end of the run: ``sample``
    works on a copy of the energy, so the chain carries them for ``predictive``."""
    base = energy.cv_base
    if not base.has_buffers:  # a declared capability (Energy.has_buffers)
        return None
    if base.buffer_chains not in (None, num_chains):
        return None
    return [{k: v.detach().clone() for k, v in base.chain_buffers(c).items()} for c in range(num_chains)]


def _signals() -> tuple:
    return tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n))


@contextlib.contextmanager
def restored_globals():
    """Process-wide state restored on every way out (return, exception, ``KeyboardInterrupt``):
    torch's global RNG (CPU, and CUDA where initialised: experiments seed it with
    ``torch.manual_seed`` to build their networks), the intra-op thread count, the default
    dtype, the deterministic-algorithms mode, the SIGINT / SIGTERM handlers (``sample`` installs
    one for a clean Ctrl-C) and the warnings filters. Nothing is changed on entry, so the draws
    inside are those of the bare code. Around a whole experiment or demo (``structmc demo``, the
    papers' reproductions): a run that fails midway leaves nothing changed behind it."""
    import warnings

    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    num_threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    handlers = {s: signal.getsignal(s) for s in _signals()}
    filters, showwarning = list(warnings.filters), warnings.showwarning
    try:
        yield
    finally:
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        if torch.get_num_threads() != num_threads:
            torch.set_num_threads(num_threads)
        torch.set_default_dtype(dtype)
        if (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ) != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            for s, handler in handlers.items():
                if handler is not None and signal.getsignal(s) != handler:
                    signal.signal(s, handler)
        if warnings.filters != filters:
            warnings.filters[:] = filters
            mutated = getattr(warnings, "_filters_mutated", None)  # invalidates the "once" caches
            if mutated is not None:
                mutated()
        warnings.showwarning = showwarning


def iterate(
    target: Energy | Callable,
    init: Tensor | None,
    sampler: Kernel,
    budget: Budget | int | None = None,
    *,
    until=None,
    **run_options,
):
    """``Run(target, init, sampler, **run_options).iterate(budget, until=until)``."""
    return Run(target, init, sampler, **run_options).iterate(budget, until=until)


__all__ = ["Budget", "DivergenceError", "Run", "iterate", "sample", "check_resume_compatible", "restored_globals"]
