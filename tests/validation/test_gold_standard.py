"""Two small posteriordb posteriors against reference draws nobody here computed.

bench/gold_standard.py writes eight posteriordb posteriors (https://github.com/stan-dev/posteriordb,
BSD 3-Clause, commit 28f8d3d) in PyTorch and runs the samplers on them against posteriordb's
reference draws. Here, without that repository or the network, two of them run from the
committed fixture ``gold_standard_fixtures.json`` (their data and the reference draws' means
and sds, with provenance and licence): eight schools (non-centred, hierarchical, τ > 0) and
earnings-logearn_interaction_z (regression on 1,192 rows, σ > 0).

* The log densities equal an independent calculation with ``scipy.stats`` (full normalised
  densities; differences between points, so the dropped constants cancel), and the
  unconstrained density adds exactly log|dθ/du| = u for the positive parameter.
* Full-batch MALA on both, and SGLD at the bench's small step on earnings, give means within
  ``4·MCSE + 0.03`` reference sds of the reference means and sds within ``4·MCSE_sd + 0.05``
  of them (MCSE from the bulk ESS of the run; 0.03 sd covers the reference's own Monte Carlo
  error, ≈ 1/√10,000 = 0.01 sd, and 0.05 SGLD's O(ε) variance inflation, ≤ 6.7% in variance at
  ε = 0.25/λ_max). SGLD's tolerance is wide (an ESS of a few hundred in a test's budget, 4·MCSE ≈ 0.25 sd);
  the bench's extended earnings run puts it within 0.064 sd. SGLD is not run on eight schools: its κ ≈ 300 makes SGLD's relaxation
  time ≈ 8κ ≈ 2,400 iterations, beyond a test's budget (the bench runs it).
* The check fails a wrong posterior: eight schools with τ ~ half-normal(0, 5) in place of
  Stan's half-Cauchy(0, 5) is rejected.
"""

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from scipy import stats

import structmc as sm
from structmc.diagnostics import ess

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = json.loads((Path(__file__).parent / "gold_standard_fixtures.json").read_text())


def _bench():
    spec = importlib.util.spec_from_file_location("gold_standard", ROOT / "bench" / "gold_standard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gold_standard"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gs = _bench()
SCHOOLS, EARNINGS = "eight_schools-eight_schools_noncentered", "earnings-logearn_interaction_z"


def _posterior(name):
    post = gs.POSTERIORS[name]
    fx = FIXTURES["posteriors"][name]
    data = post.prepare(fx["data"])
    ref_mean, ref_sd = gs.reference_for(post, data, fx["reference_mean"], fx["reference_sd"])
    return post, data, ref_mean, ref_sd


def _random_points(post, n, seed):
    g = torch.Generator().manual_seed(seed)
    pts = []
    for _ in range(n):
        p = {}
        for name, shape in post.params.items():
            x = torch.randn(shape, generator=g, dtype=torch.float64)
            p[name] = x.exp() if post.constraints[name] is torch.distributions.constraints.positive else x
        pts.append(p)
    return pts


def _scipy_schools(p, raw):
    theta_trans, mu, tau = p["theta_trans"].numpy(), float(p["mu"]), float(p["tau"])
    y, sigma = raw["y"], raw["sigma"]
    return (
        stats.norm.logpdf(theta_trans).sum()
        + stats.norm.logpdf(y, mu + tau * theta_trans, sigma).sum()
        + stats.norm.logpdf(mu, 0, 5)
        + stats.halfcauchy.logpdf(tau, scale=5)
    )


def _scipy_earnings(p, raw):
    import numpy as np

    earn, height, male = (np.asarray(raw[k], dtype=float) for k in ("earn", "height", "male"))
    z = (height - height.mean()) / height.std(ddof=1)
    b, sigma = p["beta"].numpy(), float(p["sigma"])
    return stats.norm.logpdf(np.log(earn), b[0] + b[1] * z + b[2] * male + b[3] * z * male, sigma).sum()


@pytest.mark.parametrize("name,scipy_density", [(SCHOOLS, _scipy_schools), (EARNINGS, _scipy_earnings)])
def test_log_density_equals_scipy(name, scipy_density):
    post, data, _, _ = _posterior(name)
    raw = FIXTURES["posteriors"][name]["data"]
    pts = _random_points(post, 4, seed=1)
    ours = torch.stack([post.log_density(p, data) for p in pts])
    theirs = torch.tensor([scipy_density(p, raw) for p in pts], dtype=torch.float64)
    torch.testing.assert_close(ours - ours[0], theirs - theirs[0], rtol=1e-9, atol=1e-8)
    # a batch of points at once (the chains' layout) gives the same values
    batched = {k: torch.stack([p[k] for p in pts]) for k in post.params}
    torch.testing.assert_close(post.log_density(batched, data), ours)


def test_unconstrained_density_adds_the_log_jacobian():
    post, data, _, _ = _posterior(SCHOOLS)
    target = gs.make_target(post, data)
    u = torch.randn(5, target.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    p = target.constrained(u)
    torch.testing.assert_close(p["tau"], u[:, -1].exp())  # tau > 0 is the last coordinate, exp
    torch.testing.assert_close(target.log_density(u), post.log_density(p, data) + u[:, -1])
    torch.testing.assert_close(target.unconstrained({k: v[0] for k, v in p.items()}), u[0])


def _check(quantities, ref_mean, ref_sd, bias_allowance):
    """Mean errors and sd ratios against the reference, with their tolerances (module docstring)."""
    names = list(ref_mean)
    x = torch.stack([quantities[n] for n in names], -1)  # [C, S, K]
    rm = torch.tensor([ref_mean[n] for n in names], dtype=torch.float64)
    rs = torch.tensor([ref_sd[n] for n in names], dtype=torch.float64)
    n_eff = ess(x.float()).to(torch.float64).clamp(min=1)
    err = (x.mean((0, 1)) - rm) / rs
    ratio = x.std((0, 1)) / rs
    mcse = ratio / n_eff.sqrt()
    ok_mean = err.abs() <= 4 * mcse + 0.03
    ok_sd = (ratio - 1).abs() <= 4 * ratio / (2 * n_eff).sqrt() + 0.03 + bias_allowance
    detail = {
        n: (round(float(e), 3), round(float(r), 3), round(float(s), 3)) for n, e, r, s in zip(names, err, ratio, mcse)
    }
    return bool(ok_mean.all() and ok_sd.all()), detail


def _schools_with_half_normal_tau(p, d):
    """Eight schools with τ ~ half-normal(0, 5) instead of Stan's half-Cauchy(0, 5): a wrong posterior."""
    right = gs.eight_schools_log_density(p, d)
    return right - gs.cauchy_lpdf(p["tau"], 0.0, 5.0) + gs.normal_lpdf(p["tau"], 0.0, 5.0)


def _mala(name, log_density=None, chains=32, burn_in=300, draws=500, seed=0):
    post, data, ref_mean, ref_sd = _posterior(name)
    if log_density is not None:
        post = dataclasses.replace(post, log_density=log_density)
    target = gs.make_target(post, data)
    lap = gs.laplace(target)
    rule = gs.step_sizes(lap, post.num_data(data))
    draws_c, facts = gs.run_sampler(
        "MALA", target, lap, rule["MALA"], chains=chains, burn_in=burn_in, draws=draws, seed=seed
    )
    assert 0.4 < facts["accept"] < 0.8, facts
    return post.quantities(draws_c, data), ref_mean, ref_sd


@pytest.mark.slow
@pytest.mark.parametrize("name", [SCHOOLS, EARNINGS])
def test_mala_matches_the_reference_posterior(name):
    quantities, ref_mean, ref_sd = _mala(name)
    ok, detail = _check(quantities, ref_mean, ref_sd, bias_allowance=0.0)
    assert ok, detail


@pytest.mark.slow
def test_the_check_rejects_a_wrong_posterior():
    # a half-normal(0, 5) prior on τ in place of the half-Cauchy(0, 5): lighter tail, smaller τ
    quantities, ref_mean, ref_sd = _mala(SCHOOLS, log_density=_schools_with_half_normal_tau)
    ok, detail = _check(quantities, ref_mean, ref_sd, bias_allowance=0.0)
    assert not ok, detail
    assert detail["tau"][0] < 0, detail


@pytest.mark.slow
def test_sgld_at_the_small_step_matches_the_reference_posterior():
    post, data, ref_mean, ref_sd = _posterior(EARNINGS)
    target = gs.make_target(post, data)
    lap = gs.laplace(target)
    rule = gs.step_sizes(lap, post.num_data(data))
    assert math.isclose(rule["SGLD small"]["lr"], 0.25 / lap.lam_max)
    draws_c, _ = gs.run_sampler(
        "SGLD small", target, lap, rule["SGLD small"], chains=64, burn_in=300, draws=1500, seed=0
    )
    ok, detail = _check(post.quantities(draws_c, data), ref_mean, ref_sd, bias_allowance=0.05)
    assert ok, detail


@pytest.mark.parametrize("name", [SCHOOLS, EARNINGS])
def test_the_stand_in_equals_the_library_constrained_energy(name):
    """bench/gold_standard.py's constrained target (its stand-in) is the library's
    ``LogDensityEnergy(log_prob, params=..., constraints=...)``: same values and gradients at
    the same unconstrained points, the same constrained draws, so either can run the suite."""
    post, data, _, _ = _posterior(name)
    ours = gs.make_target(post, data)
    library = sm.LogDensityEnergy(
        lambda p, batch: post.log_density(p, data), params=post.params, constraints=post.constraints, vectorized=True
    )
    u = torch.randn(3, ours.dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    value, grad = library.value_and_grad(u, None)
    our_value, our_grad = ours.energy.value_and_grad(u, None)
    torch.testing.assert_close(value, our_value)
    torch.testing.assert_close(grad, our_grad)
    flat = torch.cat([ours.constrained(u)[k].reshape(3, -1) for k in post.params], 1)
    torch.testing.assert_close(library.to_draws(u), flat)
