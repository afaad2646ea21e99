"""Diagnostic plots (matplotlib, optional extra ``plot``; imported inside each function).

Every function returns the ``matplotlib.figure.Figure``; save it with ``fig.savefig(path)``
or :func:`save_figure`. Figures are created with ``matplotlib.figure.Figure`` (not pyplot), so
nothing depends on the interactive backend and figures never pile up in pyplot's registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from .autocorr import autocorrelation
from .summary import _is_chain, select_draws


def _figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] | None = None, **kw):
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'structmc[plot]'") from err
    fig = Figure(figsize=size or (4.5 * ncols, 2.4 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def _np(t: Tensor):
    return t.detach().to("cpu", torch.float64).numpy()


def _x_axis(obj, D: int):
    if _is_chain(obj) and getattr(obj, "draw_steps", None) is not None and len(obj.draw_steps) == D:
        return _np(obj.draw_steps), "iteration"
    return list(range(D)), "draw"


def plot_trace(obj, params=None, *, max_params: int = 6, labels: Sequence[str] | None = None):
    """Trace (left, one line per chain) and per-chain histogram (right) of selected parameters.
    ``obj``: Chain or ``[C, D, ...]`` tensor; ``params`` as in :func:`summary`; at most
    ``max_params`` rows (the first; a warning says when ``params`` selects more)."""
    x, lab = select_draws(obj, params, max_default=max_params, labels=labels)
    C, D, k = x.shape
    fig, axes = _figure(k, 2, size=(10, 1.9 * k + 0.6), width_ratios=[3, 1])
    xs, xlabel = _x_axis(obj, D)
    for j in range(k):
        for c in range(C):
            v = _np(x[c, :, j])
            axes[j, 0].plot(xs, v, lw=0.7, alpha=0.8, label=f"chain {c}")
            axes[j, 1].hist(v, bins=30, histtype="step", density=True)
        axes[j, 0].set_ylabel(lab[j], fontsize=8)
    axes[-1, 0].set_xlabel(xlabel)
    if C > 1:
        axes[0, 0].legend(fontsize=7, ncol=min(C, 4), loc="upper right")
    fig.suptitle("trace and marginal histograms")
    return fig


def plot_autocorr(obj, params=None, *, max_lag: int = 100, max_params: int = 6, labels: Sequence[str] | None = None):
    """Chain-averaged autocorrelation ``ρ̄(k)``, k = 0..max_lag, one line per parameter."""
    x, lab = select_draws(obj, params, max_default=max_params, labels=labels)
    rho = autocorrelation(x, max_lag=max_lag).mean(dim=0)  # [L, k]
    fig, axes = _figure(1, 1, size=(6, 3.5))
    ax = axes[0, 0]
    lags = list(range(rho.shape[0]))
    for j in range(rho.shape[1]):
        ax.plot(lags, _np(rho[:, j]), lw=1, label=lab[j])
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xlabel("lag")
    ax.set_ylabel("autocorrelation")
    ax.legend(fontsize=7)
    return fig


def plot_pair(obj, params=None, *, max_params: int = 4, labels: Sequence[str] | None = None, max_points: int = 2000):
    """Pair plot of selected parameters: scatter below the diagonal (coloured by chain, thinned
    to ``max_points`` per chain), histograms on it."""
    x, lab = select_draws(obj, params, max_default=max_params, labels=labels)
    C, D, k = x.shape
    step = max(1, D // max_points)
    x = x[:, ::step]
    fig, axes = _figure(k, k, size=(2.2 * k + 0.6, 2.2 * k + 0.6))
    for i in range(k):
        for j in range(k):
            ax = axes[i, j]
            if i == j:
                ax.hist(_np(x[:, :, i].reshape(-1)), bins=30, color="0.5")
            elif i > j:
                for c in range(C):
                    ax.scatter(_np(x[c, :, j]), _np(x[c, :, i]), s=2, alpha=0.4)
            else:
                ax.set_axis_off()
            if i == k - 1:
                ax.set_xlabel(lab[j], fontsize=8)
            if j == 0 and i > 0:
                ax.set_ylabel(lab[i], fontsize=8)
    return fig


def _series(values) -> dict[str, Tensor]:
    if isinstance(values, Mapping):
        return {str(k): torch.as_tensor(v) for k, v in values.items()}
    v = torch.as_tensor(values)
    if v.dim() == 2:
        return {f"chain {c}": v[c] for c in range(v.shape[0])}
    return {"": v.reshape(-1)}


def plot_metric(
    values,
    x=None,
    *,
    xlabel: str = "iteration",
    ylabel: str = "metric",
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
):
    """Generic curve(s): ``values`` is ``[S]``, ``[C, S]`` (one line per chain) or
    ``{label: [S]}``; ``x`` is ``[S]`` (default 1..S) or ``{label: [S]}``."""
    series = _series(values)
    fig, axes = _figure(1, 1, size=(6, 3.5))
    ax = axes[0, 0]
    for name, v in series.items():
        xv = x.get(name) if isinstance(x, Mapping) else x
        xv = torch.arange(1, v.numel() + 1) if xv is None else torch.as_tensor(xv)
        ax.plot(_np(xv.reshape(-1)), _np(v.reshape(-1).to(torch.float64)), lw=1, label=name or None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if any(series):
        ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return fig


def plot_metric_vs_time(times, values, *, ylabel: str = "metric", logy: bool = False):
    """Metric against wall-clock seconds (e.g. ``chain.info["time"]`` at the draw steps)."""
    return plot_metric(values, times, xlabel="time (s)", ylabel=ylabel, logy=logy)


def plot_metric_vs_steps(steps, values, *, ylabel: str = "metric", logy: bool = False):
    """Metric against sampler iterations (e.g. ``chain.draw_steps``)."""
    return plot_metric(values, steps, xlabel="iteration", ylabel=ylabel, logy=logy)


def plot_ksd_curve(ksd_values, sizes=None, *, xlabel: str = "number of samples"):
    """KSD against the number of samples (log-log), e.g. the output of :func:`ksd_curve`;
    ``ksd_values`` may be ``{label: [m]}`` to compare samplers. A ``1/√n`` guide is drawn:
    i.i.d. exact samples follow it."""
    fig = plot_metric(ksd_values, sizes, xlabel=xlabel, ylabel="KSD", logx=True, logy=True)
    ax = fig.axes[0]
    first = next(iter(_series(ksd_values).values())).reshape(-1)
    n = first.numel()
    if n > 1:
        xs = (
            torch.arange(1, n + 1, dtype=torch.float64)
            if sizes is None or isinstance(sizes, Mapping)
            else torch.as_tensor(sizes, dtype=torch.float64).reshape(-1)
        )
        ref = float(first[0]) * (xs / xs[0]) ** -0.5
        ax.plot(_np(xs), _np(ref), "k:", lw=0.8, label="∝ 1/√n")
        ax.legend(fontsize=7)
    return fig


def plot_acceptance(rates, labels: Sequence[str] | None = None, *, ylabel: str = "acceptance rate"):
    """Bar chart of acceptance rates (``[C]`` per chain, or ``{label: rate}``), in [0, 1]."""
    if isinstance(rates, Mapping):
        labels = list(map(str, rates))
        vals = [float(v) for v in rates.values()]
    else:
        vals = [float(v) for v in torch.as_tensor(rates).reshape(-1)]
        labels = list(labels) if labels is not None else [f"chain {i}" for i in range(len(vals))]
    fig, axes = _figure(1, 1, size=(max(3.0, 0.6 * len(vals) + 1.5), 3.2))
    ax = axes[0, 0]
    ax.bar(range(len(vals)), vals, color="tab:blue")
    ax.set_xticks(range(len(vals)), labels, rotation=45 if len(vals) > 6 else 0, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    return fig


def plot_calibration(probs, labels=None, *, num_bins: int = 10, label: str | Sequence[str] | None = None):
    """Reliability diagram: per equal-width confidence bin, accuracy against confidence (bars,
    with the gap between each bin's accuracy and its mean confidence, the diagonal, hatched)
    above a histogram of confidences; ECE and MCE in the legend. ``probs``: ``[n, K]`` /
    binary ``[n]``, or a result of :func:`structmc.evaluate` (then ``labels`` are the data's
    targets); a list of them draws one line each (compare a point estimate and the posterior
    predictive)."""
    import numpy as np

    from .calibration import calibration_bins, ece, mce

    many = isinstance(probs, (list, tuple))
    items = list(probs) if many else [probs]
    names = list(label) if isinstance(label, (list, tuple)) else [label] * len(items)
    fig, axes = _figure(2, 1, size=(4.6, 5.2), height_ratios=[3, 1], sharex=True)
    top, bottom = axes[0, 0], axes[1, 0]
    top.plot([0, 1], [0, 1], color="0.5", ls="--", lw=0.8, label="perfect calibration")
    for i, (item, name) in enumerate(zip(items, names)):
        p = item["probs"] if isinstance(item, Mapping) else item
        if labels is None:
            raise ValueError("plot_calibration needs the labels")
        t = calibration_bins(p, labels, num_bins)
        edges, count = _np(t["edges"]), _np(t["count"])
        mid = 0.5 * (edges[1:] + edges[:-1])
        keep = count > 0
        width = (edges[1] - edges[0]) * (0.9 if not many else 0.9 / len(items))
        shift = 0.0 if not many else (i - (len(items) - 1) / 2) * width
        colour = f"C{i}"
        e, m = float(ece(p, labels, num_bins)), float(mce(p, labels, num_bins))
        tag = name or ("model" if not many else f"model {i}")
        top.bar(
            mid[keep] + shift,
            _np(t["accuracy"])[keep],
            width=width,
            color=colour,
            alpha=0.75,
            edgecolor="k",
            lw=0.3,
            label=f"{tag}: ECE {100 * e:.2f}%, MCE {100 * m:.1f}%",
        )
        # the gap |accuracy - confidence| of each non-empty bin, shaded across its bar (Guo et al.
        # 2017, Fig. 1): one fill_between, bins separated by unfilled points (where=False)
        acc, conf = _np(t["accuracy"])[keep], _np(t["confidence"])[keep]
        left = mid[keep] + shift - width / 2
        xs = np.stack([left, left + width, left + width], 1).ravel()
        top.fill_between(
            xs,
            np.repeat(acc, 3),
            np.repeat(conf, 3),
            where=np.tile([True, True, False], len(acc)),
            facecolor="none",
            edgecolor="r" if not many else colour,
            hatch="//",
            lw=0.0,
            alpha=0.8,
            label="gap to the diagonal" if i == 0 else None,
        )
        bottom.bar(mid + shift, count / max(count.sum(), 1), width=width, color=colour, alpha=0.75)
    top.set_ylabel("accuracy")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    handles, names = top.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda j: names[j] == "gap to the diagonal")  # the gap's entry last
    top.legend([handles[j] for j in order], [names[j] for j in order], fontsize=7, loc="upper left")
    bottom.set_xlabel("confidence (top-label probability)")
    bottom.set_ylabel("fraction")
    fig.suptitle("reliability diagram", fontsize=10)
    return fig


def plot_predictive(
    x,
    mean=None,
    std=None,
    *,
    x_train=None,
    y_train=None,
    x_test=None,
    y_test=None,
    levels: Sequence[float] = (0.5, 0.9),
    draws=None,
    ax_labels: tuple[str, str] = ("x", "y"),
):
    """1-D regression: the predictive mean with central bands at ``levels`` (Gaussian bands from
    the predictive standard deviation), optional function draws ``[S, n]`` and the data.
    ``mean``/``std`` may be given as a result of :func:`structmc.evaluate` (its ``"mean"`` and
    ``"std"``) in ``mean``. ``x`` is ``[n]`` (sorted for the band)."""
    from statistics import NormalDist

    if isinstance(mean, Mapping):
        mean, std = mean["mean"], mean["std"]
    if mean is None or std is None:
        raise ValueError("plot_predictive needs the predictive mean and standard deviation")
    xs = _np(torch.as_tensor(x).reshape(-1))
    order = xs.argsort()
    xs, m, s = xs[order], _np(torch.as_tensor(mean).reshape(-1))[order], _np(torch.as_tensor(std).reshape(-1))[order]
    fig, axes = _figure(1, 1, size=(6.4, 3.8))
    ax = axes[0, 0]
    for i, level in enumerate(sorted(levels, reverse=True)):
        z = NormalDist().inv_cdf(0.5 + level / 2)
        ax.fill_between(
            xs,
            m - z * s,
            m + z * s,
            color="C0",
            alpha=0.15 + 0.15 * i,
            lw=0,
            label=f"{100 * level:g}% predictive interval",
        )
    if draws is not None:
        d = _np(torch.as_tensor(draws))
        for row in d[: min(len(d), 20)]:
            ax.plot(xs, row[order], color="C0", lw=0.5, alpha=0.35)
    ax.plot(xs, m, color="C0", lw=1.6, label="predictive mean")
    if x_train is not None and y_train is not None:
        ax.scatter(
            _np(torch.as_tensor(x_train).reshape(-1)),
            _np(torch.as_tensor(y_train).reshape(-1)),
            s=10,
            color="k",
            zorder=3,
            label="training data",
        )
    if x_test is not None and y_test is not None:
        ax.scatter(
            _np(torch.as_tensor(x_test).reshape(-1)),
            _np(torch.as_tensor(y_test).reshape(-1)),
            s=10,
            color="C3",
            marker="x",
            zorder=3,
            label="test data",
        )
    ax.set_xlabel(ax_labels[0])
    ax.set_ylabel(ax_labels[1])
    ax.legend(fontsize=7, loc="best")
    return fig
