"""Minibatch blocked Metropolis-within-Gibbs for neural networks (Papamarkou 2023).

``MetropolisWithinGibbs(partition, proposal_var)`` is a sampler of the library: it runs
through :func:`structmc.sample` (batching, storage, checkpoints, ``Chain``) with its blocks
taken from :mod:`structmc.partitions`. :func:`acceptance` turns a chain's ``accept`` record
into rates per block, node or layer over any iteration window.
"""

from .incremental import IncrementalMLP, why_not_incremental
from .mwg import Adapt, MetropolisWithinGibbs, MWGState
from .proposals import acceptance

__all__ = ["MetropolisWithinGibbs", "MWGState", "Adapt", "acceptance", "IncrementalMLP", "why_not_incremental"]
