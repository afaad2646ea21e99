"""psgld-australian (pSGLD Fig. 2): the exact HMC reference against quadrature, the claims'
rules against adversarial answers, and the tiny preset end to end."""

from __future__ import annotations

import json
import math

import pytest
import torch

from structmc_papers import get
from structmc_papers._report import COMPARISON_FIELDS, REPORT_FIELDS

from .adversarial import passes

aus = get("psgld-australian")


def test_the_hmc_reference_matches_quadrature():
    """A 2-weight logistic regression whose posterior mean is computed on a fine grid: the
    Metropolis-corrected HMC reference agrees within 4 of its Monte Carlo standard errors."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(15, 2, generator=g)
    y = (torch.rand(15, generator=g) < torch.sigmoid(x @ torch.tensor([1.5, -1.0]))).float()
    cfg = aus.Config(prior_var=4.0, reference_chains=8, reference_steps=4_000, seed=1)
    ref = aus.reference_hmc(x, y, cfg)
    grid = torch.linspace(-8, 8, 801, dtype=torch.float64)
    t1, t2 = torch.meshgrid(grid, grid, indexing="ij")
    theta = torch.stack([t1.reshape(-1), t2.reshape(-1)], 1)
    logits = theta @ x.double().T
    logp = (
        -torch.nn.functional.binary_cross_entropy_with_logits(
            logits, y.double().expand_as(logits), reduction="none"
        ).sum(1)
        - 0.5 * theta.square().sum(1) / cfg.prior_var
    )
    w = torch.softmax(logp, 0)
    exact = (w[:, None] * theta).sum(0)
    assert 0.6 < ref["acceptance"] <= 1.0
    assert ((ref["mean"] - exact).abs() <= 4 * ref["mcse"] + 1e-3).all(), (ref["mean"], exact, ref["mcse"])
    assert not torch.allclose(ref["map"], exact, atol=0.05)  # the mean is not the mode: the test can fail


def test_wrong_answers_do_not_pass_the_claims():
    """The claims are orderings between pSGLD and SGLD: answers with the paper's orderings pass
    every row; equal numbers (a constant) and the samplers swapped pass none."""
    cfg = aus.Config()
    steps = cfg.step_sizes

    def results(ess_p, ess_s, err_p, err_s):
        return {
            "pSGLD": {s: {"median_min_ess": ess_p(s), "weight_error": err_p(s)} for s in steps},
            "SGLD": {s: {"median_min_ess": ess_s(s), "weight_error": err_s(s)} for s in steps},
        }

    good = results(lambda s: 12 + 1e5 * s, lambda s: 10.0, lambda s: 0.1, lambda s: 0.3)
    assert passes(aus.comparisons(cfg, good)) == (2 * len(steps) + 1, 2 * len(steps) + 1)
    constant = results(lambda s: 10.0, lambda s: 10.0, lambda s: 0.2, lambda s: 0.2)
    assert passes(aus.comparisons(cfg, constant))[0] == 0
    swapped = results(lambda s: 10.0, lambda s: 12 + 1e5 * s, lambda s: 0.3, lambda s: 0.1)
    # equal to three digits is not "much larger" (the runs that barely move)
    barely = results(lambda s: 1.2962, lambda s: 1.2961, lambda s: 0.1, lambda s: 0.3)
    assert all(not r.verdict.startswith("reproduced") for r in aus.comparisons(cfg, barely) if "ESS" in r.quantity)
    assert passes(aus.comparisons(cfg, swapped))[0] == 0
    # the "especially at large steps" row needs the ratio to grow, not only pSGLD ahead
    flat = results(lambda s: 20.0, lambda s: 10.0, lambda s: 0.1, lambda s: 0.3)
    rows = aus.comparisons(cfg, flat)
    assert [r.verdict.startswith("reproduced") for r in rows].count(False) == 1


def test_tiny_end_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv("STRUCTMC_DATA", raising=False)
    report = aus.run("tiny", tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    assert report["numbers"]["data"]["source"] in ("files", "synthetic")
    res = report["numbers"]["results"]
    assert set(res) == {"T = 1", "T = 1/N"} and report["paper_setting"] == "T = 1/N"
    r = res["T = 1"]["pSGLD"]["0.0001"]
    assert len(r["min_ess_per_run"]) == 6 and math.isfinite(r["weight_error"])
    # with the larger step the chains move toward the reference: the error falls
    assert r["weight_error"] < res["T = 1"]["pSGLD"]["1e-06"]["weight_error"]
    assert (tmp_path / aus.FIGURE).stat().st_size > 5_000


def test_bad_config_is_refused_before_any_compute(tmp_path):
    with pytest.raises(ValueError, match="step_sizes"):
        aus.run(aus.Config(step_sizes=(0.0,)), tmp_path)
    with pytest.raises(ValueError, match="temperature"):
        aus.run(aus.Config(temperatures=("1/M",)), tmp_path)


def _results(ess_p, ess_s, err_p, err_s, steps):
    return {
        "pSGLD": {s: {"median_min_ess": ess_p(s), "weight_error": err_p(s)} for s in steps},
        "SGLD": {s: {"median_min_ess": ess_s(s), "weight_error": err_s(s)} for s in steps},
    }


def test_the_families_of_issue_35_that_apply():
    """Fig. 2 publishes no numbers: every row is an ordering claim on ours, so offsets from the
    paper's values do not exist and a rescaled answer (×10, fractions) keeps the orderings that are
    the claims. What applies: absurd values (a negative ESS or weight error) are implausible, NaN or
    inf fails the rows it enters (NaN everywhere passes nothing), and a sampler or step size not run
    keeps every claim, "not run" (before: a KeyError)."""
    from structmc_papers._report import NOT_REPRODUCED, NOT_RUN

    from .adversarial import at_most_a_quarter

    cfg = aus.Config()
    steps = cfg.step_sizes
    n = 2 * len(steps) + 1
    good = _results(lambda s: 12 + 1e5 * s, lambda s: 10.0, lambda s: 0.1, lambda s: 0.3, steps)
    assert passes(aus.comparisons(cfg, good)) == (n, n)
    negative = _results(lambda s: -12 - 1e5 * s, lambda s: -20.0, lambda s: -0.3, lambda s: -0.1, steps)
    rows = aus.comparisons(cfg, negative)
    at_most_a_quarter(rows, "negative ESS and errors")
    assert all("implausible" in r.verdict or "nan" in r.verdict for r in rows)  # the ratio of two: NaN
    nan = float("nan")
    for bad in ("pSGLD", "SGLD"):
        answer = {
            m: {s: {k: (nan if m == bad else v) for k, v in d.items()} for s, d in by.items()} for m, by in good.items()
        }
        rows = aus.comparisons(cfg, answer)
        assert passes(rows) == (0, n) and all(r.verdict.startswith(NOT_REPRODUCED) for r in rows)
    for gone in ("pSGLD", "SGLD"):
        rows = aus.comparisons(cfg, {m: v for m, v in good.items() if m != gone})
        assert passes(rows) == (0, n) and all(r.verdict.startswith(NOT_RUN) for r in rows)
    cut = {m: {s: d for s, d in by.items() if s != steps[0]} for m, by in good.items()}
    rows = aus.comparisons(cfg, cut)
    assert passes(rows)[1] == n and sum(r.verdict.startswith(NOT_RUN) for r in rows) == 3


def test_the_paper_presets_refuse_without_the_statlog_file(tmp_path, no_files):
    """quick and full refuse before compute, naming the file and the download switch; tiny runs
    on the stand-in, says so at the top of report.md, and leaves every claim "not run"."""
    from structmc.data import DataNotFoundError

    for preset in ("quick", "full"):
        with pytest.raises(DataNotFoundError, match="australian.dat"):
            aus.run(preset, tmp_path / preset, progress=False)
    report = aus.run("tiny", tmp_path / "tiny", progress=False)
    assert report["numbers"]["data"]["source"] == "synthetic" and report["stand_in"]
    assert "Stand-in data" in (tmp_path / "tiny" / "report.md").read_text()
    assert all(c["verdict"].startswith("not run") for c in report["comparisons"])
    assert report["verdicts"]["claims"] == 5 and report["verdicts"]["run"] == 0
