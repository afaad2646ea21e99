"""Moved to :mod:`structmc.partitions` (shared by structured SGMCMC and blocked Gibbs); this
module re-exports it for older imports."""

from ..partitions import *  # noqa: F401,F403
from ..partitions import Partition, __all__  # noqa: F401
