"""``sample()``: the one run loop every method, experiment and the CLI go through."""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from .batching import MODES, MinibatchStream
from .chain import Chain
from .energy import Energy, ModuleEnergy, as_energy
from .gradients import ControlVariate, Minibatch, as_estimator
from .samplers.base import Sampler
from .storage import RunFolder


class DivergenceError(FloatingPointError):
    """The chain produced NaN/Inf. ``.chain`` holds the draws kept before it happened."""

    def __init__(self, message: str, step: int, chain: Chain | None = None):
        super().__init__(message)
        self.step = step
        self.chain = chain


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
            raise ValueError("init is required for this energy")
        init = energy.initial_position()
    if not isinstance(init, Tensor):
        init = torch.as_tensor(init)
    if not init.is_floating_point():
        init = init.to(torch.get_default_dtype())
    if isinstance(energy, ModuleEnergy):
        init = init.to(device=energy.device, dtype=energy.dtype)
    P = energy.space.dim
    if init.dim() == 1 and init.shape[0] == P:
        return init.detach().unsqueeze(0).expand(num_chains, P).clone()
    if init.dim() == 2 and init.shape == (num_chains, P):
        return init.detach().clone()
    raise ValueError(f"init must have shape [{P}] or [{num_chains}, {P}] (num_chains={num_chains}), got {tuple(init.shape)}")


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


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
    keep_in_memory: bool = True,
    progress: bool | None = None,
    callback: Callable[[int, object], None] | None = None,
) -> Chain:
    """Run ``num_chains`` chains of ``sampler`` on ``target`` and return the kept draws.

    Parameters
    ----------
    target : an :class:`~structmc.energy.Energy` (e.g. :class:`~structmc.energy.ModuleEnergy`)
        or a log density ``log_prob(theta [P], batch) -> scalar``.
    init : ``[P]`` (shared by all chains) or ``[num_chains, P]``; ``None`` takes a module
        energy's current parameters.
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
        would; ``num_steps`` may be raised to extend a finished run.
    keep_in_memory : keep draws in ``Chain.samples`` (otherwise read them back from ``out_dir``).
    progress : tqdm bar; ``None`` shows it only when stderr is a terminal.
    callback : ``callback(iteration, state)`` after every iteration.

    Raises
    ------
    ValueError before any computation for invalid arguments; :class:`DivergenceError` naming
    the iteration and sampler when the energy, gradient or a kept draw is NaN/Inf (its
    ``.chain`` holds the draws kept so far, also written to ``out_dir``).
    """
    # ---- validation (before any compute) -------------------------------------------------
    if not isinstance(sampler, Sampler):
        raise TypeError(f"sampler must be a structmc sampler (SGLD(...), ...), got {type(sampler).__name__}")
    num_steps = _check_int("num_steps", num_steps, 1)
    burn_in = _check_int("burn_in", burn_in, 0)
    thin = _check_int("thin", thin, 1)
    num_chains = _check_int("num_chains", num_chains, 1)
    chunk_draws = _check_int("chunk_draws", chunk_draws, 1)
    seed = _check_int("seed", seed, 0)
    if burn_in >= num_steps:
        raise ValueError(f"burn_in ({burn_in}) must be smaller than num_steps ({num_steps})")
    num_draws = (num_steps - burn_in) // thin
    if num_draws < 1:
        raise ValueError(f"no draw would be kept: (num_steps - burn_in) // thin = 0 "
                         f"(num_steps={num_steps}, burn_in={burn_in}, thin={thin})")
    if batching not in MODES:
        raise ValueError(f"batching must be one of {MODES}, got {batching!r}")
    data = _as_data(data)
    if batch_size is not None:
        batch_size = _check_int("batch_size", batch_size, 1)
        if data is None:
            raise ValueError("batch_size was given but there is no data")
        if batch_size > data[0].shape[0]:
            raise ValueError(f"batch_size ({batch_size}) exceeds the number of data points ({data[0].shape[0]})")
    if checkpoint_every is not None:
        checkpoint_every = _check_int("checkpoint_every", checkpoint_every, 1)
        if out_dir is None:
            raise ValueError("checkpoint_every needs out_dir")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir")
    if not keep_in_memory and out_dir is None:
        raise ValueError("keep_in_memory=False needs out_dir (draws would be lost)")
    init_dim = None
    if init is not None:
        init_dim = (init if isinstance(init, Tensor) else torch.as_tensor(init)).shape[-1]
    energy = as_energy(target, init_dim)
    if data is not None and energy.num_data is None:
        energy = energy.with_num_data(int(data[0].shape[0]))
    if data is None and isinstance(energy, ModuleEnergy):
        raise ValueError("a module energy needs data")
    theta0 = _initial_positions(energy, init, num_chains)
    if not bool(torch.isfinite(theta0).all()):
        raise ValueError("init contains NaN or Inf")
    if getattr(sampler, "num_data", "absent") is None and energy.num_data is not None:
        sampler = copy.copy(sampler)  # never mutate the caller's sampler
        sampler.num_data = energy.num_data  # pSGLD's per-datum preconditioner scale
    estimator = as_estimator(gradient)
    if getattr(sampler, "include_gamma", False) and not hasattr(energy, "hessian_diag"):
        raise ValueError("pSGLD with include_gamma=True needs an energy with hessian_diag()")
    lr0 = sampler.lr(0)
    if not (lr0 > 0 and math.isfinite(lr0)):
        raise ValueError(f"step size must be positive, got {lr0}")

    # ---- set-up ----------------------------------------------------------------------------
    device = theta0.device
    if data is not None:
        data = tuple(t.to(device) for t in data)
    generator = torch.Generator(device=device).manual_seed(seed)
    stream = MinibatchStream(data, batch_size, num_chains, generator, batching) if data is not None else None
    settings = {
        "num_steps": num_steps, "burn_in": burn_in, "thin": thin, "seed": seed, "num_chains": num_chains,
        "batch_size": batch_size, "batching": batching, "num_data": energy.num_data, "dim": energy.space.dim,
        "space": [(i.name, list(i.shape)) for i in energy.space.params],
        "config": {"sampler": sampler.config(), "gradient": estimator.config()},
    }
    folder = RunFolder(out_dir) if out_dir is not None else None
    ckpt = folder.load_checkpoint() if (folder is not None and resume) else None
    if ckpt is not None:
        _check_resume_compatible(ckpt["settings"], settings)
    if folder is not None:
        folder.create(settings)
    has_history = hasattr(energy, "observe")
    if has_history:
        energy.start(theta0)
    estimator.prepare(energy, data, theta0)

    C, P = theta0.shape
    log = _StepLog(C, num_steps)
    samples = torch.empty(C, num_draws, P, dtype=theta0.dtype, device=device) if keep_in_memory else None
    draw_steps = torch.empty(num_draws, dtype=torch.long)
    written = 0  # draws already in chunk files
    n_chunks = 0
    start, elapsed0, kept = 0, 0.0, 0
    state = sampler.init(theta0, generator)

    if ckpt is not None:
        start, kept, written, n_chunks = ckpt["step"], ckpt["kept"], ckpt["written"], ckpt["chunks"]
        if start > num_steps:
            raise ValueError(f"the checkpoint is at iteration {start}, beyond num_steps={num_steps}")
        state = sampler.load_state({k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in ckpt["sampler_state"].items()})
        generator.set_state(ckpt["generator"])
        if stream is not None:
            stream.load_state_dict(ckpt["stream"])
        _restore_estimator(estimator, ckpt)
        if has_history:
            energy.load_state_dict(ckpt["energy_state"], device)
        S0 = ckpt["step"]
        log.load(ckpt["info"], S0)
        elapsed0 = log.times[-1] if S0 > 0 else 0.0
        folder.drop_chunks_from(n_chunks)
        got = folder.read_chunks(n_chunks)
        if got is not None:
            draw_steps[:kept] = got[1]
            if samples is not None:
                samples[:, :kept] = got[0].to(samples)

    def current_chain(upto_step: int) -> Chain:
        info = log.upto(upto_step)
        s = samples[:, :kept] if samples is not None else folder.read_chunks()[0] if written else torch.empty(C, 0, P)
        return Chain(s, energy.space, draw_steps[:kept].clone(), info, settings["config"])

    def flush() -> None:
        nonlocal written, n_chunks
        if folder is None or kept == written:
            return
        chunk = samples[:, written:kept] if samples is not None else torch.stack(pending, 1)
        folder.write_chunk(n_chunks, chunk, draw_steps[written:kept])
        pending.clear()
        written, n_chunks = kept, n_chunks + 1

    def checkpoint(step: int) -> None:
        flush()
        folder.save_checkpoint({
            "settings": settings, "step": step, "kept": kept, "written": written, "chunks": n_chunks,
            "sampler_state": {k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in sampler.state_dict(state).items()},
            "generator": generator.get_state(), "stream": stream.state_dict() if stream is not None else None,
            "estimator": _estimator_state(estimator),
            "energy_state": energy.state_dict() if has_history else None,
            "info": log.upto(step),
        })

    pending: list[Tensor] = []
    current = {"step": start}

    grad_fn = _GradientOracle(energy, estimator, stream, generator, sampler.name, current, log.lrs)

    show = sys.stderr.isatty() if progress is None else bool(progress)
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_steps, initial=start, desc=sampler.name, mininterval=0.5, smoothing=0.05)

    # ---- the loop ---------------------------------------------------------------------------
    t_start = time.perf_counter()
    t = start
    try:
        for t in range(start, num_steps):
            current["step"] = t
            lr = sampler.lr(t)
            log.lrs.append(lr)
            state, value = sampler.step(state, grad_fn, lr, generator)
            log.add_energy(value)
            if has_history:
                energy.observe(state.theta)
            log.times.append(elapsed0 + time.perf_counter() - t_start)
            k = t + 1 - burn_in
            if k > 0 and k % thin == 0:
                if not math.isfinite(float(state.theta.sum())):
                    raise DivergenceError(f"{sampler.name}: non-finite parameters after iteration {t + 1}", t + 1)
                if samples is not None:
                    samples[:, kept].copy_(state.theta)
                else:
                    pending.append(state.theta.detach().clone())
                draw_steps[kept] = t + 1
                kept += 1
                if folder is not None and kept - written >= chunk_draws:
                    flush()
            if callback is not None:
                callback(t + 1, state)
            if checkpoint_every is not None and (t + 1) % checkpoint_every == 0:
                checkpoint(t + 1)
            if bar is not None:
                bar.update(1)
                if (t + 1) % 100 == 0:
                    bar.set_postfix(energy=f"{float(value.mean()):.4g}", refresh=False)
    except DivergenceError as err:
        if folder is not None:
            flush()
            folder.mark_diverged(str(err), err.step)
        err.chain = current_chain(t)
        raise
    finally:
        if bar is not None:
            bar.close()
    if folder is not None:
        checkpoint(num_steps)
    return current_chain(num_steps)


class _StepLog:
    """Per-iteration records, kept cheap in the hot loop: Python lists for the step size and
    the clock, and the energy tensors gathered in blocks (one copy per block, not per step)."""

    BLOCK = 256

    def __init__(self, num_chains: int, num_steps: int):
        self.lrs: list[float] = []
        self.times: list[float] = []
        self.energy = torch.full((num_chains, num_steps), math.nan, dtype=torch.float64)
        self._pending: list[Tensor] = []
        self._filled = 0

    def add_energy(self, value: Tensor) -> None:
        self._pending.append(value)
        if len(self._pending) >= self.BLOCK:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            block = torch.stack(self._pending, 1).to(device="cpu", dtype=torch.float64)
            self.energy[:, self._filled : self._filled + block.shape[1]] = block
            self._filled += block.shape[1]
            self._pending.clear()

    def upto(self, steps: int) -> dict[str, Tensor]:
        self._flush()
        return {"lr": torch.tensor(self.lrs[:steps], dtype=torch.float64),
                "energy": self.energy[:, :steps].clone(),
                "time": torch.tensor(self.times[:steps], dtype=torch.float64)}

    def load(self, info: dict, steps: int) -> None:
        self.lrs = info["lr"][:steps].tolist()
        self.times = info["time"][:steps].tolist()
        self.energy[:, :steps] = info["energy"][:, :steps]
        self._filled = steps


class _GradientOracle:
    """What a sampler's ``step`` calls: draws the next minibatch, estimates (Û, ∇Û), checks
    them for NaN/Inf, and can return the Hessian diagonal on the same minibatch."""

    def __init__(self, energy, estimator, stream, generator, sampler_name, current, info_lr):
        self.energy, self.estimator, self.stream, self.generator = energy, estimator, stream, generator
        self.sampler_name, self.current, self.info_lr = sampler_name, current, info_lr
        self.batch = None

    def __call__(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        self.batch = self.stream.next() if self.stream is not None else None
        value, grad = self.estimator(self.energy, theta, self.batch)
        if not math.isfinite(float(value.sum() + grad.sum())):
            step = self.current["step"]
            bad = "energy" if not bool(torch.isfinite(value).all()) else "gradient"
            raise DivergenceError(f"{self.sampler_name}: non-finite {bad} at iteration {step + 1} "
                                  f"(lr={self.info_lr[step]:.3g}); reduce the step size", step + 1)
        return value, grad

    def hessian_diag(self, theta: Tensor, num_probes: int = 1) -> Tensor:
        return self.energy.hessian_diag(theta, self.batch, self.generator, num_probes)


def _estimator_state(estimator) -> dict | None:
    if isinstance(estimator, ControlVariate):
        return {"centre": estimator._centre_c.cpu(), "full_grad": estimator._full_grad_c.cpu()}
    return None


def _restore_estimator(estimator, ckpt: dict) -> None:
    saved = ckpt.get("estimator")
    if saved is not None and isinstance(estimator, ControlVariate):
        device = estimator._centre_c.device
        estimator._centre_c, estimator._full_grad_c = saved["centre"].to(device), saved["full_grad"].to(device)


def _check_resume_compatible(old: dict, new: dict) -> None:
    for key in ("burn_in", "thin", "seed", "num_chains", "batch_size", "batching", "dim", "space", "config"):
        if json_like(old.get(key)) != json_like(new.get(key)):
            raise ValueError(f"cannot resume: {key} differs from the checkpoint ({old.get(key)!r} vs {new.get(key)!r})")


def json_like(x):
    return json.dumps(x, sort_keys=True, default=str)
