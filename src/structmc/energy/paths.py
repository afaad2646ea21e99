r"""The evaluation paths of :class:`~structmc.energy.ModuleEnergy`: one chain through the bound
module (the hot path), chains in a loop or vmapped, the readable reference path, the Hessian
diagonal and the forward of parameter draws. :class:`_ModuleEvaluation` is a base class of
``ModuleEnergy``, whose methods these are (no extra call per step: a method found on a base
class costs what one defined on the class does).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .._vmap import vmap  # torch.func.vmap, immune to tensordict's patches (issue 22 §3)
from ..autodiff import hutchinson_diag, traced_value_and_grad
from ..energy_checks import _check_batch_layout, _check_theta
from ..module_binding import keyword_call, read_output, swap_buffers
from .protocols import Batch

if TYPE_CHECKING:
    from ..likelihoods import Likelihood
    from ..priors.prior import BoundPrior
    from ..space import ParamSpace


class _ModuleEvaluation:
    """``ModuleEnergy``'s evaluation: ``_evaluate`` (what ``value_and_grad`` and ``value`` run),
    ``_single``, ``_looped``, ``_vmapped``, ``hessian_diag``, ``reference_value_and_grad`` and
    ``forward_draws``, on the state ``ModuleEnergy`` sets up (its module bound to one flat
    vector ``_flat`` and one flat gradient ``_grad``, ``space``, ``likelihood``, ``prior``)."""

    # the state ModuleEnergy sets up (declared for the type checker: annotations, no values)
    module: nn.Module
    space: ParamSpace
    likelihood: Likelihood
    prior: BoundPrior
    chain_evaluation: str
    _flat: Tensor
    _grad: Tensor
    _buffer_store: dict[str, list[dict[str, Tensor]]]
    _hot_batch: tuple[Sequence[Tensor], list[Tensor], Tensor] | None  # (batch, chain-0 inputs, chain-0 target)
    _randomness_checked: bool
    _has_buffers: bool
    input_keys: tuple[str, ...] | None
    output: str | Callable | None
    _vmap_failed: bool

    if TYPE_CHECKING:  # ModuleEnergy's, which these paths call

        @property
        def device(self) -> torch.device | None: ...

        def scale(self, batch: Batch) -> float: ...

        def prior_energy(self, theta: Tensor) -> Tensor: ...

        def _add_prior_grad(self, lik_grad: Tensor, theta: Tensor) -> Tensor: ...

        def _check_deterministic(self, inputs: Sequence[Tensor]) -> None: ...

    def _forward(self, inputs: Sequence[Tensor]):
        """The bound module on the batch's input tensors (``module(*inputs)``, or
        ``module(**{key: tensor})`` with ``input_keys``), its output read by ``output``."""
        if self.input_keys is None and self.output is None:  # the plain path: no per-call work
            return self.module(*inputs)
        args, kwargs = keyword_call(self.input_keys, inputs)
        return read_output(self.module(*args, **kwargs), self.output)

    def _functional(self, module: nn.Module, tensors: dict[str, Tensor], inputs: Sequence[Tensor]):
        """``functional_call(module, tensors, ...)`` on the batch's input tensors, positional or as
        the keyword inputs ``input_keys``, its output read by ``output``."""
        if self.input_keys is None and self.output is None:
            return functional_call(module, tensors, tuple(inputs))
        args, kwargs = keyword_call(self.input_keys, inputs)
        return read_output(functional_call(module, tensors, args, kwargs), self.output)

    def _single(self, theta1: Tensor, inputs: Sequence[Tensor], target: Tensor, scale: float, grad: bool):
        """One chain through the bound module; returns (negative scaled log-lik, grad)."""
        if theta1.data_ptr() != self._flat.data_ptr():
            self._flat.copy_(theta1)
        if not grad:
            with torch.no_grad():
                return -scale * self.likelihood.log_lik(self._forward(inputs), target), None
        self._grad.zero_()
        if torch.is_grad_enabled():  # the usual case: skip the context manager's cost
            nll = -scale * self.likelihood.log_lik(self._forward(inputs), target)
            nll.backward()
        else:
            with torch.enable_grad():
                nll = -scale * self.likelihood.log_lik(self._forward(inputs), target)
                nll.backward()
        return nll.detach(), self._grad

    def _swap_buffers(self, c: int, n_chains: int, save: bool) -> None:
        swap_buffers(self.module, self._buffer_store, c, n_chains, save)

    def _looped(self, theta, batch, scale, grad):
        """Chains one after another through the bound module, each with its own buffers."""
        C = theta.shape[0]
        nll = theta.new_empty(C)
        g = torch.empty_like(theta) if grad else None
        for c in range(C):
            self._swap_buffers(c, C, save=False)
            nll_c, g_c = self._single(theta[c], [t[c] for t in batch[:-1]], batch[-1][c], scale, grad)
            nll[c] = nll_c
            if grad:
                g[c] = g_c
            self._swap_buffers(c, C, save=True)
        return nll, g

    def _vmapped(self, theta, batch, scale, grad):
        module, space, lik = self.module, self.space, self.likelihood

        def chain_forward(params, *inputs):
            return self._functional(module, params, inputs)

        def log_lik(params):  # the forward vmapped, the likelihood batched where it can be
            out = vmap(chain_forward)(params, *batch[:-1])
            if lik.log_lik_chains is not None and isinstance(out, Tensor):
                return lik.log_lik_chains(out, batch[-1])
            return vmap(lik.log_lik)(out, batch[-1])

        theta = theta.detach()
        if not grad:
            with torch.no_grad():
                return -scale * log_lik(space.unflatten(theta)), None
        C = theta.shape[0]
        if torch.compiler.is_compiling():  # the compiled step: torch.func.grad (autodiff.traced_value_and_grad)
            chunks = tuple(theta[:, i.slice] for i in space.params)
            nll, grads = traced_value_and_grad(
                lambda *xs: -scale * log_lik({i.name: x.reshape(C, *i.shape) for i, x in zip(space.params, xs)}),
                chunks,
            )
            return nll, torch.cat(grads, dim=1)
        with torch.enable_grad():
            # one leaf per parameter tensor: the gradient of a view of one flat [C, P] leaf is
            # scattered into a zero [C, P] tensor per parameter and summed (C·P fills and adds
            # per parameter tensor, 0.7 ms of an 8-copy structured step); cat is one copy
            leaves = [theta[:, i.slice].detach().requires_grad_() for i in space.params]
            params = {i.name: leaf.reshape(C, *i.shape) for i, leaf in zip(space.params, leaves)}
            nll = -scale * log_lik(params)
            grads = torch.autograd.grad(nll.sum(), leaves)
        return nll.detach(), torch.cat(grads, dim=1)

    def _functional_single(self, theta, batch, scale, grad, chain: int = 0):
        """Chain ``chain`` through ``functional_call`` with the module's own buffers (BatchNorm
        updates its running statistics in place, as the eager one-chain path does): the compiled
        step's path for one chain, for a module with buffers (several chains swap buffers from
        Python: not compiled) and, chain by chain, for ``chain_evaluation="loop"``."""
        module, space, lik = self.module, self.space, self.likelihood
        inputs, target, n = tuple(t[chain] for t in batch[:-1]), batch[-1][chain], len(space.params)
        named = list(module.named_buffers())
        names, buffers = [b[0] for b in named], tuple(b[1] for b in named)

        def nll_of(*xs):  # the parameters, then the buffers (updated in place: passed in)
            tensors = {i.name: x.view(i.shape) for i, x in zip(space.params, xs[:n])}
            tensors.update(zip(names, xs[n:]))
            return -scale * lik.log_lik(self._functional(module, tensors, inputs), target)

        chunks = tuple(theta[chain, i.slice] for i in space.params)
        if not grad:
            with torch.no_grad():
                return nll_of(*chunks, *buffers).reshape(1), None
        if torch.compiler.is_compiling():  # torch.func.grad (autodiff.traced_value_and_grad)
            nll, grads = traced_value_and_grad(nll_of, chunks, buffers)
            return nll.reshape(1), torch.cat(grads).unsqueeze(0)
        with torch.enable_grad():
            leaves = [c.detach().requires_grad_() for c in chunks]
            nll = nll_of(*leaves, *buffers)
            grads = torch.autograd.grad(nll, leaves)
        return nll.detach().reshape(1), torch.cat(grads).unsqueeze(0)

    def _evaluate(self, theta: Tensor, batch: Batch, grad: bool):
        if torch.compiler.is_compiling():  # the compiled step: the functional paths, no Python-side caches
            assert batch is not None  # the compiled step gathers a batch
            theta, scale, C = theta.detach(), self.scale(batch), theta.shape[0]
            if self._has_buffers or C == 1:  # buffers: one chain (compiled.blocker); one chain: no vmap
                nll, g = self._functional_single(theta, batch, scale, grad)
            elif self.chain_evaluation == "loop":  # e.g. convolutions on CUDA: vmap is slower
                parts = [self._functional_single(theta, batch, scale, grad, chain=c) for c in range(C)]
                nll = torch.cat([p[0] for p in parts])
                g = torch.cat([p[1] for p in parts]) if grad else None
            else:
                nll, g = self._vmapped(theta, batch, scale, grad)
            return nll + self.prior_energy(theta), (None if g is None else self._add_prior_grad(g, theta))
        _check_theta(theta, self.space.dim)
        hot = self._hot_batch
        if hot is None or hot[0] is not batch:  # checked once per batch object (a run's stream reuses it)
            _check_batch_layout(theta.shape[0], batch)
        scale = self.scale(batch)
        assert batch is not None  # scale() refuses None
        if theta.requires_grad:
            theta = theta.detach()
        if not self._randomness_checked:
            self._check_deterministic(tuple(t[0] for t in batch[:-1]))
        if theta.shape[0] == 1:  # the hot path: no per-chain bookkeeping
            hot = self._hot_batch
            if hot is None or hot[0] is not batch:  # a run's stream hands over the same views each step
                hot = self._hot_batch = (batch, [t[0] for t in batch[:-1]], batch[-1][0])
            nll, g = self._single(theta[0], hot[1], hot[2], scale, grad)
            nll = nll.reshape(1)
            g = None if g is None else g.unsqueeze(0)
        elif self._has_buffers or self.chain_evaluation == "loop":
            nll, g = self._looped(theta, batch, scale, grad)
        elif self._vmap_failed:
            nll, g = self._looped(theta, batch, scale, grad)
        else:
            try:
                nll, g = self._vmapped(theta, batch, scale, grad)
            except RuntimeError as err:
                if "vmap" not in str(err):  # not vmap's refusal: the forward itself fails
                    raise
                self._vmap_failed = True  # e.g. transformers' attention masks (data-dependent branches)
                warnings.warn(
                    f"ModuleEnergy: {type(self.module).__name__}'s forward cannot be vmapped over chains "
                    f"({str(err).splitlines()[0][:200]}); evaluating the chains one after another (the same "
                    "values; pass chain_evaluation='loop' to choose this and silence the warning)",
                    UserWarning,
                    stacklevel=3,
                )
                nll, g = self._looped(theta, batch, scale, grad)
        energy = nll + self.prior_energy(theta)
        return energy, (None if g is None else self._add_prior_grad(g, theta))

    def hessian_diag(self, theta: Tensor, batch: Batch, generator=None, num_probes: int = 1) -> Tensor:
        """diag ∇²U ``[C, P]``: Hutchinson for the likelihood (through ``functional_call``, with
        copies of the buffers so running statistics are not updated twice) plus the exact prior
        term 1/σ². Used by pSGLD's Γ term."""
        _check_theta(theta, self.space.dim)
        scale = self.scale(batch)
        assert batch is not None  # scale() refuses None
        module, space, lik = self.module, self.space, self.likelihood
        buffers = {k: v.detach().clone() for k, v in module.named_buffers()}

        def chain_log_lik(flat, *b):
            out = self._functional(module, {**space.unflatten(flat), **buffers}, b[:-1])
            return lik.log_lik(out, b[-1])

        if buffers:
            nll = lambda t: (
                -scale * torch.stack([chain_log_lik(t[c], *(x[c] for x in batch)) for c in range(t.shape[0])])
            )
        else:
            nll = lambda t: -scale * vmap(chain_log_lik)(t, *batch)
        prior = self.prior.hessian_diag(theta, generator, num_probes)  # first: it may draw from generator
        return hutchinson_diag(nll, theta, generator, num_probes) + prior

    def reference_value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """Readable per-chain ``functional_call`` + autograd path, used to test the fast ones."""
        _check_theta(theta, self.space.dim)
        scale = self.scale(batch)
        assert batch is not None  # scale() refuses None
        values, grads = [], []
        for c in range(theta.shape[0]):
            leaf = theta[c].detach().clone().requires_grad_(True)
            with torch.enable_grad():
                out = self._functional(self.module, self.space.unflatten(leaf), [t[c] for t in batch[:-1]])
                log_prior = -self.prior.energy(leaf.unsqueeze(0))[0]
                u = -scale * self.likelihood.log_lik(out, batch[-1][c]) - log_prior
                (g,) = torch.autograd.grad(u, leaf)
            values.append(u.detach())
            grads.append(g)
        return torch.stack(values), torch.stack(grads)

    @torch.no_grad()
    def forward_draws(
        self,
        samples: Tensor,
        inputs: Sequence[Tensor],
        *,
        draws_per_call: int = 64,
        buffers: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        """Module outputs for each parameter draw: ``samples [S, P]`` -> ``[S, n, ...]``.

        Runs in eval mode (running BatchNorm statistics), draws vmapped in groups. ``buffers``
        (e.g. ``chain_buffers(c)``, for the draws of chain ``c``) replace the module's own.
        """
        was_training = self.module.training
        self.module.eval()
        extra = {} if buffers is None else {k: v.to(self.device) for k, v in buffers.items()}
        try:
            outs = []

            def draw_forward(flat):
                return self._functional(self.module, {**self.space.unflatten(flat), **extra}, inputs)

            for s0 in range(0, samples.shape[0], draws_per_call):
                chunk = samples[s0 : s0 + draws_per_call].to(self._flat)
                if not self._vmap_failed:
                    try:
                        outs.append(vmap(draw_forward)(chunk))
                        continue
                    except RuntimeError as err:
                        if "vmap" not in str(err):
                            raise
                        self._vmap_failed = True
                        warnings.warn(
                            f"ModuleEnergy: {type(self.module).__name__}'s forward cannot be vmapped over draws "
                            f"({str(err).splitlines()[0][:200]}); evaluating the draws one after another",
                            UserWarning,
                            stacklevel=3,
                        )
                outs.append(torch.stack([draw_forward(flat) for flat in chunk]))
            return torch.cat(outs)
        finally:
            self.module.train(was_training)
