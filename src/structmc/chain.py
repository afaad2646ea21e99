"""The result of a run: kept samples ``[chains, draws, P]`` plus per-step information.

A :class:`Chain` holds data only; :func:`structmc.storage.save_chain` /
:func:`structmc.storage.load_chain` write and read it (and assemble one from a run folder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from .space import ParamSpace


@dataclass
class Chain:
    """Kept draws of ``num_chains`` chains.

    Attributes
    ----------
    samples : ``[C, D, P]`` tensor of kept draws (flat parameter vectors).
    space : layout of the flat vector; ``chain["fc1.weight"]`` gives ``[C, D, *shape]`` views.
    draw_steps : ``[D]`` iteration (1-based count of sampler iterations) at which each draw was kept.
    info : per-iteration records over all ``S`` iterations run so far, ``{key: [..., S]}``:
        ``energy [C, S]`` minibatch energy estimate, ``lr [S]`` step size, ``grad_evals [S]``
        model gradient evaluations per chain, ``time [S]`` seconds spent in sampler steps,
        plus the sampler's own records (e.g. SGNHT's ``thermostat [C, S]``, a Metropolis
        sampler's acceptance).
    config : sampler, gradient estimator and run settings, for reports.
    buffers : for a module with buffers (BatchNorm running statistics), each chain's buffers
        at the end of the run (``[{name: tensor}]``, one per chain), which
        :func:`structmc.predictive` uses for that chain's draws; ``None`` otherwise.
    """

    samples: Tensor
    space: ParamSpace
    draw_steps: Tensor
    info: dict[str, Tensor] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    buffers: list[dict[str, Tensor]] | None = None

    @property
    def num_chains(self) -> int:
        return self.samples.shape[0]

    @property
    def num_draws(self) -> int:
        return self.samples.shape[1]

    @property
    def dim(self) -> int:
        return self.samples.shape[2]

    def __getitem__(self, name: str) -> Tensor:
        return self.space.unflatten(self.samples)[name]

    def named(self) -> dict[str, Tensor]:
        """All named views ``{name: [C, D, *shape]}``."""
        return self.space.unflatten(self.samples)

    def flat_draws(self) -> Tensor:
        """Draws of all chains pooled: ``[C * D, P]``."""
        return self.samples.reshape(-1, self.dim)

    def __repr__(self) -> str:
        return (
            f"Chain(chains={self.num_chains}, draws={self.num_draws}, dim={self.dim}, "
            f"sampler={self.config.get('sampler', {}).get('sampler')})"
        )

    def to_arviz(self, var_names=None):
        """The draws as ArviZ data with dims ``(chain, draw, ...)``: an ``arviz.InferenceData``
        with ArviZ 0.x (Python 3.11), an ``xarray.DataTree`` with ArviZ 1.x (Python >= 3.12;
        checked by ``bench/check_arviz1.py``); groups ``posterior`` and, when the run's
        ``info`` has them, ``sample_stats``. See :func:`structmc.diagnostics.to_arviz`
        (needs ``structmc[arviz]``)."""
        # a higher layer (diagnostics reads run folders, which hold chains), resolved at call
        # time (importlib): not an import edge, so chain stays below storage
        import importlib

        return importlib.import_module("structmc.diagnostics.interop").to_arviz(self, var_names=var_names)
