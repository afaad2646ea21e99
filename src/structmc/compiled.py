r"""The compiled step: one SGMCMC iteration as one ``torch.compile`` graph (``execution="compiled"``).

An eager iteration is dozens of small operations, each dispatched from Python: the minibatch
gather, the model's forward and backward (vmapped over chains), the estimator (a control
variate adds its centre terms), the sampler's update and its noise. Where the arithmetic is
small — small models, several chains, any model on a GPU — the dispatch is the step's cost.
:class:`Compiled` traces the iteration once and runs it as one fused graph (Inductor on the
CPU; on CUDA ``mode="reduce-overhead"`` replays it as a CUDA graph).

Randomness and the chain
    Random draws stay outside the graph, made from the run's own generator in the order the
    eager step makes them — per update, the minibatch indices then the sampler's one
    ``[C, P]`` standard normal (:meth:`~structmc.samplers.sampler.Sampler.draws_noise`);
    momentum resampling (SGHMC's ``begin``) before them, eagerly — and passed in as inputs
    (a :class:`~structmc.samplers.sampler.Drawn` stands where the update takes its generator).
    So the same seed gives the same random numbers as the eager run, and the same chain up to
    the float rounding of the fused kernels (a fused ``a·x + b`` rounds once where the eager
    path rounds twice); ``backend="aot_eager"`` runs the traced graph op by op with the eager
    kernels, bit for bit the eager chain (the tests use it to check the tracing).

What is compiled, and what is not
    The gradient samplers (SGLD, pSGLD without ``include_gamma``, SGHMC, SGNHT), with the
    minibatch or control-variate estimator, on an energy that declares itself ``compilable``
    (:class:`~structmc.energy.LogDensityEnergy`, :class:`~structmc.energy.ModuleEnergy` — with
    BatchNorm buffers, one chain —, S- and Sd-structured energies, whose θ̃ and masks are drawn
    before the graph from their own generator), fed from in-memory tensors, at a constant or
    step-decay step size; and a blocked Metropolis-within-Gibbs sweep (a
    :class:`~structmc.samplers.sampler.SweepSampler`: the minibatch, normals and uniforms drawn
    before the graph in the eager order, every block's proposal and accept/reject in it as
    selects, generic or incremental evaluator, MALA moves too). Anything else — a ``Dataset`` or a
    per-batch transform, buffers with several chains, pSGLD's Hessian probes, scale-adapted
    SGHMC, a step size that changes every iteration — runs eagerly, with a
    :class:`CompileFallbackWarning` naming why. A trace that fails (an operation Dynamo cannot
    capture: ``fullgraph=True``; the run's recompile limit) does the same at the iteration where
    it happens, with the run's generator, stream and state restored, so that the chain is the
    eager one.

Recompiles
    The graph is specialised on the shapes (chains, batch size, parameters), the dtype and the
    device, and Dynamo guards on the step size (a step decay compiles once per value) and on the
    update count where an update branches on it (pSGLD's first step): a handful of graphs per
    run, at most :data:`RECOMPILE_LIMIT`, each run its own (one code object per run). Guards on
    module globals are dropped (:func:`_keep_local_guards`): they were checked at every call. The run's
    checks stay as they are: NaN/Inf and the blow-up watch read device buffers every
    ``check_every`` iterations, recorders and checkpoints run between steps.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .batching import MinibatchStream
from .energy.protocols import CompilableEnergy, DrawingEnergy, Energy, StatefulEnergy
from .execution import Execution
from .gradients import ControlVariate, Minibatch
from .oracle import Oracle
from .samplers.sampler import Drawn, Sampler, SweepSampler

_RUNS = 0  # compiled runs in this process (names their code objects)
RECOMPILE_LIMIT = 32  # graphs per run: one per step size of a step decay, per update count where it branches


class CompileFallbackWarning(UserWarning):
    """``execution="compiled"`` runs (part of) a run eagerly; the message says why."""


class Compiled(Execution):
    """Compile each iteration (see the module docstring). ``backend``, ``mode`` and ``dynamic``
    go to :func:`torch.compile` (``mode=None`` picks ``"reduce-overhead"`` — CUDA graphs — on
    CUDA and the default elsewhere)."""

    name = "compiled"

    def __init__(self, backend: str = "inductor", mode: str | None = None, dynamic: bool | None = None, block: int = 1):
        self.backend, self.mode, self.dynamic = backend, mode, dynamic
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an int >= 1 (iterations per compiled call), got {block!r}")
        self.block = block
        self._per_run()

    def _per_run(self) -> None:
        """What one run sets up and fills (a strategy is copied per run, maybe after a run of its own)."""
        self.fallback = ""  # why the run steps eagerly ("" while compiled)
        self._fn: Callable | None = None
        self._cudagraphs = False  # replayed as a CUDA graph (Inductor's reduce-overhead mode on CUDA)
        self._sweep_oracle: Oracle | None = None  # a sweep sampler's evaluations inside the graph
        self._cost = 0  # model gradient evaluations per chain of an update (0: asked each step)
        self._traced: tuple | None = None  # (lr, warm-up, iterations) of the last call: a change may recompile
        self._drawing: DrawingEnergy | None = None  # a structured energy: θ̃ and masks drawn before the graph
        self._fields: tuple[str, ...] = ()  # the sampler state's fields (a block's iterations copy them)
        self._static: dict[str, Tensor] = {}  # the state's tensors at their fixed addresses (CUDA graphs)
        self._noise_buffers: list[Tensor] = []  # each update's noise at a fixed address (CUDA graphs)
        # a block's iterations computed ahead, oldest last: (state, energy, generator and stream after its draws)
        self._ahead: list[tuple] = []
        self._given: Any = None  # the state the last step returned (a run that replaced it drops the block)
        self._mark: tuple | None = None  # the generator and stream after the last returned iteration's draws

    def describe(self) -> str:
        block = f", block={self.block}" if self.block > 1 else ""
        return f"compiled ({self.backend}" + (f", {self.mode}" if self.mode else "") + block + ")"

    def bind(self, run) -> None:
        self._per_run()
        self.fallback = blocker(run)
        if self.fallback:
            warnings.warn(
                f"execution='compiled': {self.fallback}; this run steps eagerly", CompileFallbackWarning, stacklevel=4
            )
            return
        mode = self.mode
        if mode is None and run.theta.device.type == "cuda":
            mode = "reduce-overhead"
        self._stream = run.stream
        self._drawing = run.energy if isinstance(run.energy, DrawingEnergy) else None
        self._sampler, self._energy, self._estimator = run.sampler, run.energy, run.estimator
        # this run's own code object, so that its compiled graphs, guards and recompile count are its
        # own (Dynamo caches per code object: runs would otherwise share, and exhaust, one cache)
        global _RUNS
        _RUNS += 1
        traced = Compiled._sweep if isinstance(run.sampler, SweepSampler) else Compiled._iteration
        # the cost of an update is fixed, except a structured energy's (1 during its warm-up, K after)
        self._cost = 0 if self._drawing is not None else run.oracle.gradient_cost()
        if dataclasses.is_dataclass(run.state):
            self._fields = tuple(f.name for f in dataclasses.fields(run.state))
        if isinstance(run.sampler, SweepSampler):
            # the run's energy and estimator on the sweep's minibatch, without a stream, its
            # evaluations counted from zero in each call (the run's oracle adds them)
            self._sweep_oracle = Oracle(run.oracle.energy, run.oracle.estimator)
        code = traced.__code__.replace(co_name=f"structmc_compiled_step_{_RUNS}")
        iteration = types.FunctionType(code, traced.__globals__, code.co_name)
        kwargs: dict = {}
        if "recompile_limit" in inspect.signature(torch.compile).parameters:  # torch >= 2.12
            kwargs["recompile_limit"] = RECOMPILE_LIMIT
        # torch.compile takes a mode or options, not both: a mode becomes its Inductor options (with
        # the guard filter beside them); other backends have no modes
        options = (
            dict(torch._inductor.list_mode_options(mode, self.dynamic)) if mode and self.backend == "inductor" else {}
        )
        self._cudagraphs = bool(options.get("triton.cudagraphs")) and run.theta.device.type == "cuda"
        if self._cudagraphs:
            # persistent inputs at fixed addresses: the replayed graph reads the data and updates the
            # state where they are (cudagraph trees copy other inputs in at every replay, and do not
            # capture a graph that writes to them)
            for t in () if run.stream is None else run.stream.data:
                torch._dynamo.mark_static_address(t, guard=False)
        options["guard_filter_fn"] = _keep_local_guards
        self._fn = torch.compile(  # type: ignore[call-overload]
            types.MethodType(iteration, self),
            backend=self.backend,
            dynamic=self.dynamic,
            fullgraph=True,
            options=options,
            **kwargs,
        )

    def _gather(self, idx: Tensor | None) -> tuple[Tensor, ...] | None:
        stream = self._stream
        if stream is None:
            return None
        if idx is None:
            return stream.full_batch
        flat = idx.reshape(-1)
        return tuple(t.index_select(0, flat).view(*idx.shape, *t.shape[1:]) for t in stream.data)

    def _iteration(self, state, indices: list, noises: list, drawn: list, lr: float):
        """One iteration (``num_leapfrog`` updates), or a block of them: the final state, each
        iteration's energy, and the state's fields after each iteration but the last."""
        energies, snapshots = [], []
        per = self._sampler.num_leapfrog
        for u, (idx, noise, energy_draws) in enumerate(zip(indices, noises, drawn)):
            if energy_draws is not None:
                self._energy.use_draws(energy_draws)
            energy, grad = self._estimator(self._energy, state.theta, self._gather(idx))
            state = self._sampler.update(state, grad, lr, None if noise is None else Drawn(noise))
            if (u + 1) % per == 0:
                energies.append(energy)
                if u + 1 < len(indices):
                    snapshots.append([_snapshot(getattr(state, name)) for name in self._fields])
        return state, energies, snapshots

    def _sweep(self, state, draws):
        oracle = self._sweep_oracle
        oracle.batch = draws[0]
        return self._sampler.sweep(state, draws, oracle, host_decisions=False)

    def _sweep_step(self, run):
        """A sweep sampler's iteration: its random numbers drawn eagerly (the minibatch, then the
        sweep's normals and uniforms: the eager order), the sweep traced; the evaluations are
        counted from zero in each call (a count carried over would be guarded as a constant)."""
        sampler, oracle = run.sampler, self._sweep_oracle
        assert oracle is not None
        saved = _saved(run, None) if self._traced is None else None
        draws = sampler.sweep_draws(run.state, run.oracle, run.generator)
        oracle.value_evals = oracle.grad_evals = 0
        try:
            if self._cudagraphs:
                _keep_addresses(run.state, self._static)
                torch.compiler.cudagraph_mark_step_begin()
            energy, accept = self._fn(run.state, draws)
            if self._cudagraphs:  # the graph's output buffers, rewritten by the next replay
                energy, accept = energy.clone(), accept.clone()
        except Exception as err:  # noqa: BLE001  (named in the warning, then the eager step)
            if saved is None:
                raise
            _restore(run, saved, None)
            self._fallback(err)
            return super().step(run, None)
        self._traced = (None, False)
        evaluations = oracle.value_evals + oracle.grad_evals
        run.oracle.value_evals += oracle.value_evals
        run.oracle.grad_evals += oracle.grad_evals
        return sampler.sweep_info(run.state, energy, accept, evaluations)

    def _fallback(self, err: Exception) -> None:
        self._fn = None
        self.fallback = f"torch.compile could not trace the step ({type(err).__name__}: {str(err).splitlines()[0]})"
        warnings.warn(
            f"execution='compiled': {self.fallback}; this run steps eagerly", CompileFallbackWarning, stacklevel=4
        )

    def _call(self, state, indices, noises, drawn, lr):
        # the energies take their gradient with torch.func.grad inside the trace
        # (autodiff.traced_value_and_grad): no Dynamo switch to set around the call (toggling
        # trace_autograd_ops cost ~60 µs a step, a third of a small target's compiled step)
        if not self._cudagraphs:
            return self._fn(state, indices, noises, drawn, lr)
        _keep_addresses(state, self._static)
        torch.compiler.cudagraph_mark_step_begin()
        state, energies, snapshots = self._fn(state, indices, noises, drawn, lr)
        # the energies and snapshots are the graph's output buffers, rewritten by the next replay: copies
        energies = [e.clone() for e in energies]
        return state, energies, [[_snapshot(v) for v in snap] for snap in snapshots]

    def step(self, run, lr):
        if self._fn is None:
            return super().step(run, lr)
        if self._sweep_oracle is not None:
            return self._sweep_step(run)
        if self._ahead:
            if run.state is self._given:
                return self._next_ahead(run)
            self._ahead.clear()  # the run's state was replaced (a restored checkpoint): the block is void
        sampler, generator, stream = run.sampler, run.generator, run.stream
        iterations = self._block_size(run, lr)
        saved = None
        # where a trace may happen (the first call; a new step size; a structured energy's warm-up
        # ending; a block's first or last use), a trace that fails leaves the run as the eager step finds it
        key = (lr, self._drawing is not None and self._drawing.draws_next(), iterations)
        if key != self._traced:
            saved = _saved(run, self._drawing)
        state = sampler.begin(run.state, lr, generator)
        indices, noises, drawn, marks = [], [], [], []
        drawing = self._drawing
        for _ in range(iterations):
            for _ in range(sampler.num_leapfrog):  # the eager order: each update's indices, then its noise
                indices.append(None if stream is None else stream.next_indices())
                # a structured energy's θ̃ and masks: its own generator, so the order against the run's is free
                drawn.append(
                    None
                    if drawing is None
                    else drawing.draw_for_step(run.num_chains, run.theta.dtype, run.theta.device)
                )
                noises.append(self._noise(len(noises), state.theta, generator) if sampler.draws_noise(lr) else None)
            if iterations > 1:  # where the run is after each iteration's draws, should it stop there
                marks.append((generator.get_state(), None if stream is None else stream.state_dict()))
        try:
            state, energies, snapshots = self._call(state, indices, noises, drawn, lr)
        except Exception as err:  # noqa: BLE001  (named in the warning, then the eager step)
            if saved is None:
                raise
            _restore(run, saved, self._drawing)
            self._fallback(err)
            return super().step(run, lr)
        self._traced = key
        if iterations > 1:  # the block's iterations before its last, as states of their own
            states = [_with_fields(state, self._fields, snap) for snap in snapshots] + [state]
            self._ahead = list(zip(states, energies, marks))[::-1]
            return self._next_ahead(run)
        run.oracle.grad_evals += sampler.num_leapfrog * (self._cost or run.oracle.gradient_cost())
        return state, {"energy": energies[-1], **sampler.records(state)}

    def _block_size(self, run, lr) -> int:
        """Iterations in the next call: ``block`` where they share the step size and the sampler's
        ``begin`` does nothing between them, else one."""
        sampler, t = run.sampler, run.iteration
        if self.block == 1 or not self._fields or self._drawing is not None or sampler.begin_changes_state():
            return 1
        if sampler.lr is not None and any(sampler.lr(t + j) != lr for j in range(1, self.block)):
            return 1
        return self.block

    def _next_ahead(self, run):
        state, energy, self._mark = self._ahead.pop()
        self._given = state
        run.oracle.grad_evals += run.sampler.num_leapfrog * (self._cost or run.oracle.gradient_cost())
        return state, {"energy": energy, **run.sampler.records(state)}

    def settle(self, run) -> None:
        """A block's iterations not yet returned are dropped, and the run's generator and stream
        go back to where they were after the last returned iteration's draws."""
        if not self._ahead:
            return
        self._ahead.clear()
        if self._mark is not None:
            run.generator.set_state(self._mark[0])
            if run.stream is not None:
                run.stream.load_state_dict(self._mark[1])

    def _noise(self, k: int, theta: Tensor, generator) -> Tensor:
        """The k-th update's standard normal, from the run's generator. Under CUDA graphs drawn into
        one buffer per update at a fixed address: the graph reads it where it was captured, and an
        update may scale it in place (pSGLD), which cudagraph trees allow only there."""
        if not self._cudagraphs:
            return torch.empty_like(theta).normal_(generator=generator)
        bufs = self._noise_buffers
        if len(bufs) <= k or bufs[k].shape != theta.shape or bufs[k].dtype != theta.dtype:
            buf = torch.empty_like(theta)
            torch._dynamo.mark_static_address(buf, guard=False)
            bufs[k:] = [buf]
        return bufs[k].normal_(generator=generator)


def _keep_local_guards(entries) -> list[bool]:
    """Drop Dynamo's guards on module globals (that ``torch``, ``torch.nn.functional``, the
    library's own modules and the functions they hold are still the objects traced): they are
    most of the guards of a small step, checked at every call (10-parameter softmax regression,
    one thread, three A/B pairs: 287, 297, 414 µs a step against 346, 366, 531 keeping them),
    and a run does not re-bind them.
    Guards on the arguments and on the run's objects (their tensors, flags and counters: a
    structured energy's warm-up, a control variate's centre gradient) stay."""
    return [not entry.is_global for entry in entries]


def _keep_addresses(state, static: dict[str, Tensor]) -> None:
    """Keep each state tensor of a CUDA-graphed step at one address: a replayed graph reads and
    updates the state where it was captured (cudagraph trees capture no graph that writes to an
    input at a changing address, and re-record when a static input moves). A tensor that an eager
    hook replaced (SGHMC's momentum resampling; a restored state) is copied into the kept one."""
    for name, t in vars(state).items():
        if not isinstance(t, Tensor):
            continue
        kept = static.get(name)
        if kept is t:
            continue
        if kept is not None and kept.shape == t.shape and kept.dtype == t.dtype and kept.device == t.device:
            kept.copy_(t)
            setattr(state, name, kept)
        else:
            torch._dynamo.mark_static_address(t, guard=False)
            static[name] = t


def _saved(run, drawing: DrawingEnergy | None) -> tuple:
    """What a failed trace must give back (:func:`_restore`): the run's generator, stream, state
    and a structured energy's draws, as the eager step will find them."""
    return (
        run.generator.get_state(),
        None if run.stream is None else run.stream.state_dict(),
        _copy_state(run),
        None if drawing is None else drawing.state_dict(),
    )


def _restore(run, saved: tuple, drawing: DrawingEnergy | None) -> None:
    generator_state, stream_state, state, drawing_state = saved
    run.generator.set_state(generator_state)
    if run.stream is not None:
        run.stream.load_state_dict(stream_state)
    run.state = state
    if drawing is not None:
        drawing.load_state_dict(drawing_state, run.theta.device)
        drawing.use_draws(None)


def _snapshot(value):
    return value.clone() if isinstance(value, Tensor) else value


def _with_fields(state, names: tuple[str, ...], values: list):
    """A copy of the sampler state ``state`` with ``names`` set to ``values`` (a block's iteration)."""
    out = copy.copy(state)
    for name, value in zip(names, values):
        setattr(out, name, value)
    return out


def _copy_state(run):
    """A copy of the sampler state (its tensors cloned): the updates work in place."""
    return run.sampler.load_state(
        {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in run.sampler.state_dict(run.state).items()}
    )


def blocker(run) -> str:
    """Why ``run``'s iteration cannot be compiled ("" when it can)."""
    sampler, estimator, stream = run.sampler, run.estimator, run.stream
    energy: Energy = run.energy
    if not isinstance(sampler, (Sampler, SweepSampler)):
        return f"{type(sampler).__name__} is neither a gradient sampler nor a sweep (SweepSampler)"
    why_not = getattr(sampler, "compile_blocker", None)  # a gradient sampler's, or a sweep's that has one
    if why_not is not None and why_not():
        return f"{type(sampler).__name__}: {why_not()}"
    if isinstance(sampler, Sampler) and sampler.lr is not None and not sampler.lr.piecewise_constant:
        return (
            f"the step size {type(sampler.lr).__name__} changes every iteration, and a graph is compiled per "
            "step size (use a constant or a StepDecay schedule to compile)"
        )
    if isinstance(energy, StatefulEnergy) and not isinstance(energy, DrawingEnergy):
        return (
            f"{type(energy).__name__} keeps state between steps and does not say how to draw its random numbers "
            "before the step (DrawingEnergy)"
        )
    if not (isinstance(energy, CompilableEnergy) and energy.compilable):
        return f"{type(energy).__name__} does not declare itself compilable (Energy.compilable)"
    if energy.has_buffers and run.num_chains > 1:
        return (
            f"{type(energy).__name__} has module buffers (BatchNorm statistics), kept per chain and swapped from "
            f"Python between the {run.num_chains} chains (one chain compiles)"
        )
    if not isinstance(estimator, (Minibatch, ControlVariate)):
        return f"the gradient estimator {type(estimator).__name__} is not compiled"
    if stream is not None and type(stream) is not MinibatchStream:
        return f"batches come from a {type(stream).__name__} (a Dataset or a per-batch transform), read from Python"
    return ""


__all__ = ["Compiled", "CompileFallbackWarning", "blocker"]
