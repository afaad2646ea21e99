"""The kernel protocol: what :class:`~structmc.run.Run` drives, one iteration at a time.

A kernel is a Markov transition over explicit state (blackjax's ``init`` + ``step``): the
SGMCMC samplers (:class:`~structmc.samplers.Sampler`: a diffusion's update rule, taken
``num_leapfrog`` times on the gradient estimates of an oracle) and blocked
Metropolis-within-Gibbs (:class:`~structmc.gibbs.MetropolisWithinGibbs`: a sweep of accept /
reject moves on minibatch energies) both implement it, and the run loop knows nothing else
about either. A new kind of sampler implements these members and runs through
:func:`structmc.sample`, :class:`~structmc.run.Run`, run folders, resume and the tuners
without a change to any of them:

* ``name`` (for messages and records) and ``lr``: a step-size schedule ``lr(iteration)``, or
  ``None`` for a kernel without one (the run loop then passes ``lr=None`` and records none);
* ``target_energy(energy)``: the energy to run on, given the run's (a Metropolis kernel may ask
  for the unscaled minibatch target);
* ``prepare(energy)``: a **copy** for one run, holding that run's scratch (buffers, index
  tensors, an incremental evaluator) and refusing, with ``ValueError``, an energy it cannot
  run on. The object the user built is configuration and is never changed;
* ``init(theta [C, P], generator) -> state``: the state tree at the start; it must carry the
  position as ``state.theta`` (a ``[C, P]`` tensor, e.g. a dataclass field), from which the run
  reads the draws (refused at set-up otherwise, naming the member);
* ``step(state, oracle, lr, generator) -> (state, info)``: one iteration; every random number
  from ``generator``, every energy or gradient through ``oracle`` (:class:`~structmc.oracle.Oracle`,
  which counts them); ``info`` holds ``[C]``- or ``[C, ...]``-shaped records (``energy`` at
  least, when there is one);
* ``state_dict(state) -> dict`` and ``load_state(dict) -> state``: the state, for checkpoints;
* ``config() -> dict``: the hyperparameters (JSON-able), for reports, run folders and resume.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class Kernel(Protocol):
    """One iteration of a Markov chain over explicit state (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def lr(self) -> Callable[[int], float] | None: ...

    def target_energy(self, energy: Any) -> Any: ...

    def prepare(self, energy: Any) -> Kernel: ...

    def init(self, theta: Tensor, generator: torch.Generator | None = None) -> Any: ...

    # lr: the schedule's value at this iteration (a float), or None for a kernel without one
    def step(self, state: Any, oracle: Any, lr: Any, generator: torch.Generator | None) -> tuple[Any, dict]: ...

    def state_dict(self, state: Any) -> dict[str, Any]: ...

    def load_state(self, d: dict[str, Any]) -> Any: ...

    def config(self) -> dict[str, Any]: ...


__all__ = ["Kernel"]
