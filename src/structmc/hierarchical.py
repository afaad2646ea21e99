"""Sampled prior scales: :class:`HierarchicalEnergy`, a :class:`~structmc.energy.ModuleEnergy`
whose Normal prior scales are coordinates of θ (an energy, so above the priors it uses)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import fingerprint
from .energy import WrappedEnergy
from .priors import Flat, GammaPrecision, HalfCauchy  # noqa: F401


class HierarchicalEnergy(WrappedEnergy):
    r"""A :class:`~structmc.energy.ModuleEnergy` whose Normal(0, σ_g²) prior scales are sampled:
    one σ_g per group g of parameters (``groups="layer"``: per layer; ``"param"``: per
    parameter tensor; or a :class:`~structmc.partitions.Partition`), each with ``hyperprior``
    (:class:`HalfCauchy` or :class:`GammaPrecision`). θ gains one coordinate s_g = log σ_g per
    group, named ``log_scale.<group>``, after the network's parameters:

    .. math::
        U(θ, s) = U_{lik}(θ) + \sum_g \Big[	frac12 e^{-2 s_g} \sum_{j \in g} θ_j^2
                  + n_g s_g\Big] - \sum_g \log p_{hyper}(s_g)

    (the last term includes the Jacobian of σ = e^s). Any sampler runs on it; ``predictive``,
    ``evaluate`` and ``forward_draws`` use the network part of each draw. The base energy's
    own prior is replaced (``base.with_prior(Flat())``). As a
    :class:`~structmc.energy.WrappedEnergy` it forwards the base's ``num_data``, ``device``,
    ``dtype``, ``requires_data``, per-chain buffers and checks; its ``space`` is its own.
    """

    def __init__(self, base, groups="layer", hyperprior=None, *, init_scale: float = 1.0):
        from .space import ParamSpace

        if not hasattr(base, "with_prior"):
            raise TypeError(f"HierarchicalEnergy wraps a ModuleEnergy, got {type(base).__name__}")
        if not float(init_scale) > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale}")
        self.hyperprior = HalfCauchy(1.0) if hyperprior is None else hyperprior
        if not (hasattr(self.hyperprior, "energy") and hasattr(self.hyperprior, "grad")):
            raise TypeError("hyperprior must be HalfCauchy(...) or GammaPrecision(...) (energy and grad in s = log σ)")
        super().__init__(base.with_prior(Flat()))
        space = base.space
        names, ids = self._groups(space, groups)
        self.group_names, self.num_groups = names, len(names)
        self.group_ids = ids.to(base.device)
        self.group_sizes = torch.bincount(ids, minlength=len(names)).to(device=base.device, dtype=base.dtype)
        self.net_dim = space.dim
        self._space = ParamSpace([(i.name, i.shape) for i in space.params] + [(f"log_scale.{n}", ()) for n in names])
        self.init_scale = float(init_scale)
        self.groups_spec = groups

    @staticmethod
    def _groups(space, groups):
        if isinstance(groups, str):
            if groups == "layer":
                names, ids = [], torch.empty(space.dim, dtype=torch.long)
                for g, layer in enumerate(space.layers):
                    names.append(layer.name or str(g))  # a bare module's layer has no name
                    for pname in [layer.weight, layer.bias] if layer.kind != "other" else list(layer.other):
                        if pname is not None:
                            ids[space[pname].slice] = g
                return names, ids
            if groups == "param":
                ids = torch.empty(space.dim, dtype=torch.long)
                for g, info in enumerate(space.params):
                    ids[info.slice] = g
                return [i.name for i in space.params], ids
            raise ValueError(f"groups must be 'layer', 'param' or a Partition, got {groups!r}")
        ids = getattr(groups, "group_ids", None)
        if ids is None or ids.shape != (space.dim,):
            raise ValueError("groups must be 'layer', 'param' or a Partition of the network's parameters")
        return [str(g) for g in range(int(groups.num_groups))], ids.long().cpu()

    # -- the Energy protocol (the rest forwarded by WrappedEnergy) -------------------------------
    @property
    def space(self):
        """The network's parameters, then one ``log_scale.<group>`` per group."""
        return self._space

    def check(self, data=None, init=None, batch_size=None, batching=None, *, num_points=None) -> None:
        """The base's checks, on the network part of ``init`` (log σ_g ranges over the reals)."""
        self.base.check(
            data, None if init is None else init[..., : self.net_dim], batch_size, batching, num_points=num_points
        )

    def describe(self) -> dict:
        """Kind, ``num_data``, the groups, hyperprior and network size hashed as ``hierarchical``,
        and the base's description."""
        part, unchecked = fingerprint.value_fingerprint(
            {
                "config": self.config(),
                "hyperprior": self.hyperprior,
                "group_ids": self.group_ids,
                "net_dim": self.net_dim,
            },
            "the hierarchical prior",
        )
        out: dict = {"kind": type(self).__name__, "num_data": self.num_data, "hierarchical": part}
        if unchecked:
            out["unfingerprintable"] = unchecked
        out["base"] = self.base.describe()
        return out

    def initial_position(self, source: str = "module", *, generator=None, num_chains=None):
        """The module's parameters and log σ_g = log ``init_scale`` (``"module"`` only: the
        hyperprior's draws of σ can be extreme; give ``init=`` for anything else)."""
        if source != "module":
            raise ValueError(f"a HierarchicalEnergy starts from 'module' (or give init=), got {source!r}")
        net = self.base.initial_position()  # type: ignore[attr-defined]  # a ModuleEnergy (checked in __init__)
        s = torch.full((self.num_groups,), math.log(self.init_scale), dtype=net.dtype, device=net.device)
        out = torch.cat([net, s])
        return out if num_chains is None else out.expand(num_chains, -1).clone()

    def _hier(self, theta: Tensor, grad: bool):
        w, s = theta[:, : self.net_dim], theta[:, self.net_dim :]
        sq = torch.zeros(theta.shape[0], self.num_groups, dtype=theta.dtype, device=theta.device)
        sq.index_add_(1, self.group_ids, w * w)
        inv_var = torch.exp(-2 * s)  # [C, G]
        energy = (0.5 * inv_var * sq + self.group_sizes * s + self.hyperprior.energy(s)).sum(-1)
        if not grad:
            return energy, None
        g_w = w * inv_var.index_select(1, self.group_ids)
        g_s = -inv_var * sq + self.group_sizes + self.hyperprior.grad(s)
        return energy, torch.cat([g_w, g_s], 1)

    def value_and_grad(self, theta, batch):
        lik, g_lik = self.base.value_and_grad(theta[:, : self.net_dim].contiguous(), batch)
        hier, g_hier = self._hier(theta, True)
        g_hier[:, : self.net_dim] += g_lik
        return lik + hier, g_hier

    def value(self, theta, batch):
        return self.base.value(theta[:, : self.net_dim].contiguous(), batch) + self._hier(theta, False)[0]

    def check_data(self, data):
        return self.base.check_data(data)

    # -- predictions use the network part of each draw -------------------------------------------
    @property
    def predictive_energy(self):
        """The energy that predicts from this energy's draws (see :class:`~structmc.energy.Energy`):
        itself, since :meth:`forward_draws` takes whole draws and drops their ``log_scale`` part."""
        return self

    @property
    def likelihood(self):
        return self.base.likelihood

    @property
    def module(self):
        return self.base.module

    def forward_draws(self, samples, inputs, **kw):
        return self.base.forward_draws(samples[..., : self.net_dim], inputs, **kw)

    def scales(self, draws: Tensor) -> Tensor:
        """σ_g of draws ``[..., P]`` -> ``[..., G]``."""
        return draws[..., self.net_dim :].exp()

    def config(self) -> dict:
        return {"groups": self.group_names, "hyperprior": self.hyperprior.describe()}

    def describe_v1(self) -> dict:
        """Version 1: :meth:`config` and the likelihood's name and noise."""
        return {
            "hierarchical": fingerprint.json_text(self.config()),
            "likelihood": {"name": self.likelihood.name, "noise_std": self.likelihood.noise_std},
        }


# Its home when runs were first written was structmc.priors: the fingerprint records it under that
# name (structmc.fingerprint's _RECORDED_AS), so those runs still resume, and a pickle naming
# structmc.priors.HierarchicalEnergy still loads (structmc/__init__.py sets that attribute of
# structmc.priors; the priors never import the energies, issue 38 item 4).

__all__ = ["HierarchicalEnergy"]
