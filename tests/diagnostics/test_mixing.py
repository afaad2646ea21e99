"""Autocorrelation, IAC, ESS and R-hat: reference implementations and AR(1) closed forms.

Closed-form tolerances: each AR(1) test averages the estimator over 256 independent series, so
its standard error (SE) is the empirical SD over series / 16; the tolerance is 4 SE plus a
bound on the estimator's known finite-sample bias (never a fudge factor):

* window bias: sample autocorrelations from n draws with the mean removed are biased by
  about ``−(τ + k ρ_k)/n`` (Priestley 1981, §5.3), so a sum over 2M lags with M ≈ 5τ is off
  by at most ``b_w = (2·5τ·τ + 2 Σ k ρ_k)/n`` (n = length of the chains the estimator uses);
* truncation bias (only for rules stopping at the first negative term/pair): they add the
  first one or two noise-dominated lags with positive selection, at most
  ``b_t = 4 σ_ρ`` with ``σ_ρ = √(τ/N)`` the SD of one autocorrelation estimate from N draws.
"""

import math

import numpy as np
import pytest
import torch

from structmc.diagnostics import (
    autocorrelation,
    autocovariance,
    ess,
    ess_bulk,
    ess_equicorrelation,
    ess_from_correlation,
    ess_mean,
    ess_tail,
    ess_tfp,
    integrated_time,
    mixing,
    rhat,
)

from .conftest import ar1

TAU = 3.0  # (1 + 0.5) / (1 − 0.5)
SUM_K_RHO = 2.0  # Σ_k k 0.5^k


def _bias_window(tau, n, sum_k_rho):
    return (2 * 5 * tau * tau + 2 * sum_k_rho) / n


def _check_mean(values, target, bias, label):
    v = values.double()
    se = float(v.std()) / math.sqrt(v.numel())
    tol = 4 * se + bias
    assert abs(float(v.mean()) - target) < tol, f"{label}: mean {float(v.mean()):.4f} vs {target:.4f} (tol {tol:.4f})"
    return se


# --------------------------------------------------------------------------- references ------


def test_autocorrelation_matches_emcee_function_1d():
    emcee = pytest.importorskip("emcee", reason="emcee not installable")
    x = ar1(3, 700, 4, torch.tensor([0.0, 0.5, 0.9, -0.3]), seed=1)
    rho = autocorrelation(x)
    for c in range(3):
        for j in range(4):
            np.testing.assert_allclose(
                rho[c, :, j].numpy(), emcee.autocorr.function_1d(x[c, :, j].numpy()), rtol=1e-9, atol=1e-12
            )
    acov = autocovariance(x, max_lag=10)
    assert acov.shape == (3, 11, 4)
    xc = x - x.mean(1, keepdim=True)
    direct = (xc[:, 3:] * xc[:, :-3]).sum(1) / x.shape[1]  # lag 3 by definition
    torch.testing.assert_close(acov[:, 3], direct)


def test_sokal_iat_matches_emcee(mixed_bag):
    emcee = pytest.importorskip("emcee", reason="emcee not installable")
    x = mixed_bag[..., :6]  # the AR(1) columns, φ from -0.4 to 0.97
    ref = emcee.autocorr.integrated_time(x.numpy().transpose(1, 0, 2), c=5, tol=0, quiet=True)
    np.testing.assert_allclose(integrated_time(x).numpy(), ref, rtol=1e-10)
    ref_c3 = emcee.autocorr.integrated_time(x.numpy().transpose(1, 0, 2), c=3, tol=0, quiet=True)
    np.testing.assert_allclose(integrated_time(x, c=3).numpy(), ref_c3, rtol=1e-10)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # ArviZ's 0/0 on the constant column
def test_ess_and_rhat_match_arviz(mixed_bag):
    az = pytest.importorskip("arviz", reason="arviz not installable")
    ds = az.convert_to_dataset(mixed_bag.numpy())
    for method, ours in [("bulk", ess_bulk), ("tail", ess_tail), ("mean", ess_mean)]:
        ref = az.ess(ds, method=method)["x"].values
        np.testing.assert_allclose(ours(mixed_bag).numpy(), ref, rtol=1e-10, err_msg=method)
    np.testing.assert_allclose(rhat(mixed_bag).numpy(), az.rhat(ds)["x"].values, rtol=1e-10, equal_nan=True)
    np.testing.assert_allclose(
        rhat(mixed_bag, method="split").numpy(), az.rhat(ds, method="split")["x"].values, rtol=1e-10, equal_nan=True
    )
    np.testing.assert_allclose(
        rhat(mixed_bag, method="classic").numpy(),
        az.rhat(ds, method="identity")["x"].values,
        rtol=1e-10,
        equal_nan=True,
    )
    # tail ESS with other quantiles, and a single chain (ArviZ allows it for ESS)
    ref = az.ess(ds, method="tail", prob=(0.1, 0.8))["x"].values
    np.testing.assert_allclose(ess_tail(mixed_bag, prob=(0.1, 0.8)).numpy(), ref, rtol=1e-10)
    one = az.convert_to_dataset(mixed_bag[:1].numpy())
    np.testing.assert_allclose(ess_bulk(mixed_bag[:1]).numpy(), az.ess(one)["x"].values, rtol=1e-10)


def test_slowly_mixing_chains_match_arviz():
    # τ of several hundred: Geyer's positive sequence runs past the first 128 pairs that are
    # formed at first, so the all-lags fallback is exercised
    az = pytest.importorskip("arviz", reason="arviz not installable")
    x = ar1(2, 3000, 3, torch.tensor([0.995, 0.998, 0.3]), seed=17)
    ds = az.convert_to_dataset(x.numpy())
    for method, ours in [("bulk", ess_bulk), ("tail", ess_tail), ("mean", ess_mean)]:
        np.testing.assert_allclose(ours(x).numpy(), az.ess(ds, method=method)["x"].values, rtol=1e-10, err_msg=method)
    from structmc.diagnostics._utils import split_chains
    from structmc.diagnostics.ess import _geyer_core

    t = split_chains(x.permute(2, 0, 1).contiguous())
    assert _geyer_core(t, 128, (1500 - 1) // 2 - 1)[1].tolist() == [True, True, False]  # the fallback did run


def test_rank_rhat_catches_what_each_part_is_for(mixed_bag):
    r = rhat(mixed_bag)
    split = rhat(mixed_bag, method="split")
    assert float(r[8]) > 1.1  # shifted chain: the bulk part
    assert float(r[9]) > 1.1 and float(split[9]) < 1.05  # wider chain, same mean: only the folded part sees it
    assert torch.isnan(r[10])  # constant: undefined (0/0), as in ArviZ
    assert float(ess_bulk(mixed_bag)[10]) == 4 * 300  # constant: all draws count (ArviZ convention)


def test_tfp_style_matches_tensorflow_probability(mixed_bag):
    tfp = pytest.importorskip(
        "tensorflow_probability.substrates.numpy", reason="tensorflow-probability (numpy substrate) not installable"
    )
    x = mixed_bag[..., :10]
    xt = x.numpy().transpose(1, 0, 2)  # TFP wants draws first
    cases = [
        ({"cross_chain_dims": 1}, {}),
        ({"cross_chain_dims": 1, "filter_beyond_positive_pairs": True}, {"filter": "pairs"}),
        ({"cross_chain_dims": 1, "filter_beyond_lag": 25}, {"max_lag": 25}),
        ({}, {"cross_chain": False}),
        ({"filter_beyond_positive_pairs": True}, {"cross_chain": False, "filter": "pairs"}),
    ]
    for ref_kw, our_kw in cases:
        ref = tfp.mcmc.effective_sample_size(xt, **ref_kw)
        np.testing.assert_allclose(ess_tfp(x, **our_kw).numpy(), ref, rtol=1e-9, err_msg=str(ref_kw))


# ---------------------------------------------------------------------- closed forms -------


def test_sokal_iat_ar1_closed_form(ar1_long):
    N, n = 4 * 5000, 5000
    tau = integrated_time(ar1_long)
    _check_mean(tau, TAU, _bias_window(TAU, n, SUM_K_RHO), "sokal")
    # the spread across series matches Madras & Sokal's var(τ̂) ≈ 2(2M+1)τ²/N, M ≈ cτ (asymptotic
    # formula: ±25%; the SD estimate itself has ~4% SE from 256 series)
    ms = TAU * math.sqrt(2 * (2 * 5 * TAU + 1) / N)
    assert 0.75 < float(tau.std()) / ms < 1.25


@pytest.mark.parametrize("name", ["bulk", "mean", "tfp", "direct"])
def test_ess_ar1_closed_form(ar1_long, name):
    N = 4 * 5000
    sigma_rho = math.sqrt(TAU / N)
    if name == "bulk":
        est, n = N / ess_bulk(ar1_long), 2500
    elif name == "mean":
        est, n = N / ess_mean(ar1_long), 2500
    elif name == "tfp":
        est, n = N / ess_tfp(ar1_long), 5000
    else:
        est, n = integrated_time(ar1_long, method="direct"), 5000
    _check_mean(est, TAU, _bias_window(TAU, n, SUM_K_RHO) + 4 * sigma_rho, name)


def test_tail_ess_ar1_closed_form(ar1_long):
    # the indicator I(x <= q) of a standard Gaussian AR(1) has lag-k autocorrelation
    # (Φ₂(q, q; φ^k) − p²)/(p(1−p)), and Φ₂(q, q; ρ) − p² = ∫_0^ρ exp(−q²/(1+r)) / (2π√(1−r²)) dr
    # (Plackett 1954: ∂Φ₂/∂ρ is the bivariate density)
    stats = pytest.importorskip("scipy.stats")
    integrate = pytest.importorskip("scipy.integrate")
    p = 0.05
    q = stats.norm.ppf(p)
    dens = lambda r: math.exp(-q * q / (1 + r)) / (2 * math.pi * math.sqrt(1 - r * r))  # noqa: E731
    rho_i = [integrate.quad(dens, 0, 0.5**k)[0] / (p * (1 - p)) for k in range(1, 40)]
    tau_i = 1 + 2 * sum(rho_i)
    sum_k = sum(k * r for k, r in enumerate(rho_i, start=1))
    N = 4 * 5000
    # the indicator of the empirical 5% quantile does not depend on the marginal scale
    est = N / ess_tail(ar1_long, prob=(p, p))
    _check_mean(est, tau_i, _bias_window(tau_i, 2500, sum_k) + 4 * math.sqrt(tau_i / N), "tail")
    sub = ar1_long[..., :16]
    assert torch.all(ess_tail(sub) <= ess_tail(sub, prob=(0.05, 0.05)) + 1e-9)  # min over both tails


def test_equicorrelation_ess_ar1():
    # 16 chains so that B (C−1 = 15 d.o.f.) is usable: C·n/ESS ≈ τ χ²₁₅/15 per series, SE from
    # the empirical spread; finite-n bias of B/W is below 2Σkρ_k/n + τ/n ≈ 0.006
    x = ar1(16, 1250, 256, 0.5, seed=11)
    est = 16 * 1250 / ess_equicorrelation(x)
    _check_mean(est, TAU, (2 * SUM_K_RHO + TAU) / 1250, "equicorrelation")


def test_equicorrelation_formula_and_bda2_identity():
    assert float(ess_from_correlation(10, 0.0)) == 10
    assert float(ess_from_correlation(10, 1.0)) == 1
    assert float(ess_from_correlation(11, 0.1)) == pytest.approx(11 / 2)
    x = ar1(5, 400, 3, torch.tensor([0.3, 0.8, 0.95]), seed=5)
    C, n = 5, 400
    xn = x.numpy()
    B = n * xn.mean(1).var(0, ddof=1)
    W = xn.var(1, ddof=1).mean(0)
    var_plus = (n - 1) / n * W + B / n
    bda2 = np.minimum(C * n * var_plus / B, C * n)  # Gelman et al. (2004) §11.6, capped
    np.testing.assert_allclose(ess_equicorrelation(x).numpy(), bda2, rtol=1e-10)


# ------------------------------------------------------------------ layout and dtypes -------


def test_shapes_chunks_and_dispatch(mixed_bag):
    x = mixed_bag[..., :6].reshape(4, 301, 2, 3)
    for fn in (ess_bulk, ess_tail, ess_mean, rhat, integrated_time, ess_equicorrelation):
        out = fn(x)
        assert out.shape == (2, 3)
        torch.testing.assert_close(fn(x, chunk=1), out)
    assert ess_tfp(x, cross_chain=False).shape == (4, 2, 3)
    assert ess_bulk(x[..., 0, 0]).shape == ()
    torch.testing.assert_close(ess(x, method="tail"), ess_tail(x))
    m = mixing(x)
    torch.testing.assert_close(m["ess_bulk"], ess_bulk(x))
    torch.testing.assert_close(m["ess_tail"], ess_tail(x))
    torch.testing.assert_close(m["rhat"], rhat(x))
    torch.testing.assert_close(m["iac"], integrated_time(x))
    with pytest.raises(ValueError):
        ess_bulk(x[:, :3])
    with pytest.raises(ValueError):
        ess(x, method="nope")
    with pytest.raises(ValueError):
        ess_equicorrelation(x[:1])


def test_float32_agrees_with_float64(ar1_long):
    x64 = ar1_long[..., :32]
    x32 = x64.float()
    for fn in (ess_bulk, ess_tail, rhat, integrated_time, ess_tfp):
        a, b = fn(x32), fn(x64)
        assert a.dtype == torch.float32
        # float32 rounding creates a few rank ties and ~1e-6 FFT error; both move ESS by far less
        torch.testing.assert_close(a.double(), b, rtol=2e-3, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(mixed_bag):
    x = mixed_bag
    for fn in (ess_bulk, ess_tail, ess_mean, rhat, integrated_time, ess_tfp, ess_equicorrelation):
        torch.testing.assert_close(fn(x.cuda()).cpu(), fn(x), rtol=1e-8, atol=1e-8, equal_nan=True)
    torch.testing.assert_close(ess_bulk(x.float().cuda()).cpu(), ess_bulk(x.float()), rtol=1e-3, atol=0)
