"""Energies from a user log density: :class:`LogDensityEnergy`."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor

from .. import fingerprint
from .._vmap import vmap  # torch.func.vmap, immune to tensordict's patches (issue 22 §3)
from ..autodiff import hutchinson_diag, traced_value_and_grad
from ..energy_checks import _check_theta
from ..space import ParamSpace
from .bases import EnergyBase, _as_num_data, _described
from .constraints import Constraints
from .protocols import Batch


def _chain_slice(batch: Batch, c: int) -> Batch:
    return None if batch is None else tuple(t[c] for t in batch)


class DensityShapeError(ValueError):
    """A user log density returned something other than one scalar per chain."""


def _check_scalar(value, what: str, hint: str) -> Tensor:
    if not isinstance(value, Tensor):
        value = torch.as_tensor(value)
    if value.dim() != 0:  # under vmap this is the per-chain shape
        raise DensityShapeError(
            f"{what} returned a tensor of shape {list(value.shape)} for one chain; it must return a scalar{hint}"
        )
    return value


class LogDensityEnergy(EnergyBase):
    """Energy of a user log density over a flat vector, in one of two forms.

    * ``LogDensityEnergy(log_prob, dim)``: ``U = -log_prob(theta, batch)``, used as is.
      ``log_prob(theta [P], batch) -> scalar`` must itself be (an unbiased estimate of) the
      full-data log posterior up to a constant: no N/n scaling is added, ``num_data`` is
      only recorded (it weights chunks in :func:`full_data_value_and_grad`).
    * ``LogDensityEnergy(dim=dim, log_likelihood=..., log_prior=...)``: the energy applies
      the N/n scaling like every other energy,
      ``U = -(N/n)·log_likelihood(theta, batch) - log_prior(theta)``, with
      ``log_likelihood(theta [P], batch) -> scalar`` summed over the minibatch and
      ``log_prior(theta [P]) -> scalar``; ``num_data=None`` means no scaling.

    **Named and constrained parameters.** With ``params={name: shape}`` instead of ``dim`` the
    functions take the named values ``{name: tensor of that shape}`` in place of the flat
    vector (``()`` is a scalar). ``constraints={name: constraint}`` gives a parameter a support —
    a ``torch.distributions.constraints`` object (``positive``, ``interval(-1, 1)``,
    ``simplex``, ``lower_cholesky``, ...) or a bijective ``Transform`` onto it: the sampler then
    moves θ = T⁻¹(x) in the unconstrained space with the bijection T of
    ``torch.distributions.biject_to`` and the density of θ is
    ``log p(T(θ)) + log|det ∂T/∂θ|`` (Stan's constraint transforms); the functions still see
    the constrained values. Draws (:class:`~structmc.chain.Chain`, run folders), ``init`` and
    :meth:`initial_position` are in the constrained space (:attr:`draw_space`); the sampler's
    state, step sizes and preconditioners are in the unconstrained one (:attr:`space`). With
    ``dim``, ``constraints`` is one constraint for the whole vector (e.g. a simplex).

    ``batch`` is the chain's minibatch (a tuple of ``[n, ...]`` tensors) or ``None``. Chains
    are evaluated with ``torch.func.vmap``; if the function cannot be vmapped we fall back
    to a loop over chains (with a warning). With ``vectorized=True`` the function itself
    takes ``[C, P]`` and the chain-batched minibatch and returns ``[C]``. ``model`` is an
    optional object the density came from (e.g. a :class:`~structmc.models.PMF`, for its
    predictions).
    """

    predictive_energy = None  # a log density has no model that predicts (see Energy)
    compilable = True  # autograd on a detached leaf: traced by the compiled step (structmc.compiled)

    @property
    def requires_data(self) -> bool:
        return self.log_likelihood is not None

    def __init__(
        self,
        log_prob: Callable | None = None,
        dim: int | None = None,
        *,
        params=None,
        constraints=None,
        vectorized: bool = False,
        num_data: int | None = None,
        log_likelihood: Callable | None = None,
        log_prior: Callable | None = None,
        model=None,
    ):
        parts = log_likelihood is not None or log_prior is not None
        if parts == (log_prob is not None):
            raise TypeError("give either log_prob, or log_likelihood and log_prior")
        if parts and not (callable(log_likelihood) and callable(log_prior)):
            raise TypeError("log_likelihood and log_prior must both be callables")
        if not parts and not callable(log_prob):
            raise TypeError("log_prob must be callable")
        if params is not None:
            if dim is not None:
                raise TypeError("give dim (a flat vector) or params (named parameters), not both")
            self._constraints: Constraints | None = Constraints(params, constraints)
        else:
            if dim is None or isinstance(dim, bool) or int(dim) != dim or int(dim) < 1:
                raise ValueError(f"dim must be a positive integer, got {dim}")
            self._constraints = (
                None if constraints is None else Constraints({"theta": (int(dim),)}, {"theta": constraints})
            )
        self._named = params is not None
        num_data = _as_num_data(num_data)
        self.log_prob = log_prob
        self.log_likelihood, self.log_prior = log_likelihood, log_prior
        self.space = ParamSpace.flat(int(cast(int, dim))) if self._constraints is None else self._constraints.space
        self.vectorized = vectorized
        self.num_data = num_data
        self.model = model
        self._use_vmap = True

    def with_num_data(self, num_data):
        new = copy.copy(self)
        new.num_data = _as_num_data(num_data)
        return new

    def describe(self) -> dict:
        """Kind, ``num_data`` and the functions that define the density (their code, closures
        and globals; see :mod:`structmc.fingerprint`), each with ``vectorized``."""
        parts, unchecked = {}, []
        for key, f in (
            ("log_prob", self.log_prob),
            ("log_likelihood", self.log_likelihood),
            ("log_prior", self.log_prior),
        ):
            if f is not None:
                parts[key], missing = fingerprint.value_fingerprint(
                    {"fn": f, "vectorized": bool(self.vectorized)}, f"the {key.replace('_', ' ')} function"
                )
                unchecked += missing
        if self._constraints is not None:  # absent otherwise: earlier fingerprints unchanged
            parts["parameters"] = {"named": self._named, **self._constraints.describe()}
        return _described(self, parts, unchecked)

    def describe_v1(self) -> dict:
        """Version 1: the qualified names of the functions."""
        return {
            name: getattr(f, "__qualname__", type(f).__name__)
            for name, f in (
                ("log_prob", self.log_prob),
                ("log_likelihood", self.log_likelihood),
                ("log_prior", self.log_prior),
            )
            if f is not None
        }

    # -- the two spaces ------------------------------------------------------------------------
    @property
    def draw_space(self) -> ParamSpace:
        """The layout of the draws: the constrained parameters' (``space`` without constraints)."""
        return self.space if self._constraints is None else self._constraints.draw_space

    def to_draws(self, theta: Tensor) -> Tensor:
        """θ ``[..., P]`` -> the draws ``[..., draw_space.dim]`` (each constrained parameter
        through its bijection)."""
        return theta if self._constraints is None else self._constraints.to_draws(theta)

    def from_draws(self, x: Tensor, what: str = "init") -> Tensor:
        """Draws ``[..., draw_space.dim]`` -> θ; a value outside its support is refused."""
        return x if self._constraints is None else self._constraints.from_draws(x, what)

    def initial_position(self) -> Tensor:
        """With ``params`` or ``constraints``: the image of θ = 0 (every unconstrained coordinate
        0: 1 for a positive scale, the middle of an interval, the uniform simplex), in the
        draws' space like ``init``. A flat unconstrained density has no natural start."""
        if self._constraints is None:
            raise ValueError(
                "init is required: a LogDensityEnergy over a flat vector (dim=...) has no natural starting "
                "point; pass init=torch.zeros(dim) or the like"
            )
        return self.to_draws(torch.zeros(self.space.dim, dtype=torch.get_default_dtype()))

    def _arguments(self, theta: Tensor):
        """What the user functions take (θ, its named values, or the constrained ones) and the
        log-Jacobian of the constraint transforms (0 without)."""
        if self._constraints is None:  # a flat vector (params= always builds Constraints)
            return theta, 0.0
        values, log_det = self._constraints.constrain(theta)
        return (values if self._named else values["theta"]), log_det

    def _log_density(self, theta: Tensor, batch) -> Tensor:
        """Log density of one chain (or of ``[C, P]`` when vectorized), in θ's space: the
        constrained density plus the transforms' log-Jacobian."""
        if self._constraints is None and not self._named:
            return self._user_log_density(theta, batch)
        args, log_det = self._arguments(theta)
        return self._user_log_density(args, batch) + log_det

    def _user_log_density(self, theta, batch) -> Tensor:
        """The user's log density at ``theta`` (flat, or named values)."""
        if self.vectorized:  # shapes are checked on the [C] result
            if self.log_prob is not None:
                return self.log_prob(theta, batch)
            assert self.log_prior is not None and self.log_likelihood is not None  # __init__: both or log_prob
            lp = self.log_prior(theta)
            if batch is None:
                raise ValueError("this energy has a likelihood: pass data=(...) to sample()")
            scale = 1.0 if self.num_data is None else self.num_data / batch[-1].shape[1]
            return lp + scale * self.log_likelihood(theta, batch)
        if self.log_prob is not None:
            return _check_scalar(
                self.log_prob(theta, batch),
                "log_prob",
                " (the log posterior of that chain's θ [P], summed over the minibatch)",
            )
        assert self.log_prior is not None and self.log_likelihood is not None  # __init__: both or log_prob
        lp = _check_scalar(self.log_prior(theta), "log_prior", " (the log prior of that chain's θ [P])")
        if batch is None:
            raise ValueError("this energy has a likelihood: pass data=(...) to sample()")
        n = batch[-1].shape[0]
        scale = 1.0 if self.num_data is None else self.num_data / n
        ll = _check_scalar(
            self.log_likelihood(theta, batch),
            "log_likelihood",
            " (the log-likelihood summed over the minibatch: add .sum())",
        )
        return lp + scale * ll

    def _log_prob_chains(self, theta: Tensor, batch: Batch) -> Tensor:
        if self.vectorized:
            out = self._log_density(theta, batch)
            if not isinstance(out, Tensor) or out.numel() != theta.shape[0]:
                shape = list(out.shape) if isinstance(out, Tensor) else type(out).__name__
                raise DensityShapeError(
                    f"a vectorized log density must return one value per chain [{theta.shape[0]}], got {shape}"
                )
            return out.reshape(theta.shape[0])
        if theta.shape[0] == 1:
            return self._log_density(theta[0], _chain_slice(batch, 0)).reshape(1)
        if self._use_vmap:
            try:
                if batch is None:
                    return vmap(lambda t: self._log_density(t, None))(theta)
                return vmap(lambda t, *b: self._log_density(t, tuple(b)))(theta, *batch)
            except DensityShapeError:
                raise
            except Exception as err:  # vmap-incompatible user code: correct but slower
                warnings.warn(f"log density could not be vmapped ({err}); evaluating chains in a loop")
                self._use_vmap = False
        return torch.stack([self._log_density(theta[c], _chain_slice(batch, c)) for c in range(theta.shape[0])])

    def value_and_grad(self, theta, batch):
        _check_theta(theta, self.space.dim)
        if torch.compiler.is_compiling():  # the compiled step: torch.func.grad (autodiff.traced_value_and_grad)
            energy, (grad,) = traced_value_and_grad(lambda t: -self._log_prob_chains(t, batch), (theta.detach(),))
            return energy, grad
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            energy = -self._log_prob_chains(leaf, batch)
            (grad,) = torch.autograd.grad(energy.sum(), leaf)
        return energy.detach(), grad

    @torch.no_grad()
    def value(self, theta, batch):
        _check_theta(theta, self.space.dim)
        return -self._log_prob_chains(theta, batch)

    def hessian_diag(self, theta: Tensor, batch: Batch, generator=None, num_probes: int = 1) -> Tensor:
        """Hutchinson estimate of diag ∇²U ``[C, P]`` (for pSGLD's Γ term)."""
        _check_theta(theta, self.space.dim)
        return hutchinson_diag(lambda t: -self._log_prob_chains(t, batch), theta, generator, num_probes)
