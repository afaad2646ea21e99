r"""Table 1 and Fig. 3 of Li, Chen, Carlson & Carin (2016, pSGLD): Bayesian logistic regression
on Adult (a9a), pSGLD against SGLD.

What is reproduced
------------------
The paper's setting (section "Bayesian Logistic Regression"): a9a, N_train = 32,561,
N_test = 16,281, D = 123; minibatch 50, prior N(0, σ² I) with σ² = 10, T = 1.5×10⁴
iterations, burn-in 500, thinning 50, step ε = 5×10⁻² for both samplers. Table 1 gives the
test errors pSGLD 14.85 %, SGLD 14.85 % and, for variational methods we do not run, DSVI
15.20 %, L-BFGS-SGVI 14.91 %, HFSGVI 15.16 %; the text claims that both SG-MCMC methods beat
the variational ones and that "pSGLD converges in less than 4×10³ iterations, while SGLD at
least needs double the time to reach this accuracy" (Fig. 3, learning curves).

Model: logistic regression without a separate intercept (the paper's D = 123 = a9a's
features; every row has exactly one ``sex`` category, so the one-hot blocks span the
constant), ``LogDensityEnergy(dim=D, log_likelihood=Σ_batch log Bernoulli(y | σ(xᵀθ)),
log_prior=N(0, 10 I), num_data=N)``: Û = −(N/n) Σ_batch log p(y|x, θ) − log p(θ). Both
samplers start at θ = 0 (Algorithm 1 only says "random θ₁"), one chain per seed; pSGLD with
the paper's α = 0.99, λ = 10⁻⁵, V₀ = 0 (Algorithm 1), Γ omitted (the paper's practical
choice).

Evaluation: the posterior predictive p̄(y=1|x) = mean of σ(xᵀθ_s) over the kept draws
θ_s (after iterations burn_in + thin·k, k = 1, 2, …: 290 draws at the paper's settings),
predicted class p̄ > ½, test error in %. The learning curve (Fig. 3) is the test error of
the posterior predictive of the draws kept so far, at every ``gcd(thin, burn_in)``
iterations (from the first kept draw on), next to the error of the single current draw. A
sampler's *convergence iteration* is the first iteration from which its learning curve stays
within ``converge_pp`` = 0.2 percentage points of its final error; the paper's ratio claim
compares pSGLD's convergence iteration with the iteration from which SGLD's curve stays below
pSGLD's converged level (pSGLD's final error + 0.2 pp), "this accuracy". With several seeds
the verdicts use the seed-mean curves and errors (per-seed values are in ``numbers``).

Step size (docs/conventions.md)
-------------------------------
The paper's ε = 5×10⁻² is a step on the *per-datum* (batch-averaged) log-likelihood, the
convention of the authors' Matlab code (``SGLD.m``: θ ← θ − lr·ḡ + √(2·lr)·ξ/N;
``SGLD_RMSprop.m``: θ ← θ − lr·G·ḡ + √(2·lr·G)·ξ/N, ḡ the batch-mean gradient of the
negative log-likelihood plus the prior's share). Read on the summed scale of the paper's
eq. (2) instead, ε = 5×10⁻² could not run: the full-data Hessian of this posterior has
largest eigenvalue ≈ 2.4×10⁴ (measured at the MAP, reported), so SGLD's (ε/2)·λ_max ≈ 600 ≫ 2
diverges. In the library's convention (drift (lr/2)∇Û with ∇Û = N·ḡ) the per-datum step lr_paper
is ``lr = 2·lr_paper/N``: both samplers run with ``SGLD(lr=2·5e-2/32,561)`` =
``PSGLD(lr=2·5e-2/32,561)`` = 3.071×10⁻⁶ (N = the training rows used). Then SGLD's drift is
ε·ḡ and pSGLD's ε·G·ḡ exactly as in the Matlab code, and SGLD's stability number
ε·λ_max/N ≈ 0.04. Noise: the Matlab code divides its noise by N (variance 2·lr·G/N² against
the drift lr·G·ḡ: temperature T = 1/N), and the paper's Table 1 comes from that code.
``Config.temperatures`` (default both, ``(1.0, "1/N")``) runs every chain at the posterior's
T = 1 and at the authors' T = 1/N; the report judges each side by side and its tally counts
T = 1/N, the setting of the paper's numbers (issue 26 §2).

Encoding
--------
a9a (LIBSVM, from Platt 1998) has 123 binary features: the 8 categorical attributes one-hot
(99 categories; a missing value is an all-zero block) and the 6 continuous ones quantised
into quantile bins and one-hot. The exact cut points are not published.
``encoding="a9a-like"`` (the default) reproduces the construction: the same 99 one-hot
categories (:func:`structmc.data.load_adult`), and each continuous attribute cut at its
training quintiles (``quantiles=5``), equal cut points merged. Heavy ties merge bins as in
a9a (capital-gain and capital-loss: 0 vs > 0, 2 bins each, as a9a); they also merge one bin
of education-num (ties at 9 years) and one of hours-per-week (ties at 40 h), where a9a keeps
5: **121 features instead of 123**. ``encoding="standardized"`` uses the loader's 105
features (the 6 numerics standardised, continuous) instead. The MAP of each encoding is
computed (Newton's method, full data) so the report shows how much the encoding alone moves
the test error (≈ 0.1 pp).

Data: ``<data dir>/adult/adult.data`` and ``adult.test`` (the canonical UCI split, the same
rows as a9a's); ``data="auto"`` falls back to a synthetic stand-in with a9a's shape (14
one-hot blocks of a9a's sizes, 123 features, 24 % positives, a random true θ) when the
files are not found, and says so: then no paper number is judged.

Presets: ``tiny`` (a few seconds, tests: 4,000 training and 4,000 test rows, 1,500
iterations, burn-in 100, thin 10), ``quick`` (the paper's settings for every run, 5 seeds
per sampler; 21 s on the 2-core development CPU with one torch thread, 45 s while the
machine was shared with other jobs) and ``full`` (the same, 20 seeds). Neither cuts
anything from a run of the paper's settings (a run of 15,000 iterations takes about 2 s);
the paper reports one run, we report the mean over seeds and their spread.

Measured (``quick``, seeds 0–4): pSGLD 14.82 % (sd 0.05), SGLD 14.92 % (sd 0.06) against the
paper's 14.85 % for both; pSGLD's seed-mean learning curve settles at iteration 2,300 and
SGLD's stays below that accuracy from 7,450 (ratio 3.2, the paper: < 4,000 and ≥ 2). Not
reproduced: "both below L-BFGS-SGVI's 14.91 %" (SGLD 14.92 %, a 0.06 pp claim).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from structmc import PSGLD, SGLD, LogDensityEnergy, sample
from structmc.data import ChecksumError, DataError
from structmc.data.adult import COLUMNS, NUMERIC, load_adult, read_adult

from . import REGISTRY, resolve_preset
from ._common import GaussianLogPrior, logistic_log_likelihood
from ._report import Claim, Comparison, Ordering, WithinNoise, binomial_se, seed_se, write_report
from ._shared import (
    AUTHORS_TEMPERATURE_1_OVER_N,
    check_temperatures,
    default_data_dir,
    paper_setting_of,
    progress_log,
    pyplot,
    resolve_temperature,
    restores_globals,
    temperature_label,
    temperature_suffix,
    threads,
)

NAME = "psgld-blr"
# the paper's setting (section "Bayesian Logistic Regression")
PAPER_N_TRAIN, PAPER_N_TEST, PAPER_D = 32_561, 16_281, 123
PAPER_STEP = 5e-2  # ε, per-datum scale
PAPER_CONVERGE = 4_000  # "pSGLD converges in less than 4×10³ iterations"
PAPER_RATIO = 2.0  # "SGLD at least needs double the time"
# a9a's 14 attributes: bins (numerics) or categories, 123 in all (Platt 1998 / LIBSVM)
A9A_BLOCKS = (5, 8, 5, 16, 5, 7, 14, 6, 5, 2, 2, 2, 5, 41)
SAMPLERS = ("pSGLD", "SGLD")
FIGURE = "fig3_learning_curves.png"


@dataclass
class Config:
    encoding: str = "a9a-like"  # "a9a-like" (quantile bins, one-hot) or "standardized" (the loader's 105)
    quantiles: int = 5  # bins per continuous attribute (a9a: quintiles), equal cut points merged
    num_train: int | None = None  # None: every training row; else a random subset (data_seed)
    num_test: int | None = None
    batch_size: int = 50
    prior_var: float = 10.0  # σ²
    num_steps: int = 15_000  # T
    burn_in: int = 500
    thin: int = 50
    step: float = PAPER_STEP  # the paper's ε on the per-datum scale: lr = 2·step/N
    # every chain at each: 1.0 the posterior, "1/N" the Matlab code's noise (see the module docstring)
    temperatures: tuple[float | str, ...] = (1.0, "1/N")
    alpha: float = 0.99  # pSGLD's RMSprop decay
    lam: float = 1e-5  # pSGLD's λ
    v_init: str = "zeros"  # V₀ = 0 (Algorithm 1); "first": ḡ₁² (the Matlab code)
    samplers: tuple = SAMPLERS
    num_seeds: int = 1  # repeats with seeds seed, seed + 1, ...
    seed: int = 0
    batching: str = "epoch"
    converge_pp: float = 0.2  # convergence: within this many percentage points of the final error
    # (issue 35: the value rows are judged on the seed spread, |ours − paper| ≤ 3·SE, not on a fixed
    # tolerance; see _comparisons)
    data: str = "auto"  # "auto" (files if found, else the synthetic stand-in), "files", "synthetic"
    data_seed: int = 0  # subsets and the synthetic stand-in
    download: bool = False  # let the loader download adult.data / adult.test when not found
    map_reference: bool = True  # MAP test error of the encoding(s) (Newton, full data)
    checkpoint_every: int | None = 5_000
    threads: int | None = 1


PRESETS = {
    "tiny": Config(num_train=4_000, num_test=4_000, num_steps=1_500, burn_in=100, thin=10, checkpoint_every=500),
    "quick": Config(num_seeds=5),
    "full": Config(num_seeds=20),
}


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def quantile_edges(v: np.ndarray, quantiles: int) -> np.ndarray:
    """Inner cut points of ``quantiles`` equal-count bins of ``v``, equal ones merged."""
    probs = np.arange(1, quantiles) / quantiles
    return np.unique(np.quantile(v, probs))


def one_hot_bins(v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """One-hot of the bin of each value: bin k holds edges[k−1] < v ≤ edges[k]."""
    k = np.searchsorted(edges, v, side="left")
    out = np.zeros((len(v), len(edges) + 1))
    out[np.arange(len(v)), k] = 1.0
    return out


def _numeric(rows) -> np.ndarray:
    cols = list(zip(*rows))
    return np.array([[float(v) for v in cols[COLUMNS.index(c)]] for c in NUMERIC]).T


def a9a_like(ds, quantiles: int = 5) -> tuple[Tensor, Tensor, list[str], dict]:
    """``(x_train, x_test, names, edges)``: the continuous attributes of the Adult files cut at
    their training quantiles and one-hot, next to the loader's one-hot categories."""
    raw_tr = _numeric(read_adult(Path(ds.meta["source"]["train"]))[0])
    raw_te = _numeric(read_adult(Path(ds.meta["source"]["test"]))[0])
    k = len(NUMERIC)
    blocks_tr, blocks_te, names, edges = [], [], [], {}
    for j, c in enumerate(NUMERIC):
        e = quantile_edges(raw_tr[:, j], quantiles)
        edges[c] = e.tolist()
        blocks_tr.append(one_hot_bins(raw_tr[:, j], e))
        blocks_te.append(one_hot_bins(raw_te[:, j], e))
        bounds = [-math.inf, *e.tolist(), math.inf]
        names += [f"{c} in ({bounds[b]:g}, {bounds[b + 1]:g}]" for b in range(len(e) + 1)]
    dtype = ds.x_train.dtype
    x_tr = torch.cat([torch.from_numpy(np.concatenate(blocks_tr, 1)).to(dtype), ds.x_train[:, k:]], 1)
    x_te = torch.cat([torch.from_numpy(np.concatenate(blocks_te, 1)).to(dtype), ds.x_test[:, k:]], 1)
    return x_tr, x_te, names + list(ds.feature_names[k:]), edges


def synthetic_adult(
    num_train: int = PAPER_N_TRAIN, num_test: int = PAPER_N_TEST, *, seed: int = 0, positive_rate: float = 0.24
) -> dict:
    """A stand-in with a9a's shape: 14 attributes with a9a's numbers of bins/categories (123
    one-hot features, category frequencies ∝ 1/rank^1.2 in a random order), θ_true ~ N(0, I),
    y ~ Bernoulli(σ(xᵀθ_true + b)) with b set for ``positive_rate`` positives."""
    g = torch.Generator().manual_seed(int(seed))
    n = num_train + num_test
    blocks = []
    for k in A9A_BLOCKS:
        p = (torch.arange(1, k + 1, dtype=torch.float64) ** -1.2)[torch.randperm(k, generator=g)]
        idx = torch.multinomial(p / p.sum(), n, replacement=True, generator=g)
        blocks.append(F.one_hot(idx, k).to(torch.float32))
    x = torch.cat(blocks, 1)
    theta = torch.randn(x.shape[1], generator=g)
    logits = (x @ theta).to(torch.float64)
    lo, hi = -30.0, 30.0
    for _ in range(80):  # bisection: mean σ(logit + b) = positive_rate
        b = (lo + hi) / 2
        lo, hi = (b, hi) if float(torch.sigmoid(logits + b).mean()) < positive_rate else (lo, b)
    y = torch.bernoulli(torch.sigmoid(logits + (lo + hi) / 2), generator=g).to(torch.float32)
    names = [f"attr{a}={j}" for a, k in enumerate(A9A_BLOCKS) for j in range(k)]
    return {
        "x_train": x[:num_train],
        "y_train": y[:num_train],
        "x_test": x[num_train:],
        "y_test": y[num_train:],
        "names": names,
    }


def _subset(x: Tensor, y: Tensor, n: int | None, g: torch.Generator) -> tuple[Tensor, Tensor]:
    if n is None or n >= len(y):
        return x, y
    idx = torch.randperm(len(y), generator=g)[:n].sort().values
    return x[idx], y[idx]


@functools.lru_cache(maxsize=2)
def _read_files(root: str | None, download: bool, quantiles: int):
    """The Adult files read once per process: the loader's data set and the a9a-like
    encoding (the tensors are shared: callers index them, never write into them)."""
    ds = load_adult(data_dir=root, download=download)
    return ds, a9a_like(ds, quantiles)


def load_data(cfg: Config, data_dir=None) -> dict:
    """Train/test tensors in ``cfg.encoding`` with ``source`` (what was read, from where, or
    why the synthetic stand-in was used). Missing files: ``data="files"`` raises, ``"auto"``
    falls back to :func:`synthetic_adult`."""
    if cfg.data not in ("auto", "files", "synthetic"):
        raise ValueError(f"Config.data must be 'auto', 'files' or 'synthetic', got {cfg.data!r}")
    if cfg.encoding not in ("a9a-like", "standardized"):
        raise ValueError(f"Config.encoding must be 'a9a-like' or 'standardized', got {cfg.encoding!r}")
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    reason = "Config.data='synthetic'"
    if cfg.data != "synthetic":
        try:
            ds, a9a = _read_files(None if root is None else str(root), bool(cfg.download), int(cfg.quantiles))
        except ChecksumError:
            raise
        except DataError as err:
            if cfg.data == "files":
                raise DataError(
                    f"psgld-blr needs the UCI Adult files adult/adult.data and adult/adult.test under "
                    f"the data folder ({root}; set $STRUCTMC_DATA or pass data_dir), or "
                    f"Config(download=True), or Config(data='auto') for the synthetic stand-in: "
                    f"{err}"
                ) from err
            reason = f"Adult files not found ({err})"
        else:
            encodings = {"standardized": (ds.x_train, ds.x_test, list(ds.feature_names), None), "a9a-like": a9a}
            if cfg.encoding != "a9a-like" and not cfg.map_reference:
                del encodings["a9a-like"]
            out = {}
            for name, (x_tr, x_te, names, edges) in encodings.items():
                gs = torch.Generator().manual_seed(int(cfg.data_seed))  # the same rows for every encoding
                x_tr, y_tr = _subset(x_tr, ds.y_train, cfg.num_train, gs)
                x_te, y_te = _subset(x_te, ds.y_test, cfg.num_test, gs)
                out[name] = {
                    "x_train": x_tr,
                    "y_train": y_tr,
                    "x_test": x_te,
                    "y_test": y_te,
                    "names": names,
                    "edges": edges,
                }
            data = dict(out[cfg.encoding])
            data["other"] = {k: v for k, v in out.items() if k != cfg.encoding}
            data["source"] = {
                "source": "files",
                "files": ds.meta["source"],
                "encoding": cfg.encoding,
                "description": "UCI Adult (adult.data / adult.test, the rows of a9a)",
            }
            return data
    n_tr = PAPER_N_TRAIN if cfg.num_train is None else int(cfg.num_train)
    n_te = PAPER_N_TEST if cfg.num_test is None else int(cfg.num_test)
    data = synthetic_adult(n_tr, n_te, seed=cfg.data_seed)
    data.update(edges=None, other={})
    data["source"] = {
        "source": "synthetic",
        "seed": cfg.data_seed,
        "reason": reason,
        "encoding": "one-hot (a9a's shape)",
        "description": "synthetic stand-in (psgld_blr.synthetic_adult): 14 one-hot blocks of a9a's "
        "sizes, 123 features, 24 % positives, y from a random true θ",
    }
    return data


# ---------------------------------------------------------------------------------------------
# model and evaluation
# ---------------------------------------------------------------------------------------------


def make_energy(cfg: Config, dim: int, num_train: int) -> LogDensityEnergy:
    return LogDensityEnergy(
        dim=dim, log_likelihood=logistic_log_likelihood, log_prior=GaussianLogPrior(cfg.prior_var), num_data=num_train
    )


def library_lr(step: float, num_train: int) -> float:
    """The paper's per-datum step ε as the library's ``lr`` (drift (lr/2)∇Û, ∇Û = N·ḡ)."""
    return 2.0 * float(step) / int(num_train)


def make_sampler(name: str, cfg: Config, num_train: int, temperature: float | str = 1.0):
    lr = library_lr(cfg.step, num_train)
    t = resolve_temperature(temperature, num_train)
    if name == "pSGLD":
        return PSGLD(lr, alpha=cfg.alpha, eps=cfg.lam, temperature=t, v_init=cfg.v_init)
    if name == "SGLD":
        return SGLD(lr, temperature=t)
    raise ValueError(f"unknown sampler {name!r}; choose from {list(SAMPLERS)}")


def record_every(cfg: Config) -> int:
    """Draws are recorded every ``gcd(thin, burn_in)`` iterations: the learning curve's grid,
    which contains every kept draw (iterations burn_in + thin·k)."""
    return math.gcd(int(cfg.thin), int(cfg.burn_in))


def kept_mask(steps: Tensor, burn_in: int, thin: int) -> Tensor:
    """The draws of the posterior predictive: iterations ``burn_in + thin·k``, k ≥ 1."""
    steps = torch.as_tensor(steps)
    return (steps > burn_in) & ((steps - burn_in) % thin == 0)


@torch.no_grad()
def evaluate(samples: Tensor, steps: Tensor, x: Tensor, y: Tensor, burn_in: int, thin: int) -> dict:
    """Test errors (%) of each recorded draw and of the posterior predictive of the kept draws
    up to each recorded iteration (NaN before the first kept draw); the last value of the
    latter is the posterior predictive of all kept draws."""
    samples = samples.to(x)
    probs = torch.sigmoid(x @ samples.T).to(torch.float64)  # [N_test, S]
    yt = y.to(torch.float64).unsqueeze(1)
    per_draw = 100 * ((probs > 0.5).to(torch.float64) != yt).to(torch.float64).mean(0)
    keep = kept_mask(steps, burn_in, thin).to(probs.device)
    k = int(keep.sum())
    if k == 0:
        raise ValueError("no draw is kept: need num_steps > burn_in + thin")
    cum = probs[:, keep].cumsum(1) / torch.arange(1, k + 1, dtype=torch.float64, device=probs.device)
    running_kept = 100 * ((cum > 0.5).to(torch.float64) != yt).to(torch.float64).mean(0)
    count = keep.to(torch.long).cumsum(0)
    running = torch.full_like(per_draw, math.nan)
    has = count > 0
    running[has] = running_kept[count[has] - 1]
    p_bar = cum[:, -1].clamp(1e-12, 1 - 1e-12)
    nll = float(-(y.to(torch.float64) * p_bar.log() + (1 - y.to(torch.float64)) * (1 - p_bar).log()).mean())
    return {
        "steps": torch.as_tensor(steps).tolist(),
        "per_draw": per_draw.cpu().tolist(),
        "posterior_predictive": running.cpu().tolist(),
        "test_error": float(running_kept[-1]),
        "test_nll": nll,
        "num_kept": k,
    }


def settle_iteration(steps, curve, level: float) -> int | None:
    """First iteration from which ``curve`` stays ≤ ``level`` to the end (None: not at the end)."""
    ok = [c == c and c <= level + 1e-9 for c in curve]  # NaN counts as not within
    if not ok or not ok[-1]:
        return None
    i = len(ok)
    while i > 0 and ok[i - 1]:
        i -= 1
    return int(steps[i])


def first_iteration(steps, curve, level: float) -> int | None:
    """First iteration at which ``curve`` is ≤ ``level`` (None: never)."""
    for s, c in zip(steps, curve):
        if c == c and c <= level + 1e-9:
            return int(s)
    return None


@torch.no_grad()
def map_reference(x: Tensor, y: Tensor, x_te: Tensor, y_te: Tensor, prior_var: float, steps: int = 50) -> dict:
    """The exact MAP by Newton's method (float64, full data), its test error (%), the largest
    eigenvalue of the full-data Hessian of the energy there and the Laplace approximation's
    marginal standard deviations (√diag H⁻¹)."""
    x, y = x.to(torch.float64), y.to(torch.float64)
    m = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    eye = torch.eye(x.shape[1], dtype=torch.float64, device=x.device) / prior_var
    for _ in range(steps):
        p = torch.sigmoid(x @ m)
        H = (x * (p * (1 - p)).unsqueeze(1)).T @ x + eye
        step = torch.linalg.solve(H, x.T @ (y - p) - m / prior_var)
        m = m + step
        if float(step.norm()) < 1e-10 * (1 + float(m.norm())):
            break
    p = torch.sigmoid(x @ m)
    H = (x * (p * (1 - p)).unsqueeze(1)).T @ x + eye
    err = 100 * float(
        ((torch.sigmoid(x_te.to(torch.float64) @ m) > 0.5).to(torch.float64) != y_te.to(torch.float64))
        .to(torch.float64)
        .mean()
    )
    return {
        "test_error": err,
        "hessian_max_eigenvalue": float(torch.linalg.eigvalsh(H)[-1]),
        "dim": x.shape[1],
        "laplace_sd": torch.linalg.inv(H).diagonal().sqrt().cpu().tolist(),
    }


# ---------------------------------------------------------------------------------------------
# the experiment
# ---------------------------------------------------------------------------------------------
def _check(cfg: Config) -> None:
    if not 0 <= cfg.burn_in < cfg.num_steps or cfg.thin < 1 or cfg.num_steps - cfg.burn_in < cfg.thin:
        raise ValueError("need 0 <= burn_in < num_steps, thin >= 1 and at least one kept draw")
    if cfg.num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {cfg.num_seeds}")
    for s in cfg.samplers:
        if s not in SAMPLERS:
            raise ValueError(f"unknown sampler {s!r}; choose from {list(SAMPLERS)}")
    check_temperatures(cfg.temperatures)


def _run_one(
    name: str,
    seed: int,
    cfg: Config,
    energy,
    data: dict,
    folder: Path,
    device,
    resume: bool,
    progress,
    temperature: float = 1.0,
) -> dict:
    dim = data["x_train"].shape[1]
    n = len(data["y_train"])
    g = record_every(cfg)
    t0 = time.perf_counter()
    chain = sample(
        energy,
        torch.zeros(dim, device=device),
        make_sampler(name, cfg, n, temperature),
        cfg.num_steps,
        data=(data["x_train"], data["y_train"]),
        batch_size=cfg.batch_size,
        batching=cfg.batching,
        burn_in=0,
        thin=g,
        seed=seed,
        out_dir=folder,
        checkpoint_every=cfg.checkpoint_every,
        resume=resume,
        overwrite=not resume,
        progress=progress,
    )
    seconds = time.perf_counter() - t0
    ev = evaluate(chain.samples[0], chain.draw_steps, data["x_test"], data["y_test"], cfg.burn_in, cfg.thin)
    keep = kept_mask(chain.draw_steps, cfg.burn_in, cfg.thin)
    ev["draw_sd"] = chain.samples[0][keep.to(chain.samples.device)].to(torch.float64).std(0).cpu().tolist()
    ev["seconds"] = seconds
    ev["sampling_seconds"] = float(chain.info["time"][-1]) if "time" in chain.info else None
    return ev


def _mean(curves: list[list[float]]) -> list[float]:
    return torch.tensor(curves, dtype=torch.float64).mean(0).tolist()


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/psgld-blr",
    progress: bool | None = None,
    *,
    device: str = "cpu",
    seed: int | None = None,
    resume: bool = False,
    data_dir: str | Path | None = None,
) -> dict:
    """Run the experiment; write ``report.json``, ``report.md`` and the Fig. 3 PNG to
    ``out_dir``, the chains to ``out_dir/runs/<sampler>-seed<k>`` (checkpointed every
    ``checkpoint_every`` iterations; ``resume=True`` continues them, a finished one is read
    back). ``seed`` overrides the config's; ``data_dir``: where to look for ``adult/``."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    _check(cfg)
    with threads(cfg.threads):  # the report records the thread count used
        return _run(cfg, preset, Path(out_dir), progress, device, resume, data_dir)


def _run(cfg: Config, preset: str, out: Path, progress, device, resume: bool, data_dir) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    log = progress_log(NAME, progress)
    t_start = time.perf_counter()
    data = load_data(cfg, data_dir)
    for k in ("x_train", "y_train", "x_test", "y_test"):
        data[k] = data[k].to(device)
    n, dim = data["x_train"].shape
    files = data["source"]["source"] == "files"
    if log:
        log(f"data: {data['source']['description']}, {n:,} train / {len(data['y_test']):,} test rows, D = {dim}")
    refs = {}
    if cfg.map_reference:
        refs[cfg.encoding if files else "synthetic"] = map_reference(
            data["x_train"], data["y_train"], data["x_test"], data["y_test"], cfg.prior_var
        )
        for enc, d in data["other"].items():
            refs[enc] = map_reference(d["x_train"], d["y_train"], d["x_test"], d["y_test"], cfg.prior_var)
    energy = make_energy(cfg, dim, n)
    seeds = [cfg.seed + k for k in range(cfg.num_seeds)]
    temperatures = {temperature_label(t): resolve_temperature(t, n) for t in cfg.temperatures}
    several = len(temperatures) > 1
    paper_setting = paper_setting_of(temperatures, AUTHORS_TEMPERATURE_1_OVER_N)
    by_temperature: dict[str, dict] = {}
    rows: list[Comparison] = []
    figures: list[str] = []
    for label, t in temperatures.items():
        runs: dict[str, dict[int, dict]] = {s: {} for s in cfg.samplers}
        for name in cfg.samplers:
            for s in seeds:
                folder = out / "runs" / f"{name.lower()}-seed{s}{temperature_suffix(t, n)}"
                runs[name][s] = _run_one(name, s, cfg, energy, data, folder, device, resume, progress, t)
                if log:
                    log(
                        f"{name} seed {s}, {label}: test error {runs[name][s]['test_error']:.2f} % "
                        f"({runs[name][s]['seconds']:.1f} s)"
                    )
        results_t = _summarise(cfg, runs)
        ref = refs.get(cfg.encoding if files else "synthetic")
        for name in cfg.samplers:  # spread of the draws against the Laplace approximation (N large: near exact)
            if ref is not None:
                ratio = torch.tensor(results_t[name]["draw_sd"]) / torch.tensor(ref["laplace_sd"])
                results_t[name]["draw_sd_over_laplace_sd"] = {
                    "median": float(ratio.median()),
                    "min": float(ratio.min()),
                    "max": float(ratio.max()),
                }
        for row in _comparisons(cfg, results_t, files, len(data["y_test"])):
            row.setting = label if several else ""
            rows.append(row)
        slug = label.replace("T = ", "T").replace("/", "over")
        figure = FIGURE if not several or label == paper_setting else FIGURE.replace(".png", f"-{slug}.png")
        if _plot(out / figure, cfg, results_t, files, label):
            figures.insert(0 if figure == FIGURE else len(figures), figure)
        by_temperature[label] = results_t
    # the numbers, notes and figure of the paper's setting first; every setting's under by_temperature
    results = by_temperature[paper_setting] if paper_setting is not None else next(iter(by_temperature.values()))
    steps = results[cfg.samplers[0]]["steps"]
    numbers = {
        "data": {
            **data["source"],
            "num_train": n,
            "num_test": len(data["y_test"]),
            "dim": dim,
            "positive_rate_train": float(data["y_train"].mean()),
            "majority_error_test_pct": 100 * min(float(data["y_test"].mean()), 1 - float(data["y_test"].mean())),
            "quantile_edges": data.get("edges"),
        },
        "library_lr": library_lr(cfg.step, n),
        "seeds": seeds,
        "record_every": record_every(cfg),
        "map_reference": refs,
        "samplers": {
            name: {k: v for k, v in r.items() if k != "steps"} for name, r in results.items() if name != "_claim"
        },
        "convergence_claim": results.get("_claim"),
        "curve_iterations": steps,
        "temperatures": temperatures,
        "paper_setting": paper_setting,
        "by_temperature": {
            label: {
                "samplers": {
                    name: {k: v for k, v in r.items() if k != "steps"} for name, r in res.items() if name != "_claim"
                },
                "convergence_claim": res.get("_claim"),
            }
            for label, res in by_temperature.items()
        },
    }
    notes = _notes(cfg, data, refs, results, n, dim, files)
    return write_report(
        out,
        experiment=REGISTRY.get(NAME),
        preset=preset,
        config=asdict(cfg),
        seed=cfg.seed,
        comparisons=rows + common_rows(),
        numbers=numbers,
        wall_time_s=time.perf_counter() - t_start,
        device=device,
        step_sizes=_step_sizes(cfg, n, refs),
        reductions=_reductions(cfg),
        figures=figures,
        notes=notes,
        paper_setting=paper_setting,
        stand_in="" if files else f"a synthetic stand-in with a9a's shape: {data['source']['description']}",
    )


def _summarise(cfg: Config, runs: dict) -> dict:
    """Per sampler: per-seed numbers, the seed-mean curves, final errors and convergence."""
    out = {}
    for name, by_seed in runs.items():
        evs = list(by_seed.values())
        steps = evs[0]["steps"]
        pp = _mean([e["posterior_predictive"] for e in evs])
        per = _mean([e["per_draw"] for e in evs])
        errs = [e["test_error"] for e in evs]
        final = float(np.mean(errs))
        level = final + cfg.converge_pp
        out[name] = {
            "steps": steps,
            "test_error_pct": final,
            "test_error_sd_over_seeds": float(np.std(errs, ddof=1)) if len(errs) > 1 else None,
            "test_error_per_seed": errs,
            "test_nll": float(np.mean([e["test_nll"] for e in evs])),
            "num_kept_draws": evs[0]["num_kept"],
            "converged_at": settle_iteration(steps, pp, level),
            "first_within": first_iteration(steps, pp, level),
            "converged_at_per_seed": [
                settle_iteration(steps, e["posterior_predictive"], e["test_error"] + cfg.converge_pp) for e in evs
            ],
            "per_draw_converged_at": settle_iteration(steps, per, per[-1] + cfg.converge_pp) if len(per) else None,
            "curve": {
                "posterior_predictive": pp,
                "per_draw": per,
                "per_seed": {
                    str(s): {"posterior_predictive": e["posterior_predictive"], "per_draw": e["per_draw"]}
                    for s, e in by_seed.items()
                },
            },
            "draw_sd": _mean([e["draw_sd"] for e in evs]),
            "seconds": [e["seconds"] for e in evs],
            "sampling_seconds": [e["sampling_seconds"] for e in evs],
        }
    if "pSGLD" in out and "SGLD" in out:
        p, s = out["pSGLD"], out["SGLD"]
        level = p["test_error_pct"] + cfg.converge_pp
        t_s = settle_iteration(s["steps"], s["curve"]["posterior_predictive"], level)
        s["reaches_psgld_level_at"] = t_s
        s["psgld_level_pct"] = level
        t_p = p["converged_at"]
        ratio = math.inf if t_s is None and t_p else (None if not t_p else t_s / t_p)
        out["_claim"] = {
            "psgld_converged_at": t_p,
            "sgld_reaches_psgld_level_at": t_s,
            "ratio": ratio,
            "sgld_own_converged_at": s["converged_at"],
            "never_reached": t_s is None,
        }
    return out


def _published() -> dict:
    return REGISTRY.get(NAME).published["test_error_pct"]


PAPER_ROUNDING_SE = 0.005 / math.sqrt(3)  # Table 1's values are given to 0.01 pp: uniform ±0.005


def value_se(r: dict, num_test: int) -> tuple[float, str]:
    """The standard error of a sampler's seed-mean test error (pp) and where it comes from: the
    spread over seeds / √seeds with two seeds or more, else the binomial SE of ``num_test`` rows."""
    per = [v for v in (r.get("test_error_per_seed") or []) if v is not None]
    se = seed_se(per) if len(per) > 1 else math.nan
    if math.isfinite(se) and se > 0:
        return se, f"SE_ours = sd over {len(per)} seeds / √{len(per)} = {se:.3g} pp"
    p = r.get("test_error_pct")
    p = p if isinstance(p, (int, float)) and math.isfinite(p) and 0 <= p <= 100 else 15.0
    se = 100 * binomial_se(p / 100, num_test)
    return se, f"SE_ours = binomial SE of {num_test:,} test rows = {se:.3g} pp (one seed)"


def _comparisons(cfg: Config, res: dict, files: bool, num_test: int = 16_281) -> list[Comparison]:
    """The rows of one run setting (issue 35): every claim of Table 1 and its text, run or not.

    * each sampler's published test error, judged on the noise of both sides: |ours − paper| ≤
      3·SE (WithinNoise), SE_ours the seed spread / √seeds (the binomial SE of the test rows with
      one seed), SE_paper the published rounding (0.005/√3 pp; the paper reports no spread);
    * "pSGLD and SGLD equal" (Table 1: both 14.85 %): a weak claim (equal numbers meet it);
    * both SG-MCMC below DSVI and below every variational method (orderings against the paper's
      published VI values, which we do not run);
    * pSGLD converges in fewer than 4,000 iterations; SGLD needs at least double.

    A sampler not run (``cfg.samplers``), or the synthetic stand-in: its rows stay, "not run"."""
    pub = _published()
    stand_in = "" if files else "the run used a synthetic stand-in for Adult: not comparable with a9a"
    rows = []
    for name in SAMPLERS:
        r = res.get(name)
        if r is None:
            rows.append(
                Comparison(
                    f"{name} test error (posterior predictive)",
                    None,
                    pub[name],
                    None,
                    unit="%",
                    not_run=stand_in or f"{name} is not in this run's samplers {list(cfg.samplers)}",
                )
            )
            continue
        se, source = value_se(r, num_test)
        sd = r.get("test_error_sd_over_seeds")
        spread = f"; sd over {len(r['test_error_per_seed'])} seeds {sd:.3f} pp" if sd is not None else ""
        rows.append(
            Comparison(
                f"{name} test error (posterior predictive of {r['num_kept_draws']} draws)",
                r["test_error_pct"],
                pub[name],
                WithinNoise(
                    se,
                    PAPER_ROUNDING_SE,
                    3.0,
                    f"{source}; SE_paper = 0.005/√3 = {PAPER_ROUNDING_SE:.3g} pp, the published rounding to 0.01 pp "
                    "(the paper reports one number and no spread)",
                ),
                unit="%",
                not_run=stand_in,
                note=(
                    f"mean over seeds{spread}; the encoding is a9a-like, not a9a (see Notes). If the paper's number is "
                    f"one chain, its own sd would be about one seed's ({sd:.3f} pp here), which this rule leaves out "
                    "(hypothesis, not measured: the paper does not say how many runs)"
                    if sd is not None
                    else "one seed; the encoding is a9a-like, not a9a (see Notes)"
                ),
            )
        )
    both = "pSGLD" in res and "SGLD" in res
    why = stand_in or ("" if both else f"needs both samplers; this run has {list(cfg.samplers)}")
    p: float = res["pSGLD"]["test_error_pct"] if both else math.nan
    s_: float = res["SGLD"]["test_error_pct"] if both else math.nan
    # the worse of the two (a NaN or inf in either is the worse: max() would drop a NaN)
    worse = next((v for v in (p, s_) if not math.isfinite(v)), max(p, s_)) if both else None
    gap_se = math.hypot(value_se(res["pSGLD"], num_test)[0], value_se(res["SGLD"], num_test)[0]) if both else 0.0
    allowed = 3 * gap_se + 0.01
    rows.append(
        Comparison(
            "pSGLD − SGLD test error (the paper: equal, both 14.85 %)",
            None if not both else p - s_,
            pub["pSGLD"] - pub["SGLD"],
            Claim(
                f"|pSGLD − SGLD| ≤ 3·SE of the difference + 0.01 (the published rounding) = {allowed:.3g} pp",
                lambda d: abs(d) <= allowed,
                weak=True,
            ),
            unit="pp",
            not_run=why,
            valid=False,
            note="SE of the difference √(SE_pSGLD² + SE_SGLD²) from the seed spreads",
        )
    )
    rows.append(
        Comparison(
            "both SG-MCMC below DSVI (the worse of pSGLD, SGLD vs DSVI's published 15.20 %)",
            [worse, pub["DSVI"]],
            [max(pub["pSGLD"], pub["SGLD"]), pub["DSVI"]],
            Ordering(("SG-MCMC (worse of the two)", "DSVI"), margin=0.5),
            unit="%",
            not_run=why,
            valid=(0, 100),
            note="DSVI is not run: its value is the paper's; reproduced when ours is below 15.20 % by at least half "
            "the paper's 0.35 pp margin",
        )
    )
    best_vi = min(pub["L-BFGS-SGVI"], pub["HFSGVI"], pub["DSVI"])
    rows.append(
        Comparison(
            "both SG-MCMC below every variational method (worse of pSGLD, SGLD vs L-BFGS-SGVI's "
            "14.91 %, the best of DSVI, L-BFGS-SGVI, HFSGVI)",
            [worse, best_vi],
            [max(pub["pSGLD"], pub["SGLD"]), best_vi],
            Ordering(("SG-MCMC (worse of the two)", "best VI"), margin=0.5),
            unit="%",
            not_run=why,
            valid=(0, 100),
            note="the paper's margin is 0.06 pp = 10 of 16,281 test rows, below what the encoding difference alone "
            "moves (see the MAP rows)",
        )
    )
    c = res.get("_claim") or {}
    t_p = c.get("psgld_converged_at")
    rows.append(
        Comparison(
            f"pSGLD converges (learning curve stays within {cfg.converge_pp:g} pp of its final "
            "error) in fewer than 4,000 iterations",
            t_p,
            PAPER_CONVERGE,
            Claim(f"iteration < {PAPER_CONVERGE:,}", lambda v: _given(v) < PAPER_CONVERGE),
            unit="iterations",
            not_run=stand_in or ("" if "pSGLD" in res else "pSGLD is not in this run's samplers"),
            valid=False,
            note="seed-mean learning curve of the posterior predictive (kept draws so far); the paper gives only the "
            "bound",
        )
    )
    t_s = c.get("sgld_reaches_psgld_level_at")
    rows.append(
        Comparison(
            "SGLD needs at least double pSGLD's iterations to reach pSGLD's converged accuracy "
            "(ratio of iterations, SGLD / pSGLD)",
            NEVER if c.get("ratio") == math.inf else c.get("ratio"),
            PAPER_RATIO,
            Claim(
                "ratio ≥ 2 (SGLD never reaching it within T counts as ≥ 2)",
                lambda v: v == NEVER or _given(v) >= PAPER_RATIO,
            ),
            not_run=why,
            valid=False,
            note=(
                f"pSGLD converged at {t_p} and SGLD's curve stays below pSGLD's level "
                f"{res['SGLD']['psgld_level_pct']:.2f} % from {'never (within T)' if t_s is None else t_s}"
                if both
                else ""
            ),
        )
    )
    return rows


NEVER = "never: SGLD does not reach it within T"  # the ratio when SGLD never reaches pSGLD's level


def _given(v):
    """``v``, or ValueError (the claim's verdict: "not run") when the run has no such number."""
    if v is None:
        raise ValueError("this run has no convergence iteration (no learning curve)")
    return v


def common_rows() -> list[Comparison]:
    """Table 1's published values of the variational methods, which no run of this experiment
    makes (their numbers serve as the reference in the ordering rows): "not run"."""
    pub = _published()
    return [
        Comparison(
            f"{m} test error (Table 1)",
            None,
            pub[m],
            None,
            unit="%",
            not_run="the variational methods are not implemented here; their published values are the reference "
            "of the SG-MCMC-below-VI rows",
        )
        for m in ("DSVI", "L-BFGS-SGVI", "HFSGVI")
    ]


def rejudge(report: dict) -> list[Comparison]:
    """The rows of a written report rebuilt from its numbers and config (issue 35 §7)."""
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in report["config"].items()
        if k in Config.__dataclass_fields__
    }
    cfg = Config(**fields)
    nums = report["numbers"]
    files = nums["data"].get("source") == "files" and not report.get("stand_in")
    by_t = nums["by_temperature"]
    several = len(by_t) > 1
    rows = []
    for label, d in by_t.items():
        res = {**d["samplers"], "_claim": d.get("convergence_claim")}
        for row in _comparisons(cfg, res, files, int(nums["data"]["num_test"])):
            row.setting = label if several else ""
            rows.append(row)
    return rows + common_rows()


def _step_sizes(cfg: Config, n: int, refs: dict) -> list[str]:
    lr = library_lr(cfg.step, n)
    lam = next((r["hessian_max_eigenvalue"] for r in refs.values()), None)
    lines = [
        f"paper ε = {cfg.step:g} for pSGLD and SGLD, a step on the per-datum (batch-mean) log-likelihood as in "
        f"the authors' Matlab code → PSGLD(lr=2ε/N) = SGLD(lr=2ε/N) = 2·{cfg.step:g}/{n:,} = {lr:.4g} "
        f"(drift (lr/2)∇Û = ε·ḡ, resp. ε·G·ḡ, with ∇Û = N·ḡ)",
        "temperatures: "
        + ", ".join(f"T = {t}" for t in cfg.temperatures)
        + f"; T = 1 is the posterior, the Matlab code divides its noise by N, i.e. T = 1/N = {1 / n:.3g} (the "
        "setting of the paper's numbers)",
    ]
    if lam is not None:
        lines.append(
            f"why not the summed scale of eq. (2): the full-data Hessian at the MAP has λ_max = "
            f"{lam:,.0f}, so SGLD(lr={cfg.step:g}) would have (ε/2)·λ_max = {cfg.step / 2 * lam:,.0f} ≫ 2 "
            f"and diverge; with lr = {lr:.4g} it is {lr / 2 * lam:.3f}"
        )
    lines.append(
        f"pSGLD: α = {cfg.alpha:g}, λ = {cfg.lam:g}, V₀ = {'0' if cfg.v_init == 'zeros' else 'ḡ₁²'}, Γ omitted"
    )
    return lines


def _reductions(cfg: Config) -> list[str]:
    out = []
    if cfg.num_train is not None or cfg.num_test is not None:
        out.append(
            f"{cfg.num_train or PAPER_N_TRAIN:,} training and {cfg.num_test or PAPER_N_TEST:,} test rows "
            f"(random subsets) instead of {PAPER_N_TRAIN:,} / {PAPER_N_TEST:,}: a noisier posterior and test "
            "error (± ~0.6 pp from the test subset alone); lr = 2ε/N follows the smaller N"
        )
    if (cfg.num_steps, cfg.burn_in, cfg.thin) != (15_000, 500, 50):
        out.append(
            f"{cfg.num_steps:,} iterations, burn-in {cfg.burn_in:,}, thinning {cfg.thin} instead of 15,000, "
            "500, 50: SGLD's slow coordinates (rare categories) are far from converged, so its error is "
            "expected higher and the convergence claims are not tested at the paper's scale"
        )
    if cfg.batch_size != 50 or cfg.prior_var != 10.0 or cfg.step != PAPER_STEP:
        out.append(f"batch {cfg.batch_size}, σ² = {cfg.prior_var:g}, ε = {cfg.step:g} (paper: 50, 10, 5e-2)")
    return out


def _notes(cfg: Config, data: dict, refs: dict, res: dict, n: int, dim: int, files: bool) -> list[str]:
    notes = []
    src = data["source"]
    if not files:
        notes.append(
            f"DATA: {src['description']}, seed {src['seed']} — {src['reason']}. The paper's numbers are for "
            "a9a and are shown but not judged."
        )
    elif cfg.encoding == "a9a-like":
        notes.append(
            f"Encoding (a9a-like): the 8 categorical attributes one-hot over the 99 categories of adult.data "
            f"(missing = all-zero block, as a9a), the 6 continuous ones cut at their training quintiles "
            f"(equal cut points merged) and one-hot: {dim} features instead of a9a's 123 — capital-gain and "
            "capital-loss get 2 bins (0 / > 0) as in a9a, but ties at 9 years of education and at 40 hours "
            "a week merge one quintile bin each where a9a keeps 5 (its cut points are not published)."
        )
    else:
        notes.append(
            f"Encoding (standardized): the loader's {dim} features — 99 one-hot categories and the 6 "
            "continuous attributes standardised (a9a quantises them into 24 binary features)."
        )
    if len(refs) > 1:
        notes.append(
            "MAP test error (Newton's method, full data, no sampling) per encoding: "
            + ", ".join(f"{k} {v['test_error']:.2f} % (D = {v['dim']})" for k, v in refs.items())
            + ": what the encoding alone moves. The value rows are judged on the seed spread / √seeds and the "
            "published rounding (|ours − paper| ≤ 3·SE), far below that, so an encoding shift fails them; the "
            "orderings carry the comparisons with the variational methods."
        )
    elif refs:
        notes.append(
            "MAP test error (Newton's method, full data): "
            + ", ".join(f"{k} {v['test_error']:.2f} %" for k, v in refs.items())
            + "."
        )
    if cfg.num_seeds > 1:
        notes.append(
            f"{cfg.num_seeds} runs per sampler (seeds {cfg.seed}..{cfg.seed + cfg.num_seeds - 1}); the "
            "paper reports one. Test errors and learning curves are seed means; per-seed values in numbers."
        )
    if "pSGLD" in res and "SGLD" in res:
        p, s = res["pSGLD"], res["SGLD"]
        notes.append(
            f"Single draws: the last draw's test error is {p['curve']['per_draw'][-1]:.2f} % for pSGLD and "
            f"{s['curve']['per_draw'][-1]:.2f} % for SGLD (posterior predictive {p['test_error_pct']:.2f} / "
            f"{s['test_error_pct']:.2f} %). pSGLD's preconditioner G ≈ 1/√V gives rare categories "
            "large steps, and its larger steps let it move along the directions the one-hot blocks leave "
            "to the prior (every block sums to 1: adding c to one block's weights and subtracting it from "
            "another's changes only the prior), so its draws spread far more than SGLD's (still less than "
            "the posterior within T) and single draws err more; SGLD's uniform step barely moves along them."
            + (
                ""
                if "draw_sd_over_laplace_sd" not in p
                else " Median ratio of the draws' standard deviation to the Laplace approximation's (√diag H⁻¹ at "
                f"the MAP): pSGLD {p['draw_sd_over_laplace_sd']['median']:.2f}, SGLD "
                f"{s['draw_sd_over_laplace_sd']['median']:.2f} (1 = the posterior's spread; both chains "
                "are under-dispersed within T, SGLD far more)."
            )
        )
    notes.append(
        f"Learning curve: the test error of the posterior predictive of the draws kept so far, every "
        f"{record_every(cfg)} iterations from the first kept draw (iteration {cfg.burn_in + cfg.thin}); the "
        f"dotted lines are single draws. Convergence: the first iteration from which the curve stays within "
        f"{cfg.converge_pp:g} pp of its final value."
    )
    return notes


def _plot(path: Path, cfg: Config, res: dict, files: bool, setting: str = "") -> bool:
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return False
    colors = {"pSGLD": "tab:red", "SGLD": "tab:blue"}
    pub = _published()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    finals = []
    for name in cfg.samplers:
        r = res[name]
        steps = np.array(r["steps"])
        pp = np.array(r["curve"]["posterior_predictive"], dtype=float)
        per = np.array(r["curve"]["per_draw"], dtype=float)
        finals.append(r["test_error_pct"])
        axes[0].plot(steps, per, color=colors.get(name), lw=0.7, ls=":", alpha=0.8, label=f"{name}: single draw")
        for ax in axes:
            ax.plot(
                steps,
                pp,
                color=colors.get(name),
                lw=1.8,
                label=f"{name}: posterior predictive ({r['test_error_pct']:.2f} %)",
            )
            if r["converged_at"] is not None:
                ax.axvline(r["converged_at"], color=colors.get(name), lw=0.8, ls="--", alpha=0.6)
    for ax in axes:
        if files:
            ax.axhline(pub["pSGLD"], color="k", lw=0.8, ls="--", label="paper: pSGLD = SGLD 14.85 %")
            ax.axhline(pub["DSVI"], color="gray", lw=0.8, ls="-.", label="paper: DSVI 15.20 %")
        ax.set_xlabel("iteration")
        ax.set_ylabel("test error (%)")
        ax.grid(alpha=0.3)
    lo = min(finals) - 0.4
    axes[1].set_ylim(lo, lo + 2.0)
    axes[1].set_xlim(0, cfg.num_steps)
    axes[0].set_title("learning curves (Fig. 3, ours)", fontsize=10)
    axes[1].set_title(f"zoom on the posterior predictive; dashed: convergence (±{cfg.converge_pp:g} pp)", fontsize=10)
    axes[0].legend(fontsize=7, loc="upper right")
    fig.suptitle(
        f"BLR on {'Adult (' + cfg.encoding + ')' if files else 'synthetic stand-in'}: pSGLD vs SGLD, "
        f"batch {cfg.batch_size}, ε = {cfg.step:g} (per datum)" + (f", {setting}" if setting else ""),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
