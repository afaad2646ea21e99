"""Structured SGMCMC (Alexos, Boyd & Mandt 2022): chain history, S and Sd energies, and the
partitions they use (defined in :mod:`structmc.partitions`, re-exported here)."""

from ..partitions import (
    Partition,
    by_finer_nodes,
    by_layer,
    by_neuron,
    custom,
    fully_factorized,
    fully_joint,
    make_partition,
    node_blocks,
    random_partition,
    round_robin,
)
from .energies import BernoulliMask, BetaMask, StructuredEnergy, UniformMask, make_mask, structured_optimum_gaussian
from .history import ChainHistory

__all__ = [
    "BernoulliMask",
    "BetaMask",
    "UniformMask",
    "StructuredEnergy",
    "make_mask",
    "structured_optimum_gaussian",
    "ChainHistory",
    "Partition",
    "by_finer_nodes",
    "by_layer",
    "by_neuron",
    "custom",
    "fully_factorized",
    "fully_joint",
    "make_partition",
    "node_blocks",
    "random_partition",
    "round_robin",
]
