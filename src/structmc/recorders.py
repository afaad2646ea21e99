"""The recorder seam of the run loop: what a run keeps or watches, one iteration at a time.

A :class:`Recorder` is handed every iteration by whoever drives a :class:`~structmc.run.Run`
(``on_step(iteration, state, info)``), and says what it must carry through a checkpoint
(``state_dict`` / ``load_state_dict``, like ``torch.optim``'s). :func:`structmc.sample` is a
composition of them with one :class:`~structmc.checkpointing.Checkpointer`; an experiment or a
tuner composes its own from the same pieces:

* :class:`RunRecords`: the kept draws (after ``burn_in``, every ``thin``-th) and every
  iteration's info, in memory and/or streamed to a run folder;
* :class:`ThinningKeeper`: at most ``2·cap`` evenly spaced draws of a run of unknown length
  (the thinning doubles when full): the tuners' and the experiments' keeper;
* :class:`BlowupWatch`: a chain blowing up without (yet) being NaN;
* :class:`Trace`: a function of the state every few iterations (trace plots);
* :class:`Callback`: a user's ``callback(iteration, state)``;
* :class:`Carry`: a caller's own accumulators (traces, draws) carried through checkpoints.

Example — a trace of two coordinates, checkpointed with the run::

    run = Run(energy, None, SGLD(1e-3), data=(X, y), batch_size=32)
    trace = Carry({"theta01": []})
    for t, state, info in run.iterate(1000):
        trace.data["theta01"].append(state.theta[0, :2].clone())
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from .chain import Chain
from .recording import DrawRecorder, InfoLog
from .runner import DivergenceError
from .space import ParamSpace


class Recorder:
    """One piece of what a run keeps or watches. ``on_step`` is called after every iteration
    with ``(iteration, state, info)`` (the state is live: copy what you keep); ``state_dict``
    is what a checkpoint must hold for an exact resume (``{}``: nothing), restored by
    ``load_state_dict``; ``close`` ends it (a progress bar, a file)."""

    def on_step(self, iteration: int, state, info: dict) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        pass


class RunRecords(Recorder):
    """The draws a run keeps (after iteration ``burn_in``, every ``thin``-th: iterations
    ``burn_in + thin·k``) and every iteration's info, in memory (``keep_in_memory``) and/or in
    ``folder``'s chunks. Its checkpoint entries are ``draws`` and ``info`` (the layout of
    checkpoint format 2, so checkpoints written before the recorder seam resume). ``dim`` and
    ``to_draws``: the draws' size and the map from θ to a draw (an energy's draw space,
    :func:`~structmc.energy.to_draws_of`)."""

    def __init__(
        self,
        num_chains: int,
        dim: int,
        num_draws: int,
        *,
        burn_in: int,
        thin: int,
        dtype,
        device,
        keep_in_memory: bool = True,
        folder=None,
        chunk_draws: int = 1000,
        before_write: Callable[[], None] | None = None,
        to_draws: Callable[[Tensor], Tensor] | None = None,
    ):
        self.burn_in, self.thin = int(burn_in), int(thin)
        self.to_draws = to_draws  # θ -> the kept draw (a constrained log density's values; None: θ)
        self.draws = DrawRecorder(
            num_chains,
            dim,
            num_draws,
            dtype=dtype,
            device=device,
            keep_in_memory=keep_in_memory,
            folder=folder,
            chunk_draws=chunk_draws,
        )
        self.log = InfoLog(folder, keep=keep_in_memory)
        self.draws.before_write = self.log.before_write = before_write  # nothing non-finite reaches the disk

    def on_step(self, iteration: int, state, info: dict) -> None:
        self.log.append(info)
        if iteration > self.burn_in and (iteration - self.burn_in) % self.thin == 0:
            self.draws.add(state.theta if self.to_draws is None else self.to_draws(state.theta), iteration)

    def flush(self) -> None:
        self.draws.flush()

    def state_dict(self) -> dict:
        """``{"draws": ..., "info": ...}``: the draw and record counters and the records not yet
        in an info chunk (flushes the draws first)."""
        self.draws.flush()  # the records: info chunks on disk plus the tail not yet in one
        return {"draws": {**self.draws.state_dict(), **self.log.state_dict()}, "info": self.log.tail()}

    def load_state_dict(self, state: dict, iteration: int = 0) -> None:
        draws, info = state["draws"], state["info"]
        if "info_chunks" in draws:  # records streamed to out_dir/info
            self.draws.restore(draws, draws["info_chunks"])
            self.log.restore(draws, iteration, info)
        else:  # older checkpoints hold the records
            self.draws.restore(draws, 0)
            self.log.load(info, iteration)

    def truncate(self, last_good: int) -> None:
        """Drop the draws and records after iteration ``last_good`` (a divergence)."""
        self.draws.truncate(last_good + 1)
        self.log.truncate(last_good)

    def write(self) -> None:
        self.draws.flush()
        self.log.write()

    def chain(self, space: ParamSpace, config: dict) -> Chain:
        return self.draws.chain(space, self.log.upto(), config)


class ThinningKeeper(Recorder):
    """Every ``thin``-th draw of a run of unknown length (a seconds budget), at most ``2·cap``:
    when full, every other kept draw is dropped and ``thin`` doubles, so the kept draws stay
    evenly spaced over the whole run. ``draws``, ``steps`` (iterations) and ``times`` (the
    run's sampling clock, ``info["time"]``) are kept; ``select(state)`` picks what is kept
    (default: ``state.theta``, all chains). Iterations are counted by the keeper itself, from 1
    at its first step."""

    def __init__(self, thin: int, cap: int, select: Callable[[object], Tensor] | None = None):
        self.thin, self.cap = int(thin), max(1, int(cap))
        self.select = select
        self.draws: list[Tensor] = []
        self.steps: list[int] = []
        self.times: list[float] = []
        self.count = 0  # iterations seen

    def on_step(self, iteration: int, state, info: dict) -> None:
        self.add(state.theta if self.select is None else self.select(state), iteration, info.get("time"))

    def add(self, theta: Tensor, iteration: int | None = None, time: float | None = None) -> None:
        self.count += 1
        if self.count % self.thin:
            return
        self.draws.append(theta.detach().clone())
        self.steps.append(self.count if iteration is None else int(iteration))
        self.times.append(math.nan if time is None else float(time))
        if len(self.draws) >= 2 * self.cap:
            self.draws, self.steps, self.times = self.draws[1::2], self.steps[1::2], self.times[1::2]
            self.thin *= 2

    def finish(self, theta: Tensor) -> None:
        """A run shorter than ``thin`` iterations still yields its last draw (rather than
        nothing to score)."""
        if not self.draws and self.count > 0:
            self.draws.append(theta.detach().clone())
            self.steps.append(self.count)
            self.times.append(math.nan)

    def stacked(self, dim: int, like: Tensor) -> Tensor:
        """``[n, P]`` with chains pooled (draw-major within each chain)."""
        if not self.draws:
            return like.new_empty(0, dim)
        return torch.stack(self.draws, 1).reshape(-1, dim)

    def state_dict(self) -> dict:
        return {
            "thin": self.thin,
            "count": self.count,
            "draws": [d.cpu() for d in self.draws],
            "steps": list(self.steps),
            "times": list(self.times),
        }

    def load_state_dict(self, state: dict) -> None:
        self.thin, self.count = int(state["thin"]), int(state["count"])
        self.draws, self.steps, self.times = list(state["draws"]), list(state["steps"]), list(state["times"])


class Trace(Recorder):
    """``select(state)`` (e.g. a few coordinates of θ) at iteration 1 and every ``every``-th
    iteration, with the iterations: ``values`` and ``steps``. Checkpointed with the run; points
    recorded past the iteration a run resumes from (a trace restored from a file written later
    than the checkpoint) are dropped and recorded again."""

    def __init__(self, select: Callable[[object], Tensor], every: int = 1):
        self.select, self.every = select, max(1, int(every))
        self.values: list[Tensor] = []
        self.steps: list[int] = []

    def on_step(self, iteration: int, state, info: dict) -> None:
        if self.steps and self.steps[-1] >= iteration:
            keep = sum(s < iteration for s in self.steps)
            del self.values[keep:], self.steps[keep:]
        if iteration % self.every == 0 or iteration == 1:
            self.values.append(self.select(state).detach().clone())
            self.steps.append(iteration)

    def state_dict(self) -> dict:
        return {"values": [v.cpu() for v in self.values], "steps": list(self.steps)}

    def load_state_dict(self, state: dict) -> None:
        self.values, self.steps = list(state["values"]), list(state["steps"])


class Callback(Recorder):
    """``fn(iteration, state)`` after every iteration (``sample(..., callback=fn)``)."""

    def __init__(self, fn: Callable[[int, object], None]):
        self.fn = fn

    def on_step(self, iteration: int, state, info: dict) -> None:
        self.fn(iteration, state)


class Carry(Recorder):
    """A caller's accumulators, ``data`` (a dict; its lists are filled by the caller's loop),
    carried through checkpoints: ``state_dict`` holds them with tensors on the CPU, and
    ``load_state_dict`` restores them in place (a list keeps its identity, so a loop holding it
    goes on filling the restored one). ``on_step`` does nothing: the caller fills ``data``."""

    def __init__(self, data: dict | None = None):
        self.data = {} if data is None else data

    def on_step(self, iteration: int, state, info: dict) -> None:
        pass

    def state_dict(self) -> dict:
        return {
            k: ([t.cpu() if isinstance(t, Tensor) else t for t in v] if isinstance(v, list) else v)
            for k, v in self.data.items()
        }

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            if isinstance(self.data.get(key), list):
                self.data[key][:] = value
            else:
                self.data[key] = value


class BlowupWatch(Recorder):
    """Watches a chain blowing up without (yet) becoming NaN, on two scales. The energy is
    watched at every iteration on the device (a running maximum, no host sync) and read at the
    first iteration, every ``EVERY`` iterations and at ``last`` (one device read each):

    * the minibatch energy against its value at iteration 1 (the start):
      ``|U_t| > FACTOR · max(|U_1|, P, 1)`` for a chain. Only growth counts (the energy falling
      during burn-in is normal); the floor ``P`` (about the energy's thermal spread) keeps a
      start near a mode from false alarms. A posterior chain's per-datum loss does not grow a
      hundredfold from a random start (digits, SGLD lr = 1: ×530 in one step).
    * the position against the prior, where the energy has a prior (``ModuleEnergy``): the
      prior's energy per parameter −log p(θ)/P (½ E[(θ/σ)²] for a Normal prior; about ½ for a
      prior draw) past ``PRIOR_FACTOR`` (RMS θ/σ = 10) and ten times its start. A posterior
      lies inside its prior's mass; |θ| = 853 under an N(0, 1) prior does not.

    ``mode`` is ``"warn"`` or ``"raise"`` (a :class:`~structmc.run.DivergenceError` whose
    iteration is finite: its draw and records are kept). Not checkpointed: after a resume the
    scales are taken again at the first iteration watched.
    """

    EVERY = 64
    FACTOR = 1e2
    PRIOR_FACTOR = 50.0

    def __init__(self, run, mode: str, last: int | None = None):
        from .energy import ModuleEnergy

        self.run, self.mode, self.last = run, mode, last
        self.scale: Tensor | None = None
        self.fired = False
        # the largest energy per chain since the last read, on the device (made at the first read;
        # a blow-up grows the energy: its read compares |energy| too)
        self.peak: Tensor | None = None
        self.read_at = 0
        e = run.energy
        base = e if isinstance(e, ModuleEnergy) else e.cv_base
        # a structured energy's cv_base is its ModuleEnergy; a hierarchical one is not a ModuleEnergy
        self.prior_of: Callable[[Tensor], Tensor] | None = (
            base.prior_energy if isinstance(base, ModuleEnergy) and base.space.dim == e.space.dim else None
        )
        # at the start θ_0 (the first check sees θ_1, which one bad step has already thrown out)
        self.prior_first = None if self.prior_of is None else self._prior_per_param(run.theta).clamp(min=0.5)

    def on_step(self, iteration: int, state, info: dict) -> None:
        if self.peak is not None:
            # every iteration, on the device, in place: the largest energy since the last read (one
            # kernel, no allocation, no host sync), so a spike between two reads is seen (issue 36 §13)
            torch.maximum(self.peak, info["energy"], out=self.peak)  # the oracle's [C] energy, detached
        if self.scale is None or iteration % self.EVERY == 0 or iteration == self.last:
            self.check(iteration, info)

    def _prior_per_param(self, theta: Tensor) -> Tensor:
        assert self.prior_of is not None
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
            e = info["energy"]
            # the per-step maximum runs on the oracle's own [C] tensor (detached); another shape: not watched
            self.peak = e.detach().clone() if e.dim() == 1 and not e.requires_grad else None
            self.read_at = t
            return
        peak = energy.abs() if self.peak is None else torch.maximum(self.peak.to(torch.float64).abs(), energy.abs())
        since, self.read_at = self.read_at + 1, t
        if self.peak is not None:
            self.peak.copy_(info["energy"])  # the next stretch starts here
        ratio = peak / self.scale
        if prior is not None:  # one read for both scales
            assert self.prior_first is not None  # set with prior_of
            prior_ratio = prior / self.prior_first
            flags = torch.stack([ratio, prior, prior_ratio]).cpu()
            ratio, prior, prior_ratio = flags[0], flags[1], flags[2]
        else:
            ratio = ratio.cpu()
        worst = int(ratio.argmax()) if ratio.numel() > 1 else 0
        growth = float(ratio[worst])
        chain = lambda c: f", chain {c}" if ratio.numel() > 1 else ""  # noqa: E731
        lr = info.get("lr")
        advice = (
            (
                f"The step size lr={lr:.3g} may be too large: "
                if isinstance(lr, float)
                else "The step size may be too large: "
            )
            + "lr is ε of each sampler's own parameterisation, against the energy of all N data points "
            "(docs/conventions.md), e.g. SGLD's drift is (ε/2)∇Û with Û scaled by N/n; reduce it."
        )
        msg = None
        if growth > self.FACTOR and math.isfinite(growth):
            now, top, first = float(energy[worst]), float(peak[worst]), float(self.first[worst])
            when = (
                f"{now:.3g} at iteration {t}"
                if top <= abs(now) * (1 + 1e-12)
                else f"up to {top:.3g} between iterations {since} and {t} ({now:.3g} at iteration {t})"
            )
            msg = (
                f"{self.run.sampler.name}: the minibatch energy is blowing up: {when}, "
                f"{growth:.3g} times its initial magnitude ({first:.3g} at iteration 1{chain(worst)}). "
            )
        elif prior is not None:
            assert self.prior_first is not None
            far = (prior > self.PRIOR_FACTOR) & (prior_ratio > 10.0)
            if bool(far.any()):
                c = int(torch.where(far, prior, torch.zeros_like(prior)).argmax())
                msg = (
                    f"{self.run.sampler.name}: the chain has left the prior's mass: at iteration {t} the prior "
                    f"energy per parameter −log p(θ)/P is {float(prior[c]):.3g}{chain(c)} (about 0.5 for a draw "
                    f"from the prior; {float(prior[c]) / float(self.prior_first[c]):.3g} times its start; for a "
                    f"Normal prior, RMS θ/σ = {math.sqrt(2 * float(prior[c])):.3g}): the chain is blowing up. "
                )
        if msg is None:
            return
        self.fired, self.peak = True, None  # warned once: nothing more to watch
        msg += advice
        if self.mode == "raise":
            err = DivergenceError(msg, t)
            err.finite = True  # iteration t is finite: its draw and records are kept
            raise err
        warnings.warn(msg, UserWarning, stacklevel=4)


__all__ = ["Recorder", "RunRecords", "ThinningKeeper", "Trace", "Callback", "Carry", "BlowupWatch"]
