"""Checks that catch a bad run from its own records (issue 36 §14-§17): an energy trace that has
not settled after burn-in, a Metropolis chain stuck while the pooled acceptance looks healthy,
and the guidance a weight-space R-hat needs in a neural network. Pure functions over the run's
per-iteration records (``Chain.info``: ``energy [C, S]``, ``accept [C, ..., S]``); ``sample()``
warns with them, ``structmc diagnose`` and the CLI's report print them."""

from __future__ import annotations

import math

import torch
from torch import Tensor


class ConvergenceWarning(UserWarning):
    """The run's own records show it is not sampling the target yet (an energy trace still
    moving after burn-in, a stuck Metropolis chain): filter it with ``warnings.simplefilter(
    "ignore", ConvergenceWarning)`` where a transient is intended."""


#: split-R-hat of the energy above which the trace has not settled (Vehtari et al. 2021's 1.01 is
#: for parameters over long runs; the minibatch energy of a short run is noisier, so 1.1)
ENERGY_RHAT_MAX = 1.1
#: iterations after burn-in below which the energy is not judged
MIN_ITERATIONS = 40
#: a chain is stuck when its acceptance after burn-in is below this fraction of the pooled median
STUCK_FRACTION = 0.1

WEIGHT_SPACE_NOTE = (
    "weight-space R-hat and ESS of a neural network are expected to look poor (R-hat well above 1.01, "
    "ESS of a few draws): permutation and scaling symmetries give the posterior many equivalent modes, "
    "and chains settle in different ones. Judge mixing on the predictive (function space: R-hat / ESS "
    "of the predictive on held-out points, structmc.diagnostics.function_space) and on the energy."
)


def _split_rhat(x: Tensor) -> float:
    """Split R-hat (BDA3 §11.4) of ``x [C, S]``: each chain cut into halves."""
    half = x.shape[1] // 2
    s = torch.cat([x[:, :half], x[:, half : 2 * half]], dim=0)  # [2C, n]
    n = s.shape[1]
    within = s.var(dim=1, correction=1).mean()
    between = n * s.mean(dim=1).var(correction=1)
    if not float(within) > 0:
        return math.nan
    return float(torch.sqrt((between / within + n - 1.0) / n))


def energy_stationarity(energy, burn_in: int = 0) -> dict:
    """Has the energy trace settled after burn-in? ``energy [C, S]`` (or ``[S]``), every
    iteration's minibatch energy. Returns ``checked`` (False with ``reason`` when fewer than
    :data:`MIN_ITERATIONS` iterations follow burn-in or the trace is not finite), ``rhat`` (split
    R-hat of the energy over chain halves), ``settled`` (``rhat <= ENERGY_RHAT_MAX``) and the
    mean energy of the first and second half after burn-in (``first``, ``second``)."""
    e = torch.as_tensor(energy).detach().to(torch.float64)
    if e.dim() == 1:
        e = e.unsqueeze(0)
    e = e.reshape(e.shape[0], -1)[:, int(burn_in) :]
    if e.shape[1] < MIN_ITERATIONS:
        return {"checked": False, "reason": f"{e.shape[1]} iterations after burn-in (< {MIN_ITERATIONS})"}
    if not bool(torch.isfinite(e).all()):
        return {"checked": False, "reason": "non-finite energies"}
    r = _split_rhat(e)
    half = e.shape[1] // 2
    first, second = float(e[:, :half].mean()), float(e[:, half : 2 * half].mean())
    settled = not (math.isfinite(r) and r > ENERGY_RHAT_MAX)
    return {"checked": True, "rhat": r, "settled": settled, "first": first, "second": second}


def stationarity_note(energy, burn_in: int = 0) -> str | None:
    """A warning line when :func:`energy_stationarity` finds the trace unsettled, else None."""
    s = energy_stationarity(energy, burn_in)
    if not s["checked"] or s["settled"]:
        return None
    direction = "falling" if s["second"] < s["first"] else "rising"
    return (
        f"the energy has not settled after burn-in (iteration {burn_in}): split R-hat of the minibatch energy over "
        f"chain halves {s['rhat']:.3g} > {ENERGY_RHAT_MAX:g}, its mean still {direction} from {s['first']:.4g} "
        f"(first half) to {s['second']:.4g} (second half); the draws may not yet be from the target: increase "
        "burn_in or num_steps, and look at the energy trace (structmc.diagnostics.plot_metric_vs_steps)"
    )


def stuck_chains(accept, burn_in: int = 0) -> dict:
    """Per-chain Metropolis acceptance after burn-in: ``accept [C, ..., S]`` (iterations last;
    blocks or layers between). Returns ``rates`` (per chain), ``pooled`` (mean over chains),
    ``stuck`` (chains whose rate is 0 or below :data:`STUCK_FRACTION` of the median chain's)."""
    a = torch.as_tensor(accept).detach().to(torch.float64)
    if a.dim() == 1:
        a = a.unsqueeze(0)
    a = a[..., int(burn_in) :]
    if a.shape[-1] == 0:
        return {"rates": [], "pooled": math.nan, "stuck": []}
    rates = a.reshape(a.shape[0], -1).mean(dim=1)
    med = float(rates.median())
    stuck = [c for c, r in enumerate(rates.tolist()) if r == 0.0 or (med > 0 and r < STUCK_FRACTION * med)]
    return {"rates": rates.tolist(), "pooled": float(rates.mean()), "stuck": stuck}


def stuck_note(accept, burn_in: int = 0) -> str | None:
    """A warning line naming the chains :func:`stuck_chains` finds stuck, else None."""
    s = stuck_chains(accept, burn_in)
    if not s["stuck"] or len(s["rates"]) < 2:
        return None
    shown = ", ".join(f"chain {c}: {s['rates'][c]:.3g}" for c in s["stuck"][:8])
    more = f" and {len(s['stuck']) - 8} more" if len(s["stuck"]) > 8 else ""
    return (
        f"{len(s['stuck'])} of {len(s['rates'])} chains are stuck: their Metropolis acceptance after burn-in is 0 or "
        f"below {STUCK_FRACTION:g} of the median chain's ({shown}{more}) while the pooled rate reads {s['pooled']:.3g}; "
        "a stuck chain repeats one point and biases every estimate: start it elsewhere, or reduce the proposal "
        "scale, and leave it out of the summaries"
    )


def function_space(energy, chain, inputs, max_points: int = 256) -> dict:
    """Function-space mixing (issue 36 §15): rank-normalised split R-hat and bulk ESS of each
    draw's predictive (class probabilities, or the regression mean) on up to ``max_points``
    held-out ``inputs``, one value per point and output. Unlike weight-space R-hat, these do not
    suffer from the network's symmetries: chains in equivalent modes predict alike. Returns
    ``rhat`` and ``ess`` (tensors over points × outputs) and their medians and maxima/minima."""
    from ..predictive import predictive
    from .ess import ess_bulk
    from .rhat import rhat

    x = inputs if isinstance(inputs, Tensor) else inputs[0]
    n = min(int(max_points), x.shape[0])
    xs = inputs[:n] if isinstance(inputs, Tensor) else tuple(t[:n] for t in inputs)
    out = predictive(energy, chain, xs, per_draw=True)
    values = out["probs"] if "probs" in out else out["mean"]  # [C, D, n, ...]
    values = values.reshape(values.shape[0], values.shape[1], -1).to(torch.float64)
    keep = values.std(dim=(0, 1)) > 0  # a constant output (a saturated probability) has no R-hat
    values = values[..., keep]
    if values.shape[-1] == 0 or values.shape[1] < 4:
        return {"checked": False, "reason": "fewer than 4 draws per chain, or constant predictions"}
    r, e = rhat(values), ess_bulk(values)
    finite = torch.isfinite(r)
    return {
        "checked": True,
        "points": n,
        "rhat": r,
        "ess": e,
        "rhat_median": float(r[finite].median()) if bool(finite.any()) else math.nan,
        "rhat_max": float(r[finite].max()) if bool(finite.any()) else math.nan,
        "ess_median": float(e[torch.isfinite(e)].median()) if bool(torch.isfinite(e).any()) else math.nan,
        "ess_min": float(e[torch.isfinite(e)].min()) if bool(torch.isfinite(e).any()) else math.nan,
    }


def function_space_lines(energy, chain, inputs, max_points: int = 256) -> list[str]:
    """The report lines of :func:`function_space` (empty when it cannot be computed)."""
    fs = function_space(energy, chain, inputs, max_points)
    if not fs["checked"]:
        return [f"function space: not computed ({fs['reason']})"]
    return [
        f"function space (the predictive on {fs['points']} held-out points; rank-normalised split R-hat, bulk ESS): "
        f"R-hat median {fs['rhat_median']:.4g}, max {fs['rhat_max']:.4g}; ESS median {fs['ess_median']:.4g}, "
        f"min {fs['ess_min']:.4g}"
        + ("" if fs["rhat_max"] <= 1.1 else " -- R-hat > 1.1: the chains disagree on the predictions, run longer")
    ]


__all__ = [
    "ConvergenceWarning",
    "function_space",
    "function_space_lines",
    "ENERGY_RHAT_MAX",
    "MIN_ITERATIONS",
    "STUCK_FRACTION",
    "WEIGHT_SPACE_NOTE",
    "energy_stationarity",
    "stationarity_note",
    "stuck_chains",
    "stuck_note",
]
