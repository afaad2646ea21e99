"""structmc: scalable approximate MCMC for Bayesian neural networks in PyTorch.

Conventions (docs/conventions.md): ``lr`` = ε, energy Û(θ) = -(N/n)Σ_batch log p(y|x,θ) - log p(θ),
SGLD θ ← θ - (ε/2)∇Û + N(0, εT).
"""

from .chain import Chain
from .energy import Energy, LogDensityEnergy, ModuleEnergy, full_data_value_and_grad, make_likelihood
from .gradients import ControlVariate, Minibatch
from .optimize import find_map
from .predictive import predictive
from .run import DivergenceError, sample
from .samplers import PSGLD, SGHMC, SGLD, SGNHT, Sampler
from .schedules import Constant, Cyclical, Polynomial, StepDecay, steps_per_epoch
from .space import ParamSpace
from . import structured  # noqa: E402  (structmc.structured.StructuredEnergy, partitions, history)

__version__ = "0.1.0"

__all__ = [
    "Chain", "Energy", "LogDensityEnergy", "ModuleEnergy", "full_data_value_and_grad", "make_likelihood",
    "ControlVariate", "Minibatch", "find_map", "predictive", "DivergenceError", "sample",
    "SGLD", "PSGLD", "SGHMC", "SGNHT", "Sampler", "Constant", "Cyclical", "Polynomial", "StepDecay",
    "steps_per_epoch", "ParamSpace",
]
