"""structmc: scalable approximate MCMC for Bayesian neural networks in PyTorch.

Conventions (docs/conventions.md): ``lr`` = ε, energy Û(θ) = -(N/n)Σ_batch log p(y|x,θ) - log p(θ),
SGLD θ ← θ - (ε/2)∇Û + N(0, εT).
"""

from . import distributed, gibbs, partitions, structured, zoo  # noqa: E402, F401  (attributes: torch.distributed runs, blocks, S/Sd energies, models as energies)
from . import hierarchical as _hierarchical  # noqa: E402
from . import priors as _priors  # noqa: E402
from .batching import DataSource
from .chain import Chain
from .energy import (
    Energy,
    EnergyBase,
    HessianDiagEnergy,
    LogDensityEnergy,
    ModuleEnergy,
    NoisyGradientEnergy,
    StatefulEnergy,
    WrappedEnergy,
    full_data_value_and_grad,
    make_likelihood,
)
from .evaluation import evaluate, evaluate_probs
from .executors import run_chains
from .gradients import ControlVariate, Minibatch
from .optimize import find_map
from .oracle import Oracle
from .predictive import PosteriorPredictive, draw_module, predictive
from .run import Budget, DivergenceError, Run, iterate, sample
from .samplers import PSGLD, SGHMC, SGLD, SGNHT, Kernel, Sampler, ScaleAdaptedSGHMC, WindowAdaptation
from .schedules import Constant, Cyclical, Polynomial, StepDecay, steps_per_epoch
from .space import ParamSpace
from .storage import load_chain, save_chain

# structmc.priors.HierarchicalEnergy: the class's first home, the name pickles written then carry
# (and `from structmc.priors import HierarchicalEnergy`); set here, above both modules, so that the
# priors never import the energies (issue 38 item 4: no import circle)
_priors.HierarchicalEnergy = _hierarchical.HierarchicalEnergy  # type: ignore[attr-defined]
del _hierarchical, _priors

__version__ = "0.1.0"

__all__ = [
    "Chain",
    "Energy",
    "EnergyBase",
    "WrappedEnergy",
    "HessianDiagEnergy",
    "StatefulEnergy",
    "LogDensityEnergy",
    "ModuleEnergy",
    "NoisyGradientEnergy",
    "full_data_value_and_grad",
    "make_likelihood",
    "ControlVariate",
    "Minibatch",
    "Oracle",
    "find_map",
    "predictive",
    "PosteriorPredictive",
    "draw_module",
    "evaluate",
    "evaluate_probs",
    "Budget",
    "DivergenceError",
    "DataSource",
    "Run",
    "iterate",
    "sample",
    "run_chains",
    "load_chain",
    "save_chain",
    "SGLD",
    "WindowAdaptation",
    "PSGLD",
    "SGHMC",
    "SGNHT",
    "ScaleAdaptedSGHMC",
    "Kernel",
    "Sampler",
    "Constant",
    "Cyclical",
    "Polynomial",
    "StepDecay",
    "steps_per_epoch",
    "ParamSpace",
]


_LAZY_SUBMODULES = (
    "data",
    "priors",
    "tuning",
    "diagnostics",
    "models",
    "evaluation",
    "storage",
    "schedules",
    "batching",
    "optimize",
    "predictive",
    "recording",
)


def __getattr__(name: str):
    """``structmc.data``, ``structmc.priors``, ``structmc.tuning``, ... without an explicit
    import (loaded on first use)."""
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'structmc' has no attribute {name!r}")
