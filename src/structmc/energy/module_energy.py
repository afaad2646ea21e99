"""Energies from an ``nn.Module``: :class:`ModuleEnergy` (its evaluation paths are in
:mod:`structmc.energy.paths`)."""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .. import fingerprint
from ..energy_checks import _refuse_dropout, _refuse_meta, check_deterministic, check_module_data, probe
from ..likelihoods import Likelihood, make_likelihood
from ..module_binding import (
    bind_flat,
    buffer_chains,
    buffer_state,
    chain_buffers,
    check_input_keys,
    flat_data,
    load_buffer_state,
)
from ..space import ParamSpace
from .bases import EnergyBase, _as_num_data, _described
from .paths import _ModuleEvaluation
from .protocols import Batch

if TYPE_CHECKING:
    from ..priors.prior import Prior


def _select_sampled(module: nn.Module, sample) -> None:
    """Sample only the parameters ``sample`` selects (a name pattern, a list of patterns, or a
    predicate ``(name, parameter) -> bool``); the others get ``requires_grad=False`` and stay
    fixed at their values (no gradient memory, no place in θ)."""
    names = [n for n, _ in module.named_parameters()]
    if callable(sample):
        chosen = {n for n, p in module.named_parameters() if sample(n, p)}
        what = "the predicate"
    else:
        patterns = [sample] if isinstance(sample, str) else list(sample)
        if not patterns or not all(isinstance(p, str) for p in patterns):
            raise TypeError(f"sample must be a name pattern, a list of patterns or a predicate, got {sample!r}")
        unused = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
        if unused:
            raise ValueError(
                f"sample pattern(s) {unused} select no parameter; the parameters are: "
                f"{', '.join(names[:40])}{' ...' if len(names) > 40 else ''}"
            )
        chosen = {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
        what = f"sample={sample!r}"
    if not chosen:
        raise ValueError(f"{what} selects no parameter; the parameters are: {', '.join(names[:40])}")
    for n, p in module.named_parameters():
        p.requires_grad_(n in chosen)


class ModuleEnergy(EnergyBase, _ModuleEvaluation):
    r"""Energy of an ``nn.Module`` with a likelihood and a prior on its parameters.

    ``U(θ) = -(N/n) Σ_batch log p(y|x, θ) − log p(θ)`` (constants dropped).

    The prior is ``prior_std`` — a float or a ``{name pattern: σ}`` map (``{"*.bias": 10,
    "*": 1}``), the zero-mean Normal, 1 by default — or ``prior=``, any prior of
    :mod:`structmc.priors` (``Normal(loc=pretrained_state_dict, scale=0.1)``, ``Laplace``,
    ``StudentT``, ``ScaleMixtureNormal``, a ``{pattern: prior}`` map, or a callable log
    density on the flat vector); not both.

    ``sample`` (a name pattern such as ``"fc.*"``, a list of patterns, or a predicate
    ``(name, parameter) -> bool``) samples only the parameters it selects — e.g. the last
    layer of a pretrained network; the others stay fixed at their current values, on the
    module's device, with ``requires_grad=False`` (no gradient memory). Without it every
    parameter with ``requires_grad=True`` is sampled. ``space``, partitions, Gibbs blocks and
    ``Chain`` names cover the sampled parameters only.
    The module is deep-copied; its parameters become views of one flat buffer so a single
    chain runs the module's own forward with no per-tensor work and the backward pass writes
    straight into one flat gradient. Several chains use ``vmap`` over
    ``torch.func.functional_call``. Modules with buffers (BatchNorm statistics) keep one set
    of buffers per chain and evaluate chains one after another; buffers are not sampled.
    ``chain_evaluation="loop"`` evaluates several chains (or the K copies of a structured
    energy) one after another in the same way, without ``vmap``: vmapped convolutions with one
    weight tensor per chain can be far slower on a GPU (measured on an H100: ResNet-20, K = 2,
    96 ms against about 20 ms a step, see docs/performance.md). The values agree to float
    rounding; the choice is not part of the run's fingerprint.
    The module is evaluated in the train/eval mode it was given in.

    Keyword inputs and structured outputs (e.g. a ``transformers`` model): ``input_keys=
    ("input_ids", "attention_mask")`` calls ``module(**{key: tensor})``; ``sm.sample``,
    :func:`~structmc.energy.full_data_value_and_grad`, ``check_data``, ``predictive``,
    ``PosteriorPredictive`` and ``evaluate`` then take the inputs as one dict of tensors
    ``(inputs_dict, targets)`` (or those tensors positionally, in ``input_keys`` order).
    Minibatches index every tensor of the dict with the same rows; a key missing or
    undeclared, or tensors with different numbers of rows, is a ``ValueError`` naming the key
    before any compute. ``output`` says what the likelihood reads from the module's output:
    ``None`` (default) takes a tensor as it is and the ``"logits"`` entry of a mapping output
    (a dict, or ``transformers``' ``ModelOutput``, an ``OrderedDict``); ``"key"`` another entry;
    a callable ``output(out) -> Tensor`` anything else. A forward that ``vmap`` refuses
    (transformers' attention masks branch on the data) evaluates several chains one after
    another, with a warning, as ``chain_evaluation="loop"`` does.
    """

    _prior_spec: Prior | None  # set by _set_prior (None: prior_std's Normal)
    _prior_precision: Tensor | None

    def __init__(
        self,
        module: nn.Module,
        likelihood: str | Likelihood | Callable = "categorical",
        *,
        prior_std: float | Mapping[str, float] | None = None,
        num_data: int | None = None,
        noise_std: float | None = None,
        prior=None,
        sample: str | Sequence[str] | Callable[[str, Tensor], bool] | None = None,
        chain_evaluation: str = "vmap",
        input_keys: str | Sequence[str] | None = None,
        output: str | Callable | None = None,
    ):
        _refuse_meta(module)
        self.input_keys = check_input_keys(input_keys)
        if output is not None and not (isinstance(output, str) or callable(output)):
            raise TypeError(f"output must be None, an entry name such as 'logits' or a callable, got {output!r}")
        self.output = output
        self._vmap_failed = False  # set when vmap refuses the forward: chains then run in a loop
        if chain_evaluation not in ("vmap", "loop"):
            raise ValueError(f"chain_evaluation must be 'vmap' or 'loop', got {chain_evaluation!r}")
        self.module = copy.deepcopy(module)
        for p in self.module.parameters():
            p.grad = None
        if sample is not None:
            _select_sampled(self.module, sample)
        self.sample_spec = sample
        self.space = ParamSpace.from_module(self.module)
        if self.space.dim == 0:
            raise ValueError("the module has no trainable parameters")
        self.likelihood = make_likelihood(likelihood, noise_std)
        self.num_data = _as_num_data(num_data)
        _refuse_dropout(self.module)
        # the first evaluation also checks, on a few rows, that the forward is deterministic
        self._randomness_checked = False
        if prior is not None and prior_std is not None:
            raise ValueError("give prior_std (the zero-mean Normal's σ) or prior=..., not both")
        if prior is None:
            prior_std = 1.0 if prior_std is None else prior_std
            stds = self.space.per_param_vector(prior_std)
            if not bool(torch.all(stds > 0)) or not bool(torch.all(torch.isfinite(stds))):
                raise ValueError("prior_std must be positive and finite")
        self.prior_std = prior_std
        self._has_buffers = any(True for _ in self.module.buffers())
        self.chain_evaluation = chain_evaluation
        self._hot_batch = None  # (batch, its chain-0 inputs, its chain-0 target): views made once
        # per-chain buffer copies (BatchNorm statistics) of the last multi-chain evaluation
        self._buffer_store: dict[str, list[dict[str, Tensor]]] = {}
        ref = next(p for p in self.module.parameters() if p.requires_grad)
        self._set_prior(prior, ref.detach(), stds if prior is None else None)
        self._bind()
        self._initial = self._flat.detach().clone()

    # -- set-up ----------------------------------------------------------------------------
    def _bind(self) -> None:
        """Make the module's parameters views of one flat vector and one flat gradient."""
        self._flat, self._grad = bind_flat(self.module, self.space)

    def to(self, device=None, dtype=None) -> ModuleEnergy:
        """Move the module (and the flat buffers) in place; returns self."""
        self.module.to(device=device, dtype=dtype)
        self.prior = self.prior.to(device=device, dtype=dtype)
        if self._prior_precision is not None:
            self._prior_precision = self._prior_precision.to(device=device, dtype=dtype)
        self._buffer_store.clear()
        self._bind()
        self._initial = self._initial.to(self._flat)
        return self

    evaluations_per_call = 1
    requires_data = True

    def __getstate__(self):  # copies and pickles do not carry the last run's batch views
        return {**self.__dict__, "_hot_batch": None}

    def __copy__(self):
        # a shallow copy shares the module and its binding: pickle's and deepcopy's path
        # (__setstate__ binds again) would make the shared module's parameters views of a new flat
        # vector, and this energy's flat vector and gradient would no longer be its parameters (the
        # caller's energy, after sample() took its copy, returned the prior's gradient alone)
        new = object.__new__(type(self))
        new.__dict__.update(self.__getstate__())
        return new

    def __setstate__(self, state):
        # pickle and deepcopy rebuild each parameter as its own tensor: they no longer alias
        # the flat vector and flat gradient, so the one-chain path would copy θ into a buffer
        # the forward never reads and return the prior's gradient alone. Bind them again.
        self.__dict__.update(state)
        self.__dict__.setdefault("chain_evaluation", "vmap")  # pickled before the option existed
        for name, default in (("input_keys", None), ("output", None), ("_vmap_failed", False)):
            self.__dict__.setdefault(name, default)  # pickled before keyword inputs existed
        if self._prior_spec is None and not self.prior._fused:  # pickled before the fused forms moved
            self.prior.fuse()  # into the bound Normal (issue 23): the same rounding as when it was written
        self._bind()

    def with_num_data(self, num_data):
        """A copy with N = ``num_data``. The copy owns its module, flat buffers and per-chain
        buffer store, so the two can run at the same time (threads) without sharing state."""
        num_data = _as_num_data(num_data)
        new = copy.copy(self)
        new.num_data = num_data
        new.module = copy.deepcopy(self.module)
        new._buffer_store = {}
        new._bind()
        return new

    @property
    def cv_base(self) -> ModuleEnergy:
        return self

    @property
    def device(self) -> torch.device:
        return self._flat.device

    @property
    def dtype(self) -> torch.dtype:
        return self._flat.dtype

    def _set_prior(self, prior, like: Tensor, stds: Tensor | None = None) -> None:
        """Bind ``prior`` (``None``: the zero-mean Normal with standard deviations ``stds``, in
        its fused forms: :meth:`structmc.priors._BoundNormal.fuse`)."""
        from ..priors.families import _BoundNormal
        from ..priors.prior import as_prior

        if prior is None:
            assert stds is not None  # __init__ passes prior_std's σ; with_prior refuses None
            self._prior_spec = None
            stds = stds.to(like)
            self.prior = _BoundNormal(torch.zeros_like(stds), stds, fused=True)
        else:
            self._prior_spec = as_prior(prior)
            self.prior = self._prior_spec.bind(self.space, like)
        self._prior_precision = getattr(self.prior, "precision", None)

    def with_prior(self, prior) -> ModuleEnergy:
        """A copy with another prior (any of :mod:`structmc.priors`); the module, likelihood,
        ``num_data`` and sampled parameters are shared."""
        if prior is None:
            raise TypeError(
                "with_prior takes a prior (any of structmc.priors, e.g. Normal(scale=1.0)), got None; "
                "for the zero-mean Normal of prior_std build ModuleEnergy(..., prior_std=σ)"
            )
        new = copy.copy(self)
        new._set_prior(prior, self._flat.detach())
        new.prior_std = None
        new._hot_batch = None
        return new

    def initial_position(
        self, source: str = "module", *, generator: torch.Generator | None = None, num_chains: int | None = None
    ) -> Tensor:
        """``"module"``: the module's parameters at construction, a flat ``[P]`` vector.
        ``"prior"``: a draw from the prior with ``generator`` (``[P]``, or ``[num_chains, P]``
        — one per chain)."""
        if source == "module":
            return self._initial.clone() if num_chains is None else self._initial.expand(num_chains, -1).clone()
        if source == "prior":
            shape = () if num_chains is None else (int(num_chains),)
            return self.prior.sample(generator, shape).to(self._initial)
        raise ValueError(f"initial_position takes 'module' or 'prior', got {source!r}")

    @property
    def prior_precision(self) -> Tensor:
        """1/σ² per parameter ``[P]`` (read-only); a Normal prior's only."""
        if self._prior_precision is None:
            assert self._prior_spec is not None  # prior_std's Normal has a precision
            raise ValueError(
                f"prior_precision is defined for a Normal prior; this energy's prior is "
                f"{self._prior_spec.describe()['kind']} (see energy.prior: its grad and curvature)"
            )
        return self._prior_precision

    @property
    def prior_spec(self):
        """The prior as given (``prior=`` or :meth:`with_prior`, as a :mod:`structmc.priors`
        prior), or ``None`` for ``prior_std``'s zero-mean Normal (read-only)."""
        return self._prior_spec

    def check_init(self, theta: Tensor) -> None:
        """``ValueError`` (before any compute) when an initial position ``[C, P]`` lies outside
        the prior's support."""
        if self._prior_spec is not None:
            self.prior.check_support(theta, self._coordinate_name)

    def check(
        self,
        data: Sequence[Tensor] | None = None,
        init: Tensor | None = None,
        batch_size: int | None = None,
        batching: str | None = None,
        *,
        num_points: int | None = None,
    ) -> None:
        """:meth:`check_data` on ``data`` (its errors carry ``about_data = True``: the run loop
        says when they concern a Dataset's items), then :meth:`check_init` on ``init``."""
        if data is not None:
            try:
                self.check_data(self.flat_data(data))
            except (ValueError, TypeError) as err:
                setattr(err, "about_data", True)  # noqa: B010  (an attribute the built-in errors do not declare)
                raise
        if init is not None:
            self.check_init(init)

    def describe(self) -> dict:
        """Kind, ``num_data`` and fingerprints (:mod:`structmc.fingerprint`) of the module's
        structure and code (``module``), its buffers and frozen parameters (``module_state``; the
        sampled ones are the chain's state), the likelihood and the prior (every tensor it holds)."""
        module, state, unchecked = fingerprint.module_fingerprint(self.module, {i.name for i in self.space.params})
        parts = {"module": module, "module_state": state}
        if self.input_keys is not None or self.output is not None:  # other energies' fingerprints unchanged
            parts["call"], missing = fingerprint.value_fingerprint(
                {"input_keys": self.input_keys, "output": self.output}, "the module's call"
            )
            unchecked += missing
        for key, obj, label in (
            ("likelihood", self.likelihood, "the likelihood"),
            ("prior", {"prior_std": self.prior_std, "spec": self._prior_spec, "bound": self.prior}, "the prior"),
        ):
            parts[key], missing = fingerprint.value_fingerprint(obj, label)
            unchecked += missing
        return _described(self, parts, unchecked)

    def describe_v1(self) -> dict:
        """Version 1: ``prior_std``, the sum of the prior precision (a Normal prior), the prior's
        own description, and the likelihood's name and noise."""
        try:
            prec = self.prior_precision
        except ValueError:  # not a Normal prior
            prec = None
        prior = {
            "prior_std": repr(self.prior_std),
            "precision_sum": float(prec.double().sum()) if isinstance(prec, Tensor) else None,
        }
        if self.prior_spec is not None:
            prior["prior"] = fingerprint.json_text(self.prior_spec.describe())
        return {"prior": prior, "likelihood": {"name": self.likelihood.name, "noise_std": self.likelihood.noise_std}}

    def _coordinate_name(self, j: int) -> str:
        for info in self.space.params:
            if info.offset <= j < info.offset + info.numel:
                return f"parameter {info.name!r} entry {j - info.offset}"
        return f"coordinate {j}"

    def scale(self, batch: Batch) -> float:
        """The likelihood's weight on ``batch``: N/n, or 1 when ``num_data`` is ``None``."""
        if batch is None:
            raise ValueError("a module energy needs data: pass data=(inputs..., targets)")
        n = batch[-1].shape[1]
        return 1.0 if self.num_data is None else self.num_data / n

    def prior_energy(self, theta: Tensor) -> Tensor:
        """−log p(θ) per chain ``[C]`` (constants dropped): ½ Σ θ²/σ² for ``prior_std``'s
        Normal (one fused op when all σ are equal)."""
        return self.prior.energy(theta)

    def _add_prior_grad(self, lik_grad: Tensor, theta: Tensor) -> Tensor:
        """A new tensor ∇(-log-lik) + ∇(−log p) (θ/σ² for ``prior_std``'s Normal, one fused op)."""
        return self.prior.add_grad(lik_grad, theta)

    # -- checks -----------------------------------------------------------------------------
    def _probe(self, inputs: Sequence[Tensor], rows: int = 4) -> Tensor:
        """The module's output on the first ``rows`` rows of ``inputs`` (no chain dimension), at
        the current parameters, buffers copied, no gradient (:func:`structmc.energy_checks.probe`)."""
        return probe(self, inputs, rows)

    def _check_deterministic(self, inputs: Sequence[Tensor]) -> None:
        """Refuse a module whose forward draws random numbers (checked once, at the first
        evaluation, and by :meth:`check_data`; :func:`structmc.energy_checks.check_deterministic`)."""
        check_deterministic(self, inputs)

    def check_data(self, data: Sequence[Tensor]) -> None:
        """Check ``data = (inputs..., target)`` (no chain dimension) against the module and the
        likelihood before any compute; raises ``ValueError`` saying what to convert.

        Feature dtypes against the parameters'; one forward on ≤ 4 rows (input width vs the
        first layer); the output and target against the likelihood
        (:meth:`~structmc.likelihoods.Likelihood.check_output`, ``check_target``: categorical
        labels integer in [0, K) or soft labels, Bernoulli labels in {0, 1}, a target size per
        row matching the output's); no NaN/Inf in floating data; a deterministic forward
        (:func:`structmc.energy_checks.check_module_data`).
        """
        check_module_data(self, self.flat_data(data))

    def flat_data(self, data):
        """``(inputs_dict, targets)`` as the tensors the batches carry: the dict's tensors in
        ``input_keys`` order, then the targets (``ValueError`` for keys that are not
        ``input_keys``, or tensors with different numbers of rows, naming the key); other data as
        it is (:func:`structmc.module_binding.flat_data`)."""
        return flat_data(self.input_keys, data, "ModuleEnergy")

    def _check_target(self, out: Tensor, target: Tensor, rows: int) -> None:
        self.likelihood.check_target(out, target, rows)

    def value_and_grad(self, theta, batch):
        return self._evaluate(theta, batch, grad=True)

    def value(self, theta, batch):
        return self._evaluate(theta, batch, grad=False)[0]

    @property
    def has_buffers(self) -> bool:
        """Whether the module has buffers (e.g. BatchNorm running statistics), kept per chain."""
        return self._has_buffers

    # the compiled step (structmc.compiled) traces the functional_call paths: vmapped over chains,
    # or one chain with the module's own buffers (several chains' buffers are swapped from Python:
    # the compiled step refuses a module with buffers and several chains)
    compilable = True

    @property
    def buffer_chains(self) -> int | None:
        """Number of chains whose buffers are kept (the last multi-chain evaluation), or
        ``None`` when the module's own buffers are the only ones (no multi-chain run yet)."""
        return buffer_chains(self._buffer_store)

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        """Buffers (e.g. BatchNorm running statistics) of one chain of the last multi-chain run
        (the module's own buffers when there was none)."""
        return chain_buffers(self.module, self._buffer_store, chain)

    def buffer_state_dict(self) -> dict:
        """The module's buffers and each chain's (the last multi-chain evaluation), on the CPU:
        ``{"own": {name: tensor}, "chains": [{name: tensor}, ...] or None}``. A run's checkpoint
        holds it (``Run.state_dict()["buffers"]``): BatchNorm's running statistics move with the
        chain (train mode) and eval-mode predictions read them, so a resumed chain needs them."""
        if not self._has_buffers:
            raise ValueError("this ModuleEnergy's module has no buffers (has_buffers is False): nothing to save")
        return buffer_state(self.module, self._buffer_store)

    def load_buffer_state_dict(self, state: dict) -> None:
        """Restore :meth:`buffer_state_dict`'s ``state``: the module's buffers in place (on the
        module's device and dtype) and each chain's; ``ValueError`` when the buffer names differ."""
        if not self._has_buffers:
            raise ValueError("this ModuleEnergy's module has no buffers (has_buffers is False): nothing to restore")
        load_buffer_state(self.module, self._buffer_store, state)

    # -- prediction ---------------------------------------------------------------------------
    @property
    def predictive_energy(self) -> ModuleEnergy:
        """The energy whose model predicts from this energy's draws (see :class:`Energy`): itself."""
        return self
