"""The baselines MAMBA is compared with (Coullon et al. 2023, Sect. 4 and App. B.1).

* :func:`grid_search`: every arm runs for the whole per-arm budget, batch fixed at 10% of
  the data (the paper's), ranked by the same metric as MAMBA or a validation metric (the
  paper's grid search ranks step sizes by test log-loss, starting from the MAP plus noise).
* :func:`heuristic`: step size h = 1/N (Brosse et al. 2018), batch 10%.
"""

from __future__ import annotations

from ..run import Budget
from ..samplers import SAMPLERS
from .arms import Arm, as_arms, lr_from_paper
from .halving import _as_budget, check_scorable, warn_unscored
from .mamba import _run_rounds
from .problem import Problem, as_problem
from .records import TuningSettings
from .result import TuningResult


def heuristic(
    num_data: int,
    sampler: str = "sgld",
    *,
    batch_size: float | int | None = 0.1,
    gradient: str = "minibatch",
    **hyperparameters,
) -> Arm:
    """The arm with the paper's heuristic step size ``h = 1/N`` (converted to our ``lr`` by
    :func:`~structmc.tuning.lr_from_paper`: ε = 2/N for SGLD, η = 1/N for SGHMC/SGNHT) and
    batch 10%; other hyperparameters (``num_leapfrog``, ``friction``, ``a``) as given."""
    if isinstance(num_data, bool) or int(num_data) != num_data or num_data < 1:
        raise ValueError(f"num_data must be a positive integer, got {num_data!r}")
    name = SAMPLERS.resolve(sampler)
    cfg = {"name": name, **hyperparameters, "lr": lr_from_paper(name, 1.0 / int(num_data))}
    return Arm(cfg, batch_size, gradient)


def grid_search(
    target,
    init,
    arms,
    budget: Budget,
    *,
    data=None,
    batch_size: float | int | None = 0.1,
    metric="ksd",
    executor=None,
    seed: int = 0,
    num_chains: int = 1,
    batching: str = "epoch",
    centre=None,
    thin: int = 10,
    max_samples: int = 256,
    min_samples: int = 10,
    metric_cost: float | None = 0.25,
    warmup: int = 2,
    score_data: int | None = None,
    score_batches: str | None = None,
    validation=None,
    out_dir=None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | None = None,
    problem: Problem | None = None,
) -> TuningResult:
    """Run every arm for ``budget`` (per arm) and choose the lowest ``metric``.

    ``batch_size`` overrides every arm's batch (default 10%, the paper's; ``None`` keeps the
    arms' own, duplicates removed). ``metric`` as in :func:`~structmc.tuning.mamba`, e.g. a
    validation log-loss ``fn(samples, problem)`` using ``problem.validation``. Other options
    as in :func:`~structmc.tuning.mamba`; one round, all arms in parallel on ``executor``.
    """
    arms = as_arms(arms)
    if batch_size is not None:
        seen, fixed = set(), []
        for a in arms:
            b = a.replace(batch_size=batch_size)
            key = repr(b.to_dict())
            if key not in seen:
                seen.add(key)
                fixed.append(b)
        arms = fixed
    budget = _as_budget(budget)
    # one round of every arm (eta = M + 1 is only recorded in the trace), scored on its own samples
    settings = TuningSettings(
        "grid_search",
        budget,
        metric,
        len(arms) + 1,
        seed=seed,
        thin=thin,
        max_samples=max_samples,
        min_samples=min_samples,
        metric_cost=metric_cost,
        warmup=warmup,
        executor=executor,
        out_dir=out_dir,
        resume=resume,
        overwrite=overwrite,
        progress=progress,
    )
    check_scorable(budget, thin, settings.min_scored, arms=len(arms), rounds=1, total=budget)  # per arm
    problem = as_problem(
        target,
        init,
        problem,
        data=data,
        num_chains=num_chains,
        batching=batching,
        centre=centre,
        score_data=score_data,
        score_batches=score_batches,
        validation=validation,
        seed=seed,
    )
    result = _run_rounds(problem, arms, [(budget, 1)], settings)
    warn_unscored(result, min_samples)
    return result


__all__ = ["grid_search", "heuristic"]
