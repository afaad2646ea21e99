"""Checkpoints of a run: what resume compares (:func:`check_resume_compatible`), the
checkpoint formats (format 1 of structmc 0.1 upgraded on load), and the one
:class:`Checkpointer` that :func:`structmc.sample`, the experiments and the tuners use: the
:class:`~structmc.run.Run`'s ``state_dict`` and each recorder's, written crash-consistently to a
:class:`~structmc.storage.RunFolder`."""

from __future__ import annotations

import json
import signal
import threading
import time
import warnings
from typing import Any, cast

from torch import Tensor

from . import fingerprint
from .energy import StatefulEnergy
from .energy.protocols import BufferedEnergy
from .storage import RunFolder

CHECKPOINT_FORMAT = 2


def load_checkpoint(folder: RunFolder, settings: dict, num_steps: int | None = None) -> dict | None:
    """The folder's checkpoint in the current format, checked against this run's settings."""
    if (folder.path / "run.json").exists():
        folder.settings()  # verified against the manifest: an altered or damaged run.json is refused, naming it
    ckpt = folder.load_checkpoint()
    if ckpt is None:
        return None
    ckpt = _upgrade_checkpoint(ckpt)
    check_resume_compatible(ckpt["settings"], settings)
    if num_steps is not None and ckpt["run"]["iteration"] > num_steps:
        raise ValueError(f"the checkpoint is at iteration {ckpt['run']['iteration']}, beyond num_steps={num_steps}")
    return ckpt


def _upgrade_checkpoint(ckpt: dict) -> dict:
    """Format 1 (structmc 0.1.0, no ``format`` key) -> format 2 (and an experiment's carried
    BatchNorm statistics -> the run's: :func:`_carried_buffers`)."""
    fmt = ckpt.get("format", 1)
    if fmt == CHECKPOINT_FORMAT:
        return _carried_buffers(ckpt)
    if fmt == 1 and "carry" in ckpt:  # the experiments' own format before the recorder seam
        return {
            "format": CHECKPOINT_FORMAT,
            "settings": ckpt["settings"],
            "run": ckpt["run"],
            "recorders": {"carry": ckpt["carry"]},
        }
    if fmt != 1:
        raise ValueError(f"checkpoint format {fmt} is newer than this structmc understands ({CHECKPOINT_FORMAT})")
    info = dict(ckpt["info"])
    steps = int(ckpt["step"])
    return {
        "format": CHECKPOINT_FORMAT,
        "settings": ckpt["settings"],
        "run": {
            "iteration": steps,
            "elapsed": float(info["time"][-1]) if steps else 0.0,
            "grad_evals": 0,
            "value_evals": 0,
            "sampler_state": ckpt["sampler_state"],
            "generator": ckpt["generator"],
            "stream": ckpt["stream"],
            "estimator": ckpt.get("estimator") or {},
            "energy": ckpt.get("energy_state"),
        },
        "draws": {"kept": ckpt["kept"], "written": ckpt["written"], "chunks": ckpt["chunks"]},
        "info": info,
    }


def _carried_buffers(ckpt: dict) -> dict:
    """A checkpoint of ``structmc_papers.ssgmcmc_resnet`` (the papers' companion package) written while the experiment
    carried BatchNorm's statistics itself (its carry's ``buffers``: ``[{"own", "chains"}]``, the
    layout of ``buffer_state_dict()``) before the run's state held them: moved to ``run["buffers"]``."""
    carry = ckpt.get("recorders", {}).get("carry")
    if not isinstance(carry, dict) or "buffers" not in carry or "buffers" in ckpt["run"]:
        return ckpt
    carried = carry["buffers"]
    saved = carried[0] if isinstance(carried, list) and len(carried) == 1 else None
    if not isinstance(saved, dict) or set(saved) != {"own", "chains"}:
        return ckpt  # a caller's own "buffers" accumulator, not the experiment's statistics
    recorders = {**ckpt["recorders"], "carry": {k: v for k, v in carry.items() if k != "buffers"}}
    return {**ckpt, "run": {**ckpt["run"], "buffers": saved}, "recorders": recorders}


def check_folder_replaceable(folder: RunFolder, settings: dict) -> None:
    """``resume=True`` without a checkpoint (a run killed before its first one) starts afresh and
    removes the draws and records in the folder: refuse when they belong to another run, i.e.
    ``run.json``'s settings differ as a checkpoint's would (target fingerprint included)."""
    if not (folder.chunk_files() or folder.info_files()):
        return
    if not (folder.path / "run.json").exists():  # whose draws they are cannot be told: never delete them
        held = [
            f"{len(files)} {kind} chunk(s) in {where}"
            for kind, files, where in (
                ("sample", folder.chunk_files(), folder.samples_dir),
                ("record", folder.info_files(), folder.info_dir),
            )
            if files
        ]
        raise ValueError(
            f"out_dir {folder.path} holds {' and '.join(held)} but no run.json and no checkpoint, so whose draws "
            "they are cannot be checked; resume=True would delete them. Restore run.json to resume that run, or "
            "move the folder away (or choose another out_dir) to start a new one"
        )
    old = folder.settings()  # checked against the manifest: a damaged run.json is an error naming it
    try:
        check_resume_compatible(old, settings, against="the run in out_dir")
    except ValueError as err:
        raise ValueError(
            f"out_dir {folder.path} holds the draws of another run and no checkpoint: {err}. "
            "resume=True would delete them; resume with that run's settings and target, or pass "
            "overwrite=True (without resume) to replace it"
        ) from None


def check_resume_compatible(old: dict, new: dict, against: str = "the checkpoint") -> None:
    """Raise ``ValueError`` (naming what differs) unless a run whose :meth:`Run.settings` are
    ``new`` may continue one recorded with settings ``old`` (a checkpoint's or a run folder's
    ``settings``): burn-in, thinning, seed, chains, batching, the parameter space and sampler
    config, the dtype and the target's fingerprint (:mod:`structmc.fingerprint`) must agree.
    ``against`` names ``old``'s origin in the message. ``sample(..., resume=True)`` checks this
    itself; call it when you checkpoint a :class:`Run` yourself (``state_dict`` + ``settings``)."""
    # a distributed run (structmc.distributed) records its world size; one process records none
    old_world, new_world = old.get("world_size", 1), new.get("world_size", 1)
    if old_world != new_world:
        raise ValueError(
            f"cannot resume: {against} was written by a run over {old_world} process(es) (torch.distributed world "
            f"size) and this run has {new_world}: resume with {old_world} (torchrun --nproc-per-node {old_world}"
            f"{'' if old_world > 1 else ', or without distributed'}). structmc does not re-shard a chain: across "
            "world sizes it agrees only to float rounding, not bit for bit"
        )
    new = _check_centre(old, new, against)
    for key in ("burn_in", "thin", "seed", "num_chains", "batch_size", "batching", "dim", "space", "config"):
        if json_like(old.get(key)) != json_like(new.get(key)):
            raise ValueError(f"cannot resume: {key} differs from {against} ({old.get(key)!r} vs {new.get(key)!r})")
    # the chain's dtype (checkpoints written before it was recorded are not compared): the
    # sampler state would be loaded in the checkpoint's dtype and the run go on in it silently
    if "dtype" in old and "dtype" in new and old["dtype"] != new["dtype"]:
        raise ValueError(
            f"cannot resume: the chain in {against} is {old['dtype']} but this run's is {new['dtype']} "
            f"(init's dtype, or the module's for a ModuleEnergy): give init, the module and the data in "
            f"{old['dtype']} as before (e.g. init.to(torch.{old['dtype']})), or start a new run"
        )
    # the target (structmc.fingerprint): a changed part is refused, naming it; what could not be
    # fingerprinted, or was recorded by an older structmc's weaker fingerprint, is a warning
    fingerprint.check(old.get("target"), new["target"], against)


def _check_centre(old: dict, new: dict, against: str) -> dict:
    """A control variate's centre (its fingerprint in the gradient config: a checkpoint restores
    the centre it was written with, so another one would be silently ignored): refuse a changed
    one, naming it; where ``old`` was recorded without it (an earlier structmc), warn that it
    could not be checked and return ``new`` without it, for the other comparisons."""
    og, ng = (s.get("config", {}).get("gradient") if isinstance(s.get("config"), dict) else None for s in (old, new))
    if not (isinstance(og, dict) and isinstance(ng, dict) and "centre" in ng):
        return new
    if og.get("gradient") != ng.get("gradient"):
        return new  # another estimator: the config comparison names it
    if "centre" in og:
        if og["centre"] != ng["centre"]:
            raise ValueError(
                f"cannot resume: the ControlVariate centre differs from {against}'s (fingerprint {og['centre']} vs "
                f"{ng['centre']}); the run would go on with the centre it was started with, not this one: pass "
                "ControlVariate(centre) with the centre the run started with, or start a new run"
            )
        return new
    warnings.warn(
        f"resuming from {against}, written by an earlier structmc that did not record the ControlVariate centre: "
        "the centre could not be checked (the run goes on with the centre stored in the checkpoint)",
        UserWarning,
        stacklevel=3,
    )
    gradient = {k: v for k, v in ng.items() if k != "centre"}
    return {**new, "config": {**new["config"], "gradient": gradient}}


_check_resume_compatible = check_resume_compatible  # the name older code and tests import


def json_like(x):
    return json.dumps(x, sort_keys=True, default=str)


class Checkpointer:
    """Writes and reads a run's checkpoints in ``folder`` (a :class:`~structmc.storage.RunFolder`):
    the :class:`~structmc.run.Run`'s ``state_dict``, ``settings`` (what resume compares) and the
    ``state_dict`` of each recorder, under ``recorders`` (name -> recorder). ``records`` (a
    :class:`~structmc.recorders.RunRecords`, optional) is kept at the top level as ``draws`` and
    ``info``, the layout checkpoints had before recorders, so old checkpoints still resume.
    ``every``: :meth:`step` writes every ``every`` iterations (``None``: only when asked);
    ``every_seconds``: and then only when that many seconds have passed since the last write
    (or the start), for states too large to write every few iterations (structured SGMCMC's
    θ̃ history of a ResNet: 5.4 GB). Where the chain is checkpointed never changes the chain."""

    def __init__(
        self,
        folder: RunFolder,
        settings: dict,
        *,
        every: int | None = None,
        every_seconds: float | None = None,
        records=None,
        recorders: dict | None = None,
    ):
        self.folder, self.settings, self.every = folder, settings, every
        if every_seconds is not None and not every_seconds >= 0:
            raise ValueError(f"every_seconds must be None or >= 0, got {every_seconds!r}")
        self.every_seconds = every_seconds
        self.records, self.recorders = records, dict(recorders or {})
        self.written_at: int | None = None
        self._written_clock = time.monotonic()

    def load(self, run, num_steps: int | None = None) -> bool:
        """Restore ``run`` and the recorders from the folder's checkpoint, checked against the
        settings (refused, naming what differs); ``False`` when there is none."""
        ckpt = self.read(num_steps)
        if ckpt is None:
            return False
        self.restore(ckpt, run)
        return True

    def read(self, num_steps: int | None = None) -> dict | None:
        """The folder's checkpoint (upgraded to the current format), checked against the
        settings and, with ``num_steps``, not beyond it; ``None`` when there is none."""
        return load_checkpoint(self.folder, self.settings, num_steps)

    def restore(self, ckpt: dict, run) -> None:
        """Load ``ckpt`` (from :meth:`read`) into ``run`` and the recorders."""
        run.load_state_dict(ckpt["run"])
        if self.records is not None:
            self.records.load_state_dict(ckpt, run.iteration)
        states = ckpt.get("recorders", {})
        for name, recorder in self.recorders.items():
            if name in states:
                recorder.load_state_dict(states[name])

    def save(self, run) -> None:
        """Write a checkpoint at the run's iteration (once per iteration; nothing non-finite)."""
        if self.written_at == run.iteration:
            return  # written at this iteration already (every, then the end or Ctrl-C)
        run.check_finite()
        ckpt = {"format": CHECKPOINT_FORMAT, "settings": self.settings, "run": run.state_dict()}
        if self.records is not None:
            ckpt.update(self.records.state_dict())
        if self.recorders:
            ckpt["recorders"] = {name: r.state_dict() for name, r in self.recorders.items()}
        self.folder.save_checkpoint(ckpt)
        self.written_at = run.iteration
        self._written_clock = time.monotonic()

    def step(self, run, iteration: int) -> None:
        if self.every is not None and iteration % self.every == 0:
            if self.every_seconds is not None and time.monotonic() - self._written_clock < self.every_seconds:
                return
            self.save(run)


class InterruptGuard:
    """Ctrl-C during a run with a folder: the first SIGINT sets :attr:`interrupted` (the loop
    finishes its iteration, checkpoints and raises ``KeyboardInterrupt``); a second stops at
    once. A handler the program installed is chained (called on every SIGINT); one ignoring
    SIGINT (``SIG_IGN``, e.g. a background job) is kept; off the main thread nothing is
    installed. The previous handler is restored on exit."""

    def __init__(self, active: bool = True):
        self.active = active
        self.interrupted = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptGuard:
        if (
            self.active
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            chained = signal.getsignal(signal.SIGINT)

            def on_sigint(signum, frame):
                again = self.interrupted
                self.interrupted = True
                if callable(chained) and chained is not signal.default_int_handler:
                    try:
                        chained(signum, frame)
                    except KeyboardInterrupt:
                        # the program's handler logs and re-raises (issue 36 §2): on the first Ctrl-C
                        # the loop still finishes its iteration and checkpoints, then raises
                        if again:
                            raise
                if again:
                    raise KeyboardInterrupt

            self._previous, self._installed = signal.signal(signal.SIGINT, on_sigint), True
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed = False


__all__ = ["CHECKPOINT_FORMAT", "Checkpointer", "InterruptGuard", "check_resume_compatible", "load_checkpoint"]


# -- a run's state (Run.state_dict / Run.load_state_dict) ------------------------------------
def run_state_dict(run) -> dict:
    """A :class:`~structmc.run.Run`'s state after ``iteration`` iterations, on the CPU, from each component's
    own ``state_dict`` (sampler state, generator, minibatch stream, gradient estimator,
    stateful energy) and, for an energy with buffers (a module's BatchNorm statistics),
    ``buffers``: its ``buffer_state_dict()``."""
    d = {
        "iteration": run.iteration,
        "elapsed": run.elapsed,
        "grad_evals": run.oracle.grad_evals,
        "value_evals": run.oracle.value_evals,
        "sampler_state": {
            k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in run.sampler.state_dict(run.state).items()
        },
        "generator": run.generator.get_state(),
        "stream": run.stream.state_dict() if run.stream is not None else None,
        "estimator": run.estimator.state_dict(),
        "energy": run.energy.state_dict() if isinstance(run.energy, StatefulEnergy) else None,
    }
    if run.energy.has_buffers:  # a declared capability (BufferedEnergy): BatchNorm's running
        # statistics move with the chain; a run without buffers keeps the layout it had
        d["buffers"] = cast(BufferedEnergy, run.energy).buffer_state_dict()
    return d


def load_run_state(run, d: dict) -> None:
    """Restore :func:`run_state_dict`'s state into ``run`` (a :class:`~structmc.run.Run` set up with the same settings)."""
    device = run.state.theta.device
    run.iteration, run.elapsed = int(d["iteration"]), float(d["elapsed"])
    run.oracle.grad_evals, run.oracle.value_evals = int(d["grad_evals"]), int(d["value_evals"])
    run.state = run.sampler.load_state(
        {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in d["sampler_state"].items()}
    )
    run.generator.set_state(d["generator"])
    if run.stream is not None:
        run.stream.load_state_dict(d["stream"])
    run.estimator.load_state_dict(d["estimator"], device)
    if isinstance(run.energy, StatefulEnergy):
        run.energy.load_state_dict(d["energy"], device)
    if run.energy.has_buffers:  # last: whatever the set-up evaluated, the chain's statistics win
        if d.get("buffers") is None:
            warnings.warn(
                "the checkpoint holds no module buffers (written before structmc saved them): the "
                "resumed chain goes on with the module's current ones (BatchNorm running statistics), "
                "not those of the interrupted run, so its eval-mode predictions differ from an "
                "uninterrupted run's",
                stacklevel=4,
            )
        else:
            cast(BufferedEnergy, run.energy).load_buffer_state_dict(d["buffers"])
