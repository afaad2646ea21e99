r"""Minibatch blocked Metropolis-within-Gibbs (Papamarkou 2023, "Approximate blocked Gibbs
sampling for Bayesian neural networks", Algorithm 1).

A sweep (one iteration of the chain) draws one minibatch B_t, re-evaluates the current
state's log target on it, and visits the blocks b = 1..M of a
:class:`~structmc.partitions.Partition` in order; each block gets one Metropolis step

.. math::
    \theta'_b \sim \mathcal N(\theta_b, \sigma_b^2 I), \qquad
    \log\alpha = \log\pi_{B_t}(\theta'_b, \theta_{-b}) - \log\pi_{B_t}(\theta_b, \theta_{-b}),

accepted with probability min(1, α), where log π_B = log prior + (scaled) log-likelihood of
the batch. ``scaling="none"`` (the default) is the paper's target: the summed log-likelihood
of the batch, no N/n (the sampler asks the run for the unscaled energy). **It is not the
posterior** when the batch is smaller than the data: it weights the data by n/N, i.e. it
targets a posterior that has seen n of the N points, wider and less confident than the
posterior (on noisy XOR the pooled ECE was 19.4% against 10.8% with ``"N/n"``, issue 22 §6).
``"N/n"`` uses the run's N/n-scaled energy, an unbiased estimate of the full-data log posterior
(docs/conventions.md): choose it to sample the posterior (the minibatch acceptance keeps it
approximate). The default stays the paper's, to reproduce its numbers. With the full data as
the batch both are exact Metropolis-within-Gibbs on the posterior.

Exactness of the bookkeeping (the reference code gets both wrong): a rejected proposal leaves
no trace — later blocks of the sweep see the current state — and the cached log target
always belongs to the stored state. All C chains move together, every block step vectorised
over chains with per-chain accept/reject; a non-finite proposal is rejected, never raised.

Options beyond the paper:

* ``adapt``: Robbins–Monro on log σ during the first ``adapt.steps`` sweeps,
  log σ ← log σ + γ₀ (t+1)^{−κ} (a − a*), toward the target acceptance a* per layer or per
  block (pooled over the chains), then frozen; the frozen values are ``state.log_sd`` and
  the per-sweep ``proposal_sd`` record.
* ``mala=True``: a gradient-informed block move (MALA within Gibbs),
  θ'_b ~ N(θ_b + (σ_b²/2)∇_b log π, σ_b² I), with the reverse-proposal correction in α.
* ``preconditioner=WindowAdaptation(steps)`` (with ``mala=True``): a diagonal inverse mass M per
  chain (:mod:`structmc.samplers.adaptation`), the block move preconditioned by it,

  .. math::
      \theta'_b = \theta_b - \frac{\sigma_b^2}{2} M_b \nabla_b U(\theta) + \sigma_b M_b^{1/2} z, \qquad
      q(\theta'_b \mid \theta) = \mathcal N\big(\theta_b - \tfrac{\sigma_b^2}{2} M_b \nabla_b U(\theta),\ \sigma_b^2 M_b\big),

  with that proposal density (and its reverse) in α, so that every block step is an exact
  Metropolis-Hastings step of the target for any fixed M. M is estimated in Stan's burn-in
  windows of sweeps from the positions and the gradients at the end of each sweep — gradients the
  MALA sweep has already computed, so no evaluation is added — and frozen after ``steps`` sweeps
  (keep ``burn_in >= steps``): the chain is then MALA-within-Gibbs with a constant
  preconditioner. Random-walk proposals take none: the default estimate (the ratio of the
  positions' and the gradients' spreads) needs the gradients, which a random-walk sweep does not
  compute.

A compatibility option, off by default, reproduces the reference sampler's defect:

* ``reference_defect=True``: the sweep of eeyore's ``Gibbs.draw``
  (``eeyore/samplers/gibbs.py``, commit 2c991ee; ../shared/papers/reference-code-notes.md,
  "Blocked Gibbs": "after a rejection the reference keeps the rejected values in its proposal
  vector"). The reference copies the state into a proposal vector p once per sweep
  (``proposed['sample'] = self.current['sample'].clone()``, line 71), writes each block's proposal
  into it (``proposed['sample'][indices[i]] = kernel.sample()``, lines 82-85, centred at p_b = θ_b, which no
  earlier block of the sweep has touched) and evaluates log π(p); on acceptance it copies the
  block into the state and caches log π(p) as the current target
  (``self.current['target_val'] = proposed['target_val']``, lines 89-90); on rejection it restores only
  the model's parameters (``self.model.set_params(self.current['sample'])``, line 93), **not** p. So
  every later block of the sweep is proposed jointly with all earlier rejected blocks, and
  once a block was rejected, the target cached at a later acceptance is that of p, a state
  the chain is not in:

  .. math::
      p \leftarrow \theta;\ \text{for } b = 1..M:\ p_b \leftarrow \theta_b + \sigma_b z_b,\
      \text{accept if } \log u_b < \log\pi_B(p) - c,\ \text{then } \theta_b \leftarrow p_b,\ c \leftarrow \log\pi_B(p).

  It is not a Metropolis step of any target (tests/gibbs/test_mwg.py shows the invariant
  Gaussian lost); it exists to reproduce the paper's acceptance rates (the gibbs-xor
  experiment reports both samplers). The same random numbers are drawn, so a chain with and
  without it shares its proposals and uniforms. The recorded ``energy`` is the cached
  target c. As with minibatches in the reference (``if self.counter.num_batches != 1``, line 68), c is
  re-evaluated on the current state at the start of every sweep; the reference's full-batch
  runs carry a stale c across sweeps, which is not reproduced. Not with ``mala``.

Proposal variances σ² are given per block in one line: a number (all blocks), a sequence with
one value per layer (the paper's ``[1e-2, 1e-4, 1e-4, 1e-5]`` for MNIST, batch 3,000), a
``{layer name pattern: value}`` map, a ``[M]`` tensor (per block), or a function
``f(block, layer, unit, size) -> value``.

The log target is evaluated by the run's oracle (a full forward per block, any energy and any
partition), or, for MLPs with node or finer node blocks, by the incremental evaluator of
:mod:`structmc.gibbs.incremental`, which recomputes only the changed unit's pre-activation and
what lies downstream — the same chain, much faster.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..partitions import Partition, contiguous_index
from ..samplers.adaptation import WindowAdaptation, WindowState, adapt, as_adaptation, window_from_flat, window_to_flat
from ..samplers.sampler import state_to_dict
from .proposals import _jsonable, _resolve_var, acceptance  # noqa: F401  (acceptance: its old home)

SCALINGS = ("none", "N/n")


@dataclass(frozen=True)
class Adapt:
    """Robbins–Monro adaptation of the proposal scales during the first ``steps`` sweeps:
    log σ += ``rate`` · (t+1)^−``decay`` · (acceptance − ``target``), per ``by`` ("layer" or
    "block"), acceptance pooled over chains; frozen afterwards."""

    steps: int
    target: float = 0.3
    by: str = "layer"
    rate: float = 1.0
    decay: float = 0.6

    def __post_init__(self):
        if int(self.steps) != self.steps or self.steps < 1:
            raise ValueError(f"Adapt.steps must be a positive integer, got {self.steps!r}")
        if not 0 < self.target < 1:
            raise ValueError(f"Adapt.target must lie in (0, 1), got {self.target!r}")
        if self.by not in ("layer", "block"):
            raise ValueError(f"Adapt.by must be 'layer' or 'block', got {self.by!r}")
        if not (self.rate > 0 and 0.5 < self.decay <= 1):
            raise ValueError(f"Adapt needs rate > 0 and decay in (0.5, 1], got {self.rate}, {self.decay}")


@dataclass
class MWGState:
    theta: Tensor  # [C, P]
    log_sd: Tensor  # [C, M] proposal log standard deviation per block
    step: int = 0
    window: WindowState | None = None  # a preconditioner's M and its window's sums


def _why_not_proposal_vector(inc) -> str | None:
    """``None`` if the incremental evaluator, committing every proposal, evaluates the
    reference's proposal vector exactly (``reference_defect``), else the reason. Its caches then
    hold the proposal vector, but it reads the weights of layers after a block's, and of the
    block's own layer for a block over several units, from the state: exact when the blocks
    come in layer order and a block over several units is alone in its layer."""
    layers = [plan["layer"] for plan in inc.blocks]
    if layers != sorted(layers):
        return "reference_defect=True needs blocks in layer order for it"
    if any(plan["unit"] < 0 and layers.count(plan["layer"]) > 1 for plan in inc.blocks):
        return "reference_defect=True needs a block over several units to be alone in its layer for it"
    return None


class MetropolisWithinGibbs:
    """Blocked Metropolis-within-Gibbs over the blocks of ``partition`` (see module docstring): a
    :class:`~structmc.samplers.Kernel` (``init``, one sweep per ``step``), run by
    :func:`structmc.sample` and :class:`~structmc.run.Run` like the SGMCMC samplers.

    Parameters
    ----------
    partition : the blocks, visited in group order (``by_neuron``: node blocks,
        ``by_finer_nodes(space, 10)``: the reference code's chunks of 10, ...).
    proposal_var : σ² per block (number, per-layer sequence or map, ``[M]`` tensor, function).
    scaling : ``"none"`` (default, the paper's: the batch log-likelihood unscaled, which weights
        the data by n/N, so it is **not the posterior** for n < N) or ``"N/n"`` (the N/n-scaled
        energy, whose target is the posterior: use it unless you reproduce the paper).
    adapt : an :class:`Adapt` to tune σ during the first sweeps, or ``None``.
    mala : gradient-informed block proposals (one gradient evaluation per block).
    preconditioner : a :class:`~structmc.samplers.WindowAdaptation` (or its config), with
        ``mala=True``: the MALA block moves preconditioned by a diagonal inverse mass adapted
        in burn-in windows of sweeps, then frozen (see the module docstring); ``None`` (default).
    evaluator : ``"auto"`` (incremental where the model and blocks allow it), ``"incremental"``
        (an error if they do not), or ``"generic"`` (full forward per block).
    record : ``"block"`` stores ``accept [C, M]`` per sweep; ``"layer"`` the per-layer rates
        ``accept [C, L]`` (for very long chains with many blocks).
    reference_defect : ``False`` (default: a rejected block leaves no trace, the correct
        kernel). ``True`` reproduces the reference code's defect (eeyore ``Gibbs.draw``, see
        the module docstring): rejected proposals stay in the sweep's proposal vector, against
        which later blocks are proposed and evaluated. Not a valid MCMC kernel; for
        reproducing the paper's acceptance rates only. Part of :meth:`config`, so a run
        recorded with one setting does not resume with the other.
    """

    name = "mwg"
    State = MWGState
    # the run's scratch, set by prepare() on the run's copy (never on the object the user built)
    _index: list
    _group_ids: Tensor
    _incremental: Any
    _layer: Tensor
    _num_layers: int
    _layer_size: Tensor
    _first_of_layer: Tensor

    def __init__(
        self,
        partition: Partition,
        proposal_var=1e-2,
        *,
        scaling: str = "none",
        adapt: Adapt | None = None,
        mala: bool = False,
        preconditioner: WindowAdaptation | None = None,
        evaluator: str = "auto",
        record: str = "block",
        reference_defect: bool = False,
    ):
        if not isinstance(partition, Partition):
            raise TypeError(f"partition must be a structmc.partitions.Partition, got {type(partition).__name__}")
        if scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
        if evaluator not in ("auto", "incremental", "generic"):
            raise ValueError(f"evaluator must be 'auto', 'incremental' or 'generic', got {evaluator!r}")
        if record not in ("block", "layer"):
            raise ValueError(f"record must be 'block' or 'layer', got {record!r}")
        if adapt is not None and not isinstance(adapt, Adapt):
            raise TypeError("adapt must be an Adapt(...) or None")
        if not isinstance(reference_defect, bool):
            raise TypeError(f"reference_defect must be True or False, got {reference_defect!r}")
        if reference_defect and mala:
            raise ValueError(
                "reference_defect=True reproduces the reference code's random-walk sweep, which has no "
                "gradient moves: use mala=False with it"
            )
        self._preconditioner = as_adaptation(preconditioner)
        if self._preconditioner is not None and not mala:
            raise ValueError(
                "preconditioner=WindowAdaptation(...) needs mala=True: M is estimated from the gradients the MALA "
                "sweep computes, which a random-walk sweep does not (tune random-walk scales with adapt=Adapt(...))"
            )
        if self._preconditioner is not None and self._preconditioner.dense:
            raise ValueError(
                "MetropolisWithinGibbs takes a diagonal preconditioner only (WindowAdaptation(dense=False)); a dense "
                "M is offered for SGLD and SGHMC"
            )
        self._layout = None if self._preconditioner is None else self._preconditioner.layout()
        self.lr = None  # no step size: σ² per block is the proposal's scale
        self.partition, self.proposal_var = partition, proposal_var
        self.scaling, self.adapt, self.mala = scaling, adapt, bool(mala)
        self.evaluator, self.record = evaluator, record
        self.reference_defect = reference_defect
        self.block_var = _resolve_var(proposal_var, partition)  # validated now: before any compute
        if adapt is not None and adapt.by == "layer" and (partition.layer is None or bool((partition.layer < 0).any())):
            raise ValueError("Adapt(by='layer') needs blocks that each lie in one layer")
        if record == "layer" and (partition.layer is None or bool((partition.layer < 0).any())):
            raise ValueError("record='layer' needs blocks that each lie in one layer")
        self._incremental = None

    @property
    def preconditioner(self) -> WindowAdaptation | None:
        """The adapted diagonal preconditioner of the MALA moves, or ``None``."""
        return self._preconditioner

    def compile_blocker(self) -> str:
        """Why a sweep cannot be traced into a compiled step ("" when it can)."""
        if self._preconditioner is not None:
            return "the preconditioner's adaptation branches on the sweep count (not traced)"
        return ""

    @property
    def full_data_step(self) -> bool:
        """One block moved by a gradient-informed (MALA) proposal: a Metropolis-adjusted step of
        all parameters, every evaluation through the oracle (so it runs data-parallel under
        ``distributed=True``; a sweep of several blocks stays single-process)."""
        return self.mala and self.partition.num_groups == 1

    # -- set-up ---------------------------------------------------------------------------------
    def target_energy(self, energy):
        return energy.with_num_data(None) if self.scaling == "none" else energy

    def prepare(self, energy) -> MetropolisWithinGibbs:
        self.partition.check_space(energy.space)
        from .incremental import IncrementalMLP, why_not_incremental

        new = copy.copy(self)  # the run's copy: the scratch below is per run, the caller's object is unchanged
        new._index = [contiguous_index(idx) for idx in self.partition.blocks()]  # views for contiguous blocks
        new._group_ids = self.partition.group_ids
        new._incremental = None
        if self.evaluator != "generic" and not self.mala:
            reason = why_not_incremental(energy, self.partition)
            inc = IncrementalMLP(energy, self.partition) if reason is None else None
            if inc is not None and self.reference_defect:
                reason = _why_not_proposal_vector(inc)
            if reason is None:
                new._incremental = inc
            elif self.evaluator == "incremental":
                raise ValueError(f"the incremental evaluator cannot run here: {reason}")
        elif self.evaluator == "incremental":
            raise ValueError("the incremental evaluator does not compute gradients: use mala=False")
        layer = self.partition.layer
        if layer is not None and bool((layer >= 0).all()):  # blocks by layer: per-layer records
            new._layer = layer
            new._num_layers = int(layer.max()) + 1
            new._layer_size = torch.bincount(layer, minlength=new._num_layers).to(torch.float64)
            new._first_of_layer = torch.zeros(new._num_layers, dtype=torch.long).scatter_reduce_(
                0, layer, torch.arange(layer.numel()), reduce="amin", include_self=False
            )
        return new

    def init(self, theta: Tensor, generator=None) -> MWGState:
        theta = theta.detach().clone()
        # index tensors on the chain's device (slices need nothing), on this run's copy (prepare)
        self._group_ids = self.partition.group_ids.to(theta.device)
        self._index = [i.to(theta.device) if isinstance(i, Tensor) else i for i in self._index]
        var = self.block_var.to(device=theta.device, dtype=theta.dtype)
        window = None if self._preconditioner is None else WindowState.start(theta)
        return MWGState(theta, (0.5 * var.log()).expand(theta.shape[0], -1).clone(), window=window)

    def state_dict(self, state: MWGState) -> dict:
        return window_to_flat(state_to_dict(state))  # without a preconditioner: as before

    def load_state(self, d: dict) -> MWGState:
        return MWGState(**window_from_flat(d))

    def __repr__(self) -> str:
        return (
            f"MetropolisWithinGibbs({self.partition.kind}, {self.partition.num_groups} blocks, "
            f"scaling={self.scaling!r}, mala={self.mala}, evaluator={self.evaluator!r}"
            + (f", preconditioner={self._preconditioner!r}" if self._preconditioner is not None else "")
            + (", reference_defect=True)" if self.reference_defect else ")")
        )

    def config(self) -> dict:
        out = {
            "sampler": self.name,
            "num_blocks": self.partition.num_groups,
            "partition": self.partition.kind,
            "proposal_var": _jsonable(self.proposal_var),
            "scaling": self.scaling,
            "mala": self.mala,
            "evaluator": self.evaluator,
            "record": self.record,
        }
        if self.reference_defect:  # only when on: configs (and checkpoints) of correct runs are unchanged
            out["reference_defect"] = True
        if self._preconditioner is not None:  # only when used: configs of other runs are unchanged
            out["preconditioner"] = dataclasses.asdict(self._preconditioner) | {"kind": "WindowAdaptation"}
        if self.adapt is not None:
            out["adapt"] = vars(self.adapt) if hasattr(self.adapt, "__dict__") else dict(self.adapt.__dict__)
        return out

    # -- one sweep ---------------------------------------------------------------------------------
    def step(self, state: MWGState, oracle, lr, generator):
        evals0 = oracle.value_evals + oracle.grad_evals
        draws = self.sweep_draws(state, oracle, generator)
        energy, accept = self.sweep(state, draws, oracle)
        return self.sweep_info(state, energy, accept, oracle.value_evals + oracle.grad_evals - evals0)

    def sweep_draws(self, state: MWGState, oracle, generator) -> tuple:
        """The sweep's random numbers, before any evaluation: the minibatch (every evaluation of
        the sweep sees it), then N(0, 1) per parameter (the blocks partition θ) and one uniform
        per block, as ``(batch, noise, log u)``. The compiled step draws them eagerly, in this
        order, and traces :meth:`sweep`."""
        theta, C, M = state.theta, state.theta.shape[0], len(self._index)
        batch = oracle.next_batch()
        noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
        log_u = torch.rand((C, M), generator=generator, dtype=theta.dtype, device=theta.device).log_()
        return batch, noise, log_u

    def sweep(self, state: MWGState, draws: tuple, oracle, host_decisions: bool = True) -> tuple[Tensor, Tensor]:
        """One sweep over the blocks with ``draws`` from :meth:`sweep_draws`: θ updated in place;
        returns the energy ``[C]`` and the acceptances ``[C, M]``. ``oracle`` evaluates on
        ``batch`` (``value``, ``value_and_grad``). One chain on the CPU decides on Python floats
        (``host_decisions``); the compiled step takes the chains' path (selects, no host reads)."""
        batch, noise, log_u = draws
        theta, C = state.theta, state.theta.shape[0]
        inc = self._incremental
        if self.mala:
            energy, grad = oracle.value_and_grad(theta)
        elif inc is not None:
            energy = inc.begin(theta, batch)
        else:
            energy = oracle.value(theta)
        sd = state.log_sd.exp()
        if self.mala:
            window = state.window
            inverse_mass = None if window is None else window.inverse_mass
            energy, accept, grad = self._mala_sweep(theta, energy, grad, noise, sd, log_u, oracle, inverse_mass)
            if window is not None:  # the sweep's end: its position and the gradient there, already computed
                assert self._preconditioner is not None
                adapt(self._preconditioner, self._layout, window, state.step, theta, grad)
            return energy, accept
        steps = noise * sd[:, self._group_ids]  # σ_b z for every parameter, in one product
        if inc is not None:
            inc.set_steps(steps)
        one_chain = host_decisions and C == 1 and theta.device.type == "cpu"
        return (self._one_chain_sweep if one_chain else self._chains_sweep)(theta, energy, steps, log_u, oracle)

    def sweep_info(self, state: MWGState, energy: Tensor, accept: Tensor, evaluations: int) -> tuple[MWGState, dict]:
        """After a sweep: the adaptation of σ (Robbins-Monro, during ``adapt.steps``) and the records."""
        if self.adapt is not None and state.step < self.adapt.steps:
            self._adapt(state, accept)
        state.step += 1
        info = {
            "energy": energy,
            "accept": accept if self.record == "block" else self._per_layer(accept),
            "evaluations": evaluations,
        }
        if self.adapt is not None:
            info["proposal_sd"] = self._adapt_groups(state.log_sd).exp()
        return state, info

    def _propose(self, b: int, idx, step: Tensor, theta: Tensor, trial: Tensor, oracle) -> Tensor:
        """Energy of ``theta`` with block ``b`` moved by ``step`` (θ itself unchanged; the
        generic path writes the proposal into the scratch ``trial``)."""
        if self._incremental is not None:
            return self._incremental.propose(b, step)
        if not self.reference_defect:
            trial.copy_(theta)
        # with reference_defect, ``trial`` is the reference's proposal vector (set to θ at the
        # sweep's start, rejected blocks kept); block b is still at θ_b there
        trial[:, idx] += step
        return oracle.value(trial)

    def _chains_sweep(self, theta, energy, steps, log_u, oracle):
        """All chains at once, per-chain accept/reject by selects (no host reads)."""
        accept = torch.empty(log_u.shape, dtype=torch.bool, device=theta.device)
        trial = torch.empty_like(theta)
        defect = self.reference_defect
        if defect:
            trial.copy_(theta)  # the reference's proposal vector: rejected blocks stay in it
        for b, idx in enumerate(self._index):
            current, step = theta[:, idx], steps[:, idx]
            energy_new = self._propose(b, idx, step, theta, trial, oracle)
            ok = (log_u[:, b] < energy - energy_new) & torch.isfinite(energy_new)  # NaN/Inf proposals: rejected
            accept[:, b] = ok
            theta[:, idx] = torch.where(ok.unsqueeze(1), current + step, current)
            energy = torch.where(ok, energy_new, energy)
            if self._incremental is not None:
                self._incremental.commit(True if defect else ok)  # defect: its caches follow the proposal vector
        return energy, accept

    def _one_chain_sweep(self, theta, energy, steps, log_u, oracle):
        """One chain on the CPU: the same decisions, taken on Python floats (a handful of
        kernels fewer per block, which is most of a block's cost for small networks)."""
        log_u = log_u[0].tolist()
        accept = [False] * len(log_u)
        e_cur = float(energy[0])
        trial = torch.empty_like(theta)
        defect = self.reference_defect
        if defect:
            trial.copy_(theta)  # the reference's proposal vector: rejected blocks stay in it
        for b, idx in enumerate(self._index):
            step = steps[:, idx]
            e_new = float(self._propose(b, idx, step, theta, trial, oracle))
            ok = math.isfinite(e_new) and log_u[b] < e_cur - e_new  # NaN/Inf proposals: rejected
            if ok:
                theta[:, idx] += step
                e_cur = e_new
                accept[b] = True
            if self._incremental is not None:
                self._incremental.commit(True if defect else ok)  # defect: its caches follow the proposal vector
        return theta.new_tensor([e_cur]), torch.tensor([accept])

    def _mala_sweep(self, theta, energy, grad, noise, sd, log_u, oracle, inverse_mass=None):
        """Gradient-informed block moves: θ'_b ~ N(θ_b − (σ²/2)∇_bU, σ² I), with the reverse
        proposal in the acceptance ratio; with a diagonal ``inverse_mass`` M ``[C, P]``,
        θ'_b ~ N(θ_b − (σ²/2)M_b∇_bU, σ² M_b). Returns the energy, the acceptances and the
        gradient at the final state."""
        accept = torch.empty(log_u.shape, dtype=torch.bool, device=theta.device)
        for b, idx in enumerate(self._index):
            current, z = theta[:, idx], noise[:, idx]
            step_sd = sd[:, b : b + 1]
            var = step_sd.square()
            if inverse_mass is None:
                proposal = current - 0.5 * var * grad[:, idx] + step_sd * z
            else:
                m = inverse_mass[:, idx]
                proposal = current - 0.5 * var * m * grad[:, idx] + step_sd * m.sqrt() * z
            trial = theta.clone()
            trial[:, idx] = proposal
            energy_new, grad_new = oracle.value_and_grad(trial)
            if inverse_mass is None:
                mean_rev = proposal - 0.5 * var * grad_new[:, idx]
                # log q(θ|θ') − log q(θ'|θ), both N(mean, σ² I); the forward residual is σz
                log_q = 0.5 * z.square().sum(1) - 0.5 * (current - mean_rev).square().sum(1) / var[:, 0]
            else:  # both N(mean, σ² M_b): the forward residual is σ M_b^{1/2} z (the determinants cancel)
                mean_rev = proposal - 0.5 * var * m * grad_new[:, idx]
                log_q = 0.5 * z.square().sum(1) - 0.5 * ((current - mean_rev).square() / m).sum(1) / var[:, 0]
            ok = (log_u[:, b] < energy - energy_new + log_q) & torch.isfinite(energy_new)
            accept[:, b] = ok
            theta[:, idx] = torch.where(ok.unsqueeze(1), proposal, current)
            energy = torch.where(ok, energy_new, energy)
            grad = torch.where(ok.unsqueeze(1), grad_new, grad)
        return energy, accept, grad

    # -- bookkeeping -------------------------------------------------------------------------------
    def _per_layer(self, accept: Tensor) -> Tensor:
        """Mean over each layer's blocks: ``[..., M]`` -> ``[..., L]`` (float64)."""
        layer = self._layer.to(accept.device)
        sums = torch.zeros(*accept.shape[:-1], self._num_layers, dtype=torch.float64, device=accept.device)
        return sums.index_add_(-1, layer, accept.to(torch.float64)) / self._layer_size.to(accept.device)

    def _adapt_groups(self, log_sd: Tensor) -> Tensor:
        """log σ per adaptation group: ``[C, L]`` (by layer: all blocks of a layer share it) or ``[C, M]``."""
        assert self.adapt is not None  # called only with adaptation
        if self.adapt.by == "block":
            return log_sd
        return log_sd[:, self._first_of_layer.to(log_sd.device)]

    def _adapt(self, state: MWGState, accept: Tensor) -> None:
        assert self.adapt is not None  # called only with adaptation
        rate = self.adapt.rate * (state.step + 1) ** (-self.adapt.decay)
        acc = accept.to(torch.float64).mean(0)  # [M], pooled over chains
        if self.adapt.by == "layer":
            acc = self._per_layer(acc)[self._layer.to(acc.device)]
        state.log_sd.add_((rate * (acc - self.adapt.target)).to(state.log_sd.dtype))
