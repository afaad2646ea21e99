r"""The energy protocols: what samplers and the run loop need from a target (:class:`Energy`),
and the optional abilities some energies add (:class:`HessianDiagEnergy`, :class:`StatefulEnergy`).
The conventions (the N/n scaling, the chain-first batch layout) are in :mod:`structmc.energy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self, runtime_checkable

import torch
from torch import Tensor

from ..space import ParamSpace

Batch = Sequence[Tensor] | None


@runtime_checkable
class Energy(Protocol):
    """What samplers and the run loop need from a target: declared members, never probed.

    Subclass :class:`EnergyBase` for the defaults of everything but ``space``, ``num_data``,
    ``value_and_grad``, ``value`` and ``with_num_data``; an energy defined on top of another
    subclasses :class:`WrappedEnergy`, which forwards what the base defines. Adding an energy
    needs no change to the run loop. The members:

    * ``space``: the :class:`~structmc.space.ParamSpace` of θ (``[C, P]``, P = ``space.dim``).
    * ``num_data`` (the same contract for every energy): N, the number of data points the
      minibatch energy stands for. An energy built from a likelihood applies the N/n scaling
      itself, so that ``value(theta, batch)`` is an unbiased estimate of the full-data energy;
      ``None`` means no scaling (the batch is the whole data set). ``with_num_data(N)`` returns
      a copy with that N (``structmc.sample`` calls it when ``num_data`` is ``None``).
    * ``device``/``dtype``: where the energy computes (``None``: wherever θ lives); the run
      loop moves ``init`` there.
    * ``cv_base``: the energy a control variate evaluates at its centre (the energy itself, or
      the base of a structured energy).
    * ``evaluations_per_call``: model evaluations one call costs per chain (1; M or K for
      structured energies), which the run loop counts.
    * ``requires_data``: whether the energy has a likelihood that needs minibatches
      (``sample`` refuses to run it without ``data``).
    * ``has_buffers``: whether the energy keeps per-chain buffers (a module's BatchNorm
      statistics); when true it also answers ``buffer_chains`` (chains whose buffers are kept,
      or ``None``), ``chain_buffers(c)`` and ``buffer_state_dict()`` /
      ``load_buffer_state_dict(state)`` (all its buffers, which a run's checkpoint holds so that
      a resumed chain goes on with them). A control variate then evaluates θ and its centre
      in two calls, and a chain carries the buffers for prediction.
    * ``check(data, init, batch_size, batching, *, num_points)``: refuse, before any compute,
      what the energy cannot run on (``ValueError``/``TypeError`` saying what to change):
      ``data`` (tensors ``(inputs..., targets)`` without the chain dimension: all of them, or
      a Dataset's first items), ``init`` (the initial positions ``[C, P]`` on the energy's
      device), minibatches of ``batch_size`` rows drawn by ``batching`` out of ``num_points``
      data points. ``None`` is not checked. ``Run`` calls it once, before sampling.
    * ``describe()``: a JSON-able dict of what defines the target, data excluded: ``kind``
      (the class name), ``num_data``, settings and fingerprints (hashes from
      :mod:`structmc.fingerprint`) of its parts, ``unfingerprintable`` (what could not be
      hashed) where anything, and ``base`` (the base's ``describe()``) for a wrapper. Resume
      compares it (:func:`structmc.fingerprint.energy_fingerprint`): two energies that
      describe the same are the same target.
    * ``value_and_grad(theta, batch)``, ``value(theta, batch)``: the energy ``[C]`` (and its
      gradient ``[C, P]``), detached. The layout: ``theta`` is ``[C, P]`` and every tensor of
      ``batch`` is ``[C, n, ...]``, chain first: each chain its own minibatch. To evaluate
      several draws on one shared batch ``(x [n, d], y [n])``, expand it:
      ``tuple(t.expand(C, *t.shape) for t in batch)`` (no copy). A batch without the chain
      dimension is refused with this layout in the message.

    Optional, for :func:`~structmc.predictive` and :func:`~structmc.evaluate`:
    ``predictive_energy``, the energy whose model predicts from this energy's draws (it has
    ``likelihood``, ``forward_draws``, ``has_buffers``, ``buffer_chains``, ``chain_buffers``
    and the same ``space``), or ``None`` when there is none. A :class:`ModuleEnergy` and a
    :class:`~structmc.priors.HierarchicalEnergy` are their own; a
    :class:`~structmc.structured.StructuredEnergy` predicts through its base's.
    """

    # read-only to the protocol: an energy may define these as attributes or as properties
    # (a wrapper forwards its base's)
    @property
    def space(self) -> ParamSpace: ...

    @property
    def num_data(self) -> int | None: ...

    @property
    def evaluations_per_call(self) -> int: ...

    @property
    def requires_data(self) -> bool: ...

    @property
    def device(self) -> torch.device | None: ...

    @property
    def dtype(self) -> torch.dtype | None: ...

    @property
    def cv_base(self) -> Energy: ...

    @property
    def has_buffers(self) -> bool: ...

    def value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """``theta [C, P]`` -> (energy ``[C]``, gradient ``[C, P]``), both detached."""
        ...

    def value(self, theta: Tensor, batch: Batch) -> Tensor:
        """Energy ``[C]`` without gradient."""
        ...

    def with_num_data(self, num_data: int | None) -> Energy: ...

    def check(
        self,
        data: Sequence[Tensor] | None = None,
        init: Tensor | None = None,
        batch_size: int | None = None,
        batching: str | None = None,
        *,
        num_points: int | None = None,
    ) -> None: ...

    def describe(self) -> dict: ...


class BufferedEnergy(Protocol):
    """What an energy with ``has_buffers`` answers too (see :class:`Energy`): ``buffer_chains``,
    ``chain_buffers(c)`` and its buffers' state — ``buffer_state_dict()`` (on the CPU) and
    ``load_buffer_state_dict(state)`` — which :meth:`structmc.run.Run.state_dict` saves and
    restores (under ``"buffers"``; absent for an energy without buffers). Not part of
    :class:`Energy` (an energy without buffers need not define them) and not checked at run
    time. Unlike :class:`StatefulEnergy`, it implies no ``start``/``observe``/``fresh``: the
    buffers change inside the energy's own evaluations."""

    @property
    def buffer_chains(self) -> int | None: ...

    def chain_buffers(self, chain: int) -> dict[str, Tensor]: ...

    def buffer_state_dict(self) -> dict: ...

    def load_buffer_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class HessianDiagEnergy(Protocol):
    """An energy that can estimate its Hessian diagonal on a minibatch (pSGLD's Γ term)."""

    def hessian_diag(
        self, theta: Tensor, batch: Batch, generator: torch.Generator | None = None, num_probes: int = 1
    ) -> Tensor: ...


@runtime_checkable
class DrawSpaceEnergy(Protocol):
    """An energy whose draws may live in another space than θ (a constrained parameter's
    value rather than its unconstrained image: :class:`~structmc.energy.LogDensityEnergy`
    with ``constraints``): ``draw_space`` (the draws' :class:`~structmc.space.ParamSpace`),
    ``to_draws(theta)`` and ``from_draws(x, what)`` (``init`` is given in the draws' space).
    :class:`~structmc.energy.EnergyBase` declares the identity (``draw_space`` is ``space``);
    :func:`draw_space_of` / :func:`to_draws_of` / :func:`from_draws_of` read an energy that
    does not declare them as the identity too."""

    @property
    def draw_space(self) -> ParamSpace: ...

    def to_draws(self, theta: Tensor) -> Tensor: ...

    def from_draws(self, x: Tensor, what: str = "init") -> Tensor: ...


def draw_space_of(energy: Energy) -> ParamSpace:
    """The layout of ``energy``'s draws (its ``space`` unless it declares a ``draw_space``)."""
    return energy.draw_space if isinstance(energy, DrawSpaceEnergy) else energy.space


def to_draws_of(energy: Energy):
    """θ -> draws for ``energy`` (``None`` for the identity, so a run copies θ as is)."""
    if isinstance(energy, DrawSpaceEnergy) and energy.draw_space is not energy.space:
        return energy.to_draws
    return None


def from_draws_of(energy: Energy, x: Tensor, what: str = "init") -> Tensor:
    """A position in the draws' space (``init``) -> θ."""
    return energy.from_draws(x, what) if isinstance(energy, DrawSpaceEnergy) else x


@runtime_checkable
class CompilableEnergy(Protocol):
    """An energy that says whether its ``value_and_grad`` traces into one ``torch.compile``
    graph (the compiled step, :mod:`structmc.compiled`): ``compilable`` (EnergyBase: ``False``;
    :class:`~structmc.energy.LogDensityEnergy` and :class:`~structmc.energy.ModuleEnergy`:
    ``True``; a wrapper: its base's)."""

    @property
    def compilable(self) -> bool: ...


@runtime_checkable
class DrawingEnergy(Protocol):
    """A stateful energy that can draw an evaluation's random numbers beforehand (structured
    SGMCMC's θ̃ and masks, from its own generator), so that a compiled step traces only the
    arithmetic: ``draw_for_step(num_chains, dtype, device)`` draws them (``None``: nothing to
    draw), ``use_draws(drawn)`` hands them to the next evaluation. The :class:`StatefulEnergy`
    members as well (the compiled step restores them when a trace fails)."""

    def draw_for_step(self, num_chains: int, dtype: torch.dtype, device) -> list | None: ...

    def draws_next(self) -> bool: ...

    def use_draws(self, drawn: list | None) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, device=None) -> None: ...


@runtime_checkable
class StatefulEnergy(Protocol):
    """An energy that keeps state across iterations (structured SGMCMC's chain history).

    The run loop calls ``start(theta0)`` before the first iteration, ``observe(theta)`` after
    every iteration, and checkpoints ``state_dict()`` / restores ``load_state_dict(state,
    device)``. ``fresh()`` returns a copy with its own (empty) state, so that two runs never
    share mutable state through one energy object.
    """

    def start(self, theta0: Tensor) -> None: ...

    def observe(self, theta: Tensor) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, device=None) -> None: ...

    def fresh(self) -> Self: ...
