"""Table 2 and Tables 5–8 of Alexos, Boyd & Mandt (2022): ResNet-20 on Fashion-MNIST,
CIFAR-10 and SVHN with pSGLD and SGHMC and their structured variants — S-SGMCMC with M = 2, 4,
8, 16 ordered groups and Sd-SGMCMC with every parameter its own group (Bernoulli(ρ) masks,
K = 2 copies): posterior-predictive accuracy, IAC and ESS of the last 5,000 samples.

Protocol (Appendix H.2): 300 epochs, seed 2, batch 500 (FMNIST) or 128 (CIFAR-10, SVHN);
S-pSGLD at the authors' learning rate 1e-3, S-SGHMC at 1e-2; pSGLD, SGHMC and their Sd
variants at the rates of Tables 5–8 (the ``full`` preset runs the rates behind Table 2's
entries and the best accuracies). Accuracy: an ensemble of 100 draws from the chain.
Parameter i goes to group i mod M (the paper's ordered grouping). Per-rate numbers are
published for FMNIST (Tables 5, 6) and CIFAR-10 (Tables 7, 8; Table 8's method column says
pSGLD but holds the SGHMC runs); for SVHN only Table 2's IAC/ESS, judged as orderings.

What is ours where the paper is silent (each said in the report):

* the network is :func:`structmc.models.resnet20` with **no normalisation layers**
  (``norm=None``, biased convolutions): BatchNorm's batch statistics make the energy depend on
  how a batch is split between structured copies, and its running statistics are not
  parameters a chain can sample;
* IAC (Sokal's adaptive window, :func:`structmc.diagnostics.integrated_time`) and ESS (TFP's
  estimator, :func:`structmc.diagnostics.ess_tfp`) are averaged over 200 fixed randomly
  chosen weights traced over the last ``trace_length`` iterations (the paper's ESS ≈ 5,000 /
  IAC says it used 5,000 samples; which quantity it traced is not stated);
* prior N(0, 0.3²) (the authors' drivers' default, as in ``ssgmcmc-mnist-groups``);
* the structured runs start with one epoch of the plain sampler (``warmup_epochs``), as the
  authors' code does, and the SGHMC family with at least its 150 adaptation steps: the
  scale adaptation then sees whole gradients, not masked ones;
* the authors' pSGLD(η, α = 0.99) on the N-scaled loss is ``PSGLD(lr=2η/N)`` here
  (docs/conventions.md; the derivation is in ``ssgmcmc-mnist-groups``), with λ = 1e-5 on the
  per-datum √V (the pSGLD paper's value) instead of their λ′ = 1e-8 on the N-scaled one
  (``eps=λ′/N``): with that, a coordinate whose gradient is near zero takes noise steps of
  order √(2η/λ′) in this network without normalisation, and the chain diverges at its
  second iteration (measured);
* the authors' SGHMC is the scale-adapted SGHMC of Springenberg et al. (2016) with ``lr``,
  C = 0.05 and 150 adaptation steps on the N-scaled loss: :class:`structmc.ScaleAdaptedSGHMC`
  with ``lr = lr_authors²`` (their step ε enters squared), the same friction and adaptation;
  their momentum is also redrawn every 1,000 iterations, which ours is not (it leaves the
  target unchanged);
* CIFAR-10 and SVHN are read from ``data_dir`` or downloaded (checksummed); when neither
  works their rows are "not comparable" and the report says why. FMNIST falls back to a
  synthetic stand-in (no row judged).

Verdicts (:func:`comparisons`, issue 26 §1). The paper's methods sit close together: the
smallest gap between two rows of Tables 5+6 (and of 7+8) is 1 in IAC, 0.01 in ESS and 0.001
in accuracy, while one seed's IAC from a 5,000-sample trace with ESS ≈ 7 is uncertain by far
more. A value tolerance below those gaps is therefore meaningless for a single run, and one
above them lets a wrong number pass (a constant IAC of 800 passed 29 of the 32 FMNIST IAC cells
at the former ±25 %). So the per-run values are shown as checks (within 0.9 × the gap, not
tallied), and the claims tallied are the paper's orderings: per data set and learning rate,
each S-/Sd- run against its base sampler at the same rate (IAC lower or higher, ESS likewise,
as the paper's pair; a pair the paper separates by less than 1 % of the larger is a check,
an equal pair has no row), and Table 2's IAC ranking within each family.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .. import PSGLD, DivergenceError, ModuleEnergy, Run, ScaleAdaptedSGHMC
from ..diagnostics import ess_tfp, integrated_time
from ..models.resnet import resnet20
from ..partitions import round_robin
from ..predictive import predictive
from ..structured import BernoulliMask, ChainHistory, StructuredEnergy
from . import REGISTRY, resolve_preset
from ._common import load_images
from ._report import Claim, Comparison, Ordering, Tolerance, smallest_gap, write_report
from ._shared import (
    default_data_dir,
    load_result,
    progress_log,
    pyplot,
    restores_globals,
    resumable_iterate,
    save_result,
    threads,
)

DATASETS = ("fashion-mnist", "cifar10", "svhn")
PAPER_BATCH = {"fashion-mnist": 500, "cifar10": 128, "svhn": 128}
CHANNELS = {"fashion-mnist": 1, "cifar10": 3, "svhn": 3}
LABEL = {"fashion-mnist": "FMNIST", "cifar10": "CIFAR-10", "svhn": "SVHN"}

# Table 5 (FMNIST, pSGLD family): (method, rho, lr) -> (IAC, ESS, accuracy)
PAPER_TABLE5 = {
    ("Sd-pSGLD", 0.1, 1e-5): (1018, 5.63, 0.918),
    ("Sd-pSGLD", 0.1, 1e-4): (808, 7.0, 0.925),
    ("Sd-pSGLD", 0.1, 1e-3): (754, 7.48, 0.924),
    ("Sd-pSGLD", 0.1, 1e-2): (723, 8.05, 0.911),
    ("Sd-pSGLD", 0.5, 1e-5): (778, 7.08, 0.923),
    ("Sd-pSGLD", 0.5, 1e-4): (777, 7.15, 0.923),
    ("Sd-pSGLD", 0.5, 1e-3): (737, 7.57, 0.924),
    ("Sd-pSGLD", 0.5, 1e-2): (677, 8.24, 0.91),
    ("pSGLD", None, 1e-5): (779, 7.09, 0.924),
    ("pSGLD", None, 1e-4): (774, 7.16, 0.911),
    ("pSGLD", None, 1e-3): (770, 7.26, 0.809),
    ("pSGLD", None, 1e-2): (745, 7.48, 0.724),
    ("S-pSGLD_2", None, 1e-3): (740, 7.55, 0.918),
    ("S-pSGLD_4", None, 1e-3): (751, 7.45, 0.919),
    ("S-pSGLD_8", None, 1e-3): (776, 7.24, 0.919),
    ("S-pSGLD_16", None, 1e-3): (855, 6.64, 0.916),
}
# Table 6 (FMNIST, SGHMC family); the paper prints one Sd-SGHMC accuracy as "0.0.92"
PAPER_TABLE6 = {
    ("Sd-SGHMC", 0.1, 1e-5): (782, 7.08, 0.412),
    ("Sd-SGHMC", 0.1, 1e-4): (888, 6.41, 0.796),
    ("Sd-SGHMC", 0.1, 1e-3): (793, 6.98, 0.92),
    ("Sd-SGHMC", 0.1, 1e-2): (1113, 5.06, 0.922),
    ("Sd-SGHMC", 0.5, 1e-5): (790, 6.93, 0.207),
    ("Sd-SGHMC", 0.5, 1e-4): (789, 6.9, 0.758),
    ("Sd-SGHMC", 0.5, 1e-3): (796, 6.81, 0.92),
    ("Sd-SGHMC", 0.5, 1e-2): (923, 5.7, 0.927),
    ("SGHMC", None, 1e-5): (791, 6.93, 0.206),
    ("SGHMC", None, 1e-4): (789, 6.9, 0.751),
    ("SGHMC", None, 1e-3): (795, 6.83, 0.92),
    ("SGHMC", None, 1e-2): (920, 5.72, 0.928),
    ("S-SGHMC_2", None, 1e-2): (928, 5.67, 0.928),
    ("S-SGHMC_4", None, 1e-2): (915, 5.77, 0.927),
    ("S-SGHMC_8", None, 1e-2): (1142, 4.87, 0.919),
    ("S-SGHMC_16", None, 1e-2): (1121, 4.92, 0.906),
}
# Table 7 (CIFAR-10, pSGLD family)
PAPER_TABLE7 = {
    ("Sd-pSGLD", 0.1, 1e-2): (623, 7.23, 0.191),
    ("Sd-pSGLD", 0.1, 1e-3): (572, 7.6, 0.896),
    ("Sd-pSGLD", 0.1, 1e-4): (692, 6.45, 0.921),
    ("Sd-pSGLD", 0.1, 1e-5): (922, 4.88, 0.922),
    ("Sd-pSGLD", 0.5, 1e-2): (546, 8.01, 0.768),
    ("Sd-pSGLD", 0.5, 1e-3): (582, 7.88, 0.918),
    ("Sd-pSGLD", 0.5, 1e-4): (691, 6.85, 0.926),
    ("Sd-pSGLD", 0.5, 1e-5): (620, 7.22, 0.927),
    ("pSGLD", None, 1e-2): (716, 8.01, 0.666),
    ("pSGLD", None, 1e-3): (740, 7.87, 0.866),
    ("pSGLD", None, 1e-4): (780, 7.41, 0.914),
    ("pSGLD", None, 1e-5): (831, 6.89, 0.926),
    ("S-pSGLD_2", None, 1e-3): (600, 7.44, 0.894),
    ("S-pSGLD_4", None, 1e-3): (599, 7.4, 0.905),
    ("S-pSGLD_8", None, 1e-3): (709, 6.41, 0.881),
    ("S-pSGLD_16", None, 1e-3): (767, 5.93, 0.836),
}
# Table 8 (CIFAR-10, SGHMC family; the paper's method column repeats "pSGLD" by mistake, and
# its S-SGHMC rows say lr 1e-3 where the text says 1e-2: we key them by the table's 1e-3)
PAPER_TABLE8 = {
    ("Sd-SGHMC", 0.1, 1e-2): (608, 7.16, 0.91),
    ("Sd-SGHMC", 0.1, 1e-3): (975, 4.6, 0.922),
    ("Sd-SGHMC", 0.1, 1e-4): (654, 6.63, 0.869),
    ("Sd-SGHMC", 0.1, 1e-5): (652, 6.65, 0.724),
    ("Sd-SGHMC", 0.5, 1e-2): (584, 7.7, 0.918),
    ("Sd-SGHMC", 0.5, 1e-3): (751, 6.23, 0.927),
    ("Sd-SGHMC", 0.5, 1e-4): (679, 6.73, 0.886),
    ("Sd-SGHMC", 0.5, 1e-5): (772, 6.01, 0.778),
    ("SGHMC", None, 1e-2): (727, 7.94, 0.86),
    ("SGHMC", None, 1e-3): (832, 6.84, 0.926),
    ("SGHMC", None, 1e-4): (862, 6.57, 0.885),
    ("SGHMC", None, 1e-5): (858, 6.6, 0.746),
    ("S-SGHMC_2", None, 1e-3): (583, 7.49, 0.913),
    ("S-SGHMC_4", None, 1e-3): (624, 7.03, 0.919),
    ("S-SGHMC_8", None, 1e-3): (904, 4.97, 0.908),
    ("S-SGHMC_16", None, 1e-3): (822, 5.47, 0.774),
}
PAPER_TABLES = {
    "fashion-mnist": {**PAPER_TABLE5, **PAPER_TABLE6},
    "cifar10": {**PAPER_TABLE7, **PAPER_TABLE8},
    "svhn": {},
}
# Table 2: (IAC, ESS) of the best-mixing run of each method, per data set
PAPER_TABLE2 = {
    "cifar10": {
        "pSGLD": (842, 6.79),
        "S-pSGLD_2": (777, 7.34),
        "S-pSGLD_4": (783, 7.26),
        "S-pSGLD_8": (833, 6.86),
        "Sd-pSGLD": (816, 7.05),
        "SGHMC": (916, 6.14),
        "S-SGHMC_2": (874, 6.37),
        "S-SGHMC_4": (875, 6.37),
        "S-SGHMC_8": (1195, 4.68),
        "Sd-SGHMC": (1079, 5.28),
    },
    "svhn": {
        "pSGLD": (839, 6.82),
        "S-pSGLD_2": (840, 6.80),
        "S-pSGLD_4": (834, 6.83),
        "S-pSGLD_8": (857, 6.67),
        "Sd-pSGLD": (803, 7.00),
        "SGHMC": (858, 6.59),
        "S-SGHMC_2": (949, 5.74),
        "S-SGHMC_4": (961, 5.66),
        "S-SGHMC_8": (1056, 5.30),
        "Sd-SGHMC": (828, 6.56),
    },
    "fashion-mnist": {
        "pSGLD": (779, 7.09),
        "S-pSGLD_2": (740, 7.55),
        "S-pSGLD_4": (751, 7.45),
        "S-pSGLD_8": (776, 7.24),
        "Sd-pSGLD": (677, 8.24),
        "SGHMC": (795, 6.83),
        "S-SGHMC_2": (928, 5.67),
        "S-SGHMC_4": (915, 5.77),
        "S-SGHMC_8": (1142, 4.87),
        "Sd-SGHMC": (782, 7.08),
    },
}
FIGURE = "resnet20_{dataset}.png"

_FULL_RUNS = (
    ("pSGLD", None, 1e-5),
    ("S-pSGLD_2", None, 1e-3),
    ("S-pSGLD_4", None, 1e-3),
    ("S-pSGLD_8", None, 1e-3),
    ("S-pSGLD_16", None, 1e-3),
    ("Sd-pSGLD", 0.1, 1e-4),
    ("Sd-pSGLD", 0.5, 1e-3),
    ("Sd-pSGLD", 0.5, 1e-2),
    ("SGHMC", None, 1e-3),
    ("SGHMC", None, 1e-2),
    ("S-SGHMC_2", None, 1e-2),
    ("S-SGHMC_4", None, 1e-2),
    ("S-SGHMC_8", None, 1e-2),
    ("S-SGHMC_16", None, 1e-2),
    ("Sd-SGHMC", 0.1, 1e-5),
    ("Sd-SGHMC", 0.5, 1e-2),
)


@dataclass
class Config:
    # (method, rho, the authors' lr); "S-pSGLD_M" / "S-SGHMC_M" run M ordered groups
    runs: tuple = _FULL_RUNS
    datasets: tuple = DATASETS
    epochs: float = 300
    batch_size: int | None = None  # None: the paper's (500 for FMNIST, 128 for CIFAR-10 / SVHN)
    num_copies: int = 2  # K of Sd-SGMCMC (Appendix: "K is set to 2")
    alpha: float = 0.99
    eps: float = 1e-5  # λ on the per-datum √V (the pSGLD paper's); see the module docstring
    friction: float = 0.05  # the authors' SGHMC base_C
    adapt_steps: int = 150  # the authors' SGHMC burn_in_period
    prior_std: float = 0.3
    warmup_epochs: float = 1.0  # plain sampler before the structured energy takes over (the authors' code)
    history: int = 5_000
    trace_length: int = 5_000  # the last iterations whose traces give IAC / ESS
    trace_params: int = 200
    num_draws: int = 100  # predictive ensemble, evenly over the traced stretch
    num_train: int | None = None
    num_test: int | None = None
    data: str = "auto"
    data_dir: str | None = None
    download: bool = True  # CIFAR-10 / SVHN when not in data_dir
    threads: int | None = None
    seed: int = 2
    # value rows (accuracy, IAC, ESS of one run against Tables 5-8) are checks, not tallied: their
    # tolerance is this fraction of the smallest gap between the table's own rows (issue 26 §1;
    # for Tables 5+6 and 7+8 alike: IAC 1, ESS 0.01, accuracy 0.001, so ±0.9, ±0.009, ±0.0009),
    # far below one seed's run noise, so only the orderings below are the paper's claims
    value_gap_fraction: float = 0.9
    # a structured run against its base sampler at the same learning rate is an ordering claim
    # (IAC lower / ESS higher as the paper's pair) only where the paper's two numbers differ by at
    # least this fraction of the larger: below it (778 vs 779, 6.93 vs 6.9) the pair is a check
    claim_gap_rel: float = 0.01


# quick: the structured SGHMC runs need their 150 adaptation steps on whole gradients before the
# structured energy starts, more than quick's 60 iterations, so quick runs SGHMC alone
_QUICK_RUNS = (("pSGLD", None, 1e-5), ("S-pSGLD_2", None, 1e-3), ("Sd-pSGLD", 0.5, 1e-3), ("SGHMC", None, 1e-2))
PRESETS = {
    "tiny": Config(
        runs=(
            ("pSGLD", None, 1e-5),
            ("S-pSGLD_2", None, 1e-3),
            ("Sd-pSGLD", 0.5, 1e-3),
            ("SGHMC", None, 1e-2),
            ("Sd-SGHMC", 0.5, 1e-2),
        ),
        datasets=("fashion-mnist",),
        epochs=2,
        batch_size=50,
        num_train=200,
        num_test=100,
        trace_length=6,
        trace_params=20,
        num_draws=3,
        adapt_steps=4,
    ),
    "quick": Config(
        runs=_QUICK_RUNS,
        datasets=("fashion-mnist",),
        epochs=3,
        num_train=10_000,
        num_test=2_000,
        trace_length=30,
        num_draws=10,
    ),
    # issue 24: the headline pair of Tables 5-6 (pSGLD against Sd-pSGLD, ρ = 0.5, K = 2) on
    # FMNIST at the paper's 300 epochs; checkpointed every epoch, so it can be advanced over
    # several sittings with resume=True (one pair ≈ 5 h on 2 CPU cores; about 15 min on an H100)
    "converged": Config(runs=(("pSGLD", None, 1e-5), ("Sd-pSGLD", 0.5, 1e-3)), datasets=("fashion-mnist",)),
    "full": Config(),
}


def family(method: str) -> str:
    """``"pSGLD"`` or ``"SGHMC"``: the base sampler of ``method``."""
    for base in ("pSGLD", "SGHMC"):
        if method in (base, f"Sd-{base}") or method.startswith(f"S-{base}_"):
            return base
    raise ValueError(f"unknown method {method!r}; methods are pSGLD, S-pSGLD_M, Sd-pSGLD, SGHMC, S-SGHMC_M, Sd-SGHMC")


def make_energy(cfg: Config, num_data: int, in_channels: int = 1, device="cpu") -> ModuleEnergy:
    """ResNet-20 on ``device``. On a GPU the K copies of Sd-SGMCMC are evaluated one after
    another (``chain_evaluation="loop"``): vmapped convolutions with a weight tensor per copy
    took 66 against 16 ms a step on an H100 (docs/performance.md)."""
    torch.manual_seed(cfg.seed)
    loop = torch.device(device).type == "cuda"
    return ModuleEnergy(
        resnet20(10, in_channels=in_channels, norm=None),
        "categorical",
        prior_std=cfg.prior_std,
        num_data=num_data,
        chain_evaluation="loop" if loop else "vmap",
    ).to(device)


def make_energy_for(method: str, rho, base: ModuleEnergy, cfg: Config, steps: int, warmup_steps: int = 0):
    """The energy of ``method``; structured ones run the plain energy for ``warmup_steps``
    iterations first (the authors' first epoch; for the SGHMC family at least the
    ``adapt_steps`` of the scale adaptation), so that V̂ is learned from whole gradients: an
    Sd-mask leaves a coordinate with no likelihood gradient in a step, and when that happens
    at the end of a short adaptation window V̂ ≈ 0 there makes its step η/ε (measured: an
    MLP's Sd-SGHMC chain blew up at iteration 320)."""
    fam = family(method)
    if method == fam:
        return base
    history = ChainHistory(min(cfg.history, steps + 1))
    if method.startswith(f"S-{fam}_"):
        M = int(method.split("_")[1])
        return StructuredEnergy(base, round_robin(base.space.dim, M), history, seed=cfg.seed, warmup_steps=warmup_steps)
    # Sd: every parameter its own group
    return StructuredEnergy(
        base,
        round_robin(base.space.dim, base.space.dim),
        history,
        mask=BernoulliMask(rho),
        num_copies=cfg.num_copies,
        seed=cfg.seed,
        warmup_steps=warmup_steps,
    )


def make_sampler(method: str, lr: float, cfg: Config, num_data: int):
    """The authors' optimiser at their ``lr`` in the library's convention (module docstring)."""
    if family(method) == "pSGLD":
        return PSGLD(2 * lr / num_data, alpha=cfg.alpha, eps=cfg.eps)
    return ScaleAdaptedSGHMC(lr * lr, friction=cfg.friction, adapt_steps=cfg.adapt_steps)


def run_one(
    cfg: Config,
    data,
    method: str,
    rho,
    lr: float,
    log=None,
    *,
    folder: Path | None = None,
    resume: bool = False,
    batch_size: int | None = None,
) -> dict:
    """One chain; with ``folder`` checkpointed there every epoch (``resume=True`` continues it,
    a finished chain's result is read back)."""
    done = load_result(folder, resume)
    if done is not None:
        if log:
            log(f"{method} rho={rho} lr={lr:g}: finished earlier, read from {folder}")
        return done
    x, y = data.x_train, data.y_train
    N = len(y)
    batch = batch_size or cfg.batch_size or 500
    per_epoch = max(1, N // batch)
    steps = max(2, int(round(cfg.epochs * per_epoch)))
    base = make_energy(cfg, N, int(x.shape[1]), x.device)
    warm = int(round(cfg.warmup_epochs * per_epoch))
    if family(method) == "SGHMC":  # V̂ adapted on whole gradients (see make_energy_for)
        warm = max(warm, cfg.adapt_steps)
    warm = min(warm, steps)
    energy = make_energy_for(method, rho, base, cfg, steps, warm)
    g = torch.Generator().manual_seed(12345)
    idx = torch.randperm(base.space.dim, generator=g)[: cfg.trace_params].sort().values
    length = min(cfg.trace_length, steps)
    first = steps - length + 1
    every = max(1, length // cfg.num_draws)
    run = Run(
        energy, base.initial_position(), make_sampler(method, lr, cfg, N), data=(x, y), batch_size=batch, seed=cfg.seed
    )
    carry: dict[str, list[torch.Tensor]] = {"trace": [], "draws": []}
    trace, draws = carry["trace"], carry["draws"]
    for t, state, _ in resumable_iterate(
        run,
        steps,
        folder,
        resume=resume,
        every=per_epoch,
        carry=carry,
        progress=log is not None,
        desc=f"{method} lr {lr:g}",
    ):
        if t >= first:
            trace.append(state.theta[0, idx].to(torch.float64))  # stays on the device: no read per step
            if (steps - t) % every == 0 and len(draws) < cfg.num_draws:
                draws.append(state.theta[0].clone())
    seconds = run.elapsed
    device = x.device
    probs = predictive(base, torch.stack([d.to(device) for d in draws]), data.x_test, batch_size=500)["probs"]
    acc = float((probs.argmax(-1) == data.y_test).double().mean())
    tr = torch.stack([t.cpu() for t in trace]).unsqueeze(0)
    iac, ess = integrated_time(tr).double(), ess_tfp(tr).double()
    out = {
        "method": method,
        "rho": rho,
        "lr": lr,
        "accuracy": acc,
        "iac": float(iac.mean()),
        "ess": float(ess.mean()),
        "trace_length": int(tr.shape[1]),
        "num_draws": len(draws),
        "steps": steps,
        "epochs": steps / per_epoch,
        "batch_size": batch,
        "evaluations_per_step": getattr(energy, "num_copies", 1),
        "warmup_steps": warm if energy is not base else 0,
        "seconds": seconds,
    }
    if log:
        log(
            f"{method} rho={rho} lr={lr:g}: accuracy {100 * acc:.2f}%, IAC {out['iac']:.1f}, ESS {out['ess']:.1f} "
            f"({seconds:.1f} s)"
        )
    save_result(folder, out)
    return out


def load_dataset(name: str, cfg: Config):
    """``(data, None)`` or ``(None, why)`` when a CIFAR-10 / SVHN set is neither in
    ``data_dir`` nor downloadable (``data="files"`` raises instead). Fashion-MNIST falls back
    to the synthetic stand-in as in the other MNIST experiments."""
    from ..data import DataError, ImageData, load

    if name == "fashion-mnist":
        data = load_images(name, cfg)
    else:
        if cfg.data == "synthetic":
            return None, f"{name}: data='synthetic' has no stand-in for 3-channel images"
        data_dir = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
        try:
            ds = load(
                name, data_dir=None if data_dir is None else str(data_dir), download=cfg.download, normalize="unit"
            )
        except (DataError, FileNotFoundError, OSError, ImportError) as err:
            if cfg.data == "files":
                raise
            return None, f"{name}: not in {data_dir} and not downloadable ({type(err).__name__}: {err})"
        x_tr, y_tr, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
        if cfg.num_train is not None and cfg.num_train < len(y_tr):
            keep = torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(cfg.seed))[: cfg.num_train]
            x_tr, y_tr = x_tr[keep.sort().values], y_tr[keep.sort().values]
        if cfg.num_test is not None and cfg.num_test < len(y_te):
            x_te, y_te = x_te[: cfg.num_test], y_te[: cfg.num_test]
        data = ImageData(name, x_tr, y_tr, x_te, y_te, "files", str(data_dir))
    data.x_train, data.x_test = data.x_train.float(), data.x_test.float()
    data.y_train, data.y_test = data.y_train.long(), data.y_test.long()
    return data, None


def _key(method: str, rho) -> str:
    return method if rho is None else f"{method} rho={rho:g}"


def _reductions(cfg: Config) -> list[str]:
    out = []
    if cfg.epochs < 300:
        out.append(
            f"{cfg.epochs:g} epochs instead of 300: accuracies far below the paper's, and IAC/ESS from a "
            f"{cfg.trace_length}-iteration trace instead of 5,000 (Sokal's window is then biased low)"
        )
    if cfg.num_train is not None or cfg.num_test is not None:
        out.append(f"{cfg.num_train or 'all'} training and {cfg.num_test or 'all'} test images")
    if len(cfg.runs) < len(_FULL_RUNS):
        out.append(f"runs {[_key(m, r) + f' lr {lr:g}' for m, r, lr in cfg.runs]} only")
    if tuple(cfg.datasets) != DATASETS:
        out.append(f"data sets {list(cfg.datasets)} only (paper: FMNIST, CIFAR-10, SVHN)")
    if cfg.adapt_steps != 150:
        out.append(f"SGHMC scale adaptation over {cfg.adapt_steps} iterations instead of 150")
    return out


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/ssgmcmc-resnet",
    progress: bool | None = None,
    *,
    device: str = "cpu",
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment into ``out_dir``: each chain is checkpointed every epoch under
    ``out_dir/runs/<data set>/<method>``; ``resume=True`` continues an interrupted run
    (finished chains are read back, the interrupted one continues from its checkpoint)."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    for name in cfg.datasets:
        if name not in DATASETS:
            raise ValueError(f"unknown data set {name!r}; choose from {DATASETS}")
    for method, rho, lr in cfg.runs:
        family(method)
        if method.startswith("Sd-") and not (rho is not None and 0 < rho <= 1):
            raise ValueError(f"{method} needs a mask rate rho in (0, 1], got {rho!r}")
        if not lr > 0:
            raise ValueError(f"learning rates must be positive, got {lr!r} for {method}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = progress_log("ssgmcmc-resnet", progress)
    t_start = time.perf_counter()
    results: dict[str, dict[str, dict]] = {}
    sources, skipped, sizes = {}, {}, {}
    with threads(cfg.threads):
        for name in cfg.datasets:
            data, why = load_dataset(name, cfg)
            if data is None:
                skipped[name] = why
                if log:
                    log(f"{LABEL[name]} skipped: {why}")
                continue
            data = data.to(device)
            sources[name] = data.source
            sizes[name] = {"num_train": len(data.y_train), "num_test": len(data.y_test)}
            batch = cfg.batch_size or PAPER_BATCH[name]
            results[name] = {}
            for method, rho, lr in cfg.runs:
                key = _key(method, rho)
                try:
                    r = run_one(
                        cfg,
                        data,
                        method,
                        rho,
                        lr,
                        log,
                        folder=out / "runs" / name / f"{key}_lr{lr:g}".replace(" ", "_"),
                        resume=resume,
                        batch_size=batch,
                    )
                except DivergenceError as err:  # one run's divergence is a result, not the end of the experiment
                    r = {
                        "method": method,
                        "rho": rho,
                        "lr": lr,
                        "accuracy": math.nan,
                        "iac": math.nan,
                        "ess": math.nan,
                        "diverged_at": int(err.step),
                        "error": str(err),
                        "trace_length": 0,
                    }
                    if log:
                        log(f"{method} rho={rho} lr={lr:g}: {err}")
                results[name][f"{key}, lr {lr:g}"] = r
    rows = comparisons(cfg, results, sources, skipped)
    figures = [f for name in results for f in _figure(cfg, name, results[name], out)]
    notes = [
        f"{LABEL[n]}: {'files' if sources[n] == 'files' else 'synthetic stand-in (files not found): no row judged'}"
        for n in sources
    ]
    notes += [f"{LABEL[n]} not run: {why}" for n, why in skipped.items()]
    notes += [
        "network: ResNet-20 without normalisation layers (see the module docstring); prior N(0, 0.3²)",
        "IAC and ESS: means over 200 fixed traced weights; the paper does not say what it traced",
        "Table 2 is judged as orderings between our runs' lowest IACs per method; its entries are not always "
        "the lowest of Tables 5-8 (FMNIST pSGLD 779 is Table 5's lr 1e-5, whose lowest is 745 at 1e-2) and its "
        "CIFAR-10 entries match no row of Tables 7-8 (pSGLD 842, S-pSGLD_2 777 against Table 7's 600), so the "
        "paper's own per-rate numbers do not give Table 2's CIFAR-10 ranking",
        "verdicts (issue 26): the single-run values of Tables 5-8 are checks within 0.9 × the tables' smallest "
        "gap between rows (IAC ±0.9, ESS ±0.009, accuracy ±0.0009), not tallied: no single seed repeats a "
        "number that closely; the paper's claims are orderings: each structured run against its base sampler "
        f"at the same rate (IAC and ESS, pairs the paper separates by ≥ {100 * cfg.claim_gap_rel:g} %) and "
        "Table 2's ranking per family",
    ]
    steps = [
        f"the authors' pSGLD lr η on the N-scaled loss → PSGLD(lr=2η/N, alpha={cfg.alpha}, eps={cfg.eps:g}); "
        "eps is λ on the per-datum √V, not the authors' 1e-8/N (which diverges here, see the module docstring)",
        f"the authors' scale-adapted SGHMC (Springenberg et al. 2016) lr ε, base_C → ScaleAdaptedSGHMC(lr=ε², "
        f"friction={cfg.friction:g}, adapt_steps={cfg.adapt_steps}): their update v ← v − ε²V̂^(-1/2)∇Û − Cv + "
        "N(0, 2ε²CV̂^(-1/2) − ε⁴) is ours with η = ε²",
    ]
    numbers = {"results": results, "data": sizes, "skipped": skipped, "paper_table2": PAPER_TABLE2}
    return write_report(
        out,
        experiment=REGISTRY.get("ssgmcmc-resnet"),
        preset=preset,
        config=asdict(cfg),
        seed=cfg.seed,
        comparisons=rows,
        numbers=numbers,
        wall_time_s=time.perf_counter() - t_start,
        device=device,
        step_sizes=steps,
        reductions=_reductions(cfg),
        figures=figures,
        notes=notes,
    )


def _refuse(why: str):
    """A claim test that makes the row "not comparable: why"."""

    def test(_):
        raise ValueError(why)

    return test


def value_tolerances(name: str, fraction: float = 0.9) -> dict[str, float]:
    """``{"iac", "ess", "accuracy": tolerance}`` for data set ``name``'s per-rate tables:
    ``fraction`` × the smallest gap between two of their rows (:func:`._report.smallest_gap`;
    1, 0.01 and 0.001 for Tables 5+6 and for Tables 7+8), so that no row's number passes as
    another's."""
    table = PAPER_TABLES[name]
    return {
        q: fraction * smallest_gap([v[i] for v in table.values()]) for i, q in enumerate(("iac", "ess", "accuracy"))
    }


def comparisons(cfg: Config, results: dict, sources: dict, skipped: dict) -> list[Comparison]:
    """The report's rows from ``results`` (``{data set: {run label: {"accuracy", "iac", "ess",
    ...}}}``, in ``cfg.runs`` order), the data sources and the data sets skipped; pure, so a
    test can feed it any numbers (issue 26 §1).

    * Tables 5-8, one run against its published (IAC, ESS, accuracy): **checks** (not tallied),
      within ``cfg.value_gap_fraction`` × the table's smallest gap between rows (IAC ±0.9,
      ESS ±0.009, accuracy ±0.0009): a wider tolerance lets one row's number pass as another's
      (a constant IAC of 800 passed 29 of the 32 FMNIST IAC cells at the former ±25 %), and no
      single-seed run repeats a number to within these gaps.
    * The paper's claims, tallied: per data set and learning rate, each structured run (S-, Sd-)
      against its base sampler at the same rate, IAC and ESS ranked as the paper's pair
      (:class:`Ordering`; a pair whose paper numbers differ by less than ``cfg.claim_gap_rel``
      of the larger is a check, and an equal pair is left out: the paper ranks neither); and
      Table 2's IAC ranking of each family (our best IAC per method over the rates run)."""
    rows = []
    short = cfg.trace_length < 5_000  # the paper's IAC/ESS come from the last 5,000 samples

    def mixing_rule(rule):
        if not short:
            return rule
        return Claim(
            "needs a 5,000-iteration trace, as the paper's",
            _refuse(
                f"IAC/ESS from a {cfg.trace_length}-iteration trace (ESS ≤ its length) are not "
                "comparable with the paper's from 5,000 samples"
            ),
        )

    for name in cfg.datasets:
        table = {"fashion-mnist": "Tables 5, 6", "cifar10": "Tables 7, 8", "svhn": "Table 2"}[name]
        if name in skipped:
            rows.append(
                Comparison(
                    f"{LABEL[name]} ({table})",
                    None,
                    "the paper's numbers",
                    Claim("needs the data set", _refuse(skipped[name])),
                )
            )
            continue
        synthetic = sources[name] != "files"
        paper_rows = PAPER_TABLES[name]
        res = results[name]
        tol = value_tolerances(name, cfg.value_gap_fraction) if paper_rows else {}
        runs = dict(zip(cfg.runs, res.items()))  # (method, rho, lr) -> (label, result)
        for (method, rho, lr), (label, r) in runs.items():
            paper = None if synthetic else paper_rows.get((method, rho, lr))
            if paper is None and not synthetic and name != "svhn":
                continue  # a rate the paper did not publish for this data set
            if name == "svhn":
                continue  # no per-rate table: judged through Table 2 below
            if "diverged_at" in r:
                rows.append(
                    Comparison(
                        f"{LABEL[name]} {label}",
                        f"diverged at iteration {r['diverged_at']}",
                        None if paper is None else list(paper),
                        Claim("the chain runs to the end", lambda _: False),
                    )
                )
                continue
            for q, i, what in (("accuracy", 2, "accuracy"), ("iac", 0, "IAC"), ("ess", 1, "ESS")):
                rule = Tolerance(abs=tol[q]) if q in tol else None
                rows.append(
                    Comparison(
                        f"{LABEL[name]} {what}, {label}",
                        r[q],
                        None if paper is None else paper[i],
                        rule if q == "accuracy" or rule is None else mixing_rule(rule),
                        note=""
                        if paper is None
                        else f"a check: ±{cfg.value_gap_fraction:g} × the smallest gap between {table}'s rows "
                        f"({tol[q] / cfg.value_gap_fraction:.3g})",
                        check=True,
                    )
                )
            # the paper's claim per step size: the structured run against its base sampler at this rate
            fam = family(method)
            base = runs.get((fam, None, lr))
            base_paper = paper_rows.get((fam, None, lr))
            if method == fam or base is None or paper is None or base_paper is None or "diverged_at" in base[1]:
                continue
            for q, i, what, lower in (("iac", 0, "IAC", True), ("ess", 1, "ESS", False)):
                pv = [paper[i], base_paper[i]]
                if pv[0] == pv[1]:
                    continue  # the paper ranks neither
                gap = abs(pv[0] - pv[1]) / max(abs(pv[0]), abs(pv[1]))
                small = gap < cfg.claim_gap_rel
                better = (pv[0] < pv[1]) == lower
                rows.append(
                    Comparison(
                        f"{LABEL[name]} lr {lr:g}: {what} of {_key(method, rho)} "
                        f"{'better' if better else 'worse'} than {fam}'s ({table})",
                        [r[q], base[1][q]],
                        pv,
                        mixing_rule(Ordering((_key(method, rho), fam), lower_is_better=lower)),
                        note=(
                            f"a check: the paper's pair differs by {100 * gap:.2g} %, under "
                            f"{100 * cfg.claim_gap_rel:g} % of the larger (one seed, ESS ≈ 7 of 5,000 samples): "
                            "no ordering claimed"
                        )
                        if small
                        else "",
                        check=small,
                    )
                )
        if synthetic:
            continue
        # Table 2: per method our lowest IAC over the rates run, ranked as the paper's
        best: dict[str, float] = {}
        for (method, _rho, _lr), r in zip(cfg.runs, res.values()):
            finite = math.isfinite(r["iac"])
            best[method] = min(best.get(method, math.inf), r["iac"]) if finite else best.get(method, math.inf)
        best = {m: (v if math.isfinite(v) else math.nan) for m, v in best.items()}
        for fam in ("pSGLD", "SGHMC"):
            labels = tuple(m for m in PAPER_TABLE2[name] if family(m) == fam and m in best)
            if len(labels) >= 2:
                rows.append(
                    Comparison(
                        f"Table 2 ({LABEL[name]}): IAC ranking of the {fam} family",
                        [best[m] for m in labels],
                        [PAPER_TABLE2[name][m][0] for m in labels],
                        mixing_rule(Ordering(labels, lower_is_better=True)),
                    )
                )
    return rows


def _figure(cfg: Config, dataset: str, results: dict, out: Path) -> list[str]:
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return []
    names = list(results)
    paper_rows = PAPER_TABLES[dataset]
    paper = [paper_rows.get((m, r, lr)) for m, r, lr in cfg.runs]
    fig, axes = plt.subplots(1, 3, figsize=(max(13, 0.9 * len(names) * 3), 3.8))
    trace = max(r["trace_length"] for r in results.values())
    for ax, key, label in zip(axes, ("accuracy", "iac", "ess"), ("accuracy", "IAC (lower: faster mixing)", "ESS")):
        colours = ["tab:blue" if family(results[n]["method"]) == "pSGLD" else "tab:green" for n in names]
        ax.bar(range(len(names)), [results[n][key] for n in names], color=colours)
        i = {"iac": 0, "ess": 1, "accuracy": 2}[key]
        ax.scatter(
            range(len(names)),
            [p[i] if p else float("nan") for p in paper],
            color="tab:red",
            zorder=3,
            label="paper (300 epochs)",
        )
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
        ax.set_title(
            label if key == "accuracy" else f"{label}\nours: trace of {trace} iterations, paper: 5,000", fontsize=9
        )
    axes[0].legend(fontsize=8, title="bars: ours (blue pSGLD, green SGHMC)", title_fontsize=7)
    fig.suptitle(
        f"ResNet-20 on {LABEL[dataset]} (Table 2, "
        f"{ {'fashion-mnist': 'Tables 5, 6', 'cifar10': 'Tables 7, 8', 'svhn': 'Table 2'}[dataset] })",
        fontsize=10,
    )
    fig.tight_layout()
    path = FIGURE.format(dataset=dataset)
    fig.savefig(out / path, dpi=100)
    plt.close(fig)
    return [path]


__all__ = [
    "Config",
    "PRESETS",
    "run",
    "PAPER_TABLE5",
    "PAPER_TABLE6",
    "PAPER_TABLE7",
    "PAPER_TABLE8",
    "PAPER_TABLE2",
    "make_energy",
    "make_energy_for",
    "make_sampler",
    "family",
    "load_dataset",
    "comparisons",
    "value_tolerances",
]
