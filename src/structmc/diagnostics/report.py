"""``diagnose_run``: the text report and plots of ``structmc diagnose RUN_DIR``."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from ._utils import quantiles
from .health import WEIGHT_SPACE_NOTE, stationarity_note, stuck_note
from .summary import mixing, select_random, select_top_variance, summary


def _fmt(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.4g}"


def _dist(name: str, v: torch.Tensor) -> str:
    v = v.detach().double().reshape(-1)
    v = v[torch.isfinite(v)]
    if v.numel() == 0:
        return f"  {name:<10} (undefined: constant or non-finite draws)"
    q = quantiles(v, (0.0, 0.05, 0.5, 0.95, 1.0))
    return (
        f"  {name:<10} min {_fmt(float(q[0]))}  5% {_fmt(float(q[1]))}  median {_fmt(float(q[2]))}  "
        f"95% {_fmt(float(q[3]))}  max {_fmt(float(q[4]))}"
    )


def blowup_note(energy, dim: int, factor: float = 100.0) -> str | None:
    """A warning line when a chain's minibatch energy ``[C, S]`` grew past ``factor`` times its
    value at iteration 1 (floored at the dimension ``dim``, about the energy's thermal spread),
    the run loop's blow-up rule: R-hat, ESS and predictive scores of such a chain describe a
    divergence, not the posterior (digits, SGLD lr = 1: ×530, R-hat 1.003, 91.6% accuracy)."""
    e = energy.to(torch.float64)
    if e.dim() == 1:
        e = e.unsqueeze(0)
    if e.shape[1] < 2:
        return None
    scale = e[:, 0].abs().clamp(min=max(1.0, float(dim)))
    peak = e[:, 1:].abs().nan_to_num(nan=float("inf")).amax(dim=1)
    ratio = peak / scale
    worst = int(ratio.argmax())
    if not float(ratio[worst]) > factor:
        return None
    at = int(e[worst, 1:].abs().nan_to_num(nan=float("inf")).argmax()) + 2
    return (
        f"WARNING: the chain blew up: chain {worst}'s minibatch energy grew from {_fmt(float(e[worst, 0]))} at "
        f"iteration 1 to {_fmt(float(e[worst, at - 1]))} at iteration {at} ({float(ratio[worst]):.3g} times; "
        f"the run loop warns past {factor:g}): the step size is too large for this target, and the R-hat, ESS "
        f"and predictive scores below describe a divergence, not the posterior"
    )


def diagnose_run(
    run_dir,
    out_dir=None,
    *,
    num_params: int = 8,
    seed: int = 0,
    plots: bool = True,
    energy=None,
    held_out=None,
) -> str:
    """Load ``structmc.load_chain(run_dir)``, return a printable report and write plots.

    A run that stopped on NaN/Inf or a blow-up (``diverged.json``) is reported with its
    message and iteration; a missing or corrupted chunk is an error naming the file. The
    report gives the run settings, step size and energy, the distribution over *all*
    parameters of rank-normalised split R-hat, bulk/tail ESS and Sokal IAC (vectorised, so
    fine for 10^5-10^6 parameters), and a :func:`summary` table of ``num_params`` parameters
    (half with the largest posterior variance, half uniformly at random with ``seed``).
    With ``energy`` (the run's model) and ``held_out`` inputs, the report adds function-space
    mixing: R-hat and ESS of the predictive on held-out points (:func:`.health.function_space`),
    which a network's weight-space symmetries do not spoil. An energy trace that has not settled
    after burn-in and a stuck Metropolis chain are warned about (:mod:`.health`).
    Plots (trace, autocorrelation, pair, energy vs iteration and time, step size) go to
    ``out_dir`` (default ``run_dir/diagnostics``) with ``summary.txt``; without matplotlib they
    are skipped and the report says so.
    """
    from ..storage import RunFolder, load_chain

    run_dir = Path(run_dir)
    chain = load_chain(run_dir)  # a missing, truncated or altered chunk is an error naming it
    diverged = RunFolder(run_dir).diverged()
    out = Path(out_dir) if out_dir is not None else run_dir / "diagnostics"
    C, D, P = chain.num_chains, chain.num_draws, chain.dim
    cfg = chain.config or {}
    sampler = cfg.get("sampler", {})
    lines = [
        f"structmc diagnostics: {run_dir}",
        f"chain: {C} chains x {D} draws, {P} parameters"
        + (f"; sampler {sampler.get('sampler', sampler)}" if sampler else "")
        + (f"; gradient {cfg['gradient']}" if cfg.get("gradient") else ""),
    ]
    merged = cfg.get("merged_from")
    if isinstance(merged, dict):  # structmc sample --executor: independent chains, each in its own folder
        lines.append(
            f"merged from {merged.get('num_chains', C)} independent chains (each with its own seed, "
            f"chain_seeds in the config); their run folders: {os.path.normpath(run_dir / str(merged.get('chains', '?')))}"
        )
    if diverged is not None:
        lines.append(f"DIVERGED at iteration {diverged.get('step')}: {diverged.get('message')} (the draws end there)")
    info = chain.info or {}
    # the records after burn-in: from the first kept draw's iteration (burn_in + thin) on
    burn = max(0, int(chain.draw_steps[0]) - 1) if D else 0
    if D:
        ds = chain.draw_steps
        lines.append(f"draws kept at iterations {int(ds[0])}..{int(ds[-1])}")
    if "time" in info and info["time"].numel():
        # [S], or [C, S] for chains run apart (merged): the slowest chain's time
        S, T = info["time"].shape[-1], float(info["time"].reshape(-1, info["time"].shape[-1])[:, -1].max())
        per = " (the slowest chain)" if info["time"].dim() > 1 and info["time"].shape[0] > 1 else ""
        lines.append(
            f"iterations run: {S}, sampling time {T:.3g} s{per} ({S / T:.4g} it/s)" if T > 0 else f"iterations run: {S}"
        )
    if "lr" in info and info["lr"].numel():
        lines.append(f"step size: first {_fmt(float(info['lr'][0]))}, last {_fmt(float(info['lr'][-1]))}")
    if "energy" in info and info["energy"].numel():
        e = info["energy"]
        tail = e[:, -max(1, e.shape[1] // 10) :]
        lines.append(
            "minibatch energy, mean of the last 10% of iterations per chain: "
            + ", ".join(_fmt(float(v)) for v in tail.nanmean(dim=1))
        )
        blowup = blowup_note(e, P)
        if blowup:
            lines.append(blowup)
        settle = stationarity_note(e, burn)
        if settle:
            lines.append(f"WARNING: {settle}")
    if "accept" in info and info["accept"].numel():
        stuck = stuck_note(info["accept"], burn)
        if stuck:
            lines.append(f"WARNING: {stuck}")

    if D < 4:
        lines.append("too few draws (< 4) for ESS / R-hat")
        text = "\n".join(lines)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.txt").write_text(text + "\n")
        return text

    x = chain.samples
    m = mixing(x)
    r, eb, et, tau = m["rhat"], m["ess_bulk"], m["ess_tail"], m["iac"]
    lines.append(
        f"mixing over all {P} parameters (rank-normalised split R-hat and ESS of Vehtari et al. 2021; "
        "IAC: Sokal window, c = 5):"
    )
    lines += [_dist("R-hat", r), _dist("ESS bulk", eb), _dist("ESS tail", et), _dist("IAC", tau)]
    lines.append(f"  note: {WEIGHT_SPACE_NOTE}")
    if energy is not None and held_out is not None:
        from .health import function_space_lines

        lines += function_space_lines(energy, chain, held_out)
    finite = torch.isfinite(r)
    if bool(finite.any()):
        rf = r[finite]
        lines.append(
            f"  R-hat > 1.01: {float((rf > 1.01).double().mean()) * 100:.1f}% of parameters, "
            f"> 1.1: {float((rf > 1.1).double().mean()) * 100:.1f}%"
        )
    k = min(num_params, P)
    top = select_top_variance(x, (k + 1) // 2)
    taken = set(top.tolist())
    rest = torch.tensor(
        [i for i in select_random(P, k, seed).tolist() if i not in taken][: k - top.numel()], dtype=torch.long
    )
    idx = torch.cat([top, rest])
    table = summary(chain, idx)
    lines.append(f"selected parameters ({top.numel()} of largest variance, {rest.numel()} at random, seed {seed}):")
    lines.append(str(table))

    written = []
    if plots:
        try:
            from . import plots as P_
            from .plots import save_figure

            out.mkdir(parents=True, exist_ok=True)
            sel = idx[: min(6, idx.numel())]
            written.append(save_figure(P_.plot_trace(chain, sel), out / "trace.png"))
            written.append(save_figure(P_.plot_autocorr(chain, sel, max_lag=min(100, D - 1)), out / "autocorr.png"))
            written.append(save_figure(P_.plot_pair(chain, idx[: min(4, idx.numel())]), out / "pair.png"))
            if "energy" in info and info["energy"].numel():
                S = info["energy"].shape[1]
                written.append(
                    save_figure(
                        P_.plot_metric_vs_steps(torch.arange(1, S + 1), info["energy"], ylabel="minibatch energy"),
                        out / "energy_vs_steps.png",
                    )
                )
                if "time" in info and info["time"].numel() == S:
                    written.append(
                        save_figure(
                            P_.plot_metric_vs_time(info["time"], info["energy"], ylabel="minibatch energy"),
                            out / "energy_vs_time.png",
                        )
                    )
            if "lr" in info and info["lr"].numel():
                written.append(
                    save_figure(
                        P_.plot_metric_vs_steps(
                            torch.arange(1, info["lr"].numel() + 1),
                            info["lr"],
                            ylabel="step size",
                            logy=bool((info["lr"] > 0).all()),
                        ),
                        out / "step_size.png",
                    )
                )
            if "accept" in info and info["accept"].numel():
                acc = info["accept"].double()
                labels = None
                if acc.dim() == 3 and acc.shape[1] <= 40:  # [C, blocks, S]: per block, pooled over chains
                    rates = acc.mean(dim=(0, 2))
                    labels = [f"block {b}" for b in range(rates.numel())]
                elif acc.dim() == 3:  # many blocks: per chain
                    rates = acc.mean(dim=(1, 2))
                else:
                    rates = acc.mean(dim=-1) if acc.dim() > 1 else acc.mean().reshape(1)
                written.append(save_figure(P_.plot_acceptance(rates, labels), out / "acceptance.png"))
        except ImportError as err:
            lines.append(f"plots skipped: {err}")
    if written:
        lines.append(f"plots written to {out}: " + ", ".join(p.name for p in written))
    text = "\n".join(lines)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.txt").write_text(text + "\n")
    return text
