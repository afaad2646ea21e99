"""Plots (Agg backend), ArviZ export and the ``diagnose_run`` report of a saved run."""

import numpy as np
import pytest
import torch

from structmc import Chain, ParamSpace, save_chain
from structmc.diagnostics import diagnose_run, ess_bulk, ksd_curve, rhat, to_arviz

from .conftest import ar1


def _chain(C=2, D=120, thin=5, seed=0):
    space = ParamSpace([("w", (3, 2)), ("b", (2,)), ("log_sigma", ())])
    x = ar1(C, D, space.dim, 0.6, seed=seed)
    S = D * thin
    steps = torch.arange(1, D + 1) * thin
    g = torch.Generator().manual_seed(seed)
    info = {
        "lr": torch.full((S,), 1e-3, dtype=torch.float64),
        "energy": 100 + torch.randn(C, S, generator=g, dtype=torch.float64),
        "time": torch.linspace(0.01, 2.0, S, dtype=torch.float64),
        "accept": (torch.rand(C, S, generator=g) < 0.7).double(),
    }
    config = {"sampler": {"sampler": "sgld", "lr": 1e-3}, "gradient": {"estimator": "minibatch"}}
    return Chain(x, space, steps, info, config)


def test_plots_write_files(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installable")
    from matplotlib.figure import Figure

    from structmc.diagnostics import (
        plot_acceptance,
        plot_autocorr,
        plot_ksd_curve,
        plot_metric_vs_steps,
        plot_metric_vs_time,
        plot_pair,
        plot_trace,
        save_figure,
    )

    chain = _chain()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 2, generator=g)
    curve = ksd_curve(x, -x)
    figs = {
        "trace": plot_trace(chain, ["w"]),
        "trace_tensor": plot_trace(torch.rand(2, 30, 3, generator=g)),
        "autocorr": plot_autocorr(chain, [0, 7], max_lag=30),
        "pair": plot_pair(chain, ["b", "log_sigma"]),
        "vs_time": plot_metric_vs_time(chain.info["time"], chain.info["energy"], ylabel="energy"),
        "vs_steps": plot_metric_vs_steps(chain.draw_steps, {"acc": torch.rand(120, generator=g)}, ylabel="accuracy"),
        "ksd": plot_ksd_curve({"sgld": curve, "shifted": ksd_curve(x + 1, -x - 1)}),
        "ksd_sizes": plot_ksd_curve(curve[[9, 99, 299]], sizes=[10, 100, 300]),
        "accept": plot_acceptance(chain.info["accept"].mean(1)),
        "accept_dict": plot_acceptance({"sgld": 0.4, "mala": 0.57}),
    }
    for name, fig in figs.items():
        assert isinstance(fig, Figure)
        path = save_figure(fig, tmp_path / "sub" / f"{name}.png")
        assert path.exists() and path.stat().st_size > 2000, name


def test_calibration_and_predictive_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installable")
    from structmc.diagnostics import plot_calibration, plot_predictive, save_figure

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(2 * torch.randn(400, 3, generator=g), -1)
    y = torch.randint(0, 3, (400,), generator=g)
    x = torch.linspace(-2, 2, 50)
    figs = {
        "one": plot_calibration(probs, y),
        "two": plot_calibration([probs, {"probs": probs.sqrt()}], y, label=["map", "bayes"]),
        "binary": plot_calibration(probs[:, 0], (y == 1).long()),
        "band": plot_predictive(
            x,
            {"mean": x.sin(), "std": 0.1 + x.abs() / 10},
            x_train=x[::5],
            y_train=x[::5].sin(),
            draws=torch.randn(5, 50, generator=g),
        ),
    }
    for name, fig in figs.items():
        assert save_figure(fig, tmp_path / f"{name}.png").stat().st_size > 5000, name
    assert "ECE" in figs["two"].axes[0].get_legend().get_texts()[1].get_text()
    with pytest.raises(ValueError, match="needs the labels"):
        plot_calibration(probs)
    with pytest.raises(ValueError, match="mean and standard deviation"):
        plot_predictive(x)


def test_to_arviz():
    az = pytest.importorskip("arviz", reason="arviz not installable")
    chain = _chain()
    idata = to_arviz(chain)
    post = idata.posterior
    assert set(post.data_vars) == {"w", "b", "log_sigma"}
    assert post["w"].dims == ("chain", "draw", "w_dim_0", "w_dim_1")
    assert post["log_sigma"].dims == ("chain", "draw")
    np.testing.assert_array_equal(post["w"].values, chain["w"].numpy())
    np.testing.assert_array_equal(post["draw"].values, chain.draw_steps.numpy())
    np.testing.assert_allclose(az.ess(idata, var_names=["b"])["b"].values, ess_bulk(chain["b"]).numpy(), rtol=1e-10)
    assert idata.sample_stats["minibatch_energy"].shape == (2, 120)
    np.testing.assert_array_equal(
        idata.sample_stats["minibatch_energy"].values[:, 0], chain.info["energy"][:, 4].numpy()
    )
    only = to_arviz(chain, var_names=["w*"])
    assert set(only.posterior.data_vars) == {"w"}
    with pytest.raises(KeyError):
        to_arviz(chain, var_names=["nope"])


def test_diagnose_run(tmp_path):
    chain = _chain(C=3, D=200)
    chain.samples[2, :, 0] += 3.0  # one chain stuck elsewhere for w[0,0]
    run = tmp_path / "run"
    save_chain(chain, run)
    text = diagnose_run(run)
    assert "3 chains x 200 draws, 9 parameters" in text
    assert "sampler sgld" in text and "step size" in text
    assert "R-hat" in text and "ESS bulk" in text and "IAC" in text
    r = rhat(chain.samples)
    assert f"max {float(r.max()):.4g}" in text  # the stuck chain shows up as the worst R-hat
    assert "R-hat > 1.01:" in text
    assert "w[0,0]" in text  # largest variance, so it is in the table
    out = run / "diagnostics"
    assert (out / "summary.txt").read_text().strip() == text.strip()
    if pytest.importorskip("matplotlib", reason="matplotlib not installable"):
        for name in ("trace", "autocorr", "pair", "energy_vs_steps", "energy_vs_time", "step_size", "acceptance"):
            assert (out / f"{name}.png").stat().st_size > 2000, name
        assert "plots written to" in text
    other = tmp_path / "elsewhere"
    text2 = diagnose_run(run, out_dir=other, plots=False)
    assert (other / "summary.txt").exists() and not (other / "trace.png").exists()
    assert text2.splitlines()[:3] == text.splitlines()[:3]


def test_diagnose_run_too_few_draws(tmp_path):
    chain = _chain(D=3)
    save_chain(chain, tmp_path)
    text = diagnose_run(tmp_path)
    assert "too few draws" in text


def test_to_arviz_uses_the_1x_group_mapping(monkeypatch):
    """ArviZ 1.x (not installable in this environment's package index, so a stand-in module
    records the call): one {group: {variable: array}} mapping, coordinates as in 0.x."""
    import sys
    import types

    calls = []
    fake = types.SimpleNamespace(__version__="1.2.0", from_dict=lambda *a, **kw: calls.append((a, kw)) or "tree")
    monkeypatch.setitem(sys.modules, "arviz", fake)
    chain = _chain()
    assert to_arviz(chain, ["w"]) == "tree"
    ((args, kw),) = calls
    groups = args[0]
    assert set(groups) == {"posterior", "sample_stats"} and set(groups["posterior"]) == {"w"}
    assert groups["posterior"]["w"].shape == (2, 120, 3, 2) and groups["sample_stats"]["minibatch_energy"].shape == (
        2,
        120,
    )
    assert list(kw["coords"]["draw"]) == list(range(5, 601, 5))


def test_calibration_plot_shades_the_gap_to_the_diagonal():
    """The docstring promises the gap between each bin's accuracy and the diagonal shaded
    (issue 22 §6.10: it was not drawn): one hatched region per non-empty bin, spanning
    accuracy to mean confidence."""
    pytest.importorskip("matplotlib", reason="matplotlib not installable")
    from matplotlib.collections import PolyCollection

    from structmc.diagnostics import plot_calibration
    from structmc.diagnostics.calibration import calibration_bins

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(2 * torch.randn(400, 3, generator=g), -1)
    y = torch.randint(0, 3, (400,), generator=g)
    top = plot_calibration(probs, y).axes[0]
    fills = [c for c in top.collections if isinstance(c, PolyCollection)]
    assert len(fills) == 1
    t = calibration_bins(probs, y)
    keep = t["count"] > 0
    paths = fills[0].get_paths()
    assert len(paths) == int(keep.sum())
    for path, a, c in zip(paths, t["accuracy"][keep].tolist(), t["confidence"][keep].tolist()):
        ys = path.vertices[:, 1]
        assert ys.min() == pytest.approx(min(a, c)) and ys.max() == pytest.approx(max(a, c))
    assert "gap to the diagonal" in [x.get_text() for x in top.get_legend().get_texts()]
