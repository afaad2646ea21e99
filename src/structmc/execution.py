"""How a run's iteration executes: the strategy a :class:`~structmc.run.Run` is given.

A :class:`Run` owns the per-run state (energy copy, sampler, state, generator, stream, counters)
and asks its :class:`Execution` how one iteration is computed. Three strategies compute the same
iteration:

* :class:`Execution` (``"eager"``, the default): the sampler's ``step`` on the run's
  :class:`~structmc.oracle.Oracle`, op by op — the readable reference path.
* :class:`~structmc.compiled.Compiled` (``"compiled"``): the whole iteration — minibatch gather,
  the estimator's value and gradient, the sampler's update and noise — as one
  ``torch.compile``-d graph, its random draws made beforehand from the run's generator in the
  eager order (so the same seed gives the same chain, to float rounding).
* :class:`~structmc.distributed.DistributedExecution` (``distributed=True``): the ranks of a
  process group compute each gradient together.

The run loop knows none of them: it calls the hooks below in this order — :meth:`check` (before
any compute), :meth:`stream`, :meth:`setup`, :meth:`oracle`, :meth:`bind` (once the state
exists), then :meth:`step` each iteration, and :meth:`settle` wherever the run stops.
"""

from __future__ import annotations

from typing import Any

from .oracle import Oracle


class Execution:
    """Eager execution, and the hooks every strategy answers (each a no-op or the eager
    behaviour here). A strategy instance belongs to one run (:func:`as_execution` copies the
    caller's)."""

    name = "eager"
    context: Any = None  # a distributed run's process-group context (run.distributed)

    def check(self, sampler, energy, source, data) -> None:
        """Refuse, before any compute, what this strategy cannot run."""

    def stream(self, data, batch_size, num_chains, generator, batching):
        """The run's minibatch stream, or ``None`` for the run's default."""
        return None

    def setup(self, energy, sampler, estimator, theta0, data, seed, batch_size, batching) -> None:
        """Work before the first iteration (checks across processes, a control variate's centre)."""

    def oracle(self, energy, estimator, stream, generator) -> Oracle:
        return Oracle(energy, estimator, stream, generator)

    def bind(self, run) -> None:
        """The run is set up (its state exists): prepare what the steps need."""

    def step(self, run, lr):
        """One iteration: ``(state, info)``."""
        return run.sampler.step(run.state, run.oracle, lr, run.generator)

    def settle(self, run) -> None:
        """The run stops here (the end of :meth:`~structmc.run.Run.iterate`, a checkpoint, a
        restore): give back anything computed ahead of ``run.iteration`` (the run's generator and
        stream as they are after it)."""

    def settings(self) -> dict:
        """What this strategy adds to the run's settings (resume refuses a mismatch)."""
        return {}

    def describe(self) -> str:
        return self.name


Eager = Execution

__all__ = ["Execution", "Eager"]
