"""SGMCMC samplers: each owns only its update rule; gradients come from an estimator."""

from .base import Sampler
from .psgld import PSGLD, PSGLDState
from .sghmc import SGHMC, SGHMCState
from .sgld import SGLD, SGLDState
from .sgnht import SGNHT, SGNHTState

SAMPLERS = {"sgld": SGLD, "psgld": PSGLD, "sghmc": SGHMC, "sgnht": SGNHT}


def sampler_from_config(cfg: dict) -> Sampler:
    """``{"name": "sghmc", "lr": 1e-4, "friction": 0.1}``; ``lr`` may be a schedule config."""
    from ..schedules import schedule_from_config

    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose from {sorted(SAMPLERS)}")
    if "lr" not in cfg:
        raise ValueError(f"sampler {name!r} needs lr")
    cfg["lr"] = schedule_from_config(cfg["lr"])
    return SAMPLERS[name](**cfg)


__all__ = ["Sampler", "SGLD", "PSGLD", "SGHMC", "SGNHT", "SAMPLERS", "sampler_from_config",
           "SGLDState", "PSGLDState", "SGHMCState", "SGNHTState"]
