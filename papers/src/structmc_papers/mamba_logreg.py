r"""MAMBA on the simulated logistic regression: Table 1 of Coullon, South & Nemeth
("Efficient and generalizable tuning strategies for SGMCMC", Sect. 4.1, Fig. 1, App. C.1,
Tables 4 and 5).

Model and data (App. C.1, the reference code): d = 10, θ_true ~ N(0, 10 I), one
u ~ U(−0.4, 0.4), Σᵢⱼ = u^|i−j|, x ~ N(0, Σ), y ~ Bernoulli(σ(θᵀx)), N = 10⁶ rows in
``full`` (first 80 % train, 20 % test; :func:`structmc.data.synthetic.logistic_regression_data`);
prior N(0, 10 I), no intercept. The energy is the library's
``LogDensityEnergy(dim=10, log_likelihood=..., log_prior=...)`` (N/n scaling in the energy).
The MAP (Adam, lr 1e-2, batch 1 %, 5,000 steps) is the start of every run and the
control-variate centre.

Methods, for each of SGLD, SGLD-CV, SGHMC, SGHMC-CV, SGNHT, SGNHT-CV (see
:mod:`structmc_papers._mamba`): MAMBA-KSD and MAMBA-FSSD over log10 h ∈ {−1, −1.5, ...,
−7.5} × batch {100, 10, 1, 0.1} % (× L ∈ {5, 10} for SGHMC): 56 arms (112 for SGHMC),
η = 3, budget T such that the arm surviving every round samples for R = 1 s
(:func:`~structmc_papers._mamba.total_budget`: T ≈ 12.5 s for 56 arms, ≈ 10.8 s for 112);
grid search over the same step sizes (× L) at batch 10 %, 5,000 iterations per arm from
the MAP plus N(0, 0.2²) noise, ranked by the test log-loss (App. B.1, C.1.2); the
heuristic h = 1/N at batch 10 % (L = 10). Each chosen arm then runs from the MAP for 10 s;
we report its KSD (every 10th draw, full-data scores, IMQ kernel, V-statistic) and ξ(σ̂) =
‖σ̂ − σ_ref‖/‖σ_ref‖ against a reference posterior, plus the number of iterations and the
test accuracy (Table 5).

Reference posterior: NUTS (1,000 warm-up + 20,000 draws, as the paper) through NumPyro or
Pyro when one of them is importable (``Config.reference="nuts"``, or ``"auto"``); otherwise
(the default environment has neither) a full-batch Metropolis-adjusted Langevin chain from
the library (:class:`structmc.gibbs.MetropolisWithinGibbs` with one block and ``mala=True``,
step size adapted to 57 % acceptance during the warm-up) run in the coordinates whitened by
the Laplace approximation at the exact mode (Newton's method from the Adam MAP; θ = θ̂ + L z,
L Lᵀ = H⁻¹), so that an isotropic
proposal suits the target; exact (Metropolis-corrected) whatever the whitening. It is cached
on disk, keyed by d, N, the data seed and the chain settings
(``$STRUCTMC_CACHE/mamba-reference`` or ``~/.cache/structmc/mamba-reference``); the report
says which reference was used and its effective sample size.

Ten runs (Fig. 1: "KSD curves for ten independent runs ... the mean curve along with a
confidence interval (two standard deviations)"): every chosen arm is evaluated ``num_seeds``
times with independent seeds (run 0 has the former single run's seeds); the report gives each
method's mean ± 2 sd, the figure the mean curve and its ±2 sd band, and the verdicts read the
means — an ordering of ours (MAMBA below the others, CV below plain, more iterations) holds only
when the gap exceeds ``ordering_se`` (1) combined standard errors (:func:`._mamba.resolved_below`).

App. B.2 / Sect. 3.3 ("the stochastic KSD/FSSD produces results similar to the fullbatch
KSD/FSSD"; Fig. 4): :func:`stein_ranking` runs SGLD at batch 1 % over the step grid (1 s per
arm), scores the same draws on the full data and stochastically, and :func:`stein_rows` judges
whether the stochastic KSD / FSSD rank the arms as the full-data ones (Kendall's τ_b ≥ 0.6 and
the same best arm), for the paper's estimator (a fresh minibatch per draw: the claim) and the
library's ``Problem(score_data=m, score_batches="fixed")`` (one fixed subset, the library's
only stochastic scores before ``score_batches="per_draw"`` became the default: a check).

Verdicts compare orderings, not magnitudes (see :mod:`~structmc_papers._mamba`): KSD
grows with N (the scores do) and depends on the number of draws, so our magnitudes are
comparable with Table 1 only in the ``full`` preset. The report also gives the tuner's own
wall-time split (sampling, scores, metric, set-up, overhead) against T for every MAMBA run;
the issue's target is a whole tuning wall time ≤ 1.5 T.

Presets: ``tiny`` (N = 2,500, 3 step sizes × 3 batches, iteration budgets: deterministic,
seconds, for CI; 3 evaluation runs), ``quick`` (N = 10⁵, the paper's grids, R = 1 s and thin 10, grid search
500 iterations per arm, 2 s evaluation runs, 3 of them per arm: about 9 minutes on a 2-core CPU),
``converged`` (the paper's N, R, grid iterations and 10 s evaluations on SGLD, SGLD-CV, SGNHT and SGNHT-CV,
five evaluation runs: about 75-100 minutes), ``full`` (the
paper's settings: N = 10⁶, R = 1 s, 5,000 iterations per grid arm, ten 10 s evaluations; not run
here).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from structmc import Budget, LogDensityEnergy, find_map, sample
from structmc.data.synthetic import logistic_regression_data
from structmc.tuning import FunctionMetric, Problem

from . import _mamba as M
from . import resolve_preset
from ._common import GaussianLogPrior, logistic_log_likelihood
from ._report import binomial_se
from ._shared import progress_log, restores_globals, save_cache

PAPER_R = 1.0  # seconds, Sect. 4.1

# Table 4: (log10 h, batch %, L) chosen by each method in the paper
PAPER_TABLE4 = {
    "SGLD": {"M-KSD": (-6, 1), "M-FSSD": (-5.5, 1), "Grid": (-6, 10), "Heuristic": (-6, 10)},
    "SGLD-CV": {"M-KSD": (-5, 0.1), "M-FSSD": (-5, 1), "Grid": (-5, 10), "Heuristic": (-6, 10)},
    "SGHMC": {"M-KSD": (-7, 0.1, 10), "M-FSSD": (-6, 1, 5), "Grid": (-7, 10, 10), "Heuristic": (-6, 10, 10)},
    "SGHMC-CV": {"M-KSD": (-6.5, 0.1, 10), "M-FSSD": (-6, 1, 5), "Grid": (-6.5, 10, 10), "Heuristic": (-6, 10, 10)},
    "SGNHT": {"M-KSD": (-7.5, 1), "M-FSSD": (-6, 1), "Grid": (-7.5, 10), "Heuristic": (-6, 10)},
    "SGNHT-CV": {"M-KSD": (-5.5, 1), "M-FSSD": (-5, 10), "Grid": (-4.5, 10), "Heuristic": (-6, 10)},
}
# Table 5: number of samples in the 10 s evaluation runs and test accuracy (%)
PAPER_SAMPLES = {
    "M-KSD": [22255, 55580, 28268, 24001, 21955, 19323],
    "M-FSSD": [21851, 18792, 5145, 4194, 19845, 3105],
    "Grid": [4005, 3232, 435, 355, 4055, 3329],
    "Heuristic": [3484, 2809, 428, 346, 4056, 3329],
}
PAPER_ACCURACY = {
    "M-KSD": [93.9] * 6,
    "M-FSSD": [93.9] * 6,
    "Grid": [93.9] * 6,
    "Heuristic": [93.9, 93.9, 92.7, 92.7, 93.9, 93.9],
}


@dataclass
class Config:
    num_data: int = 1_000_000  # rows in all; the first 80 % train, the rest test
    dim: int = 10
    data_seed: int = 0
    prior_var: float = 10.0
    samplers: tuple = M.SAMPLER_LABELS
    methods: tuple = M.METHODS
    log10_h: tuple = M.LOGREG_LOG10_H  # the paper's step grid (log10 of its h)
    batches: tuple = M.LOGREG_BATCHES  # MAMBA's batch fractions
    R: float = PAPER_R  # MAMBA: budget of the arm that survives every round (seconds or iterations)
    budget_kind: str = "seconds"  # "seconds" (the paper) or "iterations" (deterministic)
    eta: int = 3
    grid_iterations: int = 5000  # grid search: iterations per arm (App. C.1.2)
    grid_noise: float = 0.2  # grid search starts from the MAP plus N(0, grid_noise²) noise
    grid_metric: str = "test"  # "test": test log-loss (the paper's), "ksd": the same KSD as MAMBA
    thin: int = 10  # tuner: keep every 10th draw for the metric (the paper)
    max_samples: int = 256
    min_samples: int = 10
    metric_cost: float | None = 0.25
    restart: str = "state"
    fssd_steps: int = 100  # FSSD-opt: Adam steps on the test locations (the paper: 100)
    fssd_kernel: str = "gauss"  # median-heuristic Gaussian; "imq" (length scale 1) ranks diverging chains best
    batching: str = "with_replacement"  # the reference code's minibatches
    eval_budget: float = 10.0  # evaluation run of each chosen arm (seconds or iterations)
    eval_kind: str = "seconds"
    eval_thin: int = 10  # KSD on every 10th draw
    eval_ksd_samples: int | None = 10_000  # at most this many (evenly spaced) draws in the KSD
    map_steps: int = 5000  # Adam, lr 1e-2, batch 1 % (the reference code)
    map_lr: float = 1e-2
    map_batch: float = 0.01
    reference: str = "auto"  # "auto": NUTS if numpyro/pyro is importable, else "mala"; "nuts"; "mala"
    reference_warmup: int = 1000
    reference_samples: int = 20_000
    reference_chains: int = 1
    reference_cache: str | None = "auto"  # a folder, "auto" ($STRUCTMC_CACHE/mamba-reference), None: no cache
    plot_traces: bool = True  # metric-by-round plot of every tuning run (tuning/<sampler>/<method>/)
    executor: str | None = None  # where arms run (structmc.executors.as_executor)
    threads: int | None = 1  # torch threads for the whole run (None: unchanged)
    seed: int = 0
    wall_target: float = 1.5  # issue target: tuning wall time <= 1.5 T
    factor: float = 1.5  # verdicts: "within x1.5 of the best method"
    accuracy_close_pp: float = 0.5  # verdicts: Table 5's accuracies "near the best" (the heuristic's gap: 1.2 pp)
    # Fig. 1: "KSD curves for ten independent runs ... the mean curve along with a confidence interval
    # (two standard deviations)": every chosen arm runs num_seeds times (run 0 is the single run of
    # before, same seed); the report gives mean ± 2 sd, the figure the band, the verdicts read the means
    num_seeds: int = 10
    ordering_se: float = 1.0  # an ordering holds when the means are ordered and the gap exceeds this many combined SEs
    # App. B.2 / Sect. 3.3: "the stochastic KSD/FSSD produces results similar to the fullbatch KSD/FSSD" —
    # SGLD at batch 1 % over the step grid, each arm run for stein_budget from the MAP (Fig. 4: 1 s),
    # its draws (thinned by `thin`, at most stein_max_samples) scored by full-data and stochastic scores
    stein_check: bool = True
    stein_sampler: str = "SGLD"
    stein_batch: float = 0.01  # the arms' batch and the stochastic scores' minibatch (Fig. 4: 1 %)
    stein_budget: float = 1.0
    stein_kind: str = "seconds"
    stein_max_samples: int = 1000
    value_k: float = 3.0  # issue 35 §1: a published value reproduced when |ours - paper| <= value_k combined SEs
    stein_min_tau: float = 0.6  # agreement: Kendall's tau_b >= 0.6 (80 % of arm pairs alike) and the same best arm


PRESETS = {
    "tiny": Config(
        num_data=2500,
        log10_h=(-3.0, -4.0, -5.0),
        batches=(1.0, 0.1, 0.01),
        R=16,
        budget_kind="iterations",
        grid_iterations=20,
        thin=1,
        min_samples=4,
        max_samples=32,
        fssd_steps=5,
        eval_budget=60,
        eval_kind="iterations",
        eval_thin=2,
        eval_ksd_samples=30,
        map_steps=100,
        plot_traces=False,
        reference="mala",
        reference_warmup=150,
        reference_samples=600,
        num_seeds=3,
        stein_budget=200,
        stein_kind="iterations",
        stein_max_samples=100,
    ),
    # quick: 3 evaluation runs per arm, not the paper's 10: one run of the 24 chosen arms costs ~80 s
    # (measured: 2.3-4.4 s per 2 s evaluation at N = 10^5, scoring included) and the App. B.2 check ~50 s,
    # so 3 runs make quick's listed ~330 s about 1.6x, 10 runs about 3.3x
    "quick": Config(num_data=100_000, grid_iterations=500, eval_budget=2.0, eval_ksd_samples=1000, num_seeds=3),
    # converged (issue 24): the paper's run length for Table 1's rows -- N = 10^6, R = 1 s, 5,000 grid-search
    # iterations per arm, 10 s evaluation runs with the KSD on every 10th draw (all of them: < 10,000) -- on
    # SGLD, SGLD-CV, SGNHT and SGNHT-CV. Cut: SGHMC and SGHMC-CV (their grid search alone, 28 arms x 5,000
    # iterations of L = 5 or 10 leapfrog steps at batch 10 %, takes ~70 and ~90 min) and 5 evaluation runs
    # per chosen arm instead of the paper's 10. Estimate for one torch thread on a core of its own, from CPU
    # times measured at N = 10^6 (OMP_NUM_THREADS=1, nice 10, load ~5 on the 2 cores, so CPU time stands for
    # the uncontended wall time; wall was ~3x): a full-data score costs 32 ms per draw, SGLD 0.8 / 0.37 /
    # 4.6 ms per iteration at batch 1 / 0.1 / 10 % (SGLD-CV 1.1 / 0.6 / 5.8): one run of the 16 chosen arms
    # 460-720 s (10 s each + 1,000-2,700 scored draws per MAMBA arm, ~200 per batch-10 % arm), x 5 = 40-60 min;
    # grid search ~25 min; MAMBA-KSD/-FSSD ~6 min; MALA reference ~3 min (cached after the first run); App. B.2
    # check ~2 min; MAP 15 s: ~75-100 min in all (full, six samplers and ten runs: ~5.3 h).
    "converged": Config(samplers=("SGLD", "SGLD-CV", "SGNHT", "SGNHT-CV"), num_seeds=5),
    "full": Config(),
}


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def make_energy(cfg: Config, num_train: int) -> LogDensityEnergy:
    return LogDensityEnergy(
        dim=cfg.dim,
        log_likelihood=logistic_log_likelihood,
        log_prior=GaussianLogPrior(cfg.prior_var),
        num_data=num_train,
    )


@torch.no_grad()
def predictive_probs(samples: Tensor, x: Tensor, chunk: int = 256) -> Tensor:
    """Posterior predictive P(y = 1 | x) averaged over ``samples [S, d]``."""
    total = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(0, samples.shape[0], chunk):
        total += torch.sigmoid(x @ samples[i : i + chunk].T.to(x)).to(torch.float64).sum(1)
    return total / samples.shape[0]


def log_loss(p: Tensor, y: Tensor) -> float:
    p = p.clamp(1e-12, 1 - 1e-12)
    y = y.to(p)
    return float(-(y * p.log() + (1 - y) * (1 - p).log()).mean())


def heldout_log_loss(samples: Tensor, problem) -> float:
    """Grid search's metric (App. B.1): log-loss of the posterior predictive on
    ``problem.validation`` (the test set, as the paper)."""
    x, y = problem.validation
    return log_loss(predictive_probs(samples, x), y)


# ---------------------------------------------------------------------------------------------
# reference posterior
# ---------------------------------------------------------------------------------------------
def _cache_dir(cfg: Config) -> Path | None:
    if cfg.reference_cache is None:
        return None
    if cfg.reference_cache != "auto":
        return Path(cfg.reference_cache).expanduser()
    root = os.environ.get("STRUCTMC_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "structmc"
    return base / "mamba-reference"


def _nuts_backend() -> str | None:
    for mod in ("numpyro", "pyro"):
        try:
            __import__(mod)
            return mod
        except ImportError:
            continue
    return None


def laplace(cfg: Config, theta_map: Tensor, x: Tensor, y: Tensor, chunk: int = 100_000) -> Tensor:
    """Hessian of the full-data energy at the MAP: Xᵀ diag(p(1−p)) X + I/prior_var (float64)."""
    m = theta_map.to(torch.float64)
    H = torch.eye(cfg.dim, dtype=torch.float64) / cfg.prior_var
    for i in range(0, x.shape[0], chunk):
        xb = x[i : i + chunk].to(torch.float64)
        p = torch.sigmoid(xb @ m)
        H += (xb * (p * (1 - p)).unsqueeze(1)).T @ xb
    return H


def posterior_mode(cfg: Config, theta: Tensor, x: Tensor, y: Tensor, steps: int = 50, chunk: int = 100_000) -> Tensor:
    """The exact posterior mode by Newton's method from ``theta`` (float64, full data): the
    centre of the reference chain's whitening (Adam's MAP is only approximate)."""
    m = theta.to(torch.float64).clone()
    for _ in range(int(steps)):
        grad = -m / cfg.prior_var
        for i in range(0, x.shape[0], chunk):
            xb = x[i : i + chunk].to(torch.float64)
            grad += xb.T @ (y[i : i + chunk].to(torch.float64) - torch.sigmoid(xb @ m))
        step = torch.linalg.solve(laplace(cfg, m, x, y, chunk), grad)
        m = m + step
        if float(step.norm()) < 1e-10 * (1.0 + float(m.norm())):
            break
    return m


class WhitenedLogLik:
    """log-likelihood of θ = m + L z as a function of z (picklable)."""

    def __init__(self, m: Tensor, L: Tensor):
        self.m, self.L = m, L

    def __call__(self, z: Tensor, batch) -> Tensor:
        return logistic_log_likelihood(self.m.to(z) + self.L.to(z) @ z, batch)


class WhitenedLogPrior:
    def __init__(self, m: Tensor, L: Tensor, var: float):
        self.m, self.L, self.prior = m, L, GaussianLogPrior(var)

    def __call__(self, z: Tensor) -> Tensor:
        return self.prior(self.m.to(z) + self.L.to(z) @ z)


def _reference_mala(cfg: Config, theta_map: Tensor, x: Tensor, y: Tensor) -> dict:
    from structmc.diagnostics import ess
    from structmc.gibbs import Adapt, MetropolisWithinGibbs
    from structmc.partitions import fully_joint

    m = posterior_mode(cfg, theta_map, x, y)
    H = laplace(cfg, m, x, y)
    C = torch.linalg.cholesky(H)
    L = torch.linalg.inv(C).T  # L Lᵀ = H⁻¹
    energy = LogDensityEnergy(
        dim=cfg.dim,
        log_likelihood=WhitenedLogLik(m.to(x.dtype), L.to(x.dtype)),
        log_prior=WhitenedLogPrior(m.to(x.dtype), L.to(x.dtype), cfg.prior_var),
        num_data=x.shape[0],
    )
    sampler = MetropolisWithinGibbs(
        fully_joint(cfg.dim),
        proposal_var=1.65**2 / cfg.dim ** (1 / 3),
        scaling="N/n",
        adapt=Adapt(steps=cfg.reference_warmup, target=0.574, by="block"),
        mala=True,
    )
    chains = int(cfg.reference_chains)
    per_chain = int(math.ceil(cfg.reference_samples / chains))
    t0 = time.perf_counter()
    chain = sample(
        energy,
        torch.zeros(cfg.dim, dtype=x.dtype),
        sampler,
        cfg.reference_warmup + per_chain,
        data=(x, y),
        batch_size=None,
        burn_in=cfg.reference_warmup,
        num_chains=chains,
        seed=cfg.seed + 777,
        progress=False,
    )
    seconds = time.perf_counter() - t0
    z = chain.samples.to(torch.float64)  # [C, S, d]
    theta = m + z @ L.T
    flat = theta.reshape(-1, cfg.dim)
    accept = float(torch.as_tensor(chain.info["accept"], dtype=torch.float64)[..., cfg.reference_warmup :].mean())
    e = ess(theta.to(torch.float32))
    return {
        "method": "mala",
        "description": (
            f"full-batch MALA (structmc.gibbs.MetropolisWithinGibbs, one block, mala=True) in Laplace-whitened "
            f"coordinates, {cfg.reference_warmup:,} adaptive warm-up + {per_chain * chains:,} draws "
            f"({chains} chain{'s' * (chains > 1)}), acceptance {100 * accept:.1f} %"
        ),
        "sd": flat.std(0).tolist(),
        "mean": flat.mean(0).tolist(),
        "num_samples": int(flat.shape[0]),
        "ess_min": float(e.min()),
        "ess_median": float(e.median()),
        "acceptance": accept,
        "seconds": seconds,
        "laplace_sd": torch.linalg.inv(H).diagonal().sqrt().tolist(),
        "mode": m.tolist(),
    }


def _reference_nuts(cfg: Config, backend: str, x: Tensor, y: Tensor) -> dict:  # pragma: no cover - optional deps
    import numpy as np

    t0 = time.perf_counter()
    sd_prior = math.sqrt(cfg.prior_var)
    if backend == "numpyro":
        import jax
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import MCMC, NUTS

        def model(X, Y):
            theta = numpyro.sample("theta", dist.Normal(0.0, sd_prior).expand([cfg.dim]).to_event(1))
            numpyro.sample("y", dist.Bernoulli(logits=X @ theta), obs=Y)

        mcmc = MCMC(NUTS(model), num_warmup=cfg.reference_warmup, num_samples=cfg.reference_samples, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(cfg.seed), x.numpy(), y.numpy())
        draws = np.asarray(mcmc.get_samples()["theta"], dtype=np.float64)
    else:
        import pyro
        import pyro.distributions as pdist
        from pyro.infer import MCMC, NUTS

        def model(X, Y):
            theta = pyro.sample("theta", pdist.Normal(torch.zeros(cfg.dim), sd_prior).to_event(1))
            pyro.sample("y", pdist.Bernoulli(logits=X @ theta), obs=Y)

        pyro.set_rng_seed(cfg.seed)
        mcmc = MCMC(
            NUTS(model), num_samples=cfg.reference_samples, warmup_steps=cfg.reference_warmup, disable_progbar=True
        )
        mcmc.run(x, y)
        draws = mcmc.get_samples()["theta"].detach().to(torch.float64).numpy()
    t = torch.from_numpy(draws)
    from structmc.diagnostics import ess

    e = ess(t.unsqueeze(0).to(torch.float32))
    return {
        "method": "nuts",
        "description": f"NUTS ({backend}), {cfg.reference_warmup:,} warm-up + "
        f"{cfg.reference_samples:,} draws, full data",
        "sd": t.std(0).tolist(),
        "mean": t.mean(0).tolist(),
        "num_samples": int(t.shape[0]),
        "ess_min": float(e.min()),
        "ess_median": float(e.median()),
        "seconds": time.perf_counter() - t0,
    }


def reference_posterior(cfg: Config, theta_map: Tensor, x: Tensor, y: Tensor) -> dict:
    """The reference posterior's mean and standard deviations (see the module docstring),
    read from the cache when there."""
    method = cfg.reference
    backend = None
    if method in ("auto", "nuts"):
        backend = _nuts_backend()
        if backend is None:
            if method == "nuts":
                raise ImportError("Config.reference='nuts' needs numpyro or pyro; use 'mala' or 'auto'")
            method = "mala"
        else:
            method = "nuts"
    elif method != "mala":
        raise ValueError(f"Config.reference must be 'auto', 'nuts' or 'mala', got {cfg.reference!r}")
    key = (
        f"logreg_d{cfg.dim}_N{cfg.num_data}_seed{cfg.data_seed}_pv{cfg.prior_var:g}_{method}"
        f"_w{cfg.reference_warmup}_s{cfg.reference_samples}_c{cfg.reference_chains}.pt"
    )
    folder = _cache_dir(cfg)
    path = None if folder is None else folder / key
    if path is not None and path.is_file():
        try:
            ref = torch.load(path, weights_only=False)
            ref["cached"], ref["path"] = True, str(path)
            return ref
        except Exception:  # a corrupt cache file is recomputed
            pass
    if method == "mala":
        ref = _reference_mala(cfg, theta_map, x, y)
    else:
        assert backend is not None  # "nuts" is chosen only when a backend was found
        ref = _reference_nuts(cfg, backend, x, y)
    ref["cached"], ref["path"] = False, None if path is None else str(path)
    if path is not None and not save_cache({k: v for k, v in ref.items() if k not in ("cached", "path")}, path):
        ref["path"] = None  # a read-only cache is not an error
    return ref


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/mamba-logreg",
    progress: bool | None = None,
    *,
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment; write ``report.json``, ``report.md`` (the common format of
    :mod:`structmc_papers._report`; every number under ``numbers``), the figures and the
    tuning traces (``tuning/<sampler>/<method>/trace.json``) to ``out_dir``; return the report.
    ``seed`` overrides the config's. Every tuner's outcome, evaluation run and the App. B.2
    check is saved under ``out_dir/units`` when it ends; ``resume=True`` reads back the finished
    ones of a run cut short (same config, else :class:`~._mamba.ResumeMismatch`) and runs the
    rest."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    unknown = [s for s in cfg.samplers if s not in M.SAMPLERS] + [m for m in cfg.methods if m not in M.METHODS]
    if unknown:
        raise ValueError(f"unknown sampler(s)/method(s) {unknown}")
    check_config(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = progress_log("mamba-logreg", progress)
    units = M.Units(out, asdict(cfg), resume=resume)
    with M.Threads(cfg.threads):
        return _run(cfg, preset, out, log, units)


def check_config(cfg: Config) -> None:
    """The settings of the ten runs and of the App. B.2 check, before any compute."""
    if isinstance(cfg.num_seeds, bool) or not isinstance(cfg.num_seeds, int) or cfg.num_seeds < 1:
        raise ValueError(
            f"Config.num_seeds must be an int >= 1 (evaluation runs per chosen arm), got {cfg.num_seeds!r}"
        )
    if not (isinstance(cfg.ordering_se, (int, float)) and math.isfinite(cfg.ordering_se) and cfg.ordering_se >= 0):
        raise ValueError(f"Config.ordering_se must be a finite number >= 0 (standard errors), got {cfg.ordering_se!r}")
    if cfg.stein_check:
        M.sampler_spec(cfg.stein_sampler)
        if cfg.stein_kind not in ("seconds", "iterations"):
            raise ValueError(f"Config.stein_kind must be 'seconds' or 'iterations', got {cfg.stein_kind!r}")
        if not 0 < float(cfg.stein_batch) <= 1:
            raise ValueError(f"Config.stein_batch must be a fraction of the data in (0, 1], got {cfg.stein_batch!r}")
        if not float(cfg.stein_budget) > 0 or int(cfg.stein_max_samples) < 2:
            raise ValueError("Config.stein_budget must be > 0 and Config.stein_max_samples >= 2")
        if not -1 <= float(cfg.stein_min_tau) <= 1:
            raise ValueError(f"Config.stein_min_tau must lie in [-1, 1] (Kendall's tau), got {cfg.stein_min_tau!r}")


STEIN_ESTIMATORS = {
    "subset": "one fixed random subset of m rows for every draw, N/m-scaled: Problem(score_data=m, "
    "score_batches='fixed'), the library's only stochastic scores before its per-draw default",
    "minibatch": "App. B.2's: every draw scored on its own minibatch of m rows (the sampler's stochastic gradient): "
    "Problem(score_data=m), score_batches='per_draw' (the default)",
}


def stein_ranking(cfg: Config, energy, theta_map: Tensor, data: tuple, log=None) -> dict:
    """App. B.2 (Fig. 4): ``cfg.stein_sampler`` at batch ``cfg.stein_batch`` over the step grid
    ``cfg.log10_h``, each arm run from the MAP for ``cfg.stein_budget`` (seconds or iterations);
    the draws (every ``cfg.thin``-th, at most ``cfg.stein_max_samples`` evenly spaced) are scored
    three ways — full data (what the tuner uses), a fixed subset of m = batch rows
    (``score_batches="fixed"``) and the paper's (a fresh minibatch of m rows per draw, the
    library's ``score_data=m`` default) — and each
    gives the KSD and the FSSD-opt of the tuner (:class:`structmc.tuning.KSD`, ``FSSD``: the same
    draws, the same seed). Returns ``{"labels", "m", "values": {estimator: {"ksd", "fssd": [per arm]}},
    "iterations", "errors", "seconds"}``; an arm whose run diverged has no value (ranks worst)."""
    from structmc.run import DivergenceError
    from structmc.tuning import FSSD, KSD
    from structmc.tuning.task import evenly

    t0 = time.perf_counter()
    x, y = data
    spec = M.sampler_spec(cfg.stein_sampler)
    arms = M.mamba_arms(spec, cfg.log10_h, (cfg.stein_batch,))
    n_train = int(x.shape[0])
    m = arms[0].batch_count(n_train) or n_train
    full = Problem(energy, theta_map, data=(x, y), centre=theta_map, batching=cfg.batching, seed=cfg.seed)
    scorers = {
        "full": full,
        "subset": Problem(
            energy, theta_map, data=(x, y), centre=theta_map, score_data=m, score_batches="fixed", seed=cfg.seed
        ),
        "minibatch": Problem(
            energy, theta_map, data=(x, y), centre=theta_map, score_data=m, score_batches="per_draw", seed=cfg.seed
        ),
    }
    budget = (
        Budget(seconds=float(cfg.stein_budget))
        if cfg.stein_kind == "seconds"
        else Budget(iterations=int(cfg.stein_budget))
    )
    values: dict = {k: {"ksd": [], "fssd": []} for k in scorers}
    labels, iterations, errors = [], [], []
    for k, arm in enumerate(arms):
        s = M.arm_summary(arm, n_train)
        labels.append(f"h=10^{s['log10_h']:g}" + (f", L={s['L']}" if s["L"] else ""))
        err, its, draws = None, 0, None
        try:
            chain = full.sample(arm, budget, seed=10_000 * cfg.seed + 500 + k, thin=cfg.thin)
            t = chain.info.get("time")
            its = int(t.shape[-1]) if t is not None else int(chain.draw_steps[-1]) if chain.num_draws else 0
            draws = chain.samples.reshape(-1, cfg.dim)
            if draws.shape[0] > cfg.stein_max_samples:
                draws = draws[evenly(torch.arange(draws.shape[0]), cfg.stein_max_samples)]
            if draws.shape[0] < 2 or not bool(torch.isfinite(draws).all()):
                err, draws = "fewer than two finite draws", None
        except DivergenceError as e:
            err = f"diverged: {e}"
        iterations.append(its)
        errors.append(err)
        for name, scorer in scorers.items():
            for metric_name, metric in (
                ("ksd", KSD()),
                ("fssd", FSSD(steps=cfg.fssd_steps, kernel=cfg.fssd_kernel, seed=cfg.seed)),
            ):
                v = None
                if draws is not None:
                    v = float(metric(draws, scorer))
                    v = v if math.isfinite(v) else None
                values[name][metric_name].append(v)
        if log is not None:
            log(
                f"App. B.2 {labels[-1]}: KSD full {values['full']['ksd'][-1]}, subset {values['subset']['ksd'][-1]}, "
                f"minibatch {values['minibatch']['ksd'][-1]}" + (f" ({err})" if err else "")
            )
    return {
        "sampler": spec.label,
        "batch_pct": 100.0 * float(cfg.stein_batch),
        "m": m,
        "budget": M.budget_dict(budget),
        "labels": labels,
        "values": values,
        "iterations": iterations,
        "errors": errors,
        "estimators": dict(STEIN_ESTIMATORS),
        "seconds": time.perf_counter() - t0,
    }


def _run(cfg: Config, preset, out: Path, log, units: M.Units | None = None) -> dict:
    t_all = time.perf_counter()
    phases = {}
    say = log or (lambda msg: None)

    t0 = time.perf_counter()
    ds = logistic_regression_data(cfg.num_data, cfg.dim, seed=cfg.data_seed, prior_var=cfg.prior_var)
    x, y, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
    assert x_te is not None and y_te is not None  # logistic_regression_data always splits off a test set
    n_train = int(x.shape[0])
    energy = make_energy(cfg, n_train)
    phases["data"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    theta_map = find_map(
        energy,
        torch.zeros(cfg.dim),
        data=(x, y),
        batch_size=max(1, int(cfg.map_batch * n_train)),
        num_steps=cfg.map_steps,
        lr=cfg.map_lr,
        seed=cfg.seed,
    )
    phases["map"] = time.perf_counter() - t0
    say(f"MAP in {phases['map']:.1f} s")

    t0 = time.perf_counter()
    ref = reference_posterior(cfg, theta_map, x, y)
    phases["reference"] = time.perf_counter() - t0
    ref_sd = torch.tensor(ref["sd"], dtype=torch.float64)
    say(
        f"reference ({ref['method']}{', cached' if ref['cached'] else ''}) in {phases['reference']:.1f} s, "
        f"min ESS {ref['ess_min']:.0f}"
    )

    centre_ref = torch.tensor(ref.get("mode") or ref["mean"], dtype=torch.float64)
    map_offset = float(((theta_map.to(torch.float64) - centre_ref) / ref_sd).abs().max())
    problem = Problem(
        energy, theta_map, data=(x, y), centre=theta_map, batching=cfg.batching, validation=(x_te, y_te), seed=cfg.seed
    )
    g = torch.Generator().manual_seed(cfg.seed + 13)
    noisy = theta_map + cfg.grid_noise * torch.randn(cfg.dim, generator=g)
    grid_problem = Problem(
        energy, noisy, data=(x, y), centre=theta_map, batching=cfg.batching, validation=(x_te, y_te), seed=cfg.seed
    )
    grid_metric = FunctionMetric(heldout_log_loss, "test_log_loss") if cfg.grid_metric == "test" else "ksd"
    settings = M.TuningSettings(
        log10_h=cfg.log10_h,
        batch_fractions=cfg.batches,
        R=cfg.R,
        budget_kind=cfg.budget_kind,
        grid_budget=Budget(iterations=cfg.grid_iterations),
        grid_metric=grid_metric,
        eta=cfg.eta,
        thin=cfg.thin,
        max_samples=cfg.max_samples,
        min_samples=cfg.min_samples,
        metric_cost=cfg.metric_cost,
        restart=cfg.restart,
        fssd_steps=cfg.fssd_steps,
        fssd_kernel=cfg.fssd_kernel,
        executor=cfg.executor,
        seed=cfg.seed,
    )
    t0 = time.perf_counter()
    tuned = M.tune_all(
        cfg.samplers,
        cfg.methods,
        settings,
        problem=problem,
        grid_problem=grid_problem,
        out_dir=out,
        log=log,
        plot_traces=cfg.plot_traces,
        units=units,
    )
    phases["tuning"] = time.perf_counter() - t0

    def extra(draws: Tensor) -> dict:
        p = predictive_probs(draws, x_te)
        return {
            "test_accuracy": float(((p > 0.5).to(y_te.dtype) == y_te).to(torch.float64).mean()),
            "test_log_loss": log_loss(p, y_te),
        }

    eval_budget = (
        Budget(seconds=float(cfg.eval_budget))
        if cfg.eval_kind == "seconds"
        else Budget(iterations=int(cfg.eval_budget))
    )
    t0 = time.perf_counter()
    runs = [  # Fig. 1: independent evaluation runs of every chosen arm (run 0: the single run of before)
        M.evaluate_all(
            tuned,
            problem,
            eval_budget,
            seed=cfg.seed,
            repeat=r,
            log=log,
            thin=cfg.eval_thin,
            max_ksd_samples=cfg.eval_ksd_samples,
            reference_sd=ref_sd,
            extra=extra,
            units=units,
        )
        for r in range(cfg.num_seeds)
    ]
    evals = runs[0]
    phases["evaluation"] = time.perf_counter() - t0

    stein = None
    if cfg.stein_check:
        t0 = time.perf_counter()
        if units is None:
            stein = stein_ranking(cfg, energy, theta_map, (x, y), log=log)
        else:
            stein = units.get_or_run("stein_check", lambda: stein_ranking(cfg, energy, theta_map, (x, y), log=log))
        phases["stein_check"] = time.perf_counter() - t0
    if units is not None and units.resumed:  # compute seconds over every sitting, not this one's
        for phase in ("tuning", "evaluation", "stein_check"):
            if phase in phases:
                phases[phase] = units.seconds(phase)

    numbers = numbers_of(tuned, evals, [m for m in M.METHODS if m in cfg.methods], runs=runs, stein=stein)
    rows = _rows(cfg, preset, numbers)
    report = {
        "experiment": "mamba-logreg: MAMBA vs grid search vs heuristic on the simulated logistic regression "
        "(Coullon et al., Table 1)",
        "preset": preset,
        "config": asdict(cfg),
        "seed": cfg.seed,
        "data": {
            "source": "simulated (structmc.data.synthetic.logistic_regression_data)",
            "num_data": cfg.num_data,
            "num_train": n_train,
            "num_test": int(x_te.shape[0]),
            "dim": cfg.dim,
            "seed": cfg.data_seed,
            "u": ds.meta["u"],
            "theta_true": ds.meta["theta_true"],
        },
        "map": theta_map,
        "map_offset_sd": map_offset,
        "reference": ref,
        "samplers": list(cfg.samplers),
        "methods": list(cfg.methods),
        "tuning": M.tuned_json(tuned, n_train),
        "evaluation": evals,
        "evaluation_runs": runs,
        "num_seeds": cfg.num_seeds,
        "seed_summary": numbers["seed_summary"],
        "stein_ranking": stein,
        "rows": rows,
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in ("agrees", "differs", "n/a")},
        "comparable": preset == "full",
        "reduced": _reduced(cfg),
        "phases_seconds": phases,
        "versions": M.versions(),
        "figures": dict(FIGURES),
    }
    _plots(out, tuned, evals, cfg, runs)
    M.set_wall_seconds(report, t_all, units)
    return M.write_rows_report(  # ordering-aware (_mamba.comparison)
        out,
        "mamba-logreg",
        preset=preset,
        cfg=asdict(cfg),
        seed=cfg.seed,
        legacy=report,
        rows=rows,
        wall_time_s=report["wall_seconds"],
        compute_time_s=report.get("compute_seconds"),
        reductions=report["reduced"],
        figures=list(FIGURES.values()),
        markdown=lambda r: _markdown(r, tuned, n_train),
        step_sizes=M.step_size_lines(n_train, cfg.samplers),
        notes=_notes(preset),
    )


def _notes(preset) -> list[str]:
    return [
        "Method rows compare orderings, not magnitudes: per sampler, whether a method is within the factor of "
        "the best method, ours against the paper's, on every sampler; magnitudes are on the paper's scale only in the "
        "full preset" + (" (this run)." if preset == "full" else " (not this run).")
    ]


FIGURES = {"fig1": "fig1_ksd_curves.png", "tuning_time": "tuning_time.png"}


def _plots(out: Path, tuned, evals, cfg: Config, runs=None) -> None:
    try:
        M.plot_ksd_curves(
            out / FIGURES["fig1"], evals, "Fig. 1 (ours): KSD of the evaluation runs, logistic regression", runs=runs
        )
        M.plot_tuning_time(out / FIGURES["tuning_time"], tuned, cfg.wall_target)
    except ImportError:  # pragma: no cover - matplotlib missing
        pass


# ---------------------------------------------------------------------------------------------
# verdicts and report
# ---------------------------------------------------------------------------------------------
def _published() -> Mapping[str, Any]:
    from . import REGISTRY

    return REGISTRY.get("mamba-logreg").published


def numbers_of(tuned, evals, methods, runs=None, stein=None) -> dict:
    """What the verdicts read from a run: ``{"ksd" | "xi" | "iterations" | "test_accuracy" |
    "batch_pct": {method: [value per sampler of Table 1's order, None where missing]},
    "tuning": {sampler: {method: {"wall_over_T"}}}}``; with ``runs`` (the independent evaluation
    runs, Fig. 1) the values are the means over the runs (:func:`._mamba.runs_summary`: None
    where any run failed) and ``"se"`` holds their standard errors (same shape), ``"seed_summary"``
    the mean, sd, se, n and failures per quantity; ``"stein"``: :func:`stein_ranking`'s result."""
    samplers = list(_published()["samplers"])
    runs = [evals] if runs is None else list(runs)
    summary = {k: M.runs_summary(runs, k, methods, samplers) for k in ("ksd", "xi", "iterations", "test_accuracy")}
    out: dict[str, Any] = {k: summary[k]["mean"] for k in summary}
    out["se"] = {k: summary[k]["se"] for k in summary}
    out["seed_summary"] = {"runs": len(runs), "band_sd": M.PAPER_BAND_SD, **summary}
    if stein is not None:
        out["stein"] = stein
    out["batch_pct"] = {
        m: [
            None
            if (tuned.get(s, {}).get(m) or {}).get("arm") is None
            else M.arm_summary(tuned[s][m]["arm"], 1)["batch_pct"]
            for s in samplers
        ]
        for m in methods
    }
    out["tuning"] = {
        s: {m: {"wall_over_T": r.get("wall_over_T")} for m, r in by_m.items()} for s, by_m in tuned.items()
    }
    out["chosen"] = M.chosen_of(tuned, samplers)
    return out


def _rows(cfg: Config, preset, numbers: dict) -> list[dict]:
    return rows(cfg, numbers, comparable=preset == "full")


def comparisons(cfg: Config, numbers: dict, comparable: bool = False) -> list:
    """The report's rows (:func:`rows`) as :class:`._report.Comparison` s, each under its rule."""
    return [M.comparison(r) for r in rows(cfg, numbers, comparable)]


def rows(cfg: Config, numbers: dict, comparable: bool = False) -> list[dict]:
    """The report's rows from ``numbers`` (:func:`numbers_of`), without running anything: per
    method and metric of Table 1, whether it is within ``cfg.factor`` of the best method on
    each sampler as in the paper (:func:`._mamba.method_rows`), then the paper's claims, each
    judged sampler by sampler (issue 26 §1: no "ours >= paper - 1" count), and the wall-time
    target of ours as a check."""
    pub = _published()
    samplers = list(pub["samplers"])
    methods = [m for m in M.METHODS if m in cfg.methods and m in numbers["ksd"]]
    paper_ksd = {m: pub["ksd"][m] for m in methods}
    # every method of Table 1 has its rows: one the preset or the run leaves out is "not run" (issue 35 §3)
    ours_ksd = {m: numbers["ksd"][m] for m in methods}
    ours_xi = {m: numbers["xi"][m] for m in methods if m in numbers["xi"]}
    out = []
    for m_rows in (
        M.method_rows(
            "ksd",
            "KSD",
            "Table 1",
            ours_ksd,
            {m: pub["ksd"][m] for m in M.METHODS},
            samplers,
            factor=cfg.factor,
            comparable=comparable,
        ),
        M.method_rows(
            "xi",
            "xi(sigma) x 10^2",
            "Table 1",
            ours_xi,
            {m: pub["sd_rel_error_x100"][m] for m in M.METHODS},
            samplers,
            factor=cfg.factor,
            scale=100.0,
            comparable=comparable,
        ),
    ):
        for r in m_rows:
            r["metric_label"] = "KSD" if r["metric"] == "ksd" else "ξ(σ̂)×10²"
            if r.get("not_run") and r["method"] not in cfg.methods:
                r["not_run"] = f"the preset runs {', '.join(cfg.methods)} only, not {r['method']}"
        out += m_rows
    run = [s for s in samplers if s in cfg.samplers]
    for key, name, table in (("ksd", "KSD", pub["ksd"]), ("xi", "xi(sigma) x 10^2", pub["sd_rel_error_x100"])):
        out += M.cut_sampler_rows(key, name, "Table 1", {m: table[m] for m in M.METHODS}, samplers, run)
    out += value_rows(cfg, numbers, samplers, run, methods)
    out += M.choice_rows(
        PAPER_TABLE4, numbers.get("chosen") or {}, samplers, run, methods, source="Table 4", configured=cfg.methods
    )
    out += _claims(cfg, numbers, samplers, methods, paper_ksd)
    return out


def value_rows(cfg: Config, numbers: dict, samplers, run, methods) -> list[dict]:
    """Table 1's KSD and ξ(σ̂)×10² and Table 5's test accuracy, cell by cell, each judged on the
    noise of both sides (issue 35 §1; :func:`._mamba.value_rows`): SE_ours the spread of the
    evaluation runs (Fig. 1's runs) / √runs, for the accuracy combined with the binomial SE of the
    test set; SE_paper the rounding of the published value (the paper gives no spread)."""
    pub = _published()
    se = numbers.get("se") or {}
    runs = (numbers.get("seed_summary") or {}).get("runs", 1)
    n_test = cfg.num_data - int(0.8 * cfg.num_data)
    spread = f"SE_ours: sd over the {runs} evaluation runs / √{runs}" + (" (one run: no spread, 0)" if runs < 2 else "")
    ours = {k: {m: numbers[k][m] for m in methods if m in numbers.get(k, {})} for k in ("ksd", "xi", "test_accuracy")}
    return [
        *M.value_rows(
            "ksd",
            "KSD",
            "Table 1",
            ours["ksd"],
            {m: pub["ksd"][m] for m in M.METHODS},
            samplers,
            run,
            ours_se=se.get("ksd"),
            resolution=1.0,
            valid=(0.0, math.inf),
            k=cfg.value_k,
            se_source=spread,
        ),
        *M.value_rows(
            "xi",
            "xi(sigma) x 10^2",
            "Table 1",
            ours["xi"],
            {m: pub["sd_rel_error_x100"][m] for m in M.METHODS},
            samplers,
            run,
            ours_se=se.get("xi"),
            resolution=0.1,
            scale=100.0,
            valid=(0.0, math.inf),
            k=cfg.value_k,
            se_source=spread,
        ),
        *M.value_rows(
            "accuracy",
            "test accuracy",
            "Table 5",
            ours["test_accuracy"],
            PAPER_ACCURACY,
            samplers,
            run,
            ours_se=se.get("test_accuracy"),
            extra_se=lambda v: 100.0 * binomial_se(min(max(v / 100.0, 0.0), 1.0), n_test),
            resolution=0.1,
            scale=100.0,
            unit="%",
            valid=(50.0, 100.0),
            k=cfg.value_k,
            se_source=spread + f", combined with the binomial SE on the {n_test:,} test rows",
            note="plausible range [50, 100] %: below 50 % a binary classifier is worse than predicting the majority class",
        ),
    ]


def rejudge(report: dict) -> list:
    """The rows of a written report rebuilt from its ``numbers`` and ``config`` under today's rules
    (issue 35 §7; ``docs/results/rejudge.py``): the seed means and SEs, the App. B.2 ranking and
    the tuning times the report holds."""
    from dataclasses import fields

    names = {f.name for f in fields(Config)}
    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in report["config"].items()}
    cfg = Config(**{k: v for k, v in given.items() if k in names})
    from structmc.tuning import Arm

    num = report["numbers"]
    methods = [m for m in M.METHODS if m in cfg.methods]
    tuned = {
        s: {
            m: {
                "arm": Arm.from_dict(r["chosen"]["arm"]) if (r.get("chosen") or {}).get("arm") else None,
                "wall_over_T": r.get("wall_over_T"),
            }
            for m, r in by_m.items()
        }
        for s, by_m in num["tuning"].items()
    }
    numbers = numbers_of(tuned, num["evaluation"], methods, num.get("evaluation_runs"), num.get("stein_ranking"))
    return comparisons(cfg, numbers, comparable=bool(num.get("comparable")))


def _every(flags) -> tuple[bool | None, str]:
    """``(holds, text)`` of per-sampler (or per-pair) outcomes ``[(name, ours, paper)]``: holds
    when ours equals the paper's on every one with a value (None: none has one)."""
    known = [(s, o, p) for s, o, p in flags if o is not None]
    differ = [s for s, o, p in known if o != p]
    text = f"{sum(bool(o) for _, o, _ in known)} of {len(known)}" + (
        f"; differs from the paper on {', '.join(differ)}" if differ else ""
    )
    return (None if not known else not differ), text


def _claims(cfg, numbers, samplers, methods, paper_ksd) -> list[dict]:
    out = []
    ours_ksd = numbers["ksd"]
    mam = [m for m in ("M-KSD", "M-FSSD") if m in methods]
    others = [m for m in methods if m not in mam]
    idx = range(len(samplers))
    # Fig. 1's ten runs: ours are the means over the runs, and an ordering of ours holds only when
    # resolved by their spread (the gap exceeds cfg.ordering_se combined standard errors,
    # _mamba.resolved_below); the paper's numbers (no spread given) are compared strictly
    se_all = numbers.get("se") or {}
    k_se = float(cfg.ordering_se)

    def se_of(key, table, m, j):
        if table is paper_ksd or key not in se_all:  # the paper's numbers: no spread
            return 0.0
        v = (se_all[key].get(m) or [None] * len(samplers))[j]
        return 0.0 if v is None else float(v)

    def lowest(table, ms, j):
        return min((M._clean(table[m][j]) for m in ms), default=math.inf)

    def argmin(table, ms, j):
        return min(ms, key=lambda m: M._clean(table[m][j]))

    def mamba_wins(table, j, vs):  # strictly below every other method beyond the noise: a tie is no win
        b, o = lowest(table, mam, j), lowest(table, vs, j)
        if not math.isfinite(b) and not math.isfinite(o):
            return None
        mb, mo = argmin(table, mam, j), argmin(table, vs, j)
        return M.resolved_below(b, o, se_of("ksd", table, mb, j), se_of("ksd", table, mo, j), k_se)

    def lacking(*ms: str) -> str:
        """The not-run reason of a claim needing methods ``ms`` ("" when all are run)."""
        gone = [m for m in ms if m not in methods]
        if not gone:
            return ""
        cut = [m for m in gone if m not in cfg.methods]
        return (
            f"the preset runs {', '.join(cfg.methods)} only, not {', '.join(cut)}"
            if cut
            else f"no value from this run for {', '.join(gone)}"
        )

    noise = (
        f"; ours: means over {numbers['seed_summary']['runs']} runs, an ordering holds when the gap exceeds "
        f"{k_se:g} combined standard error(s)"
        if (numbers.get("seed_summary") or {}).get("runs", 1) > 1
        else ""
    )

    if not (mam and others):
        why = lacking("M-KSD", "M-FSSD") if not mam else lacking("Grid", "Heuristic")
        out.append(
            M.not_run_row(
                "claim_mamba_lowest",
                "MAMBA (KSD or FSSD) gives the lowest KSD of the methods, on all samplers but SGNHT (there the heuristic)",
                "Sect. 4.1, Fig. 1, Table 1",
                "5 of 6 samplers (not SGNHT)",
                why,
            )
        )
    if not (mam and others and "Grid" in methods):
        why = lacking("M-KSD", "M-FSSD") if not mam else lacking("Grid")
        out.append(
            M.not_run_row(
                "claim_mamba_beats_grid",
                "MAMBA's KSD below grid search's",
                "Table 1",
                "6 of 6 samplers",
                why,
            )
        )
    if mam and others:
        p = sum(bool(mamba_wins(paper_ksd, j, others)) for j in idx)
        holds, text = _every(
            [(samplers[j], mamba_wins(ours_ksd, j, others), mamba_wins(paper_ksd, j, others)) for j in idx]
        )
        out.append(
            M.claim_row(
                "claim_mamba_lowest",
                "MAMBA (KSD or FSSD) gives the lowest KSD of the methods, on all samplers but SGNHT (there the heuristic)",
                "Sect. 4.1, Fig. 1, Table 1",
                f"{p} of 6 samplers (not SGNHT)",
                text,
                holds,
                "per sampler, MAMBA strictly lowest or not as in the paper, on every sampler" + noise,
            )
        )
        if "Grid" in methods:
            holds, text = _every(
                [(samplers[j], mamba_wins(ours_ksd, j, ["Grid"]), mamba_wins(paper_ksd, j, ["Grid"])) for j in idx]
            )
            out.append(
                M.claim_row(
                    "claim_mamba_beats_grid",
                    "MAMBA's KSD below grid search's",
                    "Table 1",
                    "6 of 6 samplers",
                    text,
                    holds,
                    "every sampler, strictly" + noise,
                )
            )
    if "M-KSD" not in methods:
        out.append(
            M.not_run_row(
                "claim_small_batch",
                "MAMBA-KSD chooses a batch of at most 1 %",
                "Sect. 4.1, Table 4",
                "6 of 6 samplers (1 % or 0.1 %)",
                lacking("M-KSD"),
            )
        )
        out.append(
            M.not_run_row(
                "claim_cv_helps",
                "MAMBA-KSD: the control-variate sampler has lower KSD than its plain version",
                "Table 1",
                "3 of 3 pairs",
                lacking("M-KSD"),
            )
        )
    if "M-KSD" in methods:
        b = [v for v in numbers["batch_pct"]["M-KSD"] if v is not None]
        out.append(
            M.claim_row(
                "claim_small_batch",
                "MAMBA-KSD chooses a batch of at most 1 %",
                "Sect. 4.1, Table 4",
                "6 of 6 samplers (1 % or 0.1 %)",
                f"{sum(v <= 1.0 + 1e-9 for v in b)} of {len(b)} samplers",
                None if not b else all(v <= 1.0 + 1e-9 for v in b),
                "every sampler (was: ours >= 5)",
            )
        )
        pairs = [("SGLD", "SGLD-CV"), ("SGHMC", "SGHMC-CV"), ("SGNHT", "SGNHT-CV")]
        pk = dict(zip(samplers, paper_ksd["M-KSD"]))
        ok = dict(zip(samplers, ours_ksd["M-KSD"]))

        j_of = {s: j for j, s in enumerate(samplers)}

        def cv_lower(t, a, c, table):
            if t[a] is None or t[c] is None:
                return None
            se_a, se_c = se_of("ksd", table, "M-KSD", j_of[a]), se_of("ksd", table, "M-KSD", j_of[c])
            return M.resolved_below(t[c], t[a], se_c, se_a, k_se)

        holds, text = _every(
            [(f"{a}/{c}", cv_lower(ok, a, c, ours_ksd), cv_lower(pk, a, c, paper_ksd)) for a, c in pairs]
        )
        out.append(
            M.claim_row(
                "claim_cv_helps",
                "MAMBA-KSD: the control-variate sampler has lower KSD than its plain version",
                "Table 1",
                "3 of 3 pairs",
                text,
                holds,
                "every pair, strictly" + noise,
            )
        )
    heuristic_claim = (
        "heuristic h = 1/N with SGHMC / SGHMC-CV (L = 10): KSD at least 10x the best method's",
        "Table 1",
        "2 of 2 (53,972 and 51,565 vs 56 and 18)",
    )
    sghmc_run = [s for s in ("SGHMC", "SGHMC-CV") if s in cfg.samplers]
    if "Heuristic" not in methods or not sghmc_run:
        out.append(
            M.not_run_row(
                "claim_heuristic_sghmc",
                *heuristic_claim,
                lacking("Heuristic") or f"the preset runs {', '.join(cfg.samplers)} only, not SGHMC and SGHMC-CV",
            )
        )
    elif "Heuristic" in methods:
        hs = [j for j, s in enumerate(samplers) if s in ("SGHMC", "SGHMC-CV")]

        def tenfold(j):  # heuristic >= 10 x the best method, resolved: H - 10 B > k sqrt(se_H^2 + (10 se_B)^2)
            if samplers[j] not in cfg.samplers:
                return None  # not run: nothing to test (a diverged heuristic is run, and ranks worst)
            b = argmin(ours_ksd, methods, j)
            if b == "Heuristic":
                return False
            return M.resolved_below(
                10 * M._clean(ours_ksd[b][j]),
                ours_ksd["Heuristic"][j],
                10 * se_of("ksd", ours_ksd, b, j),
                se_of("ksd", ours_ksd, "Heuristic", j),
                k_se,
            )

        known = [t for t in (tenfold(j) for j in hs) if t is not None]
        o = sum(known)
        out.append(
            M.claim_row(
                "claim_heuristic_sghmc",
                *heuristic_claim,
                f"{o} of {len(known)}" + ("" if len(known) == 2 else f" (SGHMC / SGHMC-CV run: {len(known)})"),
                None if not known else o == len(known),
                "both, strictly (those run)" + noise,
            )
        )
    if not ("M-KSD" in methods and "Grid" in methods):
        out.append(
            M.not_run_row(
                "claim_more_samples",
                "MAMBA-KSD's arm runs more iterations than grid search's in the same evaluation time",
                "Table 5",
                "6 of 6 samplers",
                lacking("M-KSD", "Grid"),
            )
        )
    else:
        its = numbers["iterations"]
        known = [j for j in idx if its["M-KSD"][j] is not None and its["Grid"][j] is not None]
        o = sum(
            M.resolved_below(
                its["Grid"][j],
                its["M-KSD"][j],
                se_of("iterations", its, "Grid", j),
                se_of("iterations", its, "M-KSD", j),
                k_se,
            )
            for j in known
        )
        holds = None if cfg.eval_kind != "seconds" or not known else o == len(known)
        out.append(
            M.claim_row(
                "claim_more_samples",
                "MAMBA-KSD's arm runs more iterations than grid search's in the same evaluation time",
                "Table 5",
                "6 of 6 samplers",
                f"{o} of {len(known)} samplers"
                + ("" if cfg.eval_kind == "seconds" else " (iteration budget: equal by construction)"),
                holds,
                "every sampler, strictly (was: ours >= 5); n/a for an iteration evaluation budget" + noise,
            )
        )

    # Table 5: 93.9 % for every method but the heuristic with SGHMC / SGHMC-CV (92.7 %); "within
    # 0.5 pp of the best" per method and sampler as in the paper (a constant answer puts the
    # heuristic there too; 0.5 pp is under the 1.2 pp gap, above the noise of 2 x 10^5 test rows)
    def near_best(table, m, j):
        vals = [table[k][j] for k in methods if table[k][j] is not None]
        return None if table[m][j] is None else table[m][j] >= max(vals) - cfg.accuracy_close_pp

    acc = {m: [None if a is None else 100.0 * a for a in numbers["test_accuracy"][m]] for m in methods}
    paper_acc = {m: PAPER_ACCURACY[m] for m in methods}
    holds, text = _every(
        [(f"{m} on {samplers[j]}", near_best(acc, m, j), near_best(paper_acc, m, j)) for m in methods for j in idx]
    )
    out.append(
        M.claim_row(
            "claim_accuracy",
            f"test accuracy: the methods within {cfg.accuracy_close_pp:g} pp of the best, per sampler (all but the "
            "heuristic on SGHMC and SGHMC-CV)",
            "Table 5",
            f"{sum(bool(near_best(paper_acc, m, j)) for m in methods for j in idx)} of {len(methods) * len(samplers)} "
            "method-sampler cells",
            text,
            holds,
            "per method and sampler, within or not as in the paper (was: MAMBA-KSD within 0.5 pp on >= 5)"
            + (f"; ours: means over {numbers['seed_summary']['runs']} runs" if noise else ""),
        )
    )
    out += stein_rows(cfg, numbers.get("stein"))
    out.append(M.wall_claim(numbers.get("tuning", {}), cfg.wall_target))  # ours, a check: not tallied
    return out


# the paper's claim is about its estimator (App. B.2: the sampler's stochastic gradients, a fresh
# minibatch per draw; the library's Problem(score_data=m) default): those rows are tallied. The fixed
# subset (score_batches="fixed", the library's only kind before) scores every draw on one subset of m
# rows, i.e. against the subset's posterior, whose mode sits O(1/sqrt(m)) from the full posterior's
# while the posterior is O(1/sqrt(N)) wide: a check of the library, not the paper's claim (measured at
# N = 10^5, 1 s per arm: tau -0.36 and best arm h = 10^-1.5, against tau 0.67 and the same best arm
# h = 10^-5 for the per-draw minibatch)
STEIN_TALLIED = ("minibatch",)


def stein_rows(cfg: Config, stein: Mapping | None) -> list[dict]:
    """App. B.2 / Sect. 3.3 ("using the stochastic KSD/FSSD produces results similar to the
    fullbatch KSD/FSSD"; Fig. 4: the stochastic KSD "follows the fullbatch KSD well" over SGLD's
    step sizes) as rankings of the arms: per estimator (:data:`STEIN_ESTIMATORS`) and metric, the
    stochastic values rank the arms as the full-data ones when Kendall's τ_b ≥ ``cfg.stein_min_tau``
    AND both pick the same best arm (the one MAMBA keeps). The paper gives the curves, not a number:
    0.6 means at least 80 % of the arm pairs ordered alike ((1 + τ)/2), the "follows well" of Fig. 4
    with room for swaps between neighbouring step sizes of similar KSD; a random ranking of 14 arms has τ
    of sd ≈ 0.20 (P(τ ≥ 0.6) ≈ 0.1 %), a reversed one τ = −1; with 3 arms (tiny) only the exact
    ranking passes. Rows for the estimators in :data:`STEIN_TALLIED` (the paper's estimator) are
    claims, the others (the fixed-subset scores, ``score_batches="fixed"``) checks."""
    fig5 = M.not_run_row(
        "claim_stochastic_ksd_batches",
        "Fig. 5, logistic-regression panel: the stochastic KSD of SGLD's draws follows the full-batch KSD over its "
        "batch sizes (h = 10^-4.5)",
        "App. B.2, Fig. 5",
        "follows the fullbatch KSD well (no number given)",
        "stein_ranking sweeps the step sizes at batch 1 % (Fig. 4), not the batch sizes (Fig. 5)",
    )
    if not stein:
        return [
            M.not_run_row(
                f"claim_stochastic_{metric}_{est}",
                f"stochastic {name} ({est}) ranks SGLD's step sizes at batch 1 % as the full-data {name}",
                "App. B.2, Fig. 4; Sect. 3.3",
                "follows the fullbatch KSD well (Fig. 4, no number given)",
                "the App. B.2 comparison is off in this config (stein_check=False)",
            )
            for est in STEIN_TALLIED
            for metric, name in (("ksd", "KSD"), ("fssd", "FSSD"))
        ] + [fig5]
    out = []
    labels = list(stein["labels"])
    full = stein["values"]["full"]
    for est, values in stein["values"].items():
        if est == "full":
            continue
        for metric, name in (("ksd", "KSD"), ("fssd", "FSSD")):
            agr = M.ranking_agreement(labels, values[metric], full[metric], cfg.stein_min_tau)
            tau = "n/a" if math.isnan(agr["tau"]) else f"{agr['tau']:.2f}"
            out.append(
                M.claim_row(
                    f"claim_stochastic_{metric}_{est}",
                    f"stochastic {name} ({est}: m = {stein['m']:,} rows) ranks {stein['sampler']}'s step sizes at batch "
                    f"{stein['batch_pct']:g} % as the full-data {name}",
                    "App. B.2, Fig. 4; Sect. 3.3",
                    "follows the fullbatch KSD well (Fig. 4, no number given)",
                    f"Kendall tau_b {tau} over {len(labels)} arms; best arm: full-data {agr['best_reference']}, "
                    f"stochastic {agr['best_estimate']}",
                    agr["holds"],
                    f"Kendall tau_b >= {cfg.stein_min_tau:g} and the same best arm ({STEIN_ESTIMATORS[est]})",
                    check=est not in STEIN_TALLIED,
                    check_reason=""
                    if est in STEIN_TALLIED
                    else "the library's fixed-subset scores (score_batches='fixed'), not the paper's estimator (a "
                    "fresh minibatch per draw, the tallied rows): a check of the library",
                )
            )
    return out + [fig5]


def _reduced(cfg: Config) -> list[str]:
    full = PRESETS["full"]
    notes = []
    if tuple(cfg.samplers) != tuple(full.samplers):
        cut = [s for s in full.samplers if s not in cfg.samplers]
        notes.append(
            f"samplers {', '.join(cfg.samplers)} only, not {', '.join(cut)} (paper: all six): the claims count "
            "over the samplers run"
            + (", and the heuristic's SGHMC claim is n/a." if not {"SGHMC", "SGHMC-CV"} & set(cfg.samplers) else ".")
        )
    if cfg.num_seeds != full.num_seeds:
        notes.append(
            f"{cfg.num_seeds} evaluation runs per chosen arm instead of the paper's ten (Fig. 1): the means and "
            "their ±2 sd bands are over fewer runs, so fewer orderings clear the standard-error rule."
        )
    if cfg.num_data != full.num_data:
        notes.append(
            f"N = {cfg.num_data:,} rows instead of {full.num_data:,}: the posterior is wider, the scores "
            "smaller and the best step sizes larger (the heuristic h = 1/N moves with N), so KSD and "
            "hyperparameter choices are not comparable in magnitude with the paper's."
        )
    if tuple(cfg.log10_h) != tuple(full.log10_h) or tuple(cfg.batches) != tuple(full.batches):
        notes.append(
            f"reduced grids: log10 h in {list(cfg.log10_h)}, batches {list(cfg.batches)} "
            f"(paper: 14 step sizes x 4 batches)."
        )
    if cfg.budget_kind != "seconds" or cfg.R != full.R:
        notes.append(f"MAMBA budget R = {cfg.R:g} {cfg.budget_kind} per surviving arm (paper: R = 1 s).")
    if cfg.thin != full.thin and cfg.budget_kind == "seconds":
        notes.append(
            f"the tuner starts from thin {cfg.thin} (then thins evenly past {2 * cfg.max_samples} draws) "
            f"instead of keeping every {full.thin}th draw: at this R most first-round SGHMC arms run fewer than "
            f"{full.thin} iterations and would keep no draw at all."
        )
    if cfg.grid_iterations != full.grid_iterations:
        notes.append(f"grid search runs {cfg.grid_iterations:,} iterations per arm (paper: 5,000).")
    if cfg.eval_kind != "seconds" or cfg.eval_budget != full.eval_budget:
        notes.append(
            f"evaluation runs of {cfg.eval_budget:g} {cfg.eval_kind} (paper: 10 s), KSD on at most "
            f"{cfg.eval_ksd_samples} draws: the V-statistic KSD has an upward bias that shrinks with the "
            "number of draws, another reason magnitudes differ."
        )
    if cfg.reference_samples != full.reference_samples:
        notes.append(f"reference posterior of {cfg.reference_samples:,} draws (paper: 20,000 NUTS draws).")
    return notes


def _pm(mean, sd, width, scale=1.0) -> str:
    if mean is None:
        return "failed"
    return M.fmt_num(scale * mean) + ("" if sd is None else f" ± {M.fmt_num(width * scale * sd)}")


def _markdown_runs(report: dict) -> list[str]:
    """Fig. 1's ten runs: per method and sampler, mean ± 2 sd over the independent evaluation runs."""
    ss = report.get("seed_summary")
    if not ss:
        return []
    w, n = ss["band_sd"], ss["runs"]
    samplers = [s for s in _published()["samplers"]]
    lines = [
        f"## Independent evaluation runs (Fig. 1: ten runs, mean ± {w:g} sd)",
        "",
        f"Every chosen arm ran {n} time(s) from the MAP with independent seeds (run 1 has the seeds of the former "
        f"single run); cells are mean ± {w:g} sd over the runs (the paper's band: two standard deviations). "
        "Table 1 above and the verdicts read the means; an ordering of ours holds only when the gap exceeds "
        f"{report['config']['ordering_se']:g} combined standard error(s). 'failed': a run diverged or chose no arm.",
        "",
        "| method | quantity | " + " | ".join(samplers) + " |",
        "|---|---|" + "---|" * len(samplers),
    ]
    for m in report["methods"]:
        for key, label, scale in (("ksd", "KSD", 1.0), ("xi", "ξ(σ̂)×10²", 100.0), ("iterations", "# of samples", 1.0)):
            t = ss[key]
            cells = [_pm(t["mean"][m][j], t["sd"][m][j], w, scale) for j in range(len(samplers))]
            lines.append(f"| {m} | {label} | " + " | ".join(cells) + " |")
    return lines + [""]


def _markdown_stein(stein, cfg) -> list[str]:
    if not stein:
        return []
    v = stein["values"]
    lines = [
        "## Stochastic vs full-data KSD/FSSD (App. B.2, Fig. 4)",
        "",
        f"{stein['sampler']} at batch {stein['batch_pct']:g} % over the step grid, each arm run from the MAP for "
        + ", ".join(f"{b:g} {k}" for k, b in stein["budget"].items())
        + f"; the same draws (thinned by {cfg['thin']}, at most {cfg['stein_max_samples']}) scored on the full data and "
        f"stochastically with m = {stein['m']:,} rows: "
        + "; ".join(f"**{k}**: {t}" for k, t in stein["estimators"].items())
        + ". Agreement: Kendall's tau_b of the two rankings and the same best arm (rows above).",
        "",
        "| arm | iterations | KSD full | KSD subset | KSD minibatch | FSSD full | FSSD subset | FSSD minibatch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, lab in enumerate(stein["labels"]):
        cells = [
            "-" if v[e][k][i] is None else M.fmt_num(v[e][k][i])
            for k in ("ksd", "fssd")
            for e in ("full", "subset", "minibatch")
        ]
        lines.append(f"| {lab} | {stein['iterations'][i]:,} | " + " | ".join(cells) + " |")
    return lines + [""]


def _markdown(report: dict, tuned, n_train: int) -> str:
    cfg, ref = report["config"], report["reference"]
    samplers = report["samplers"]
    rows = report["rows"]
    v = report["verdicts"]
    lines = [
        "# MAMBA on the simulated logistic regression (Coullon, South & Nemeth, Table 1)",
        "",
        f"Preset `{report['preset'] or 'custom'}`; d = {cfg['dim']}, N = {cfg['num_data']:,} simulated rows "
        f"({report['data']['num_train']:,} train / {report['data']['num_test']:,} test, data seed {cfg['data_seed']}); "
        f"prior N(0, {cfg['prior_var']:g} I); MAP by Adam (lr {cfg['map_lr']:g}, batch {100 * cfg['map_batch']:g} %, "
        f"{cfg['map_steps']:,} steps) as start and CV centre. MAMBA: eta = {cfg['eta']}, R = {cfg['R']:g} "
        f"{'s' if cfg['budget_kind'] == 'seconds' else cfg['budget_kind']} per surviving arm, KSD/FSSD on the "
        f"draws thinned by {cfg['thin']}; grid search: "
        f"{cfg['grid_iterations']:,} iterations per arm at batch 10 %, from the MAP + N(0, {cfg['grid_noise']:g}²), "
        f"ranked by {'test log-loss' if cfg['grid_metric'] == 'test' else 'KSD'}; heuristic h = 1/N = "
        f"{1 / n_train:.3g}, batch 10 %. Evaluation: {cfg['eval_budget']:g} {cfg['eval_kind']} from the MAP per "
        f"chosen arm; KSD on the draws thinned by {cfg['eval_thin']} (at most {cfg['eval_ksd_samples']}), full-data scores.",
        "",
        f"**Reference posterior**: {ref['description']}; {ref['num_samples']:,} draws, min ESS {ref['ess_min']:.0f}"
        f"{' (read from the cache)' if ref.get('cached') else ''}. The Adam MAP (start and CV centre of every run) "
        f"lies up to {report['map_offset_sd']:.2f} reference standard deviations from the "
        f"{'exact mode' if ref.get('mode') else 'reference mean'} in one coordinate.",
        "",
        M.wall_line(report),
        "",
        "## Table 1: ours (paper)",
        "",
        f"Cells are `ours (paper)`, ours the mean over {report.get('num_seeds', 1)} evaluation run(s). Verdict: an "
        f"ordering check — per sampler, whether the method is within x{cfg['factor']:g} of the best of the four "
        "methods, ours the same as the paper's on every sampler. "
        + (
            "Magnitudes are on the paper's scale (full preset)."
            if report["comparable"]
            else "**Magnitudes are not comparable at this scale** (N, budgets and the number of draws differ from the "
            "paper's; KSD grows with N and the number of draws)."
        ),
        "",
        *M.markdown_report_table(rows, samplers),
        "",
        "## The paper's claims",
        "",
        *M.markdown_claims(rows),
        "",
        f"Verdicts: {v['agrees']} agree, {v.get('tied', 0)} tied, {v['differs']} differ, {v['n/a']} n/a.",
        "",
    ]
    lines += _markdown_runs(report)
    lines += _markdown_stein(report.get("stein_ranking"), cfg)
    if report["reduced"]:
        lines += ["## Reduced run", "", *[f"- {n}" for n in report["reduced"]], ""]
    lines += [
        "## Chosen hyperparameters: ours (paper, Table 4)",
        "",
        *M.markdown_choices(tuned, n_train, PAPER_TABLE4),
        "",
    ]
    ev = report["evaluation"]
    lines += [
        "## Evaluation runs: iterations and test accuracy, ours (paper, Table 5)",
        "",
        "| method | quantity | " + " | ".join(samplers) + " |",
        "|---|---|" + "---|" * len(samplers),
    ]
    for m in report["methods"]:
        its, acc = [], []
        for j, s in enumerate(samplers):
            e = (ev.get(s) or {}).get(m)
            its.append(f"{e['iterations']:,} ({PAPER_SAMPLES[m][j]:,})" if e else "-")
            a = None if not e or e.get("test_accuracy") is None else 100 * e["test_accuracy"]
            acc.append(f"{a:.1f} ({PAPER_ACCURACY[m][j]})" if a is not None else "-")
        lines.append(f"| {m} | # of samples | " + " | ".join(its) + " |")
        lines.append(f"| {m} | test acc. (%) | " + " | ".join(acc) + " |")
    lines += [
        "",
        "## Tuning wall time (the tuner's split, seconds)",
        "",
        f"Issue target: whole MAMBA tuning wall time <= {cfg['wall_target']:g} x T. Grid search rows: T is "
        "iterations per arm (no seconds budget).",
        "",
        *M.markdown_timing(tuned, cfg["wall_target"]),
        "",
        "## Errors",
        "",
    ]
    errs = [f"- {s} {m}: tuning: {r['error']}" for s, by in tuned.items() for m, r in by.items() if r["error"]]
    errs += [f"- {s} {m}: evaluation: {e['error']}" for s, by in ev.items() for m, e in by.items() if e and e["error"]]
    lines += errs or ["none"]
    lines += [
        "",
        "Figures: "
        + ", ".join(f"`{f}`" for f in report["figures"].values())
        + "; tuning traces in `tuning/<sampler>/<method>/`.",
        "",
    ]
    return "\n".join(lines)
