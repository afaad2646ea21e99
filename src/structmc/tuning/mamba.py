r"""MAMBA: successive halving over SGMCMC arms, ranked by a Stein discrepancy.

Coullon, South & Nemeth (2023), "Efficient and generalizable tuning strategies for stochastic
gradient MCMC", Algorithm 1. With M arms, budget T and pruning rate η there are
``R = ⌊log_η M⌋`` rounds; in round i every surviving arm s ∈ S_i runs for

.. math::  r_i = \frac{T}{|S_i| \, R}

(seconds of sampling, iterations or gradient evaluations), is scored on the samples of that
round (KSD by default), and the ``⌊|S_i|/η⌋`` arms with the lowest metric survive. Each round
spends T/R, so the whole run spends T. An arm that diverges, errs or scores NaN ranks last,
is recorded with its error, and never stops the tuner; ties are broken by arm order.

Arms continue from where the previous round left them (``restart="state"``: the run's full
state — position, momentum, thermostat, minibatch stream, generator — so an arm that survives
every round is one chain of ``Σ r_i``). ``restart="position"`` keeps only the position and
re-initialises the sampler state each round, as the reference code does.

Each round is one task per arm on an executor (:mod:`structmc.executors`: serial, process
pool, Dask, Ray), the metric included, so scoring runs in parallel too. With an iteration or
gradient-evaluation budget the choice and the trace are identical on every backend.

Modules: :mod:`.halving` (the round arithmetic and budget checks), :mod:`.result`
(:class:`TuningResult`, the trace) and this one (the rounds on an executor, progress and resume,
and :func:`mamba`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from .. import fingerprint
from ..executors import as_executor
from ..gradients import centre_fingerprint
from ..run import Budget
from ..storage import RunFolderError
from ..storage.tuning_folder import LEGACY_STATES, PLOT, PROGRESS, TRACE, TUNING_FOLDER_FORMAT, TuningFolder
from .arms import Arm, as_arms
from .halving import (
    _as_budget,
    _check_eta,
    arm_seed,
    check_scorable,
    num_rounds,
    round_budget,
    round_sizes,
    survivors,
    warn_unscored,
)
from .problem import Problem, as_problem
from .records import ArmCarry, ArmResult, TuningSettings, budget_dict
from .result import TuningResult, _finite, _unfinite
from .task import ArmTask, evenly, run_arm

# the trace was defined here (structmc.tuning.mamba.TuningResult) before issue 23's split
TuningResult.__module__ = __name__

# PROGRESS ("progress.pt"): the one authoritative record of a tuning run in out_dir (see _save_progress)
PROGRESS_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------
class _Progress:
    """One bar over all arm-rounds; ``best=`` is the lowest metric of the current round so far
    (failed arms, inf, never shown as the best while a finite one exists)."""

    def __init__(self, show, total: int, desc: str):
        self.bar = None
        self.best = math.inf
        if show is None:
            import sys

            show = sys.stderr.isatty()
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="arm-round", leave=False)

    def round(self, i: int, rounds: int, arms: int) -> None:
        self.best = math.inf  # metrics of different rounds (budgets) are not compared
        if self.bar is not None:
            self.bar.set_description(f"round {i + 1}/{rounds}: {arms} arms")

    def done(self, metric: float) -> None:
        if metric < self.best:  # NaN compares False: never the best
            self.best = metric
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(best=f"{self.best:.4g}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _rank(results: list[ArmResult]) -> list[ArmResult]:
    """Lowest metric first; failed arms (inf) last; ties by arm index."""
    return sorted(results, key=lambda r: (r.failed, r.metric, r.index))


RoundPlan = Sequence[tuple[Budget, int]]  # per round: (each arm's budget, arms kept after it)


def _run_rounds(problem: Problem, arms: list[Arm], plan: RoundPlan, settings: TuningSettings) -> TuningResult:
    """Shared by :func:`mamba` and :func:`grid_search`: round ``i`` runs one task per surviving
    arm for ``plan[i][0]`` and keeps the ``plan[i][1]`` best (every arm starts round 0)."""
    for arm in arms:  # every arm's errors before any compute
        problem.check_arm(arm)
    own = settings.executor is None or isinstance(settings.executor, str)
    executor = as_executor(settings.executor)
    try:
        return _rounds(problem, arms, plan, settings, executor)
    finally:
        if own:
            executor.close()


def _rounds(problem: Problem, arms: list[Arm], plan: RoundPlan, settings: TuningSettings, executor) -> TuningResult:
    if settings.out_dir is None:
        return _rounds_in(problem, arms, plan, settings, executor, None)
    folder = TuningFolder(settings.out_dir)
    folder.lock()  # one tuner per folder (a second gets RunFolderBusy); released on every way out
    try:
        if settings.resume:
            folder.open_for_resume()
        elif settings.overwrite:
            folder.clear()
        elif not folder.is_empty():
            raise ValueError(
                f"out_dir {folder.path} is not empty (it holds "
                f"{sorted(p.name for p in folder.path.iterdir() if p.name != '.structmc.lock')[:5]}): pass "
                "resume=True to continue the tuning run there, or overwrite=True to replace it (or another out_dir)"
            )
        return _rounds_in(problem, arms, plan, settings, executor, folder)
    finally:
        folder.unlock()


def _rounds_in(
    problem: Problem, arms: list[Arm], plan: RoundPlan, settings: TuningSettings, executor, folder: TuningFolder | None
) -> TuningResult:
    method = settings.method
    result = TuningResult(method, arms, settings.trace(problem, executor, len(arms)))
    carries: dict[int, ArmCarry] = {}
    if folder is not None:  # what resume checks: the energy and every byte of the data
        result.target = fingerprint.fingerprint(problem.energy, problem.data)
        if any(a.gradient == "control_variate" for a in arms):  # and the centre the arms' states keep
            result.settings["centre"] = centre_fingerprint(problem.centre)
    if settings.resume:
        assert folder is not None  # TuningSettings refuses resume=True without out_dir
        result, carries = _load_progress(folder, result)
    problem.prepare(arms)

    t_start = time.perf_counter()
    wall_before = float(result.timing.get("wall", 0.0)) if settings.resume else 0.0
    bar = _Progress(settings.progress, _planned_tasks(len(arms), plan), method)
    shared = executor.share(problem)
    try:
        alive = list(range(len(arms))) if not result.rounds else list(result.rounds[-1]["kept"])
        for i in range(len(result.rounds), len(plan)):
            per_arm, keep = plan[i]
            bar.round(i, len(plan), len(alive))
            t0 = time.perf_counter()
            futures = []
            for idx in alive:
                seed = arm_seed(settings.seed, idx, i if settings.restart == "position" else 0)
                start = carries.get(idx, ArmCarry()).start(settings)
                futures.append(
                    executor.submit(run_arm, shared, ArmTask(idx, arms[idx], i, per_arm, seed, settings, start))
                )
            results: list[ArmResult] = []
            for f in futures:
                res = f.result()
                bar.done(res.metric)
                results.append(res)
            wall = time.perf_counter() - t0
            ranked = _rank(results)
            kept = sorted(r.index for r in ranked[:keep])
            pruned = []
            cut = ranked[keep - 1].metric if keep <= len(ranked) else math.inf
            for r in ranked[keep:]:
                reason = f"failed: {r.error}" if r.error else f"metric {r.metric:.4g} > {cut:.4g}, the worst kept"
                pruned.append({"index": r.index, "reason": reason})
            carries = {r.index: _trimmed(r.carry, settings.max_samples) for r in results if r.index in kept}
            record = {
                "round": i,
                "arms": list(alive),
                "budget": budget_dict(per_arm),
                "results": [r.to_dict() for r in results],
                "kept": kept,
                "pruned": pruned,
                "wall_s": wall,
            }
            result.rounds.append(record)
            alive = kept
            result.best_index = None if ranked[0].failed else ranked[0].index
            result.timing = _timing(result, executor, wall_before + time.perf_counter() - t_start, wall_before)
            if folder is not None:
                _save_progress(folder, result, carries)
            if result.best_index is None:  # nothing to rank: promoting failed arms by index would be arbitrary
                errors = "; ".join(f"{arms[r.index].label}: {r.error}" for r in results)
                raise RuntimeError(f"{method}: every arm failed in round {i} ({errors})")
    finally:
        bar.close()
    result.complete = True
    result.timing = _timing(result, executor, wall_before + time.perf_counter() - t_start, wall_before)
    if folder is not None:
        _save_progress(folder, result, carries)
        try:
            buf = io.BytesIO()
            result.plot(buf)
        except ImportError:
            pass
        else:
            folder.write_file(PLOT, buf.getvalue())
    return result


def _trimmed(carry: ArmCarry, max_samples: int) -> ArmCarry:
    """The carry a kept arm takes to its next round, its samples (``samples="all"``) thinned
    evenly to ``2·max_samples``."""
    if carry.samples is not None and carry.samples.shape[0] > 2 * max_samples:
        return dataclasses.replace(carry, samples=evenly(carry.samples, 2 * max_samples))
    return carry


def _planned_tasks(num_arms: int, plan: RoundPlan) -> int:
    n, total = num_arms, 0
    for _, keep in plan:
        total += n
        n = keep
    return total


def _timing(result: TuningResult, executor, wall: float, wall_earlier: float = 0.0) -> dict:
    keys = ("seconds", "scores_s", "metric_s", "setup_s")
    sums = {k: 0.0 for k in keys}
    busy_share = 0.0
    slots = max(1, int(getattr(executor, "slots", 1) or 1))
    for r in result.rounds:
        busy = 0.0
        for res in r["results"]:
            for k in keys:
                sums[k] += float(res.get(k, 0.0))
            busy += float(res.get("wall_s", 0.0))
        busy_share += busy / min(slots, max(1, len(r["results"])))
    busy_total = sum(float(res.get("wall_s", 0.0)) for r in result.rounds for res in r["results"])
    return {
        "wall": wall,
        "sampling": sums["seconds"],
        "scores": sums["scores_s"],
        "metric": sums["metric_s"],
        "setup": sums["setup_s"],
        # in tasks but in none of the above: draw copies, recording, state_dict
        "in_task_other": max(0.0, busy_total - sum(sums.values())),
        "overhead": max(0.0, wall - busy_share),
        "slots": slots,
        # of ``wall``, the seconds of rounds committed in earlier sittings (a resumed tuner)
        "wall_earlier_sittings": wall_earlier,
    }


def _save_progress(folder: TuningFolder, result: TuningResult, carries: dict[int, ArmCarry]) -> None:
    """One commit per round: ``progress.pt`` holds the trace and the surviving arms' states
    together, written crash-consistently and listed with its digest in the folder's manifest
    (:meth:`~structmc.storage.VerifiedFolder.write_file`), so a kill at any point leaves the
    previous round's progress or this one's, never a mix. ``trace.json`` is a readable copy
    written after the commit (resume never reads it while ``progress.pt`` exists). The states
    are stored as plain dicts (:meth:`ArmCarry.to_dict`), as they always were."""
    buf = io.BytesIO()
    states = {i: c.to_dict() for i, c in carries.items()}
    torch.save({"format": PROGRESS_FORMAT, "trace": result.to_dict(), "states": states}, buf)
    folder.write_file(PROGRESS, buf.getvalue())
    trace = {**result.to_dict(), "folder_format": TUNING_FOLDER_FORMAT}
    folder.write_file(TRACE, json.dumps(_finite(trace), indent=1))
    legacy = folder.path / LEGACY_STATES  # structmc 0.1's second file, superseded by progress.pt
    if legacy.exists():
        legacy.unlink()


def _load_progress(folder: TuningFolder, fresh: TuningResult) -> tuple[TuningResult, dict[int, ArmCarry]]:
    out_dir = folder.path
    progress, trace = out_dir / PROGRESS, out_dir / TRACE
    folder.manifest()  # None: a folder from before manifests (a warning says so); missing in a newer one: an error
    # a file on disk or listed is read, verified: one the manifest does not list, or lists but is gone, is an error
    if progress.exists() or folder._listed(PROGRESS):
        saved = _read(folder, progress)
        if not isinstance(saved, dict) or saved.get("format") != PROGRESS_FORMAT:
            got = saved.get("format") if isinstance(saved, dict) else type(saved).__name__
            raise ValueError(f"cannot resume from {progress}: unknown progress format {got!r}")
        try:
            old, states, source = TuningResult.from_dict(saved["trace"]), saved["states"], progress
        except (KeyError, TypeError, ValueError) as err:
            raise RunFolderError(f"{progress}: not a tuning run's progress ({type(err).__name__}: {err})") from err
    elif trace.exists() or folder._listed(TRACE):  # written by structmc 0.1: trace.json, then arm_states.pt
        try:
            old = TuningResult.from_dict(_unfinite(json.loads(folder.read_file(TRACE))))
        except (KeyError, TypeError, ValueError) as err:
            raise RunFolderError(f"{trace}: unreadable ({type(err).__name__}: {err})") from err
        source = trace
        states = None
    else:
        return fresh, {}
    mine, theirs = dict(fresh.settings), dict(old.settings)
    for key in ("executor",):
        mine.pop(key, None), theirs.pop(key, None)
    if theirs.get("score_data") is not None:  # a trace from before score_batches: a fixed subset was the only kind
        theirs.setdefault("score_batches", "fixed")
    if "centre" in mine and "centre" in theirs and mine["centre"] != theirs["centre"]:
        raise ValueError(
            f"cannot resume from {source}: the control-variate centre differs (fingerprint {theirs['centre']} vs "
            f"{mine['centre']}); the arms would go on with the centre they started with, not this one: pass the "
            "centre the tuning run started with, or start a new run"
        )
    if "centre" in mine and "centre" not in theirs:  # a trace from before the centre was recorded
        warnings.warn(
            f"resuming from {source}, written by an earlier structmc that did not record the control-variate "
            "centre: the centre could not be checked (the arms go on with the centre stored in their states)",
            UserWarning,
            stacklevel=4,
        )
        mine.pop("centre")
    if json.dumps(mine, sort_keys=True, default=str) != json.dumps(_unfinite(theirs), sort_keys=True, default=str) or [
        a.to_dict() for a in old.arms
    ] != [a.to_dict() for a in fresh.arms]:
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise ValueError(f"cannot resume from {source}: its settings or arms differ ({', '.join(diff) or 'arms'})")
    assert fresh.target is not None  # _rounds fingerprints the target of every run with an out_dir
    fingerprint.check(old.target, fresh.target, f"the tuning run in {out_dir}")
    old.target = fresh.target  # a run from before fingerprints records this one from now on
    if "centre" in fresh.settings:  # and a run from before centres were recorded, this one
        old.settings["centre"] = fresh.settings["centre"]
    if old.complete:
        return old, {}
    if states is None:
        states = _read(folder, out_dir / LEGACY_STATES) if old.rounds else {}
    return old, {int(i): ArmCarry.from_dict(d) for i, d in states.items()}


def _read(folder: TuningFolder, path: Path):
    """A torch file of the tuning folder, checked against its manifest; errors name the file."""
    return folder._load(path, weights_only=False)


def mamba(
    target,
    init,
    arms,
    budget: Budget,
    *,
    data=None,
    eta: int = 3,
    metric="ksd",
    executor=None,
    seed: int = 0,
    num_chains: int = 1,
    batching: str = "epoch",
    centre: Tensor | None = None,
    samples: str = "round",
    restart: str = "state",
    thin: int = 10,
    max_samples: int = 256,
    min_samples: int = 10,
    metric_cost: float | None = 0.25,
    warmup: int = 2,
    score_data: int | None = None,
    score_batches: str | None = None,
    validation=None,
    out_dir=None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    problem: Problem | None = None,
) -> TuningResult:
    """Tune ``arms`` on ``target`` by successive halving (MAMBA, Algorithm 1).

    Parameters
    ----------
    target, init, data, num_chains, batching, centre, score_data, score_batches, validation :
        the posterior, the start (``[P]`` or ``[num_chains, P]``; the paper uses the MAP), its
        data, the control-variate centre, and the score data (see :class:`Problem`: ``None``
        full-data scores; ``score_data=m`` the paper's stochastic KSD/FSSD, every draw scored
        on its own minibatch of m rows, or with ``score_batches="fixed"`` the biased
        fixed-subset scores of structmc 0.1.0); or pass
        a ready :class:`Problem` as ``target`` (or ``problem=``), e.g. to evaluate the chosen
        arm on it afterwards with ``problem.sample(result.best, budget)``.
    arms : a list of :class:`Arm` (or their dicts), e.g. from :func:`grid`.
    budget : the total budget T as a :class:`~structmc.Budget` of ``seconds`` (sampling
        time, set-up and compilation excluded: ``warmup`` iterations run off the clock on a
        throwaway copy first), ``iterations`` or ``grad_evals`` (reproducible on any backend).
    eta : pruning rate η >= 2 (default 3).
    metric : ``"ksd"`` (default), ``"fssd"``, :class:`KSD`/:class:`FSSD` objects, or any
        ``fn(samples [n, P], problem) -> float`` (lower is better).
    samples : ``"round"`` scores each round's new samples (the paper's choice), ``"all"``
        all samples so far.
    restart : ``"state"`` continues each arm's full run state, ``"position"`` only its
        position (the reference code).
    thin, max_samples, min_samples, metric_cost : keep every ``thin``-th draw (the paper: 10),
        at most ``2·max_samples`` (the thinning doubles past that), and score at most
        ``max_samples`` of them, fewer when their full-data scores would cost more than
        ``metric_cost`` × the round's sampling work in data points (but at least
        ``min_samples``); ``metric_cost=None`` scores all kept (the reference; its scoring
        then costs 5–10× the sampling).
    executor : where tasks run (:func:`structmc.executors.as_executor`): ``None`` in process,
        ``"process"``, ``"dask"``, ``"ray"``, a Dask ``Client``, an executor object.
    out_dir, resume, overwrite : commit the progress (trace and arm states, ``progress.pt``,
        crash-consistently) after every round, with ``trace.json`` as a readable copy (and the
        plot at the end); ``resume=True`` continues an interrupted run from it, refusing a
        changed target (energy or data: :mod:`structmc.fingerprint`) or changed settings. The
        folder has a run folder's guarantees (:class:`~structmc.storage.tuning_folder.TuningFolder`):
        every file is listed with its digest in ``manifest.json`` and checked when read (a
        truncated or altered one is an error naming it); one tuner writes it at a time (a
        second gets :class:`~structmc.storage.RunFolderBusy`); a new run refuses a folder that
        is not empty unless ``resume=True`` or ``overwrite=True`` (which first removes the
        previous tuning run's files; a folder holding anything else is refused).

    Returns a :class:`TuningResult` (``.best`` is the chosen :class:`Arm`).
    """
    arms = as_arms(arms)
    _check_eta(eta)
    budget = _as_budget(budget)
    settings = TuningSettings(
        "mamba",
        budget,
        metric,
        eta,
        seed=seed,
        samples=samples,
        restart=restart,
        thin=thin,
        max_samples=max_samples,
        min_samples=min_samples,
        metric_cost=metric_cost,
        warmup=warmup,
        executor=executor,
        out_dir=out_dir,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
    )
    sizes = round_sizes(len(arms), eta)
    plan = [(round_budget(budget, n, len(sizes)), survivors(n, eta)) for n in sizes]
    check_scorable(plan[0][0], thin, settings.min_scored, arms=len(arms), rounds=len(sizes), total=budget)
    problem = as_problem(
        target,
        init,
        problem,
        data=data,
        num_chains=num_chains,
        batching=batching,
        centre=centre,
        score_data=score_data,
        score_batches=score_batches,
        validation=validation,
        seed=seed,
    )
    result = _run_rounds(problem, arms, plan, settings)
    warn_unscored(result, min_samples)
    return result


__all__ = ["mamba", "TuningResult", "num_rounds", "round_sizes", "round_budget", "survivors", "arm_seed"]
