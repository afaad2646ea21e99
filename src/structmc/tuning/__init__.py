"""Tuning SGMCMC hyperparameters: MAMBA (Coullon, South & Nemeth 2023) and its baselines.

* :func:`mamba`: successive halving over :class:`Arm` s under a budget of seconds, iterations
  or gradient evaluations, ranked by KSD (default), FSSD or any function of the samples.
* :func:`grid_search`, :func:`heuristic`: the paper's baselines.
* :func:`grid`: arms from the product of value lists; :func:`lr_from_paper` converts the
  paper's step size h to our ``lr``.

Arms (and their metric) run as tasks on an executor (:mod:`structmc.executors`): in process
by default, or on a process pool, Dask or Ray. See docs/tuning.md.
"""

from .arms import Arm, as_arms, grid, lr_from_paper
from .baselines import grid_search, heuristic
from .mamba import TuningResult, arm_seed, mamba, num_rounds, round_budget, round_sizes, survivors
from .metrics import FSSD, KSD, FunctionMetric, as_metric
from .problem import Problem

__all__ = [
    "Arm",
    "grid",
    "as_arms",
    "lr_from_paper",
    "mamba",
    "grid_search",
    "heuristic",
    "TuningResult",
    "num_rounds",
    "round_sizes",
    "round_budget",
    "survivors",
    "arm_seed",
    "KSD",
    "FSSD",
    "FunctionMetric",
    "as_metric",
    "Problem",
]
