r"""Tables 1, 3 and 4 of Alexos, Boyd & Mandt (2022, *Structured Stochastic Gradient MCMC*):
S-SGLD on a 2-layer, 50-50 Bayesian network for UCI regression under four parameter
partitions, test MSE mean ± sd over seeds, learning rate chosen per partition and data set.

What is reproduced
------------------
Appendix G ("Parameter Partitions") and Table 3 (= Table 1): a fully connected network with
two hidden layers of 50 neurons, sampled with SGLD on the structured energy
Û^(S)(θ) = Σ_i Û({θ_i, θ̃_{−i}}) (:class:`structmc.structured.StructuredEnergy`) for the
partitions (a) random into M = 3 groups, (b) by layer (3 layers: input→50, 50→50, 50→1, each
weight with its bias), (c) "by activating neurons" (one group per unit: its incoming weights
and its bias; 50 + 50 + 1 = 101 groups) and (d) fully factorised (every parameter its own
group, M = P: 3,301 for Boston, 3,051 for Concrete). Every data set is split 75 % / 10 % / 15 %
(train / validation / test); the learning rates 1e-3, 1e-4, 1e-5, 1e-6, 1e-7 are tried and the
best is kept per partition and data set (Table 4); the table gives MSE mean ± sd over 5 runs
with different seeds. The paper's text: "We do not observe any specific systematic trends on
the partitions, apart from the fact that in some cases random performs better".
The registry's published values are the Housing (Boston) and Concrete columns (read from the
project's CSV copies, else UCI's files, downloaded and checksummed); Wine, Obesity, Bike and
Airfoil download (``Config.datasets``; a missing file with no network is a clear error) and
are compared with :data:`PAPER_MSE` (Table 3; note that the paper's Wine and Airfoil columns
are identical cell for cell, a copy error in the paper).

Choices the paper leaves open (the authors' UCI script is not public; the regression network of
their library, ``FF_BNN`` in mandt-lab/Structured-SG-MCMC ``lvi/components.py``, fixes the rest):

* **Scaling**: features and target min-max scaled to [0, 1] with the training part's minimum
  and maximum. Evidence (reported under ``numbers["scaling"]``): predicting the training mean
  gives a test MSE of ≈ 0.035–0.045 in min-max units, and the paper's 0.023 is then a
  plausible R² ≈ 0.4; in standardised units the same predictor scores ≈ 1 and 0.023 would be
  R² ≈ 0.98, beyond the best published Boston results (test RMSE ≈ 2.8–3 of a standard
  deviation 9.2, MSE ≈ 0.09 standardised); in raw units Boston's MSE is ≈ 10–80.
* **Likelihood and prior**: Gaussian with σ = 1 (``FF_BNN``'s default
  ``output_dist_const_params=dict(scale=1.0)``) and N(0, 1) priors (its ``prior_std=1.0``),
  ReLU. With σ = 1 on targets in [0, 1] the likelihood is weak and the posterior predictive is
  heavily shrunk: that is what puts the paper's MSEs half-way between the mean predictor and a
  well-fitted net. ``numbers["noise_check"]`` runs plain SGLD with σ = 0.1 to show the
  difference (≈ 0.008 on Boston, far below every number of Table 3).
* **Energy scale**: the library's Û = −(N/n) Σ_batch log p − log p(θ), the same as
  ``FF_BNN``'s N·mean log-likelihood (see "Step sizes" below).
* **Minibatches** of 32 rows (epoch batching), **1,000 epochs** in ``full``; the first epoch
  runs plain SGLD (``warmup_steps``, the reference drivers' "first epoch is SGLD"), the chain
  history is a window of 5,000 draws (the drivers' ``chain_length``), the posterior predictive
  mean is averaged over 100 draws evenly spaced over the second half of the chain (the
  reference evaluation's "100 chain samples").
* **Early stopping** (App. G: "We trained the model on training set and validated it in the
  validation set with an early stoppage"; no rule given): on by default, as in the paper. After
  every epoch the validation MSE of the chain's current network is computed; the chain stops
  after ``patience`` = 100 epochs without a new best (a tenth of the 1,000-epoch budget), and
  its posterior predictive averages the kept draws after ``burn_in`` of its own length (the
  draws lie on the grid a full-length run keeps, so fewer of them: ≈ 20 when Boston stops near
  epoch 220-250 at η = 1e-5, measured). The chain is not altered: same seed, same iterates up
  to the stop; ``early_stopping=False`` runs the fixed budget.
* **Seeds**: each seed draws its own split, initialisation (PyTorch's default ``nn.Linear``
  init), random partition and chain (``resplit=True``); the sd over seeds thus includes the
  split, as the paper's ±0.003 (≈ the split-to-split spread of a 76-row test set) suggests.
* **Fully factorised**: S-SGLD needs M = P ≈ 3,000 model evaluations per step (≈ 0.1 s per
  step on the development CPU, hours per run), so ``factorized="sd"`` (the default) runs the
  paper's scalable variant, Sd-SGLD with Bernoulli(ρ) masks and K copies per step, ρ = 0.1 and
  K = 16: the reference drivers' defaults (``dropout_prob`` 0.1 — the probability that a group
  is live, the "dropout 0.1" of the paper's Tables 5–8 — and ``vi_batch_size`` 16); the
  paper itself switches to Sd-SGMCMC for fully factorised posteriors "as S-SGMCMC would not
  be feasible" (Sect. 5.3). ``factorized="s"`` runs the exact S-SGLD with P copies (chunked by
  ``max_copies_per_call``). Whether the paper's UCI runs used S or Sd for (d) is not stated.
* **Random groups**: a balanced random assignment (:func:`structmc.partitions.random_partition`,
  a new one per seed); the reference code draws an independent uniform group per weight.
* **Learning-rate choice**: on the *validation* split (mean validation MSE over seeds). The
  paper chose "the learning rate that provides the best accuracy score on the test set"; we do
  not select on the test set.

Step sizes (docs/conventions.md)
--------------------------------
The authors' PyTorch SGLD (``lvi/optimizers.py``) updates θ ← θ − η(∇U + ξ/√η) =
θ − η∇U + N(0, η) with U the loss ``-(log_prior + N·mean_batch log p)`` (``components.py``):
η multiplies the gradient of the *full-data* energy (the same Û as ours), not a per-datum or
per-batch mean loss. Our SGLD drift is (ε/2)∇Û, so **ε = 2η**: ``SGLD(lr=2·η)``. Their noise
variance η = ε/2 is our temperature T = 1/2.

Temperature (issue 26 §2): ``Config.temperatures`` (default ``(1.0, 0.5)``) runs every chain at
the posterior (T = 1) and at the authors' T = 1/2, side by side, each with its verdicts. The
authors' UCI script is not public; their library's SGLD is T = 1/2, so the paper's numbers are
read as T = 1/2: that setting is the tally. T = 1's run folders keep their names (``-T0.5``
marks the others), so earlier runs resume. On Boston at 1,000 epochs (2 seeds, measured while
writing this module) T = 1/2 gave 0.017–0.020 for Random and By Layer against 0.025–0.034 at
T = 1: the temperature alone moves the MSE by about the gap between the paper and us.

A check beside the table (in ``numbers``, the notes and, not judged, the comparison table):
``noise_check`` (plain SGLD with σ = 0.1 at T = 1, one seed: what a likelihood that fits does).

Data sets: Table 3 has six (Wine, Housing, Obesity, Bike, Concrete, Airfoil). The offline data
folder of this project holds only Boston (Housing) and Concrete, so those are the default and
the report says so; the other four download (checksummed) for a user with network access.

Verdicts (:func:`comparisons`, issues 26 §1 and 35)
----------------------------------------------------
Every claim of Tables 1/3 has a row, run or not ("not run: why" for Wine, Obesity, Bike and
Airfoil, which are not offline, and for a partition a preset leaves out):

* each published MSE (partition × data set): a claim judged on the noise of both sides,
  reproduced when |ours − paper| ≤ 3·√(SE_ours² + SE_paper²), SE_ours our sd over seeds / √seeds,
  SE_paper Table 3's sd / √5 (its "5 runs with different seeds"). The paper's partitions differ by
  about a tenth of that noise (Housing 0.0003, Concrete 0.0005 against SEs of 0.0004-0.0013), so a
  value row cannot tell the partitions apart; the "random performs better" rows carry the
  comparison between partitions;
* the chosen learning rate against Table 4: a check, not judged (Table 4 is the setting of the
  paper's runs, chosen on the test set; ours is chosen on the validation split, and the numbers
  beside it say how flat the validation curve is);
* "no systematic trend across partitions", per data set: reproduced when the spread of the
  four partition means (max − min) is at most twice the pooled seed sd (√ of the mean of the
  four variances); the paper's own ratio is given beside ours. A claim of no difference that
  equal numbers for every partition satisfy: weak (counted only while the report's other claims
  carry it);
* "in some cases random performs better": on each data set where Table 3 has Random strictly
  lowest (Concrete here; Wine, Bike and Airfoil too), Random's mean MSE below every other
  partition's.

Presets: ``tiny`` (Boston, the four partitions, one learning rate, 2 seeds, 60 iterations; a
few seconds, for tests), ``quick`` (Boston and Concrete, the paper's best learning rates 1e-4
and 1e-5 only, 3 seeds, 60 epochs; ≈ 2 minutes on the 2-core development CPU at one
temperature, about twice that at both, estimated from the tiny preset's timings) and ``full``
(the paper's protocol: 5 learning rates, 5 seeds, 1,000 epochs; about 2 hours on that CPU, most of
it the 101-copy By Neurons energy at ≈ 5 ms per iteration; 1e-3 diverges within a few hundred
iterations).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from structmc import SGLD, ModuleEnergy, predictive, sample
from structmc.data.files import DataError
from structmc.data.uci import ALIASES, SETS, load_uci
from structmc.partitions import Partition, by_layer, by_neuron, fully_factorized, fully_joint, random_partition
from structmc.recorders import Recorder
from structmc.run import DivergenceError
from structmc.structured import BernoulliMask, ChainHistory, StructuredEnergy

from . import REGISTRY, resolve_preset
from ._report import Claim, Comparison, WithinNoise, seed_se, smallest_gap, write_report
from ._shared import (
    check_temperatures,
    default_data_dir,
    load_result,
    progress_log,
    pyplot,
    restores_globals,
    save_result,
    temperature_label,
    temperature_suffix,
    threads,
)

NAME = "ssgmcmc-uci"

#: the reference code's SGLD in the library's convention: θ − η∇U + N(0, η) is ε = 2η at T = 1/2
AUTHORS_TEMPERATURE = 0.5

#: the paper's learning-rate grid (Appendix G)
PAPER_LRS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)

#: our partition names -> the paper's row labels (Tables 1, 3, 4)
PARTITIONS = {
    "random": "Random (M = 3)",
    "layer": "By Layer",
    "neuron": "By Neurons",
    "factorized": "Fully-Factorized",
    "joint": "SGLD (no partition)",
}

#: the paper's column names -> the loader's data-set names
PAPER_DATASETS = {
    "wine": "wine-red",
    "housing": "boston",
    "obesity": "obesity",
    "bike": "seoul-bike",
    "concrete": "concrete",
    "airfoil": "airfoil",
}
#: the sets with published values in the registry (Housing and Concrete): the default. Their
#: files are ``uci/boston.csv`` or UCI's ``housing.data``, and ``uci/concrete.csv`` or UCI's
#: ``Concrete_Data.xls`` (needs xlrd); the project's ``shared/data`` holds the CSV copies, and
#: the loader downloads the UCI files (checksummed) where ``Config.download`` allows it
DEFAULT_SETS = ("boston", "concrete")

#: Table 3 (= Table 1), mean and sd over 5 seeds, min-max-scaled MSE. Wine and Airfoil are
#: identical cell for cell in the paper (a copy error there); housing and concrete are also
#: the registry's ``published`` values.
PAPER_MSE = {
    "Random (M = 3)": {
        "wine": (0.0454, 0.001),
        "housing": (0.0233, 0.003),
        "obesity": (0.0232, 0.005),
        "bike": (0.0242, 0.001),
        "concrete": (0.0226, 0.003),
        "airfoil": (0.0454, 0.001),
    },
    "By Layer": {
        "wine": (0.0494, 0.001),
        "housing": (0.0236, 0.003),
        "obesity": (0.0274, 0.002),
        "bike": (0.0247, 0.001),
        "concrete": (0.0243, 0.003),
        "airfoil": (0.0494, 0.001),
    },
    "By Neurons": {
        "wine": (0.0496, 0.001),
        "housing": (0.0233, 0.003),
        "obesity": (0.0262, 0.003),
        "bike": (0.0247, 0.001),
        "concrete": (0.0238, 0.003),
        "airfoil": (0.0496, 0.001),
    },
    "Fully-Factorized": {
        "wine": (0.0478, 0.002),
        "housing": (0.0236, 0.002),
        "obesity": (0.0227, 0.002),
        "bike": (0.025, 0.001),
        "concrete": (0.0238, 0.001),
        "airfoil": (0.0478, 0.002),
    },
}
#: Table 4, the best learning rate per partition and data set
PAPER_LR = {
    "Random (M = 3)": {"wine": 1e-3, "housing": 1e-5, "obesity": 1e-5, "bike": 1e-4, "concrete": 1e-5, "airfoil": 1e-4},
    "By Layer": {"wine": 1e-3, "housing": 1e-5, "obesity": 1e-4, "bike": 1e-4, "concrete": 1e-5, "airfoil": 1e-4},
    "By Neurons": {"wine": 1e-3, "housing": 1e-5, "obesity": 1e-4, "bike": 1e-4, "concrete": 1e-5, "airfoil": 1e-5},
    "Fully-Factorized": {
        "wine": 1e-5,
        "housing": 1e-4,
        "obesity": 1e-5,
        "bike": 1e-4,
        "concrete": 1e-4,
        "airfoil": 1e-3,
    },
}

FIGURE_MSE = "mse_by_partition.png"
FIGURE_LR = "validation_mse_by_lr.png"


@dataclass
class Config:
    datasets: tuple = DEFAULT_SETS  # loader names or the paper's column names (housing, wine, obesity, bike, airfoil)
    partitions: tuple = ("random", "layer", "neuron", "factorized")  # also "joint" (plain SGLD, not in the paper)
    lrs: tuple = PAPER_LRS  # the paper's η; SGLD(lr = 2η)
    seeds: int = 5  # runs per setting: seeds seed, seed + 1, ...
    epochs: int = 1000  # per run (iterations = epochs · ⌊N_train / batch_size⌋) unless num_steps is set
    num_steps: int | None = None  # iterations per run (overrides epochs; tiny)
    batch_size: int = 32
    burn_in: float = 0.5  # fraction of the iterations before draws are kept
    num_draws: int = 100  # draws evenly spaced over the rest, averaged in the posterior predictive mean
    hidden: tuple = (50, 50)
    noise_std: float = 1.0  # Gaussian likelihood σ (the reference FF_BNN's scale=1.0)
    prior_std: float = 1.0  # N(0, σ_p²) prior per parameter (FF_BNN's prior_std=1.0)
    # every chain at each: 1.0 the posterior, 0.5 the reference code's SGLD noise (the tally: the paper's)
    temperatures: tuple = (1.0, 0.5)
    scaling: str = "minmax"  # "minmax" (features and target to [0, 1], the paper's units) or "standard"
    random_groups: int = 3  # M of the random partition
    history: int = 5000  # θ̃ window (the reference drivers' chain_length)
    warmup_epochs: int = 1  # plain SGLD before the structured energy takes over (the reference drivers)
    factorized: str = "sd"  # "sd": Sd-SGLD with Bernoulli(rho), num_copies K; "s": exact S-SGLD (P copies)
    rho: float = 0.1
    num_copies: int = 16
    max_copies_per_call: int | None = 512  # chunking of the copies (memory)
    resplit: bool = True  # each seed its own 75/10/15 split; False: one split (data_seed) for every seed
    data_seed: int = 0
    split: tuple = (0.75, 0.10, 0.15)
    # App. G: "validated it in the validation set with an early stoppage": stop a chain when the
    # validation MSE of its current network has not improved for `patience` epochs (the paper
    # states no rule; False: the fixed budget of `epochs`)
    early_stopping: bool = True
    patience: int = 100  # epochs (a tenth of the full budget of 1,000)
    noise_check: float | None = 0.1  # plain SGLD with this σ at noise_check_lr, one seed (None: skip)
    noise_check_lr: float = 1e-5
    # each published MSE: reproduced when |ours − paper| ≤ noise_k·√(SE_ours² + SE_paper²) (see comparisons)
    noise_k: float = 3.0
    trend_sds: float = 2.0  # claim: spread of partition means ≤ trend_sds · pooled seed sd
    data_dir: str | None = None  # default: _shared.default_data_dir() ($STRUCTMC_DATA, ../shared/data, the cache)
    download: bool = True  # let the loader download the sets not found locally
    threads: int | None = 1
    seed: int = 0


PRESETS = {
    "tiny": Config(
        datasets=("boston",), lrs=(1e-4,), seeds=2, num_steps=60, num_draws=20, noise_check=None, download=False
    ),
    "quick": Config(lrs=(1e-4, 1e-5), seeds=3, epochs=60),
    # issue 24: the paper's length (1,000 epochs, App. G's early stopping) and seeds (5) on both data sets
    # here, every partition, both temperatures; the cut: the learning-rate grid, to the paper's chosen
    # rates (Table 4: 1e-4 and 1e-5)
    "converged": Config(lrs=(1e-4, 1e-5)),
    "full": Config(),
}


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def dataset_key(name: str) -> str:
    """The loader's name of a data set given by the loader's or the paper's name."""
    key = PAPER_DATASETS.get(name, name)
    key = ALIASES.get(key, key)
    if key not in SETS:
        raise ValueError(f"unknown data set {name!r}; choose from {sorted(set(PAPER_DATASETS) | set(SETS))}")
    return key


def paper_column(name: str) -> str | None:
    """The paper's column name of a data set (``None`` for a set the paper does not use)."""
    key = dataset_key(name)
    for col, k in PAPER_DATASETS.items():
        if k == key:
            return col
    return None


def _fit_scaler(t: Tensor, kind: str) -> tuple[Tensor, Tensor]:
    """(offset, scale) fitted on the training part: min and range, or mean and sd."""
    if kind == "minmax":
        lo, hi = t.min(0).values, t.max(0).values
        return lo, torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    mean, sd = t.mean(0), t.std(0)
    return mean, torch.where(sd > 0, sd, torch.ones_like(sd))


def load_split(cfg: Config, name: str, split_seed: int, data_dir=None) -> dict:
    """One data set, split 75/10/15 by ``split_seed`` and scaled with the training part's
    statistics (``cfg.scaling``). Raises :class:`DataError` with a clear message when the
    file is missing and cannot be downloaded."""
    key = dataset_key(name)
    root = data_dir or cfg.data_dir or default_data_dir()
    try:
        ds = load_uci(
            key,
            data_dir=root,
            download=cfg.download,
            split=tuple(cfg.split),
            seed=int(split_seed),
            standardize_x=False,
            standardize_y=False,
            dtype=torch.float32,
        )
    except (DataError, ImportError) as err:  # ImportError: Concrete_Data.xls without xlrd
        how = (
            "downloading is off (Config.download=False, as in the tiny preset): set Config.download=True to download it"
            if not cfg.download
            else "it could not be downloaded"
        )
        raise DataError(
            f"ssgmcmc-uci: data set {name!r} ({key}) is not available: {how}, or put the file in "
            f"{Path(root).expanduser() / 'uci'} (or in <dir>/uci/ with $STRUCTMC_DATA=<dir> or "
            f"Config.data_dir=<dir>), or leave {name!r} out of Config.datasets. The loader says: "
            f"{err}"
        ) from err
    if ds.x_val is None or ds.x_test is None:
        raise ValueError(f"{name}: the split {cfg.split} leaves no validation or no test rows")
    if cfg.scaling not in ("minmax", "standard"):
        raise ValueError(f"Config.scaling must be 'minmax' or 'standard', got {cfg.scaling!r}")
    x_off, x_sc = _fit_scaler(ds.x_train, cfg.scaling)
    y_off, y_sc = _fit_scaler(ds.y_train, cfg.scaling)
    fx = lambda x: (x - x_off) / x_sc  # noqa: E731
    fy = lambda y: (y - y_off) / y_sc  # noqa: E731
    return {
        "name": key,
        "paper": paper_column(key),
        "source": ds.meta["source"],
        "x_train": fx(ds.x_train),
        "y_train": fy(ds.y_train),
        "x_val": fx(ds.x_val),
        "y_val": fy(ds.y_val),
        "x_test": fx(ds.x_test),
        "y_test": fy(ds.y_test),
        "y_scale": float(y_sc),
        "y_offset": float(y_off),
        "raw": {"y_train": ds.y_train, "y_test": ds.y_test},
    }


def scaling_evidence(data: dict) -> dict:
    """Test MSE of predicting the training mean in min-max, standardised and raw units (the
    yardstick that makes the paper's ≈ 0.023 readable)."""
    ytr, yte = data["raw"]["y_train"].double(), data["raw"]["y_test"].double()
    raw = float((yte - ytr.mean()).square().mean())
    rng = float(ytr.max() - ytr.min())
    return {
        "mean_predictor_mse_raw": raw,
        "mean_predictor_mse_minmax": raw / rng**2,
        "mean_predictor_mse_standardized": raw / float(ytr.var()),
        "y_range": rng,
        "y_sd": float(ytr.std()),
        "num_train": int(len(ytr)),
        "num_test": int(len(yte)),
    }


# ---------------------------------------------------------------------------------------------
# model, partitions, one run
# ---------------------------------------------------------------------------------------------
def make_net(num_inputs: int, hidden=(50, 50)) -> nn.Sequential:
    """input → 50 → ReLU → 50 → ReLU → 1 (the paper's "2 layers with 50 neurons each")."""
    layers, width = [], num_inputs
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def make_energy(
    cfg: Config, num_inputs: int, seed: int, noise_std: float | None = None, device: str = "cpu"
) -> ModuleEnergy:
    """The base energy with PyTorch's default initialisation drawn from ``seed`` (the global
    RNG is left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        net = make_net(num_inputs, cfg.hidden)
    return ModuleEnergy(
        net.to(device), "gaussian", noise_std=cfg.noise_std if noise_std is None else noise_std, prior_std=cfg.prior_std
    )


def make_partition(cfg: Config, kind: str, base: ModuleEnergy, seed: int) -> Partition:
    P = base.space.dim
    if kind == "random":
        return random_partition(P, cfg.random_groups, seed=int(seed)).annotate(base.space)
    if kind == "layer":
        return by_layer(base.space)
    if kind == "neuron":
        return by_neuron(base.space)
    if kind == "factorized":
        return fully_factorized(P).annotate(base.space)
    if kind == "joint":
        return fully_joint(P).annotate(base.space)
    raise ValueError(f"unknown partition {kind!r}; choose from {sorted(PARTITIONS)}")


def structured_energy(
    cfg: Config, kind: str, base: ModuleEnergy, partition: Partition, seed: int, warmup_steps: int
) -> StructuredEnergy:
    """S-SGLD's energy for the partition (Sd-SGLD for the fully factorised one with
    ``factorized="sd"``)."""
    sd = kind == "factorized" and cfg.factorized == "sd"
    return StructuredEnergy(
        base,
        partition,
        ChainHistory(cfg.history),
        mask=BernoulliMask(cfg.rho) if sd else None,
        num_copies=cfg.num_copies if sd else None,
        max_copies_per_call=cfg.max_copies_per_call,
        seed=int(seed),
        warmup_steps=warmup_steps,
    )


def steps_for(cfg: Config, num_train: int) -> tuple[int, int]:
    """(iterations per run, iterations per epoch)."""
    per_epoch = max(1, num_train // cfg.batch_size)
    return (int(cfg.num_steps) if cfg.num_steps is not None else cfg.epochs * per_epoch), per_epoch


def _mse(pred: Tensor, y: Tensor) -> float:
    return float((pred.reshape(-1).double() - y.reshape(-1).double()).square().mean())


class _Stop(Exception):
    """Raised by :class:`_EarlyStopping` to end a chain (not an error)."""

    def __init__(self, iteration: int):
        super().__init__(f"early stop at iteration {iteration}")
        self.iteration = iteration


class _EarlyStopping(Recorder):
    """The recorder of a chain run with early stopping (App. G: "validated it in the validation
    set with an early stoppage"; the paper gives no rule, so: the validation MSE of the current
    network after each epoch, stop after ``cfg.patience`` epochs without a new best). It keeps
    the positions at the iterations a full-length run keeps as draws (``burn + thin·k``), so a
    stopped chain's draws lie on the same grid."""

    def __init__(self, cfg: Config, base: ModuleEnergy, x_val: Tensor, y_val: Tensor, per_epoch: int, burn, thin):
        self.cfg, self.base, self.x_val, self.y_val = cfg, base, x_val, y_val
        self.per_epoch, self.burn, self.thin = per_epoch, burn, thin
        self.best, self.best_epoch, self.grad_evals = math.inf, 0, 0.0
        self.kept: list[tuple[int, Tensor]] = []

    def on_step(self, t: int, state, info: dict) -> None:
        self.grad_evals += float(torch.as_tensor(info["grad_evals"], dtype=torch.float64).sum())
        theta = state.theta[0]
        if (t - self.burn) % self.thin == 0:  # the grid of a full-length run's draws
            self.kept.append((t, theta.detach().clone()))
        if t % self.per_epoch:
            return
        epoch = t // self.per_epoch
        if not bool(torch.isfinite(theta).all()):
            return  # a diverging chain: the sampler's blow-up watch ends it (DivergenceError), not a validation
        with torch.no_grad():
            val = _mse(predictive(self.base, theta.detach()[None], self.x_val)["mean"].cpu(), self.y_val)
        if val < self.best:
            self.best, self.best_epoch = val, epoch
        elif epoch - self.best_epoch >= self.cfg.patience:
            raise _Stop(t)

    def draws(self, stop: int) -> Tensor:
        """Up to ``num_draws`` kept positions after ``burn_in`` of the first ``stop`` iterations."""
        after = [th for t, th in self.kept if t > self.cfg.burn_in * stop and t <= stop]
        if not after:
            after = [th for t, th in self.kept if t <= stop][-1:]
        step = max(1, len(after) // self.cfg.num_draws)
        return torch.stack(after[::-1][::step][: self.cfg.num_draws][::-1])


def run_one(
    cfg: Config,
    data: dict,
    kind: str,
    lr: float,
    seed: int,
    device: str = "cpu",
    noise_std: float | None = None,
    temperature: float = 1.0,
) -> dict:
    """One chain at ``temperature``: validation and test MSE of the posterior predictive mean."""
    x, y = data["x_train"].to(device), data["y_train"].to(device)
    base = make_energy(cfg, x.shape[1], seed, noise_std, device)
    partition = make_partition(cfg, kind, base, seed)
    steps, per_epoch = steps_for(cfg, len(y))
    warm = min(cfg.warmup_epochs * per_epoch, steps)
    energy = structured_energy(cfg, kind, base, partition, seed, warm) if kind != "joint" else base
    burn = int(cfg.burn_in * steps)
    thin = max(1, (steps - burn) // cfg.num_draws)
    burn = steps - thin * min(cfg.num_draws, (steps - burn) // thin)  # exactly num_draws draws, the last at the end
    out = {
        "partition": kind,
        "lr": lr,
        "seed": seed,
        "temperature": temperature,
        "num_groups": partition.num_groups,
        "steps": steps,
        "epochs": steps / per_epoch,
        "diverged": False,
    }
    # early stopping (App. G): the validation MSE of the chain's current network after every epoch;
    # the chain stops once it has not improved for cfg.patience epochs. The chain itself is not
    # touched (same seed, same iterates up to the stop); positions on the draws' grid are kept as
    # the chain goes, and a stopped chain's posterior predictive averages those after burn_in of
    # its own length
    watch = _EarlyStopping(cfg, base, data["x_val"].to(device), data["y_val"], per_epoch, burn, thin)
    t0 = time.perf_counter()
    stopped = None
    try:
        chain = sample(
            energy,
            base.initial_position(),
            SGLD(2 * lr, temperature=temperature),
            steps,
            data=(x, y),
            batch_size=cfg.batch_size,
            burn_in=burn,
            thin=thin,
            seed=int(seed),
            progress=False,
            on_blowup="raise",
            recorders={"early_stopping": watch} if cfg.early_stopping else None,
        )
    except DivergenceError as err:
        out.update(
            diverged=True,
            val_mse=math.inf,
            test_mse=math.inf,
            seconds=time.perf_counter() - t0,
            diverged_at=int(err.step),
        )
        return out
    except _Stop as stop:
        stopped = stop.iteration
    seconds = time.perf_counter() - t0
    if stopped is None:
        draws = chain.samples[0]
        grad_evals = float(torch.as_tensor(chain.info["grad_evals"], dtype=torch.float64).sum())
    else:
        draws, grad_evals = watch.draws(stopped), watch.grad_evals
        steps = stopped
    if cfg.early_stopping:
        out.update(
            stopped_early=stopped is not None,
            stopped_at_epoch=(stopped if stopped is not None else steps) / per_epoch,
            best_val_epoch=watch.best_epoch,
        )
    val = predictive(base, draws, data["x_val"].to(device))["mean"]
    test = predictive(base, draws, data["x_test"].to(device))["mean"]
    out.update(
        val_mse=_mse(val.cpu(), data["y_val"]),
        test_mse=_mse(test.cpu(), data["y_test"]),
        seconds=seconds,
        ms_per_step=1000 * seconds / steps,
        steps_run=steps,
        num_draws=int(draws.shape[0]),
        grad_evals=grad_evals,
    )
    return out


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------
def _check(cfg: Config) -> None:
    for p in cfg.partitions:
        if p not in PARTITIONS:
            raise ValueError(f"unknown partition {p!r}; choose from {sorted(PARTITIONS)}")
    check_temperatures(cfg.temperatures)
    if any(isinstance(t, str) for t in cfg.temperatures):
        raise ValueError(
            f"Config.temperatures must be numbers (1.0 the posterior, 0.5 the authors'), got {cfg.temperatures!r}"
        )
    if cfg.factorized not in ("s", "sd"):
        raise ValueError(f"Config.factorized must be 's' or 'sd', got {cfg.factorized!r}")
    if not cfg.lrs or any(not lr > 0 for lr in cfg.lrs):
        raise ValueError(f"Config.lrs must be positive learning rates, got {cfg.lrs!r}")
    if cfg.early_stopping and not (isinstance(cfg.patience, int) and cfg.patience >= 1):
        raise ValueError(f"Config.patience must be a whole number of epochs >= 1, got {cfg.patience!r}")
    if cfg.seeds < 1 or cfg.num_draws < 1 or not 0 <= cfg.burn_in < 1:
        raise ValueError("Config needs seeds >= 1, num_draws >= 1 and 0 <= burn_in < 1")
    for d in cfg.datasets:
        dataset_key(d)


def _stats(values) -> tuple[float, float]:
    v = [float(x) for x in values]
    if not v or not all(math.isfinite(x) for x in v):
        return math.inf, math.nan
    t = torch.tensor(v, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(v) > 1 else 0.0


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/ssgmcmc-uci",
    progress: bool | None = None,
    *,
    device: str = "cpu",
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment; write ``report.json``, ``report.md`` and the two PNGs to
    ``out_dir`` and return the report. ``seed`` overrides the config's first seed. Each
    chain's result is kept under ``out_dir/runs``; ``resume=True`` reads finished chains back
    and runs only the missing ones (chains are short: no checkpoint inside one)."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    _check(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = progress_log(NAME, progress)
    t_start = time.perf_counter()
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    settings = {temperature_label(t): float(t) for t in cfg.temperatures}
    several = len(settings) > 1
    by_setting: dict[str, dict[str, dict]] = {label: {} for label in settings}
    with threads(cfg.threads):
        # every data set's file before any chain runs (issue 35 §5): a missing one stops the run here
        for name in cfg.datasets:
            load_split(cfg, dataset_key(name), seeds[0] if cfg.resplit else cfg.data_seed)
        for name in cfg.datasets:
            key = dataset_key(name)
            runs: dict[str, dict[str, dict[float, list]]] = {
                label: {p: {lr: [] for lr in cfg.lrs} for p in cfg.partitions} for label in settings
            }
            evidence, groups, source = [], {}, None
            noise = None
            for s in seeds:
                data = load_split(cfg, key, s if cfg.resplit else cfg.data_seed)
                source = data["source"]
                evidence.append(scaling_evidence(data))
                for label, t in settings.items():
                    suffix = temperature_suffix(t, len(data["y_train"]))  # T = 1: the former folder names
                    for p in cfg.partitions:
                        for lr in cfg.lrs:
                            folder = out / "runs" / key / f"{p}_lr{lr:g}_seed{s}{suffix}"
                            r = load_result(folder, resume)
                            if r is None:
                                r = run_one(cfg, data, p, lr, s, device, temperature=t)
                                save_result(folder, r)
                            runs[label][p][lr].append(r)
                            groups[p] = r["num_groups"]
                            if log:
                                log(
                                    f"{key} seed {s} {label} {p:10s} lr {lr:g}: "
                                    + (
                                        f"diverged at iteration {r['diverged_at']}"
                                        if r["diverged"]
                                        else f"val {r['val_mse']:.4f} test {r['test_mse']:.4f} ({r['seconds']:.1f} s)"
                                    )
                                )
                if noise is None and cfg.noise_check is not None:
                    noise = run_one(cfg, data, "joint", cfg.noise_check_lr, s, device, noise_std=cfg.noise_check)
                    noise["noise_std"] = cfg.noise_check
                    if log:
                        log(f"{key} noise check (plain SGLD, sigma {cfg.noise_check:g}): test {noise['test_mse']:.4f}")
            for label in settings:
                by_setting[label][key] = _summarise(cfg, key, runs[label], evidence, groups, noise, source)
        wall = time.perf_counter() - t_start
        rows = [r for label, res in by_setting.items() for r in comparisons(cfg, res, setting=label if several else "")]
        paper_setting = None
        if several:
            authors = temperature_label(AUTHORS_TEMPERATURE)
            paper_setting = authors if authors in settings else next(iter(settings))
        figures = _plot(cfg, by_setting, out, paper_setting)
        results = by_setting.get(temperature_label(1.0)) or by_setting[next(iter(by_setting))]
        numbers = _numbers(cfg, results)  # the posterior's (T = 1), the former layout
        numbers["by_temperature"] = {label: _numbers(cfg, res) for label, res in by_setting.items()}
        numbers["temperatures"] = settings
        # inside ``threads``: the report records the thread count the runs used
        return write_report(
            out,
            experiment=REGISTRY.get(NAME),
            preset=preset,
            config=asdict(cfg),
            seed=cfg.seed,
            comparisons=rows,
            numbers=numbers,
            wall_time_s=wall,
            device=device,
            step_sizes=_step_sizes(cfg, settings, paper_setting),
            reductions=_reductions(cfg),
            figures=figures,
            notes=_notes(cfg, by_setting, paper_setting),
            extra_md="\n\n".join(
                (
                    f"# {label}" + (" (the paper's setting)" if label == paper_setting else "") + "\n\n"
                    if several
                    else ""
                )
                + _markdown(cfg, res)
                for label, res in by_setting.items()
            ),
            paper_setting=paper_setting,
        )


def _summarise(cfg: Config, key: str, runs: dict, evidence: list, groups: dict, noise, source) -> dict:
    per_lr: dict[str, dict] = {}
    chosen: dict[str, dict] = {}
    for p, by_lr in runs.items():
        per_lr[p] = {}
        for lr, rs in by_lr.items():
            val_m, val_s = _stats(r["val_mse"] for r in rs)
            test_m, test_s = _stats(r["test_mse"] for r in rs)
            per_lr[p][lr] = {
                "val_mse": [r["val_mse"] for r in rs],
                "test_mse": [r["test_mse"] for r in rs],
                "val_mean": val_m,
                "val_sd": val_s,
                "test_mean": test_m,
                "test_sd": test_s,
                "diverged": sum(r["diverged"] for r in rs),
                "seconds": sum(r["seconds"] for r in rs),
                "ms_per_step": _stats(r["ms_per_step"] for r in rs if not r["diverged"])[0]
                if any(not r["diverged"] for r in rs)
                else None,
                "epochs": rs[0]["epochs"],
                "steps": rs[0]["steps"],
                "stopped_at_epoch": [r["stopped_at_epoch"] if r.get("stopped_early") else None for r in rs],
            }
        finite = [lr for lr in by_lr if math.isfinite(per_lr[p][lr]["val_mean"])]
        best = min(finite, key=lambda lr: per_lr[p][lr]["val_mean"]) if finite else None
        chosen[p] = {
            "lr": best,
            "test_mean": per_lr[p][best]["test_mean"] if best else math.nan,
            "test_sd": per_lr[p][best]["test_sd"] if best else math.nan,
            "test_mse": per_lr[p][best]["test_mse"] if best else [],
            "val_mean": per_lr[p][best]["val_mean"] if best else math.nan,
        }
    ev = {k: _stats(e[k] for e in evidence)[0] for k in evidence[0]}  # means over the seeds' splits
    ev["num_train"], ev["num_test"] = evidence[0]["num_train"], evidence[0]["num_test"]
    return {
        "per_lr": per_lr,
        "chosen": chosen,
        "scaling": ev,
        "num_groups": groups,
        "noise_check": noise,
        "source": source,
    }


def _published(column: str | None) -> tuple[dict, dict]:
    """(mse, best_lr) by paper label for a paper column: the registry's values where it has
    them, else Table 3/4 from this module."""
    if column is None:
        return {}, {}
    pub = REGISTRY.get(NAME).published
    mse = {lab: tuple(v[column]) for lab, v in pub.get("mse", {}).items() if column in v}
    lrs = {lab: v[column] for lab, v in pub.get("best_lr", {}).items() if column in v}
    if not mse:
        mse = {lab: v[column] for lab, v in PAPER_MSE.items()}
        lrs = {lab: v[column] for lab, v in PAPER_LR.items()}
    return mse, lrs


def value_tolerance(mse: dict, fraction: float = 0.9) -> float:
    """``fraction`` × the smallest gap between the partitions' published means of one Table 3
    column (``mse``: ``{label: (mean, sd)}``): 0.9 × 0.0003 for Housing, 0.9 × 0.0005 for
    Concrete. Infinite when the column has no two different means."""
    try:
        return fraction * smallest_gap([m for m, _ in mse.values()])
    except ValueError:
        return math.inf


#: Table 3's means and sds are over "5 runs with different seeds" (Sect. 5 and App. G): its SE is sd / √5
PAPER_SEEDS = 5

#: Table 3's columns in the paper's order, and why a column this run lacks was not run
NOT_RUN_DATA = (
    "data set not in this run's Config.datasets: the quick, converged and full presets run Housing and Concrete, the "
    "two sets of the offline data folder; {col} is not available offline (it downloads from UCI, checksummed, with "
    "Config.datasets and network access)"
)


def _paper_partitions() -> list[str]:
    """Our names of Table 3's four partitions (plain SGLD, "joint", is not in the paper)."""
    return [p for p in PARTITIONS if p != "joint"]


def _random_lowest(mse: dict) -> bool:
    rnd = PARTITIONS["random"]
    others = [m for lab, (m, _) in mse.items() if lab != rnd]
    return rnd in mse and bool(others) and mse[rnd][0] < min(others)


def _ours_se(cfg: Config, ch: dict) -> tuple[float, str]:
    """Our SE of a chosen partition's mean test MSE: sd over the seeds / √seeds (``seed_se`` of
    the per-seed values where the results hold them), and where it comes from."""
    values = [float(v) for v in ch.get("test_mse") or []]
    if len(values) >= 2:
        se = seed_se(values)
        n = len(values)
    else:
        n = int(cfg.seeds)
        sd = float(ch.get("test_sd", math.nan))
        se = sd / math.sqrt(n) if n >= 2 and math.isfinite(sd) else math.nan
    if not math.isfinite(se):
        return 0.0, "ours: no spread over seeds (one seed or a diverged run): the paper's SE alone"
    return se, f"ours: sd over {n} seeds / √{n}"


def comparisons(cfg: Config, results: dict, setting: str = "") -> list[Comparison]:
    """The report's rows from ``results`` (``{data set: {"chosen": {partition: {"lr",
    "test_mean", "test_sd", "test_mse" (per seed), ...}}, "per_lr": ...}}``, as
    :func:`_summarise` makes them, at one temperature); pure, so a test can feed it any numbers
    (issues 26 §1, 35 §4). ``setting`` labels the rows with the runs' temperature when a report
    has several (issue 26 §2). Every claim of Tables 1/3 has a row, run or not (issue 35 §3):

    * each published MSE (partition × data set) is a **claim** judged on the noise of both
      sides (issue 35 §1): reproduced when |ours − paper| ≤ ``cfg.noise_k``·√(SE_ours² +
      SE_paper²), SE_ours = our sd over seeds / √seeds, SE_paper = Table 3's sd / √5 (its "5
      runs with different seeds"). The paper's partitions differ by about a tenth of that
      noise, so a value row cannot tell the partitions apart (a constant near 0.024 passes
      them); the method comparison is carried by the "random performs better" rows;
    * the chosen learning rate against Table 4: a check, not judged (Table 4 is the setting the
      paper's runs used, chosen on the test set; ours is chosen on the validation split);
    * "no systematic trend across partitions", per data set: a **weak** claim (equal numbers
      for every partition meet it; :func:`~._report.tally` counts it only while the others
      carry it): the spread of the four partition means at most ``cfg.trend_sds`` pooled seed sds;
    * "in some cases random performs better": on each data set where Table 3 has Random
      strictly lowest (Wine, Bike, Concrete, Airfoil), Random's mean MSE below every other
      partition's;
    * a data set of Table 3 this run did not have (Wine, Obesity, Bike, Airfoil offline) and a
      partition left out of ``cfg.partitions``: the same rows, "not run" with the reason."""
    rows: list[Comparison] = []
    unit = "(min-max units)" if cfg.scaling == "minmax" else "(standardised units)"
    k = float(cfg.noise_k)
    ran: dict[str, str] = {}
    for key in results:
        c = paper_column(key)
        if c is not None:
            ran[c] = key
    order = list(ran) + [col for col in PAPER_DATASETS if col not in ran]
    for col in order:
        key = ran.get(col)
        res = results[key] if key is not None else None
        mse, lrs = _published(col)
        data_not_run = "" if res is not None else NOT_RUN_DATA.format(col=col.capitalize())
        done = {} if res is None else res.get("chosen", {})
        missing = [PARTITIONS[p] for p in _paper_partitions() if p not in cfg.partitions or p not in done]
        for p in _paper_partitions():
            lab = PARTITIONS[p]
            if lab not in mse:
                continue
            pm, psd = mse[lab]
            paper_se = psd / math.sqrt(PAPER_SEEDS)
            not_run = data_not_run or (
                f"partition {lab} not in this run (Config.partitions = {tuple(cfg.partitions)})"
                if lab in missing
                else ""
            )
            if not_run:
                rows.append(
                    Comparison(
                        f"{col}: test MSE, {lab}",
                        None,
                        pm,
                        WithinNoise(0.0, paper_se, k, f"paper: its sd {psd} / √{PAPER_SEEDS}"),
                        unit=unit,
                        not_run=not_run,
                        note="the paper's Wine and Airfoil columns are identical cell for cell (a copy error in "
                        "the paper)"
                        if col in ("wine", "airfoil")
                        else "",
                    )
                )
                continue
            ch = done[p]
            ours_se, src = _ours_se(cfg, ch)
            mean = float(ch["test_mean"])
            z = abs(mean - pm) / math.hypot(ours_se, paper_se) if math.isfinite(mean) else math.inf
            rows.append(
                Comparison(
                    f"{col}: test MSE, {lab}",
                    mean,
                    pm,
                    WithinNoise(ours_se, paper_se, k, f"{src}; paper: its sd {psd} / √{PAPER_SEEDS}"),
                    unit=unit,
                    # explicit: plausible_range reads "Fully-Factorized" as a factor and would give none
                    valid=(0, math.inf),
                    note=f"ours {mean:.4g} ± {float(ch.get('test_sd', math.nan)):.2g} (sd over seeds) at lr "
                    f"{ch.get('lr')!s}, paper {pm} ± {psd} (sd over {PAPER_SEEDS} seeds): z = {z:.2g} combined SEs",
                )
            )
            if lab in lrs:
                in_grid = any(math.isclose(lrs[lab], lr) for lr in cfg.lrs)
                val = (res or {}).get("per_lr", {}).get(p, {})
                curve = ", ".join(f"{lr:g}: {val[lr]['val_mean']:.4g}" for lr in cfg.lrs if lr in val)
                rows.append(
                    Comparison(
                        f"{col}: best learning rate, {lab}",
                        ch.get("lr"),
                        lrs[lab],
                        None,
                        note=(
                            "same as the paper's"
                            if ch.get("lr") is not None and math.isclose(ch["lr"], lrs[lab])
                            else "differs from the paper's"
                            if in_grid
                            else "the paper's is not in this preset's grid"
                        )
                        + f"; ours chosen on the validation split, the paper's on the test set; validation MSE by lr: "
                        f"{curve or '–'}",
                        check=True,
                        check_reason=LR_CHECK_REASON,
                        valid=(0, math.inf),
                    )
                )
        labs = [PARTITIONS[p] for p in _paper_partitions() if PARTITIONS[p] in mse]
        if len(labs) < 2:
            continue
        claim_not_run = data_not_run or (
            f"the claim is over Table 3's four partitions; this run lacks {', '.join(missing)}" if missing else ""
        )
        p_ratio = _trend_ratio([mse[lab][0] for lab in labs], [mse[lab][1] for lab in labs])
        trend = Claim(
            f"the spread of the {len(labs)} partition means (max − min) is at most {cfg.trend_sds:g} pooled seed sds "
            f"(√ of the mean of their variances): ratio ≤ {cfg.trend_sds:g}",
            lambda r, t=cfg.trend_sds: math.isfinite(r) and r <= t,
            weak=True,
        )
        quantity = f"{col}: no systematic trend across partitions — (max − min of the partition means) / pooled seed sd"
        if claim_not_run:
            rows.append(Comparison(quantity, None, p_ratio, trend, not_run=claim_not_run))
        else:
            ours = [done[p] for p in _paper_partitions() if PARTITIONS[p] in mse]
            o_ratio = _trend_ratio([c["test_mean"] for c in ours], [c["test_sd"] for c in ours])
            rows.append(
                Comparison(
                    quantity,
                    o_ratio,
                    p_ratio,
                    trend,
                    note=f"the paper's own ratio is {p_ratio:.3g}; ours {o_ratio:.3g} ({', '.join(labs)}); a claim of "
                    "no difference, which equal numbers for every partition also satisfy (weak)",
                    valid=(0, math.inf),
                )
            )
        if not _random_lowest({lab: mse[lab] for lab in labs}):
            continue
        rnd = PARTITIONS["random"]
        others = [lab for lab in labs if lab != rnd]
        quantity = (
            f"{col}: Random (M = 3) has the lowest MSE of the partitions ('in some cases random performs better')"
        )
        rule = Claim(
            f"Random's mean test MSE below each of {', '.join(others)}'s",
            lambda v: all(math.isfinite(x) for x in v) and v[0] < min(v[1:]),
        )
        paper_vals = [mse[rnd][0]] + [mse[lab][0] for lab in others]
        note = (
            f"Table 3 has Random lowest here by {min(mse[lab][0] for lab in others) - mse[rnd][0]:.2g} (the paper's "
            + (f"seed sd: {mse[rnd][1]})")
        )
        if claim_not_run:
            rows.append(Comparison(quantity, None, paper_vals, rule, unit=unit, note=note, not_run=claim_not_run))
        else:
            by_lab = {PARTITIONS[p]: float(done[p]["test_mean"]) for p in _paper_partitions() if p in done}
            rows.append(
                Comparison(
                    quantity,
                    [by_lab[rnd]] + [by_lab[lab] for lab in others],
                    paper_vals,
                    rule,
                    unit=unit,
                    note=note,
                    valid=(0, math.inf),
                )
            )
    for r in rows:
        r.setting = setting
    return rows


#: why the chosen learning rate is a check, not a claim (issue 35: a published value judged or explained)
LR_CHECK_REASON = (
    "Table 4 lists the learning rates the paper's runs used, chosen on the test set (App. G): a setting of its "
    "runs, not a finding about the partitions; ours is chosen on the validation split by design (choosing on the "
    "test set would bias the MSE rows), so an agreement or a difference reproduces or refutes nothing the paper "
    "claims. Shown with the validation curve, not judged."
)


def rejudge(report: dict) -> list[Comparison]:
    """The rows of a written report rebuilt from its ``numbers`` and ``config`` under today's
    rules (issue 35 §7): per temperature (``numbers["by_temperature"]``), the chosen partition
    means, sds and per-seed test MSEs (``mse_by_lr``) become :func:`comparisons`' results."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(Config)}
    fields: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in report["config"].items() if k in names
    }
    cfg = Config(**fields)
    numbers = report["numbers"]
    by_t = numbers.get("by_temperature") or {"": numbers}
    several = len(by_t) > 1
    rows: list[Comparison] = []
    for label, num in by_t.items():
        results: dict[str, dict] = {}
        cols = list(dict.fromkeys(col for by_col in num["mse"].values() for col in by_col))
        for col in cols:
            chosen, per_lr = {}, {}
            for p in cfg.partitions:
                lab = PARTITIONS[p]
                if col not in num["mse"].get(lab, {}):
                    continue
                mean, sd = num["mse"][lab][col]
                lr = num["chosen_lr"][lab][col]
                by_lr = num["mse_by_lr"][col][lab]
                chosen[p] = {
                    "lr": lr,
                    "test_mean": math.inf if mean is None else float(mean),
                    "test_sd": math.nan if sd is None else float(sd),
                    "test_mse": by_lr[f"{lr:g}"]["test_mse"] if lr is not None else [],
                }
                per_lr[p] = {float(v): by_lr[v] for v in by_lr}
            results[dataset_key(col)] = {"chosen": chosen, "per_lr": per_lr}
        rows += comparisons(cfg, results, setting=label if several else "")
    return rows


def _trend_ratio(means, sds) -> float:
    if not all(math.isfinite(m) for m in means) or not all(math.isfinite(s) for s in sds):
        return math.nan
    pooled = math.sqrt(sum(s * s for s in sds) / len(sds))
    spread = max(means) - min(means)
    return spread / pooled if pooled > 0 else (0.0 if spread == 0 else math.inf)


# ---------------------------------------------------------------------------------------------
# report pieces
# ---------------------------------------------------------------------------------------------
def _numbers(cfg: Config, results: dict) -> dict:
    out: dict[str, dict] = {
        "mse": {},
        "chosen_lr": {},
        "mse_by_lr": {},
        "scaling": {},
        "num_groups": {},
        "noise_check": {},
        "mse_original_units": {},
        "source": {},
    }
    for key, res in results.items():
        col = paper_column(key) or key
        rng = res["scaling"]["y_range"] if cfg.scaling == "minmax" else res["scaling"]["y_sd"]
        for p in cfg.partitions:
            lab = PARTITIONS[p]
            ch = res["chosen"][p]
            out["mse"].setdefault(lab, {})[col] = [ch["test_mean"], ch["test_sd"]]
            out["chosen_lr"].setdefault(lab, {})[col] = ch["lr"]
            out["mse_original_units"].setdefault(lab, {})[col] = [ch["test_mean"] * rng**2, ch["test_sd"] * rng**2]
            out["mse_by_lr"].setdefault(col, {})[lab] = {f"{lr:g}": v for lr, v in res["per_lr"][p].items()}
            out["num_groups"].setdefault(col, {})[lab] = res["num_groups"][p]
        out["scaling"][col] = res["scaling"]
        out["noise_check"][col] = res["noise_check"]
        out["source"][col] = res["source"]
    return out


def _step_sizes(cfg: Config, settings: dict, paper_setting: str | None = None) -> list[str]:
    temps = ", ".join(f"{t:g}" for t in settings.values())
    lines = [f"paper η = {lr:g} → SGLD(lr = 2η = {2 * lr:g}, temperature ∈ {{{temps}}})" for lr in cfg.lrs]
    lines.append(
        "The authors' SGLD (mandt-lab/Structured-SG-MCMC, lvi/optimizers.py) is θ ← θ − η∇U + N(0, η) with "
        "U = −log p(θ) − N·mean_batch log p(y|x, θ) (lvi/components.py): η multiplies the gradient of the "
        "full-data energy, the same Û as the library's (N/n scaling in the energy), so the paper's η is "
        "neither per datum nor per batch. Our drift is (ε/2)∇Û: ε = 2η gives the same drift."
    )
    lines.append(
        "Their noise variance η = ε/2 is temperature 1/2 in our convention; this run at "
        + ", ".join(settings)
        + (
            f" side by side: T = 1 the posterior, T = 0.5 the reference code's chain, the paper's numbers at "
            f"{paper_setting} (the tally)."
            if paper_setting
            else "."
        )
    )
    return lines


def _reductions(cfg: Config) -> list[str]:
    full = PRESETS["full"]
    out = []
    if set(cfg.lrs) != set(full.lrs):
        out.append(
            f"learning rates {', '.join(f'{lr:g}' for lr in cfg.lrs)} instead of the paper's "
            f"{', '.join(f'{lr:g}' for lr in full.lrs)}: the choice can only fall among these (the paper's "
            f"best for Housing and Concrete are all 1e-4 or 1e-5); 1e-3 diverges in our runs"
        )
    if cfg.seeds < full.seeds:
        out.append(
            f"{cfg.seeds} seeds instead of {full.seeds}: the means and especially the sds are noisier (an sd "
            f"from {cfg.seeds} runs is uncertain by ≈ ±{100 / math.sqrt(2 * max(cfg.seeds - 1, 1)):.0f} %), "
            f"so the tolerances are less reliable"
        )
    if cfg.num_steps is not None or cfg.epochs < full.epochs:
        what = f"{cfg.num_steps} iterations" if cfg.num_steps is not None else f"{cfg.epochs} epochs"
        out.append(
            f"{what} per run instead of {full.epochs} epochs: shorter chains, whose θ̃ history still holds "
            f"many burn-in draws; S-SGLD is affected more than a plain chain, and the posterior predictive "
            f"averages over a shorter stretch of the chain, so MSEs are expected higher and more variable"
        )
    if cfg.num_draws < full.num_draws:
        out.append(f"{cfg.num_draws} draws in the posterior predictive instead of {full.num_draws}")
    if not cfg.early_stopping:
        out.append("no early stopping: every chain runs its whole budget (the paper stops on the validation split)")
    if tuple(cfg.hidden) != tuple(full.hidden):
        out.append(f"hidden layers {cfg.hidden} instead of {full.hidden}")
    if set(cfg.partitions) < set(full.partitions):
        out.append(f"partitions {', '.join(cfg.partitions)} only")
    return out


def _notes(cfg: Config, by_setting: dict, paper_setting: str | None = None) -> list[str]:
    results = by_setting[paper_setting] if paper_setting else next(iter(by_setting.values()))
    notes = [
        "Scaling: features and target min-max scaled to [0, 1] with the training part's min and max (the paper's "
        "MSEs are in these units; see the scaling table: the mean predictor scores ≈ 0.04 min-max, ≈ 1 standardised)."
        if cfg.scaling == "minmax"
        else "Scaling: standardised (not the paper's units: no verdict is meaningful).",
        f"Model: {'-'.join(str(h) for h in cfg.hidden)} ReLU network, Gaussian likelihood σ = {cfg.noise_std:g}, "
        f"N(0, {cfg.prior_std:g}²) priors (the reference library's FF_BNN defaults), minibatch {cfg.batch_size}, "
        f"first {cfg.warmup_epochs} epoch(s) plain SGLD, θ̃ window {cfg.history} draws, posterior predictive mean "
        f"over {cfg.num_draws} draws evenly spaced after {100 * cfg.burn_in:.0f} % burn-in.",
        (
            f"Fully factorised: Sd-SGLD with Bernoulli(ρ = {cfg.rho:g}) masks and K = {cfg.num_copies:d} copies per "
            "step (the reference drivers' defaults), not exact S-SGLD, which needs P ≈ 3,000 model evaluations per "
            "step; Config.factorized='s' runs it."
        )
        if cfg.factorized == "sd"
        else "Fully factorised: exact S-SGLD with P copies per step.",
        "Learning rate chosen on the validation split (mean over seeds); the paper chose it on the test set.",
        "Seeds: "
        + (
            "each seed draws its own 75/10/15 split, initialisation, random partition and chain."
            if cfg.resplit
            else f"one split (data seed {cfg.data_seed}); seeds vary initialisation, random partition and chain."
        ),
        (
            f"Early stopping as in App. G ('validated it in the validation set with an early stoppage'; no rule is "
            f"given): after every epoch the validation MSE of the chain's current network; a chain stops after "
            f"{cfg.patience} epochs without a new best, and its posterior predictive averages the draws after "
            f"{100 * cfg.burn_in:.0f} % of its own length."
            + " In this run: "
            + "; ".join(
                f"{label + ': ' if paper_setting else ''}{_stop_summary(res)}" for label, res in by_setting.items()
            )
            + " ("
            + (f"{cfg.num_steps} iterations" if cfg.num_steps is not None else f"{cfg.epochs} epochs")
            + ")."
            if cfg.early_stopping
            else f"No early stopping (Config.early_stopping=False): fixed budgets of {cfg.epochs} epochs, unlike the "
            "paper's App. G."
        ),
        "Table 3 has six data sets (Wine, Housing, Obesity, Bike, Concrete, Airfoil); "
        + (
            f"this run has {', '.join(paper_column(k) or k for k in results)} only. The offline data folder holds "
            "Boston (Housing) and Concrete alone, so those two are the default; the other four download "
            "(checksummed) with Config.datasets and network access."
            if len(results) < 6
            else "all six ran."
        ),
        "The paper's Wine and Airfoil columns of Table 3 are identical cell for cell (a copy error in the paper).",
    ]
    if paper_setting:
        notes.append(
            f"Temperatures {', '.join(by_setting)} side by side; the paper's numbers are read as {paper_setting}, the "
            "reference code's SGLD (noise variance η = ε/2; the authors' UCI script itself is not public); the "
            "notes below are for that setting."
        )
    for key, res in results.items():
        base = res["scaling"][
            "mean_predictor_mse_minmax" if cfg.scaling == "minmax" else "mean_predictor_mse_standardized"
        ]
        worse = [PARTITIONS[p] for p in cfg.partitions if not res["chosen"][p]["test_mean"] < base]
        if worse:
            notes.append(
                f"{paper_column(key) or key}: {len(worse)} of {len(cfg.partitions)} partitions ("
                f"{', '.join(worse)}) score no better than predicting the training mean ({base:.4f}): with "
                f"σ = {cfg.noise_std:g} the posterior predictive is heavily shrunk and, on short chains, noisy."
            )
        nc = res["noise_check"]
        if nc is not None and not nc["diverged"]:
            best = min(c["test_mean"] for c in res["chosen"].values())
            notes.append(
                f"{paper_column(key) or key}: plain SGLD with σ = {nc['noise_std']:g} (lr {nc['lr']:g}, one "
                f"seed) reaches test MSE {nc['test_mse']:.4f}, against {best:.4f} for the best partition at "
                f"σ = {cfg.noise_std:g}: a σ that fits the data well gives MSEs far below Table 3, which is "
                f"why we read the paper's σ as the reference code's 1.0."
            )
    return notes


def _stop_summary(results: dict) -> str:
    """How many chains stopped early, and at which epochs ("min–max (median m)")."""
    all_ = [
        e
        for res in results.values()
        for by_lr in res["per_lr"].values()
        for v in by_lr.values()
        for e in v.get("stopped_at_epoch", [])
    ]
    ep = sorted(e for e in all_ if e is not None)
    if not ep:
        return f"none of the {len(all_)} chains stopped early"
    return (
        f"{len(ep)} of the {len(all_)} chains stopped early, at epochs {ep[0]:.0f}–{ep[-1]:.0f} "
        f"(median {ep[len(ep) // 2]:.0f}); the others ran their whole budget"
    )


def _markdown(cfg: Config, results: dict) -> str:
    lines = [
        "## Scaling evidence (test MSE of predicting the training mean)",
        "",
        "| data set | raw units | min-max units | standardised | target range | N train / test |",
        "|---|---|---|---|---|---|",
    ]
    for key, res in results.items():
        s = res["scaling"]
        lines.append(
            f"| {paper_column(key) or key} | {s['mean_predictor_mse_raw']:.4g} | "
            f"{s['mean_predictor_mse_minmax']:.4g} | {s['mean_predictor_mse_standardized']:.4g} | "
            f"{s['y_range']:.4g} | {s['num_train']} / {s['num_test']} |"
        )
    lines += [
        "",
        "The paper's MSEs (0.0226–0.0243 for Housing and Concrete) lie between the mean predictor and a "
        "well-fitted net only in min-max units; standardised, they would mean R² ≈ 0.98.",
        "",
        "## Test MSE (mean ± sd over seeds) by learning rate; validation MSE in brackets",
        "",
    ]
    for key, res in results.items():
        col = paper_column(key) or key
        lines += [
            f"**{col}**",
            "",
            "| partition | groups | " + " | ".join(f"η = {lr:g}" for lr in cfg.lrs) + " | chosen η | ms / iteration |",
            "|---|---|" + "---|" * len(cfg.lrs) + "---|---|",
        ]
        for p in cfg.partitions:
            cells = []
            for lr in cfg.lrs:
                v = res["per_lr"][p][lr]
                cells.append(
                    "diverged"
                    if not math.isfinite(v["test_mean"])
                    else f"{v['test_mean']:.4f} ± {v['test_sd']:.4f} ({v['val_mean']:.4f})"
                )
            ms = [res["per_lr"][p][lr]["ms_per_step"] for lr in cfg.lrs if res["per_lr"][p][lr]["ms_per_step"]]
            lines.append(
                f"| {PARTITIONS[p]} | {res['num_groups'][p]} | "
                + " | ".join(cells)
                + f" | {res['chosen'][p]['lr']!s} | {(sum(ms) / len(ms)) if ms else math.nan:.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


def _plot(cfg: Config, by_setting: dict, out: Path, paper_setting: str | None = None) -> list[str]:
    """Test MSE by partition (the paper's bars beside ours at each temperature) and validation
    MSE by learning rate (solid: the paper's setting, dotted: the other)."""
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return []
    labels = list(by_setting)
    first = by_setting[labels[0]]
    keys = list(first)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        col = paper_column(key)
        mse, _ = _published(col)
        labs = [PARTITIONS[p] for p in cfg.partitions]
        xs = torch.arange(len(labs), dtype=torch.float64).tolist()
        w = 0.8 / (1 + len(labels))
        pap = [mse[lab][0] if lab in mse else float("nan") for lab in labs]
        pap_sd = [mse[lab][1] if lab in mse else 0.0 for lab in labs]
        ax.bar([x - 0.4 + w / 2 for x in xs], pap, w, yerr=pap_sd, capsize=3, color="0.7", label="paper (Table 3)")
        tops = [m + e for m, e in zip(pap, pap_sd) if math.isfinite(m)]
        for k, label in enumerate(labels):
            res = by_setting[label][key]
            ours = [res["chosen"][p]["test_mean"] for p in cfg.partitions]
            ours_sd = [res["chosen"][p]["test_sd"] for p in cfg.partitions]
            ours = [m if math.isfinite(m) else float("nan") for m in ours]
            ours_sd = [s if math.isfinite(s) else 0.0 for s in ours_sd]
            at = [x - 0.4 + w / 2 + (k + 1) * w for x in xs]
            ax.bar(
                at,
                ours,
                w,
                yerr=ours_sd,
                capsize=3,
                color=colours[k % len(colours)],
                label=f"ours ({cfg.seeds} seeds)" + (f", {label}" if len(labels) > 1 else ""),
            )
            for x, p in zip(at, cfg.partitions):
                lr = res["chosen"][p]["lr"]
                ax.text(
                    x,
                    0.002 * (1 if cfg.scaling == "minmax" else 50),
                    f"η={lr:g}" if lr else "div.",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                    color="white",
                )
            tops += [v + e for v, e in zip(ours, ours_sd) if math.isfinite(v)]
        res = first[key]
        base = res["scaling"][
            "mean_predictor_mse_minmax" if cfg.scaling == "minmax" else "mean_predictor_mse_standardized"
        ]
        ax.axhline(base, color="tab:red", ls="--", lw=1, label="predict training mean")
        ax.set_ylim(0, 1.35 * max(tops + [base]))
        ax.set_xticks(xs)
        ax.set_xticklabels([lab.replace(" (", "\n(") for lab in labs], fontsize=8)
        ax.set_title(f"{col or key} ({res['scaling']['num_train']} train rows)")
        ax.set_ylabel("test MSE (min-max units)" if cfg.scaling == "minmax" else "test MSE (standardised)")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "S-SGLD partitions on UCI regression: test MSE mean ± sd over seeds (Table 3)"
        + (f"; the paper's numbers at {paper_setting}" if paper_setting else ""),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out / FIGURE_MSE, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 3.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        diverged = set()
        for label in labels:
            res = by_setting[label][key]
            ls = ":" if paper_setting and label != paper_setting else "-"
            for k, p in enumerate(cfg.partitions):
                lrs = [lr for lr in cfg.lrs if math.isfinite(res["per_lr"][p][lr]["val_mean"])]
                if lrs:
                    ax.errorbar(
                        lrs,
                        [res["per_lr"][p][lr]["val_mean"] for lr in lrs],
                        yerr=[res["per_lr"][p][lr]["val_sd"] for lr in lrs],
                        marker="o",
                        capsize=3,
                        ls=ls,
                        color=f"C{k}",
                        label=PARTITIONS[p] + (f", {label}" if len(labels) > 1 else ""),
                    )
            diverged |= {lr for lr in cfg.lrs if any(res["per_lr"][p][lr]["diverged"] for p in cfg.partitions)}
        for lr in diverged:
            ax.axvline(lr, color="tab:red", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("paper learning rate η (SGLD lr = 2η)" + (" — red dotted: diverged" if diverged else ""))
        ax.set_ylabel("validation MSE")
        ax.set_title((paper_column(key) or key) + (f" (solid: {paper_setting})" if paper_setting else ""))
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / FIGURE_LR, dpi=110)
    plt.close(fig)
    return [FIGURE_MSE, FIGURE_LR]


__all__ = [
    "Config",
    "PRESETS",
    "PAPER_MSE",
    "PAPER_LR",
    "PAPER_LRS",
    "PARTITIONS",
    "run",
    "run_one",
    "load_split",
    "make_net",
    "make_energy",
    "make_partition",
    "structured_energy",
    "scaling_evidence",
    "dataset_key",
    "comparisons",
    "rejudge",
    "value_tolerance",
    "AUTHORS_TEMPERATURE",
]
