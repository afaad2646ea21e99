"""Issue 36, items 8-10 and 21: numbers that were silently wrong (NaN inputs or draws in
``evaluate`` / ``predictive``, a bfloat16 chain whose gradient steps round away) and errors
that came from inside torch or after compute (a per-example likelihood, the input width or
dtype in ``predictive`` / ``evaluate``, ``gradient="cv"``, ``num_data=2**70``): each refused
before compute with a message naming the argument."""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.run import Budget


def _setup(dtype=torch.float32, num_data=None, likelihood="categorical"):
    torch.manual_seed(0)
    X = torch.randn(32, 3, dtype=dtype)
    y = (X[:, 0] > 0).long()
    module = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 2)).to(dtype)
    energy = sm.ModuleEnergy(module, likelihood, prior_std=1.0, num_data=num_data)
    return energy, X, y


@pytest.fixture(scope="module")
def fitted():
    energy, X, y = _setup()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 6, data=(X, y), progress=False)
    return energy, chain, X, y


# -- item 8: silent numbers -----------------------------------------------------------------
def test_evaluate_refuses_nan_input_rows(fitted):
    energy, chain, X, y = fitted
    Xn = X.clone()
    Xn[3:5] = float("nan")
    with pytest.raises(ValueError, match=r"evaluate: input 0 has NaN or Inf values in 2 row\(s\) \(the first: row 3\)"):
        sm.evaluate(energy, chain, (Xn, y))


def test_evaluate_refuses_nan_rows_of_a_dataset(fitted):
    energy, chain, X, y = fitted
    Xn = X.clone()
    Xn[20] = float("inf")

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(y)

        def __getitem__(self, i):
            return Xn[i], y[i]

    with pytest.raises(ValueError, match=r"NaN or Inf values in 1 row\(s\) \(the first: row 20\)"):
        sm.evaluate(energy, chain, Rows(), batch_size=8)


@pytest.mark.parametrize("who", ["predictive", "evaluate"])
def test_nan_draws_are_refused_naming_the_draws(fitted, who):
    energy, chain, X, y = fitted
    bad = chain.samples.clone()
    bad[0, 4, 1] = float("nan")
    with pytest.raises(ValueError, match=r"draws: 1 of 6 draws hold NaN or Inf \(the first: chain 0, draw 4\)"):
        sm.predictive(energy, bad, X) if who == "predictive" else sm.evaluate(energy, bad, (X, y))


def test_predictive_refuses_nan_predictions_from_finite_draws(fitted):
    energy, chain, X, y = fitted
    far = chain.samples * 1e30  # finite draws whose logits overflow to ±inf (softmax: NaN)
    with pytest.raises(ValueError, match=r"predictive: the model's predictions are NaN or Inf for \d+ input"):
        sm.predictive(energy, far, X)


def test_bfloat16_steps_below_resolution_warn():
    from structmc.energy_checks import warn_below_resolution

    energy, X, y = _setup(torch.bfloat16, num_data=32)
    theta = energy.initial_position().unsqueeze(0)
    with pytest.warns(UserWarning, match=r"bfloat16.*rounded away"):
        warn_below_resolution(energy, sm.SGLD(1e-5), theta, (X, y))
    with warnings.catch_warnings():  # float32: silent; a step that moves bfloat16: silent
        warnings.simplefilter("error")
        energy32, X32, y32 = _setup(torch.float32, num_data=32)
        warn_below_resolution(energy32, sm.SGLD(1e-5), energy32.initial_position().unsqueeze(0), (X32, y32))
        warn_below_resolution(energy, sm.SGLD(1e-1), theta, (X, y))


# -- item 9: errors from inside torch ----------------------------------------------------------
def test_a_per_example_likelihood_is_refused_naming_it():
    def per_example(out, y):
        return -nn.functional.cross_entropy(out, y, reduction="none")

    energy, X, y = _setup(likelihood=per_example)
    with pytest.raises(
        ValueError, match=r"likelihood 'test_a_per_example.*per_example' returned a tensor of shape \[4\].*one scalar"
    ):
        sm.sample(energy, None, sm.SGLD(1e-3), 3, data=(X, y), progress=False)


@pytest.mark.parametrize("who", ["predictive", "evaluate"])
def test_wrong_input_width_is_refused_naming_the_first_layer(fitted, who):
    energy, chain, X, y = fitted
    wide = torch.randn(5, 4)
    with pytest.raises(ValueError, match=rf"{who}: the model cannot run on the inputs.*expects in_features=3"):
        sm.predictive(energy, chain, wide) if who == "predictive" else sm.evaluate(energy, chain, (wide, y[:5]))


@pytest.mark.parametrize("who", ["predictive", "evaluate"])
def test_float64_inputs_on_a_float32_model_are_refused(fitted, who):
    energy, chain, X, y = fitted
    with pytest.raises(ValueError, match=rf"{who}: input 0 has dtype torch.float64 .* x.to\(torch.float32\)"):
        sm.predictive(energy, chain, X.double()) if who == "predictive" else sm.evaluate(energy, chain, (X.double(), y))


def test_evaluate_checks_labels_before_compute(fitted):
    energy, chain, X, y = fitted
    with pytest.raises(ValueError, match=r"categorical labels"):
        sm.evaluate(energy, chain, (X, y + 5))


# -- item 10: refused before compute, naming the argument -----------------------------------------
def test_gradient_cv_string_names_control_variate(tmp_path):
    energy, X, y = _setup()
    t0 = time.perf_counter()
    with pytest.raises(TypeError, match=r"gradient='cv'.*ControlVariate\(centre\)"):
        sm.sample(energy, None, sm.SGLD(1e-3), 10**6, data=(X, y), gradient="cv", out_dir=tmp_path / "r")
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "r").exists()


def test_gibbs_partition_of_the_wrong_size_is_refused_before_compute():
    from structmc.gibbs import MetropolisWithinGibbs
    from structmc.partitions import round_robin

    energy, X, y = _setup()
    with pytest.raises(ValueError, match=rf"partition covers {energy.space.dim + 3} parameters but the model has"):
        sm.sample(energy, None, MetropolisWithinGibbs(round_robin(energy.space.dim + 3, 2)), 10**6, data=(X, y))


@pytest.mark.parametrize("kw", [{"seconds": -1}, {"seconds": float("nan")}, {"iterations": -1}, {"grad_evals": 1.5}])
def test_budget_refuses_bad_limits_when_built(kw):
    with pytest.raises(ValueError, match=rf"Budget.{next(iter(kw))}"):
        Budget(**kw)


def test_num_data_beyond_2_53_is_refused_before_compute():
    energy, X, y = _setup(num_data=2**70)
    with pytest.raises(ValueError, match=r"num_data = 1180591620717411303424 exceeds 2\*\*53"):
        sm.sample(energy, None, sm.SGLD(1e-3), 10**6, data=(X, y), progress=False)


# -- item 12: -0.0 and +0.0 are the same data on resume ---------------------------------------------
def test_resume_accepts_data_differing_only_in_the_sign_of_zero(tmp_path):
    energy, X, y = _setup()
    X = X.clone()
    X[:4, 1] = 0.0
    kw = dict(data=(X, y), batch_size=8, out_dir=tmp_path / "run", progress=False)
    sm.sample(energy, None, sm.SGLD(1e-3), 6, **kw)
    negated = X.clone()
    negated[:4, 1] = -0.0
    assert not torch.equal(negated.view(torch.int32), X.view(torch.int32))  # other bytes, same numbers
    resumed = sm.sample(energy, None, sm.SGLD(1e-3), 10, **{**kw, "data": (negated, y)}, resume=True)
    assert resumed.num_draws == 10


def test_tensor_digest_is_unchanged_without_negative_zeros():
    from structmc.fingerprint import tensor_digest

    t = torch.linspace(-1, 1, 7)
    assert tensor_digest(t) == tensor_digest(t.clone())
    assert tensor_digest(torch.tensor([0.0, 1.0])) == tensor_digest(torch.tensor([-0.0, 1.0]))
    assert tensor_digest(torch.tensor([0.0, 1.0])) != tensor_digest(torch.tensor([0.0, -1.0]))


# -- item 21: summary takes the labels it prints; plot_trace keeps max_params with params ----------
def test_summary_takes_the_labels_it_prints(fitted):
    from structmc.diagnostics import summary

    _, chain, _, _ = fitted
    table = summary(chain)
    for label in ("2.bias[0]", "0.weight[3,1]", "2.weight[1,5]"):
        assert label in table.labels
        one = summary(chain, params=[label])
        assert one.labels == [label]
        assert torch.equal(one["mean"], table["mean"][table.labels.index(label)].reshape(1))
    both = summary(chain, params=["2.bias[1]", "0.bias"])  # a label and a name together
    assert both.labels == ["2.bias[1]"] + [f"0.bias[{i}]" for i in range(6)]
    with pytest.raises(KeyError, match=r"2.bias\[2\].*index 2 is outside 2.bias's shape \[2\]"):
        summary(chain, params=["2.bias[2]"])


def test_plot_trace_keeps_max_params_when_params_are_given(fitted):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from structmc.diagnostics import plot_trace

    _, chain, _, _ = fitted
    with pytest.warns(UserWarning, match=r"params selects 18 rows: the first 4 are plotted \(max_params=4\)"):
        fig = plot_trace(chain, params=["0.weight"], max_params=4)
    assert len(fig.axes) == 4 * 2
    plt.close(fig)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plot_trace(chain, params=["2.bias"], max_params=4)  # 2 rows: under the cap, no warning
    assert len(fig.axes) == 2 * 2
    plt.close(fig)
