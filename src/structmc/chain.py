"""The result of a run: kept samples ``[chains, draws, P]`` plus per-step information."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
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
    info : per-iteration records over all ``S`` iterations run so far:
        ``lr [S]`` step size, ``energy [C, S]`` minibatch energy estimate, ``time [S]`` seconds
        since sampling started (set-up excluded).
    config : sampler, gradient estimator and run settings, for reports.
    """

    samples: Tensor
    space: ParamSpace
    draw_steps: Tensor
    info: dict[str, Tensor] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

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
        return (f"Chain(chains={self.num_chains}, draws={self.num_draws}, dim={self.dim}, "
                f"sampler={self.config.get('sampler', {}).get('sampler')})")

    def to_arviz(self, var_names=None):
        """ArviZ InferenceData with dims (chain, draw, ...) (needs ``structmc[arviz]``)."""
        from .diagnostics.interop import to_arviz

        return to_arviz(self, var_names=var_names)

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write ``chain.pt`` (tensors) and ``chain.json`` (config) into the folder ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"samples": self.samples, "draw_steps": self.draw_steps, "info": self.info,
                    "space": [(i.name, i.shape) for i in self.space.params]}, path / "chain.pt")
        (path / "chain.json").write_text(json.dumps(self.config, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> "Chain":
        """Load a saved chain, or assemble one from a run folder's sample chunks."""
        path = Path(path)
        if (path / "chain.pt").exists():
            d = torch.load(path / "chain.pt", weights_only=True)
            config = json.loads((path / "chain.json").read_text()) if (path / "chain.json").exists() else {}
            return cls(d["samples"], ParamSpace(d["space"]), d["draw_steps"], d["info"], config)
        from .storage import RunFolder

        return RunFolder(path).load_chain()
