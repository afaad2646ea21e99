r"""Structured energies (Alexos, Boyd & Mandt 2022): S-SGMCMC and Sd-SGMCMC.

Both are energies in the sense of :mod:`structmc.energy`, so any sampler and gradient
estimator runs on them unchanged.

S-SGMCMC (their eq. 5–6): with a partition into M groups and θ̃ drawn from the chain's own
history — an independent past time for every group of every copy —

.. math:: \hat U^{(S)}(\theta) = \sum_{i=1}^{M} \hat U(\{\theta_i, \tilde\theta^{(i)}_{-i}\})

whose gradient w.r.t. θ_i comes from copy i only. Its stationary law approximates the
optimal block mean-field posterior q = Π_i q_i of their Theorem 1 (q_i ∝ exp(−E_{q_{−i}} U)).

Sd-SGMCMC (their eq. 7 / 16): K random masks r_k ∈ [0, 1]^M per step,

.. math:: \hat U^{(S_d)}(\theta) = \frac{M}{K\,\mathbb E[\sum_i r_i]}\sum_{k=1}^{K}
          \hat U(r_k\theta + (1-r_k)\tilde\theta^{(k)})

with r ~ Bernoulli(ρ) (optionally conditioned on at least one selected group, the paper's
Appendix D), Uniform(0, 1) or Beta(a, b). ρ → 1 recovers Û, ρ → 0 recovers Û^(S) (Theorem 3).
The scale uses the exact E[Σr] of each mask law (Mρ, Mρ/(1−(1−ρ)^M), M/2, Ma/(a+b)); the
reference code's 1/(Kρ) for Uniform/Beta masks is a bug we do not copy.

The K (or M) model evaluations of a step run as one batched evaluation of the base energy
over ``C·K`` mixed parameter vectors (``vmap`` for modules), in chunks of
``max_copies_per_call`` copies when memory is short.

Split batch (``split_batch=True``, beyond the paper): by default every copy is evaluated on
the chain's whole minibatch of n rows, so a step costs K model evaluations on n points. With
``split_batch`` the minibatch is cut into K disjoint contiguous slices of n/K rows and copy k
sees slice k (a view ``[C, n, ...] -> [C·K, n/K, ...]``, no copy and no random numbers: the
batch is already in random order). The base energy scales each slice by N/(n/K) and adds the
prior once per copy, so each copy is still an unbiased estimate of U at its mixed parameter
and E[Û^(Sd)] is unchanged; the model evaluations of a step cost about one base evaluation on
n points for any K (drawing θ̃ and mixing still cost O(K·P)). The price is noise: each copy's likelihood term has ~K times the variance (the README's "Split
batch" section says when it pays). n must be divisible by K
(:meth:`StructuredEnergy.check_batch_size`).

History (the :class:`~structmc.energy.StatefulEnergy` protocol): the run loop works on a
``fresh()`` copy, calls ``start(theta0)`` (stores the initial position) and ``observe(theta)``
after every iteration. The energy draws θ̃ and masks from its own
``torch.Generator`` (``seed``), so the base sampler's random stream is untouched: with M = 1
or ρ = 1 the chain equals the base sampler's chain for the same seed. ``warmup_steps``
iterations use the base energy (the reference code's plain-sampler first epoch).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import TypedDict

import torch
from torch import Tensor

from .. import fingerprint
from ..energy import Batch, Energy, WrappedEnergy
from ..partitions import Partition
from ..schedules import check_int
from .copies import _repeat_chains, _split_chains
from .history import ChainHistory
from .masks import MASK_KEYS, BernoulliMask, BetaMask, UniformMask, make_mask  # noqa: F401
from .optimum import structured_optimum_gaussian

# the mask laws are defined in structmc.structured.masks, and the Gaussian optimum in .optimum;
# their home stays this module, where the fingerprints of runs name them and pickles
# (checkpoints, process executors) find them
for _obj in (BernoulliMask, UniformMask, BetaMask, make_mask, structured_optimum_gaussian):
    _obj.__module__ = __name__
del _obj


class _State(TypedDict):
    generator: torch.Generator | None  # θ̃/mask generator (None until start)
    steps: int  # iterations observed


# ---------------------------------------------------------------------------------------
# the energy
# ---------------------------------------------------------------------------------------
class StructuredEnergy(WrappedEnergy):
    """S-SGMCMC (``mask=None``: M copies with identity masks) or Sd-SGMCMC (``mask`` and
    ``num_copies`` K) on top of any base energy.

    ``history``: a :class:`ChainHistory` or its capacity (a window of that many past samples).
    ``max_copies_per_call``: evaluate the copies in chunks of at most this many (memory).
    ``seed``: the θ̃/mask generator's seed (separate from the run's). ``warmup_steps``:
    iterations that use the base energy before the structured one takes over.

    ``split_batch`` (default ``False``; beyond the paper): copy k sees only the k-th of K
    contiguous slices of n/K rows of the chain's minibatch instead of all n rows, so the K
    copies' model evaluations (M for S-SGMCMC) cost about one base evaluation on n points
    instead of K (θ̃ draws and mixing still cost O(K·P)). Each copy
    stays unbiased (its likelihood is scaled by N/(n/K) by the base energy, the prior counted
    once per copy as without splitting), at the price of ~K times the minibatch-noise variance
    per copy. Needs a base energy that applies the N/n scaling itself (``requires_data``),
    real minibatches whose size n is divisible by the number of copies, in random order
    (``check_batch_size`` refuses the full data set and stratified batches), and no random
    numbers: the θ̃/mask stream is the same as without splitting. With ``False`` the chains
    are exactly those of the per-copy full-minibatch estimator.
    """

    def __init__(
        self,
        base: Energy,
        partition: Partition,
        history: ChainHistory | int = 1000,
        *,
        mask=None,
        num_copies: int | None = None,
        max_copies_per_call: int | None = None,
        seed: int = 0,
        warmup_steps: int = 0,
        split_batch: bool = False,
    ):
        if not isinstance(split_batch, bool):
            raise TypeError(f"split_batch must be True or False, got {split_batch!r} ({type(split_batch).__name__})")
        partition.check_space(base.space)
        if split_batch and not base.requires_data:
            raise ValueError(
                f"split_batch=True splits each minibatch between the copies, but the base energy "
                f"({type(base).__name__}) has no likelihood that it scales by N/n itself "
                f"(requires_data is False: a full-batch energy or an opaque log density): there is "
                f"nothing it could rescale per slice. Use split_batch=False, or a ModuleEnergy / "
                f"LogDensityEnergy(log_likelihood=..., log_prior=...)."
            )
        if isinstance(history, int) and not isinstance(history, bool):
            history = ChainHistory(history)
        elif not isinstance(history, ChainHistory):
            raise TypeError(f"history must be a ChainHistory or an integer capacity, got {history!r}")
        if mask is None and num_copies is not None:
            raise ValueError("num_copies applies to Sd-SGMCMC (give a mask); S-SGMCMC uses M copies")
        if mask is not None and (num_copies is None or check_int("num_copies", num_copies) < 1):
            raise ValueError("Sd-SGMCMC needs num_copies K >= 1")
        if max_copies_per_call is not None and check_int("max_copies_per_call", max_copies_per_call) < 1:
            raise ValueError("max_copies_per_call must be >= 1")
        if check_int("warmup_steps", warmup_steps) < 0:
            raise ValueError("warmup_steps must be >= 0")
        check_int("seed", seed)
        super().__init__(base)
        self.partition, self.history, self.mask = partition, history, mask
        self.num_copies = partition.num_groups if num_copies is None else int(num_copies)  # None iff mask is None
        self.max_copies_per_call = self.num_copies if max_copies_per_call is None else int(max_copies_per_call)
        self.seed, self.warmup_steps = int(seed), int(warmup_steps)
        self.split_batch = split_batch
        M = partition.num_groups
        self.scale = 1.0 if mask is None else M / (self.num_copies * mask.mean_sum(M))
        self._state: _State = {"generator": None, "steps": 0}
        self._drawn: list | None = None  # the next evaluation's random numbers, drawn before a compiled step

    compilable = True  # with its random numbers drawn before the graph (draw_for_step / use_draws)

    # -- energy protocol ---------------------------------------------------------------------
    # WrappedEnergy declares the pass-throughs (space, num_data, requires_data, device, dtype,
    # per-chain buffers): what the base can do for the *structured* energy. The base's Hessian
    # diagonal and reference paths are not the structured energy's, so they are absent
    # (pSGLD's include_gamma raises a clear error on a structured energy).
    @property
    def cv_base(self) -> Energy:
        """The energy a control variate evaluates at its centre (see ControlVariate)."""
        return self.base

    @property
    def predictive_energy(self):
        """The energy that predicts from this energy's draws (see :class:`~structmc.energy.Energy`):
        the base's. The structured energy only changes how the chain moves; its draws are draws
        of the base model's parameters (same space), so predictions are the base model's."""
        return getattr(self.base, "predictive_energy", None)  # optional on a user's base energy

    @property
    def evaluations_per_call(self) -> int:
        """Base-model evaluations per call, in evaluations on the chain's n-row minibatch: the K
        (or M) copies, 1 during warm-up, and 1 with ``split_batch`` (K copies on n/K rows each)."""
        if self._state["steps"] < self.warmup_steps or self.split_batch:
            return 1
        return self.num_copies

    def config(self) -> dict:
        """The settings that define the structured target and its chain (JSON-friendly), for
        reports and resume checks."""
        mask = None
        if self.mask is not None:
            mask = {"law": type(self.mask).__name__, **dataclasses.asdict(self.mask)}
        h = self.history
        return {
            "kind": "S-SGMCMC" if self.mask is None else "Sd-SGMCMC",
            "num_groups": self.partition.num_groups,
            "num_copies": self.num_copies,
            "mask": mask,
            "split_batch": self.split_batch,
            "history": {
                "capacity": h.capacity,
                "mode": h.mode,
                "thin": h.thin,
                "dtype": None if h.storage_dtype is None else str(h.storage_dtype),
            },
            "seed": self.seed,
            "warmup_steps": self.warmup_steps,
        }

    def describe(self) -> dict:
        """Kind, ``num_data``, the partition (its group ids hashed), :meth:`config` as
        ``structured`` and the base's description."""
        ids = self.partition.group_ids
        partition = {
            "num_groups": int(self.partition.num_groups),
            "group_ids": fingerprint.tensor_digest(ids) if isinstance(ids, Tensor) else None,
        }
        structured = json.loads(json.dumps(self.config(), default=str))
        return {
            "kind": type(self).__name__,
            "num_data": self.num_data,
            "partition": partition,
            "structured": structured,
            "base": self.base.describe(),
        }

    def describe_v1(self) -> dict:
        """Version 1: the number of groups, a strided digest of the group ids, :meth:`config`."""
        ids = self.partition.group_ids
        return {
            "partition": {
                "num_groups": int(self.partition.num_groups),
                "group_ids": fingerprint.legacy_tensor_fingerprint(ids) if isinstance(ids, Tensor) else None,
            },
            "structured": self.config(),
        }

    def check(self, data=None, init=None, batch_size=None, batching=None, *, num_points=None) -> None:
        """:meth:`check_batch_size` (``num_points``: the data's length), then the base's checks."""
        self.check_batch_size(batch_size, batching, num_points)
        self.base.check(data, init, batch_size, batching, num_points=num_points)

    def check_batch_size(
        self, batch_size: int | None, batching: str | None = None, num_data: int | None = None
    ) -> None:
        """Refuse, before any compute, a minibatch that ``split_batch=True`` cannot split
        honestly (does nothing when ``split_batch`` is ``False``): ``batch_size=None`` (the
        full data, fed in a fixed order, so copy k would see the same rows at every step),
        a ``batch_size`` equal to the number of data points ``num_data`` (default: the
        energy's N) except with ``batching="with_replacement"``, ``batching="stratified"``
        (rows come grouped by class, so a slice is not a uniform subset), and a size n not
        divisible by the number of copies K (``ValueError`` naming n and K)."""
        if not self.split_batch:
            return
        K = self.num_copies
        if batch_size is None:
            raise ValueError(
                f"split_batch=True needs minibatches (batch_size=n, n divisible by K = {K}): with the "
                f"full data (batch_size=None) every copy would see the same fixed block of rows at every "
                f"step, a biased estimate per copy"
            )
        n = check_int("batch_size", batch_size, 1)
        if batching == "stratified":
            raise ValueError(
                "split_batch=True needs minibatches in random order; stratified batches come grouped by "
                "class, so a contiguous slice is not a uniform subset (use batching='epoch', "
                "'without_replacement' or 'with_replacement')"
            )
        N = self.num_data if num_data is None else num_data
        if N is not None and n >= N and batching != "with_replacement":
            raise ValueError(
                f"split_batch=True needs minibatches: batch_size={n} is the whole data set (N = {N}), "
                f"fed in a fixed order, so copy k would see the same block of rows at every step"
            )
        self._check_divisible(n)

    def _check_divisible(self, n: int) -> None:
        K = self.num_copies
        if n % K:
            lo, hi = (n // K) * K, (n // K + 1) * K
            sizes = f"batch_size={lo} or {hi}" if lo else f"batch_size={hi}"
            raise ValueError(
                f"split_batch=True splits each minibatch of n = {n} rows into K = {K} slices (one per "
                f"copy): n must be divisible by K, and {n} is not (e.g. {sizes})"
            )

    def initial_position(self) -> Tensor:
        """The base energy's initial position (an optional member of a base energy)."""
        return getattr(self.base, "initial_position")()  # noqa: B009  (not an Energy member: typed by lookup)

    def with_base(self, base: Energy) -> StructuredEnergy:
        """A :meth:`fresh` copy around ``base`` (``with_num_data`` rebuilds it around
        ``base.with_num_data(N)``)."""
        new = self.fresh()
        new.base = base
        return new

    def fresh(self) -> StructuredEnergy:
        """A copy with its own, empty history and generator (nothing shared with ``self``)."""
        new = copy.copy(self)
        new.history = self.history.empty_copy()
        new._state = {"generator": None, "steps": 0}
        return new

    def value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return self._evaluate(theta, batch, grad=True)

    def value(self, theta: Tensor, batch: Batch) -> Tensor:
        return self._evaluate(theta, batch, grad=False)[0]

    # -- state across iterations (StatefulEnergy) ---------------------------------------------
    def start(self, theta0: Tensor) -> None:
        check_copy_memory(self.num_copies, self.max_copies_per_call, self.partition.num_groups, theta0)
        self._state["generator"] = torch.Generator(device=theta0.device).manual_seed(self.seed)
        self._state["steps"] = 0
        self.history.reset(theta0, self.partition.group_ids)

    def observe(self, theta: Tensor) -> None:
        self._state["steps"] += 1
        self.history.push(theta, self._state["generator"])

    def state_dict(self) -> dict:
        generator = self._state["generator"]
        assert generator is not None, "StructuredEnergy.start(theta0) must be called first"
        return {"history": self.history.state_dict(), "generator": generator.get_state(), "steps": self._state["steps"]}

    def load_state_dict(self, state: dict, device=None) -> None:
        self._state["generator"] = generator = torch.Generator(device=device or "cpu")
        generator.set_state(state["generator"])
        self._state["steps"] = state["steps"]
        self.history.load_state_dict(state["history"], device)

    # -- random numbers drawn before a compiled step (structmc.compiled) ------------------------
    def draw_for_step(self, num_chains: int, dtype: torch.dtype, device) -> list | None:
        """The random numbers of one evaluation, in the order :meth:`_evaluate` draws them from
        this energy's generator (per chunk of copies: the masks, then the past times), or
        ``None`` during the warm-up (the base energy draws nothing)."""
        if not self.draws_next():
            return None
        generator = self._state["generator"]
        M, K = self.partition.num_groups, self.num_copies
        out = []
        for k0 in range(0, K, self.max_copies_per_call):
            k1 = min(K, k0 + self.max_copies_per_call)
            masks = self._copy_masks(num_chains, k0, k1, dtype, device, generator)
            out.append((masks, self.history.draw_times(k1 - k0, M, generator)))
        return out

    def draws_next(self) -> bool:
        """Whether the next evaluation draws θ̃ and masks (``False`` during the warm-up)."""
        return self._state["steps"] >= self.warmup_steps

    def use_draws(self, drawn: list | None) -> None:
        """The next evaluation takes ``drawn`` (:meth:`draw_for_step`) instead of drawing."""
        self._drawn = drawn

    # -- evaluation ---------------------------------------------------------------------------
    def _copy_masks(self, C: int, k0: int, k1: int, dtype, device, generator) -> Tensor:
        """Group-level masks ``[C, k, M]`` for copies k0..k1."""
        M = self.partition.num_groups
        if self.mask is None:  # copy m keeps group m live
            eye = torch.zeros(k1 - k0, M, dtype=dtype, device=device)
            eye[torch.arange(k1 - k0), torch.arange(k0, k1)] = 1
            return eye.expand(C, -1, -1)
        return self.mask.sample((C, k1 - k0, M), generator, dtype, device)

    def _split_rows(self, batch: Batch) -> None:
        """The lazy form of :meth:`check_batch_size` on an actual minibatch ``[C, n, ...]``."""
        if batch is None:
            raise ValueError(
                "split_batch=True needs a minibatch to split between the copies, got batch=None "
                "(pass data=(...) and a batch_size divisible by the number of copies)"
            )
        sizes = {int(t.shape[1]) for t in batch}
        if len(sizes) != 1:
            raise ValueError(f"split_batch=True: the batch tensors have different row counts {sorted(sizes)}")
        self._check_divisible(sizes.pop())

    def _evaluate(self, theta: Tensor, batch: Batch, grad: bool):
        generator = self._state["generator"]
        if generator is None:
            raise RuntimeError("StructuredEnergy.start(theta0) must be called first (structmc.sample does)")
        if self.split_batch:
            self._split_rows(batch)
        drawn, self._drawn = self._drawn, None
        if self._state["steps"] < self.warmup_steps:
            return self.base.value_and_grad(theta, batch) if grad else (self.base.value(theta, batch), None)
        C, P = theta.shape
        ids = self.partition.group_ids.to(theta.device)
        M, K = self.partition.num_groups, self.num_copies
        value = theta.new_zeros(C)
        total = torch.zeros_like(theta) if grad else None
        for chunk, k0 in enumerate(range(0, K, self.max_copies_per_call)):
            k1 = min(K, k0 + self.max_copies_per_call)
            k = k1 - k0
            if drawn is None:
                r = self._copy_masks(C, k0, k1, theta.dtype, theta.device, generator)[:, :, ids]  # [C, k, P]
                tilde = self.history.draw(k, ids, M, generator, theta.dtype)  # [C, k, P]
            else:  # a compiled step: drawn beforehand, in this order (draw_for_step)
                masks, times = drawn[chunk]
                r, tilde = masks[:, :, ids], self.history.gather(times, ids, theta.dtype)
            mixed = torch.addcmul(tilde, r, theta.unsqueeze(1) - tilde).reshape(C * k, P)
            if batch is None:
                rep = None
            elif self.split_batch:  # copy j sees rows [j·n/K, (j+1)·n/K) of its chain's batch
                rep = tuple(_split_chains(t, K, k0, k1) for t in batch)
            else:
                rep = tuple(_repeat_chains(t, k) for t in batch)
            if total is not None:  # grad
                u, g = self.base.value_and_grad(mixed, rep)
                total += (r * g.view(C, k, P)).sum(1)
            else:
                u = self.base.value(mixed, rep)
            value += u.view(C, k).sum(1)
        value *= self.scale
        if total is not None and self.scale != 1.0:
            total *= self.scale
        return value, total


#: float tensors of size C·k·P alive at once in one batched evaluation of k copies: masks r,
#: draws θ̃, θ − θ̃, the mixed vectors, the base energy's parameter leaves and gradients, r·g
#: (measured: 8–10 for a vmapped linear ModuleEnergy on the CPU; activations come on top)
COPY_TENSORS = 8
#: the share of the free memory one batched evaluation may take before :func:`check_copy_memory`
#: refuses it, and the size above which it warns where the free memory is unknown
MEMORY_SHARE, UNKNOWN_MEMORY_WARN = 0.8, 2 * 2**30


def available_memory(device: torch.device) -> int | None:
    """Free bytes on ``device``: the CUDA allocator's free memory, ``MemAvailable`` of
    /proc/meminfo on the CPU (Linux); ``None`` where unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        if device.type == "cpu":
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
    except (OSError, RuntimeError, ValueError):
        return None
    return None


def check_copy_memory(num_copies: int, per_call: int, num_groups: int, theta0: Tensor) -> None:
    """Before any compute: the mixed parameter vectors of ``per_call`` copies of C chains
    (about :data:`COPY_TENSORS` tensors of C·k·P elements) must fit in the free memory, else a
    ``ValueError`` names ``max_copies_per_call`` and the value that fits (the copies are then
    evaluated in chunks of that many). Where the free memory is unknown it warns above
    :data:`UNKNOWN_MEMORY_WARN` bytes."""
    C, P = theta0.shape
    k = min(per_call, num_copies)
    per_copy = COPY_TENSORS * C * P * theta0.element_size()
    need = per_copy * k
    free = available_memory(theta0.device)
    gib = lambda b: f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"
    what = (
        f"StructuredEnergy: one batched evaluation of {k} of its {num_copies} copies (M = {num_groups} groups) for "
        f"{C} chain(s) of P = {P} parameters holds about {COPY_TENSORS} x {C}·{k}·{P} values, {gib(need)} "
        f"(model activations on top)"
    )
    if free is None:
        if need > UNKNOWN_MEMORY_WARN:
            import warnings

            fit = max(1, int(UNKNOWN_MEMORY_WARN // per_copy))
            warnings.warn(
                f"{what}; if memory runs out, pass max_copies_per_call={fit} (about "
                f"{gib(UNKNOWN_MEMORY_WARN)} per call: the copies are evaluated in chunks)",
                stacklevel=4,
            )
        return
    limit = MEMORY_SHARE * free
    if need <= limit:
        return
    fit = int(limit // per_copy)
    if fit >= 1:
        raise ValueError(
            f"{what}, but {gib(free)} is free on {theta0.device}: pass max_copies_per_call={fit} (or "
            f"less) to evaluate the copies in chunks that fit ({gib(fit * per_copy)} each), or run fewer "
            f"chains"
        )
    raise ValueError(
        f"{what}, but {gib(free)} is free on {theta0.device}: even max_copies_per_call=1 needs "
        f"{gib(per_copy)}; run fewer chains (num_chains={C}) or a smaller model"
    )
