"""The papers' models as energies: each model of :mod:`structmc.models` with the likelihood
and prior its paper uses (the table in :mod:`structmc.models.catalogue`).

``energy_for(name, num_data=..., **model_kwargs)`` builds the module and wraps it in a
:class:`~structmc.energy.ModuleEnergy` ready for :func:`structmc.sample`; ``"pmf"`` gives a
:class:`~structmc.energy.LogDensityEnergy` built from the :class:`~structmc.models.PMF`
log-likelihood and log prior, with the N/n scaling in the energy (``energy.model`` is the PMF).
"""

from __future__ import annotations

from .energy import LogDensityEnergy, ModuleEnergy
from .models.catalogue import MODELS, build_model, likelihood_for_task
from .models.pmf import PMF


def energy_for(
    name: str,
    *,
    num_data: int | None = None,
    prior_std=None,
    noise_std: float | None = None,
    likelihood=None,
    seed: int = 0,
    data=None,
    **model_kwargs,
):
    """A :class:`~structmc.energy.ModuleEnergy` of model ``name`` (any entry of
    :data:`structmc.models.MODELS`) with its paper's likelihood and prior (overridable), or
    for ``"pmf"`` the PMF log density (keyword arguments go to :class:`~structmc.models.PMF`;
    ``num_data`` is N, applied by the energy like any other).

    ``seed`` draws the module's initial weights (default 0) without touching the global random
    state, so the same call gives the same module, and with ``init=None`` the same chain, in
    every process; pass another seed for another start (``None``: the global random state
    draws it, as ``nn.Module`` does).

    ``data`` sizes a model that has ``from_data`` (the generic ``linear`` / ``mlp``) and
    gives the likelihood of its task where the model has none of its own; it does not set
    ``num_data`` (:func:`structmc.sample` fills N from the data it is given)."""
    spec = MODELS.get(name)
    if name == "pmf":
        pmf = PMF(**model_kwargs)
        return LogDensityEnergy(
            dim=pmf.dim, log_likelihood=pmf.log_likelihood, log_prior=pmf.log_prior, num_data=num_data, model=pmf
        )
    module = build_model(name, seed=seed, data=data, **model_kwargs)
    lik = likelihood or spec.likelihood
    if lik is None:
        if data is None:
            raise ValueError(f"model {name!r} takes its likelihood from the data set's task: pass data= or likelihood=")
        lik = likelihood_for_task(data.task)
    return ModuleEnergy(
        module,
        lik,
        prior_std=spec.prior_std if prior_std is None else prior_std,
        num_data=num_data,
        noise_std=noise_std if noise_std is not None else spec.noise_std,
    )
