"""Posterior predictive summaries over kept draws, batched over the test set."""

from __future__ import annotations

import copy
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from .chain import Chain
from .energy import Energy
from .energy_checks import _all_finite, _first_layer
from .likelihoods import Likelihood
from .module_binding import flat_inputs, keyword_call, read_output
from .space import ParamSpace


class Predictor(Protocol):
    """What :func:`predictive_energy` returns, the energy whose model predicts (see
    :class:`~structmc.energy.Energy`): a :class:`~structmc.energy.ModuleEnergy`, or an energy
    that predicts like one (a :class:`~structmc.priors.HierarchicalEnergy`)."""

    @property
    def space(self) -> ParamSpace: ...

    @property
    def device(self) -> torch.device | None: ...

    @property
    def likelihood(self) -> Likelihood: ...

    @property
    def module(self) -> nn.Module: ...

    @property
    def has_buffers(self) -> bool: ...

    @property
    def buffer_chains(self) -> int | None: ...

    def chain_buffers(self, chain: int) -> dict[str, Tensor]: ...

    def forward_draws(
        self,
        samples: Tensor,
        inputs: Sequence[Tensor],
        *,
        draws_per_call: int = 64,
        buffers: Mapping[str, Tensor] | None = None,
    ) -> Tensor: ...


def _check_draws_fit(energy: Predictor, draws: Chain | Tensor) -> None:
    """Refuse draws of another model: a :class:`Chain` records its parameter space (names and
    shapes), which must be the energy's; a tensor's last dimension must be the energy's P
    (``[S, P]``, ``[C, D, P]``). (Two models with the same parameter count would otherwise be read one through
    the other without any error.)"""
    P = energy.space.dim
    if isinstance(draws, Chain):
        have = [(i.name, tuple(i.shape)) for i in draws.space.params]
        want = [(i.name, tuple(i.shape)) for i in energy.space.params]
        if have != want:
            diff = next(((a, b) for a, b in zip(have, want) if a != b), None)
            where = (
                f"the chain's {diff[0][0]!r} {list(diff[0][1])} vs the energy's {diff[1][0]!r} {list(diff[1][1])}"
                if diff is not None
                else f"the chain has {len(have)} parameter tensors, the energy {len(want)}"
            )
            raise ValueError(
                f"draws: the chain was drawn for another model ({draws.space.dim} parameters in "
                f"{len(have)} tensors) than the energy's ({P} in {len(want)}); first difference: {where}. "
                "Pass the energy of the model that made the chain (same architecture, same sample= "
                "selection), e.g. Run.energy"
            )
        samples = draws.samples
    elif isinstance(draws, Tensor):
        samples = draws
    else:
        raise TypeError(f"draws must be a Chain or a tensor [S, P] / [C, D, P], got {type(draws).__name__}")
    if samples.dim() == 0 or samples.shape[-1] != P:  # [S, P'] with S·P' a multiple of P would reshape silently
        raise ValueError(
            f"draws must be [S, {P}] or [C, D, {P}] (the energy's model has P = {P} parameters), got "
            f"{list(samples.shape)}: pass draws of this model"
        )


def _finite_draws(samples: Tensor) -> None:
    """Refuse draws holding NaN or Inf (a chain that diverged): every prediction through them
    would be NaN, averaged into the rest. Names how many and the first, in the draws' layout."""
    if _all_finite(samples):
        return
    bad = ~torch.isfinite(samples).all(-1)  # [S] or [C, D]
    first = [int(i) for i in bad.nonzero()[0]]
    where = f"chain {first[0]}, draw {first[1]}" if len(first) == 2 else f"draw {first[0]}"
    raise ValueError(
        f"draws: {int(bad.sum())} of {bad.numel()} draws hold NaN or Inf (the first: {where}); the "
        "predictions through them would be NaN. Pass the finite draws only (a chain that diverged: "
        "the draws before it did, or rerun with a smaller step size)"
    )


def _finite_rows(x: Tensor, name: str, offset: int = 0) -> None:
    """Refuse a floating tensor ``[n, ...]`` with NaN/Inf values, naming the rows."""
    if not x.is_floating_point() or _all_finite(x):
        return
    rows = (~torch.isfinite(x)).reshape(x.shape[0], -1).any(1).nonzero().flatten()
    raise ValueError(
        f"{name} has NaN or Inf values in {rows.numel()} row(s) (the first: row {int(rows[0]) + offset}): "
        "drop or impute those rows (a NaN row would be predicted as NaN and miscounted in the metrics)"
    )


def _check_inputs(model: Predictor, groups, inputs: Sequence[Tensor], who: str, target: Tensor | None = None) -> Tensor:
    """Before any compute, the checks :func:`structmc.sample` makes on its data: floating
    inputs (and target) without NaN/Inf, in the model's dtype; one forward of the first draw on
    ≤ 4 rows (the input width), its output (and ``target``) against the likelihood. Returns
    that output ``[rows, ...]``."""
    for i, x in enumerate(inputs):
        _finite_rows(x, f"{who}: input {i}")
    if target is not None:
        _finite_rows(target, f"{who}: the target")
    dtype = getattr(model, "dtype", None)
    for i, x in enumerate(inputs):
        if dtype is not None and x.is_floating_point() and x.dtype != dtype:
            raise ValueError(
                f"{who}: input {i} has dtype {x.dtype} but the model's parameters are {dtype}: convert the "
                f"features with x.to({dtype})"
            )
    samples, buffers = next((s, b) for s, b in groups if s.shape[0] > 0)
    rows = min(4, int(inputs[0].shape[0]))
    xs = tuple(t[:rows].to(model.device) for t in inputs)
    try:
        out = model.forward_draws(samples[:1], xs, draws_per_call=1, buffers=buffers)[0]
    except Exception as err:
        shapes = ", ".join(f"input {i}: {list(x.shape)} {x.dtype}" for i, x in enumerate(inputs))
        module = getattr(model, "module", None)
        first = _first_layer(module) if isinstance(module, torch.nn.Module) else ""
        raise ValueError(
            f"{who}: the model cannot run on the inputs ({shapes}; a forward on {rows} row(s) failed: {err}){first}"
        ) from err
    lik = model.likelihood
    lik.check_output(out, rows)
    if target is not None:
        lik.check_target(out, target, rows)
    return out


def _finite_predictions(values: Tensor, who: str, offset: int = 0) -> None:
    """Refuse NaN/Inf predictions from finite inputs and draws (the model overflows)."""
    if _all_finite(values):
        return
    rows = (~torch.isfinite(values)).reshape(values.shape[0], -1).any(1).nonzero().flatten()
    raise ValueError(
        f"{who}: the model's predictions are NaN or Inf for {rows.numel()} input(s) (the first: row "
        f"{int(rows[0]) + offset}) although the inputs and the draws are finite: the model overflows "
        "there (e.g. a float16/bfloat16 model, or draws far out in the tails); evaluate in float32 or "
        "check those draws"
    )


def predictive_energy(energy, who: str = "predictive") -> Predictor:
    """The energy whose model predicts from ``energy``'s draws: its declared
    ``predictive_energy`` (the one route; see :class:`~structmc.energy.Energy`). A
    :class:`ModuleEnergy` and a :class:`~structmc.priors.HierarchicalEnergy` are their own, a
    :class:`~structmc.structured.StructuredEnergy` predicts through its base's; an energy
    without one (a log density) is a ``TypeError`` naming ``who``."""
    found = getattr(energy, "predictive_energy", None)
    if found is None:
        raise TypeError(
            f"{who} needs a ModuleEnergy (or a HierarchicalEnergy, or a StructuredEnergy over one): "
            f"{type(energy).__name__} has no model that predicts (its predictive_energy is not set)"
        )
    return found


def _draw_groups(energy: Predictor, draws: Chain | Tensor, chain: int | None):
    """``[(samples [S, P], buffers or None)]``: one group per chain when the module has buffers
    (each chain's draws with that chain's own running statistics), else all draws pooled."""
    P = energy.space.dim
    _check_draws_fit(energy, draws)
    if isinstance(draws, Chain) and draws.buffers is not None and energy.has_buffers:
        # the chain carries its own buffers (sample() ran on a copy of the energy)
        if chain is not None:
            if not 0 <= chain < draws.num_chains:
                raise ValueError(f"draws have {draws.num_chains} chains; no chain {chain}")
            return [(draws.samples[chain], draws.buffers[chain])]
        return [(draws.samples[c], draws.buffers[c]) for c in range(draws.num_chains)]
    samples = draws.samples if isinstance(draws, Chain) else draws
    per_chain = samples.dim() == 3  # [C, D, P]
    if chain is not None:
        if per_chain:
            if not 0 <= chain < samples.shape[0]:
                raise ValueError(f"draws have {samples.shape[0]} chains; no chain {chain}")
            samples = samples[chain]
        samples = samples.reshape(-1, P)
        return [(samples, energy.chain_buffers(chain) if energy.has_buffers else None)]
    if not energy.has_buffers or not per_chain:
        if energy.has_buffers and (energy.buffer_chains or 1) > 1:
            warnings.warn(
                f"draws [S, P] from {energy.buffer_chains} chains are evaluated with the module's own "
                "buffers; pass a Chain (or [C, D, P] draws, or chain=c) to use each chain's statistics"
            )
        return [(samples.reshape(-1, P), None)]
    C = samples.shape[0]
    kept = energy.buffer_chains
    if kept is None:
        if C > 1:
            warnings.warn(
                f"the energy keeps no per-chain buffers (it never evaluated several chains) but the draws "
                f"come from {C} chains: every chain is evaluated with the module's own buffers. Pass the "
                "run's energy (Run.energy) to use each chain's running statistics"
            )
        return [(samples.reshape(-1, P), None)]
    if kept != C:
        raise ValueError(
            f"the energy keeps buffers for {kept} chains but the draws come from {C} chains: pass the "
            "energy of the run that made these draws (Run.energy)"
        )
    return [(samples[c], energy.chain_buffers(c)) for c in range(C)]


@torch.no_grad()
def predictive(
    energy: Energy,
    draws: Chain | Tensor,
    inputs: Tensor | Sequence[Tensor],
    *,
    batch_size: int = 1024,
    draws_per_call: int = 64,
    chain: int | None = None,
    per_draw: bool = False,
) -> dict[str, Tensor]:
    """Average the module's predictions over draws (all chains pooled, or only ``chain``).

    Classification (categorical / bernoulli likelihood): ``{"probs": ...}``, the posterior
    predictive class probabilities (probabilities are averaged, never log-probabilities).
    Regression (gaussian likelihood with noise σ): ``{"mean", "var"}`` with
    ``var = Var_draws[f(x)] + σ²``. ``draws``: a :class:`Chain`, ``[C, D, P]`` or ``[S, P]``
    tensor. The module runs in eval mode; a module with buffers (BatchNorm running
    statistics) evaluates each chain's draws with that chain's own buffers
    (``energy.chain_buffers(c)``; pass the run's energy, ``Run.energy``). ``chain=c`` averages
    over chain ``c`` only (for ``[S, P]`` draws: evaluates them with chain ``c``'s buffers).

    ``energy``: a :class:`ModuleEnergy`, a :class:`~structmc.priors.HierarchicalEnergy` (the
    network part of each draw), or a :class:`~structmc.structured.StructuredEnergy` over one
    (predicts with its base model), through their ``predictive_energy``.

    ``per_draw=True`` returns each draw's predictive instead of the average, with the draws'
    layout in front: ``probs`` ``[C, D, n, K]`` (bernoulli ``[C, D, n]``) for a Chain or
    ``[C, D, P]`` draws, ``[S, n, K]`` for ``[S, P]``, ``[D, n, K]`` with ``chain=c``;
    regression ``mean`` = f_s(x) and ``var`` = σ² in that layout. That is the input of
    function-space diagnostics, e.g. ``diagnostics.summary(out["probs"][..., 1])``
    (memory: S·n·K values).
    """
    for name, v in (("batch_size", batch_size), ("draws_per_call", draws_per_call)):
        _check_count(name, v)
    if not isinstance(per_draw, bool):
        raise TypeError(f"per_draw must be True or False, got {per_draw!r}")
    model = predictive_energy(energy, "predictive")
    inputs = (inputs,) if isinstance(inputs, (Tensor, Mapping)) else tuple(inputs)
    inputs = flat_inputs(getattr(model, "input_keys", None), inputs, "predictive")
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError("inputs must be a tensor or a sequence of tensors [n, ...]")
    if (
        inputs[0].dim() == 0
        or inputs[0].shape[0] == 0
        or any(t.dim() == 0 or t.shape[0] != inputs[0].shape[0] for t in inputs)
    ):
        raise ValueError(
            f"inputs must hold at least one row, with the same first dimension n, got shapes "
            f"{[list(t.shape) for t in inputs]}"
        )
    groups = _draw_groups(model, draws, chain)
    if sum(s.shape[0] for s, _ in groups) == 0:
        raise ValueError("no draws to average over")
    samples = draws.samples if isinstance(draws, Chain) else draws
    _finite_draws(samples[chain] if chain is not None and samples.dim() == 3 else samples)
    _check_inputs(model, groups, inputs, "predictive")
    parts: list[dict[str, Tensor]] = []
    for lo in range(0, inputs[0].shape[0], batch_size):
        xb = tuple(t[lo : lo + batch_size].to(model.device) for t in inputs)
        outputs = torch.cat(
            [model.forward_draws(s, xb, draws_per_call=draws_per_call, buffers=b) for s, b in groups if s.shape[0] > 0]
        )
        _finite_predictions(outputs.transpose(0, 1), "predictive", lo)
        lik = model.likelihood
        parts.append(lik.predict(outputs, per_draw=True) if per_draw else lik.predict(outputs))
    if not per_draw:
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    # the groups hold the draws in their layout's order (chain-major), so [S, ...] -> [*lead, ...]
    lead = tuple(samples.shape[:-1]) if chain is None or samples.dim() < 3 else tuple(samples.shape[1:-1])
    out = {}
    for k in parts[0]:
        whole = torch.cat([p[k] for p in parts], 1)  # [S, n, ...]
        out[k] = whole.reshape(*lead, *whole.shape[1:])
    return out


def _check_count(name: str, value) -> int:
    """A positive integer setting (``batch_size``, ``draws_per_call``, ...), refused with its
    name before any compute (``range(0, n, 0)`` would fail inside the loop)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


# -- draws as networks -------------------------------------------------------------------------
def _network(energy, who: str):
    """The predicting energy and a copy of its module (eval mode, gradients off): the network that
    draws are loaded into. The energy's own module is never changed."""
    model = predictive_energy(energy, who)
    module = copy.deepcopy(model.module).eval()
    for p in module.parameters():
        p.grad = None
        p.requires_grad_(False)
    return model, module


def _module_values(space: ParamSpace, module: nn.Module, flat: Tensor) -> dict[str, Tensor]:
    """A draw ``[P]`` as the module's tensors by name (coordinates that are not the module's, a
    hierarchical model's scales, are left out)."""
    names = dict(module.named_parameters())
    return {k: v for k, v in space.unflatten(flat).items() if k in names}


def draw_module(energy: Energy, draws: Chain | Tensor, draw: int = -1, *, chain: int = 0) -> nn.Module:
    """One posterior draw as a network: a copy of the energy's module, in eval mode, whose
    parameters are draw ``draw`` of chain ``chain`` (for ``[S, P]`` draws, row ``draw``) and whose
    buffers, for a module with BatchNorm statistics, are that chain's. Neither the energy nor the
    draws are changed; the copy is an ordinary module (``state_dict``, ``torch.save``,
    ``torch.export``). ``draw=-1``: the last draw."""
    model, module = _network(energy, "draw_module")
    groups = _draw_groups(model, draws, chain if _chains_of(draws) else None)
    samples, buffers = groups[0]
    if not -samples.shape[0] <= draw < samples.shape[0]:
        raise IndexError(f"draw_module: draw {draw} of {samples.shape[0]} draws")
    theta = samples[draw]
    _finite_draws(theta.unsqueeze(0))
    with torch.no_grad():
        own = dict(module.named_parameters())
        for name, value in _module_values(model.space, module, theta).items():
            own[name].copy_(value.to(own[name]))
        if buffers is not None:
            live = dict(module.named_buffers())
            for name, value in buffers.items():
                live[name].copy_(value.to(live[name].device))
    return module


def _chains_of(draws: Chain | Tensor) -> bool:
    """Whether the draws come in chains (a Chain, or ``[C, D, P]``)."""
    return isinstance(draws, Chain) or (isinstance(draws, Tensor) and draws.dim() == 3)


class PosteriorPredictive(nn.Module):
    r"""The posterior predictive as a network: ``forward(*inputs)`` averages the module's
    predictions over the draws, as :func:`predictive` does, and returns the same dict
    (classification ``{"probs"}``: p(y | x) = (1/S) Σ_s softmax f_{θ_s}(x); regression ``{"mean",
    "var"}`` with var = Var_s f_{θ_s}(x) + σ²).

    It holds what it needs and nothing else: a copy of the energy's module, the draws and, for a
    module with BatchNorm statistics, each chain's buffers, as buffers of its own (``state_dict``,
    ``.to(device)``, ``torch.save``), and the likelihood's summary. The draws are evaluated
    ``draws_per_call`` at a time with ``torch.func.vmap``; the module stays in eval mode.
    ``chain=c``: chain ``c``'s draws only. Built from a finished chain, for inference on new data
    and for ``torch.export`` where the module allows (an MLP does; see the tests).
    """

    def __init__(self, energy: Energy, draws: Chain | Tensor, *, chain: int | None = None, draws_per_call: int = 64):
        super().__init__()
        self.draws_per_call = _check_count("draws_per_call", draws_per_call)
        model, self.module = _network(energy, "PosteriorPredictive")
        groups = _draw_groups(model, draws, chain)
        if sum(s.shape[0] for s, _ in groups) == 0:
            raise ValueError("PosteriorPredictive: no draws to average over")
        samples = draws.samples if isinstance(draws, Chain) else draws
        _finite_draws(samples[chain] if chain is not None and samples.dim() == 3 else samples)
        self.likelihood = model.likelihood
        # the module's call (ModuleEnergy(input_keys=..., output=...)): keyword inputs, the output read
        self.input_keys = getattr(model, "input_keys", None)
        self.output = getattr(model, "output", None)
        self._vmap_failed = bool(getattr(model, "_vmap_failed", False))
        # each group's draws reduced to the module's own tensors [S, ...], and its buffers
        self._groups: list[tuple[list[tuple[str, str]], list[tuple[str, str]]]] = []
        for g, (group, buffers) in enumerate(groups):
            stacked = _module_values(model.space, self.module, group.detach().to(self._device()))
            params = []
            for name, value in stacked.items():
                slot = f"draws_{g}_{name.replace('.', '_')}"
                self.register_buffer(slot, value.contiguous())  # [S, *shape]
                params.append((name, slot))
            kept = []
            for name, value in (buffers or {}).items():
                slot = f"state_{g}_{name.replace('.', '_')}"
                self.register_buffer(slot, value.detach().clone().to(self._device()))
                kept.append((name, slot))
            self._groups.append((params, kept))

    def _device(self) -> torch.device:
        return next(self.module.parameters()).device

    def train(self, mode: bool = True) -> PosteriorPredictive:
        super().train(mode)
        self.module.eval()  # the draws are evaluated with the running statistics, as predictive() does
        return self

    @property
    def num_draws(self) -> int:
        """The number of draws averaged over (all chains', or ``chain``'s)."""
        return sum(int(getattr(self, params[0][1]).shape[0]) for params, _ in self._groups)

    def forward(self, *inputs: Tensor, **keyword_inputs: Tensor) -> dict[str, Tensor]:
        """The posterior predictive at ``inputs`` (each ``[n, ...]``): :func:`predictive`'s dict.
        A module called with keyword inputs (``ModuleEnergy(..., input_keys=...)``) takes them as
        keywords, ``bayes(input_ids=..., attention_mask=...)``, or as one dict."""
        if keyword_inputs:
            if inputs:
                raise TypeError("PosteriorPredictive: give the inputs positionally or as keywords, not both")
            inputs = (keyword_inputs,)  # type: ignore[assignment]
        inputs = flat_inputs(self.input_keys, inputs, "PosteriorPredictive")
        args, kwargs = keyword_call(self.input_keys, inputs)

        def draw_forward(values, state):
            return read_output(functional_call(self.module, {**values, **state}, args, kwargs), self.output)

        outputs = []
        for params, kept in self._groups:
            stacked = {name: getattr(self, slot) for name, slot in params}
            state = {name: getattr(self, slot) for name, slot in kept}
            S = next(iter(stacked.values())).shape[0]
            for lo in range(0, S, self.draws_per_call):
                chunk = {k: v[lo : lo + self.draws_per_call] for k, v in stacked.items()}
                if not self._vmap_failed:
                    try:
                        outputs.append(vmap(lambda values, state=state: draw_forward(values, state))(chunk))
                        continue
                    except RuntimeError as err:
                        if "vmap" not in str(err):
                            raise
                        self._vmap_failed = True  # e.g. transformers' attention masks: draws one by one
                        warnings.warn(
                            f"PosteriorPredictive: the module's forward cannot be vmapped over draws "
                            f"({str(err).splitlines()[0][:200]}); evaluating the draws one after another",
                            UserWarning,
                            stacklevel=2,
                        )
                count = next(iter(chunk.values())).shape[0]
                outputs.append(
                    torch.stack([draw_forward({k: v[i] for k, v in chunk.items()}, state) for i in range(count)])
                )
        return self.likelihood.predict(torch.cat(outputs))
