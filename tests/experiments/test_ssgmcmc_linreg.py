"""ssgmcmc-linreg (Fig. 2 of the structured SGMCMC paper): the verdict rules against wrong answers
(issue 26 §1), including Theorem 3's ρ sweep (§5), and the exact predictions of Sd-SGLD on the Gaussian target
that those rules are built from. The tiny preset end to end is
tests/cli/test_cli.py::test_ssgmcmc_linreg_reproduce_tiny."""

from __future__ import annotations

import math
import re

import pytest
import torch

from structmc.structured import custom, structured_optimum_gaussian
from structmc_papers import ssgmcmc_linreg as lr

from .adversarial import constants, passes, reversed_ranks, shuffled

EXACT = ("SGLD", "S-SGLD {[w1,w2],[w3,b]}", "S-SGLD {w1},{w2},{w3},{b}")
SD = ("Sd-SGLD {[w1,w2],[w3,b]}", "Sd-SGLD {w1},{w2},{w3},{b}")


@pytest.fixture(scope="module")
def targets():
    """The exact target of each scenario (the posterior for SGLD, Theorem 1's optimum for S-SGLD)
    as a table ``{scenario: {("var", j) | ("corr", i, j): value}}``, and the exact MAP."""
    cfg = lr.Config()
    data = lr.paper_like_data(cfg)
    post_cov = torch.linalg.inv(data["precision"])
    table = {}
    for name, (partition, mask) in lr._scenarios(cfg).items():
        if mask is not None:
            continue
        _, opt = structured_optimum_gaussian(data["mean"], data["precision"], partition)
        t = post_cov if name == "SGLD" else opt
        sd = t.diagonal().sqrt()
        corr = (t / sd.outer(sd)).nan_to_num()
        table[name] = {("var", j): float(t[j, j]) for j in range(4)}
        table[name] |= {("corr", i, j): float(corr[i, j]) for i, j in lr.PAIRS}
    # Sd-SGLD has no closed form: corr(w1, w2) between S-SGLD's and SGLD's (Theorem 3), as in the figure
    table |= {SD[0]: {("corr", 0, 1): -0.85}, SD[1]: {("corr", 0, 1): -0.5}}
    return data["mean"].tolist(), table


@pytest.fixture(scope="module")
def sweep_exact():
    """Theorem 3's ρ sweep with the exact predictions as the answer (the discretised chain's
    stationary corr(w1, w2), ideal store, quick's grid, K and ε) and no Monte Carlo error."""
    cfg = lr.Config()
    data = lr.paper_like_data(cfg)
    ids = torch.arange(4)
    exact = [
        lr._corr01(lr.sd_ideal_covariance(data["precision"], ids, r, cfg.num_copies, cfg.lr)) for r in cfg.rho_grid
    ]
    return {
        "rho": list(cfg.rho_grid),
        "corr": exact,
        "se": [0.0] * len(exact),
        "exact": exact,
        "mean_field": 0.0,
        "posterior": lr._corr01(torch.linalg.inv(data["precision"])),
    }


def _sweep_with(sweep, answer: dict) -> dict:
    """``sweep`` with ours replaced by ``answer`` ``{"rho=r": {"corr": value}}`` (the harness's table shape:
    one 'method' per ρ)."""
    return sweep | {"corr": [answer[f"rho={r:g}"]["corr"] for r in sweep["rho"]]}


def _rows(exact_map, answer, table, sweep=None):
    """``comparisons`` on an answer table ``{scenario: {cell: value}}``; a scenario the answer
    lacks is left out of the input (not run)."""
    return lr.comparisons(lr.Config(), exact_map, _scenarios_of(exact_map, answer, table), sweep)


def test_wrong_answers_do_not_pass_the_verdicts(targets, sweep_exact):
    """The exact targets pass every row; the exact-MAP rows are checks (true by construction of the
    data set); constants, the targets shuffled across scenarios and every ranking reversed pass at
    most about a quarter of the 27 counted rows (21 moments, 3 figure claims, 3 of Theorem 3's ρ
    sweep: monotone between the limits, the mean-field end, the posterior end)."""
    exact_map, table = targets
    stable = {f"rho={r:g}": {"corr": v} for r, v in zip(sweep_exact["rho"], sweep_exact["corr"])}
    rows = _rows(exact_map, table, table, sweep_exact)
    maps = [r for r in rows if r.quantity.startswith("exact MAP")]
    assert len(maps) == 4 and all(r.check and r.verdict.startswith("check") for r in maps)
    judged = passes(rows)
    assert judged[0] == judged[1] == 27, judged
    # the ρ sweep's rows: the exact predictions pass, with no error or with quick's standard errors (~0.013)
    theorem3 = lambda answer, se=0.0: lr.sweep_comparisons(_sweep_with(sweep_exact, answer) | {"se": [se] * 5})  # noqa: E731
    assert passes(theorem3(stable)) == (3, 3) and passes(theorem3(stable, 0.013)) == (3, 3)
    # constant corr(w1, w2) across ρ never moves (a tie) and fails the ordering; it can sit at one end, not both
    for answer in constants(stable):
        sweep_rows = theorem3(answer, 0.013)
        assert sweep_rows[0].verdict.startswith("not reproduced") and passes(sweep_rows)[0] <= 1
    # every ordering reversed (the posterior end at ρ = 0.05) and the values shifted across ρ fail all three
    assert passes(theorem3(reversed_ranks(stable)))[0] == 0 and passes(theorem3(shuffled(stable)))[0] == 0
    # a sweep shifted by one grid point toward the posterior (ρ = 0.25's exact value at 0.05, ...): still
    # monotone, but the mean-field end fails
    shifted = sweep_exact["corr"][1:] + [sweep_exact["posterior"]]
    rows3 = theorem3({f"rho={r:g}": {"corr": v} for r, v in zip(sweep_exact["rho"], shifted)})
    assert [r.verdict.startswith("reproduced") for r in rows3[:3]] == [True, False, True]
    # stuck half-way: monotone, right at the mean-field end, but not far enough toward the posterior at ρ = 0.95
    half = [v / 2 for v in sweep_exact["corr"]]
    rows3 = theorem3({f"rho={r:g}": {"corr": v} for r, v in zip(sweep_exact["rho"], half)})
    assert [r.verdict.startswith("reproduced") for r in rows3[:3]] == [True, True, False]
    # measured (quick: 6,000 steps x 32 chains per ρ): within-chain corr -0.020, -0.154, -0.349, -0.594, -0.855
    # (SE 0.015, 0.012, 0.014, 0.013, 0.009) against the exact -0.027, -0.169, -0.375, -0.631, -0.898: passes 3/3
    quick = sweep_exact | {"corr": [-0.020, -0.154, -0.349, -0.594, -0.855], "se": [0.015, 0.012, 0.014, 0.013, 0.009]}
    assert passes(lr.sweep_comparisons(quick)) == (3, 3)
    # var w3: S-SGLD's two partitions' targets (0.0136, 0.0132) are closer than the 10 % noise tolerance: the rows
    # still count (issue 35: a failure must count); a pass is weak (it cannot tell the scenarios apart)
    w3 = [r for r in rows if r.quantity.startswith("S-SGLD {w1},{w2},{w3},{b}: var w3")][0]
    gap = abs(table[EXACT[1]][("var", 2)] - table[EXACT[2]][("var", 2)])
    assert not w3.check and w3.weak and "cannot tell those scenarios apart" in w3.note
    assert w3.verdict == "reproduced" and "weak" in w3.rule.describe()
    tol = float(w3.rule.text.split("≤ ")[1].split(" ")[0])
    assert tol >= 0.9 * gap
    sgld_w3 = [r for r in rows if r.quantity.startswith("SGLD: var w3")][0]
    assert not sgld_w3.check and not sgld_w3.note
    # only the non-claims are checks: the exact MAP (the data's construction) and the sweep's implementation check
    checks = [r for r in rows if r.check]
    assert len(checks) == 5 and all(r.check_reason for r in checks)
    assert {r.quantity.split(" ")[0] for r in checks} == {"exact", "rho"}
    # measured: constants 2, 5, 7, 6, 2 of 27 (one near 0.01 hits the four zero correlations of the structured
    # optima and a variance or two near 0.01), shuffled 7, reversed 7 (former rules: 8 and 9 at most). The four
    # var w3 / var b rows of S-SGLD now count (issue 35) as weak passes, and "Sd-SGLD lies between", which a
    # constant meets, is weak: neither is carried by a wrong answer's 7 of 22 strong claims
    counts = [passes(_rows(exact_map, a, table))[0] for a in constants(table)]
    assert max(counts) <= 7, counts
    assert passes(_rows(exact_map, shuffled(table), table))[0] <= 7
    assert passes(_rows(exact_map, reversed_ranks(table), table))[0] <= 7
    # all 27 counted rows, each wrong answer given to the scenarios and to the sweep alike: measured constants
    # 3, 5, 7, 6, 3 of 27 (the sweep's constants pass one end each at the extreme quantiles), shuffled 7, reversed 7
    wrong = lambda a, b: passes(_rows(exact_map, a, table, _sweep_with(sweep_exact, b)))[0]  # noqa: E731
    counts = [wrong(a, b) for a, b in zip(constants(table), constants(stable))]
    assert max(counts) <= 7, counts
    assert wrong(shuffled(table), shuffled(stable)) <= 7
    assert wrong(reversed_ranks(table), reversed_ranks(stable)) <= 7


def _beyond(table):
    """The allowed difference of each cell's rule, stated here (not read from the module, so a
    loosened rule there fails the offsets): variances 10 % of the target, correlations 0.05 (no
    Monte Carlo error in these answers); Sd-SGLD's corr(w1, w2) the 'between' claim's 0.05."""
    return lambda m, c, v: 0.10 * abs(table[m][c]) if c[0] == "var" else 0.05


def test_the_five_families_of_issue_35(targets, sweep_exact):
    """Issue 35 §4 through ``comparisons``: per-scenario offsets just beyond each rule, the right
    order with absurd values (× 10: correlations beyond 1; negative variances), NaN or inf for a
    scenario and for all, a scenario not run, fractions (/100): each passes at most a quarter of
    the 27 counted claims. The scenarios' table and the ρ sweep get the same wrong answer."""
    from .adversarial import absurd, at_most_a_quarter, fractions, missing_method, non_finite, offsets

    exact_map, table = targets
    stable = {f"rho={r:g}": {"corr": v} for r, v in zip(sweep_exact["rho"], sweep_exact["corr"])}

    def rows(answer, sweep_answer=None):
        sweep = None if sweep_answer is None else _sweep_with(sweep_exact, sweep_answer)
        return _rows(exact_map, answer, table, sweep)

    full = passes(rows(table, stable))
    assert full == (27, 27)
    sweep_beyond = lambda m, c, v: 0.2  # noqa: E731  (beyond the grid's 0.098 half-gap at the mean-field end)
    for answer, s_answer in zip(offsets(table, _beyond(table)), offsets(stable, sweep_beyond)):
        at_most_a_quarter(rows(answer, s_answer), "offsets")
    for answer, s_answer in zip(absurd(table, low=0.0), absurd(stable, low=-1.0)):
        at_most_a_quarter(rows(answer, s_answer), "absurd")
    neg = list(absurd(table, low=0.0))[1]
    assert all("implausible" in r.verdict for r in rows(neg, stable) if ": var " in r.quantity)
    at_most_a_quarter(rows(fractions(table), fractions(stable)), "fractions")
    # NaN / inf for one scenario: its rows fail, none leaves the denominator; all NaN passes nothing
    answers = list(non_finite(table))
    for answer in answers[:-1]:
        bad = next(m for m, by in answer.items() if not all(math.isfinite(v) for v in by.values()))
        r = rows(answer, stable)
        assert passes(r)[1] == full[1]
        own = [x for x in r if x.quantity.startswith(f"{bad}:")]
        assert all(x.verdict.startswith("not reproduced: the run produced") for x in own), bad
    assert passes(rows(answers[-1], {k: {"corr": math.nan} for k in stable}))[0] == 0
    # a scenario not run: its rows "not run", the denominator the complete answer's (no KeyError)
    for name, answer in missing_method(table):
        r = _rows(exact_map, answer, table, _sweep_with(sweep_exact, stable))
        assert passes(r)[1] == full[1], name
        gone = [x for x in r if x.quantity.startswith(f"{name}:")]
        assert all(x.verdict.startswith("not run") for x in gone) and (name in SD or len(gone) == 7), name
        lost = [x for x in r if name in str(x.verdict)]
        assert (lost or name == SD[0]) and all(x.verdict.startswith("not run") for x in lost), name  # SD[0]: no row
    # no ρ sweep (rho_grid empty): its three claims "not run", still counted
    r = rows(table, None)
    assert passes(r) == (24, 27) and sum(x.verdict.startswith("not run") for x in r) == 3
    # every moment row fails each offset answer: a rule loosened in the module (10 % -> 20 %, 0.05 -> 0.1) passes them
    for answer in offsets(table, _beyond(table)):
        moments = [x for x in rows(answer, stable) if ": var " in x.quantity or ": corr(" in x.quantity]
        assert len(moments) == 21 and all(x.verdict.startswith("not reproduced") for x in moments)


def _scenarios_of(exact_map, answer, table):
    """``comparisons``' scenarios from an answer table, the exact targets from ``table``."""
    out = {}
    for name in (*EXACT, *SD):
        if name not in answer:
            continue
        cells = answer[name]
        corr = [[1.0 if a == b else 0.0 for b in range(4)] for a in range(4)]
        for key, v in cells.items():
            if key[0] == "corr":
                corr[key[1]][key[2]] = corr[key[2]][key[1]] = v
        s = {"var": [cells.get(("var", j), 0.0) for j in range(4)], "corr": corr}
        if name in EXACT:
            tcorr = [[1.0 if a == b else 0.0 for b in range(4)] for a in range(4)]
            for i, j in lr.PAIRS:
                tcorr[i][j] = tcorr[j][i] = table[name][("corr", i, j)]
            s |= {
                "target_var": [table[name][("var", j)] for j in range(4)],
                "target_corr": tcorr,
                "se_var": [0.0] * 4,
                "se_corr": [[0.0] * 4 for _ in range(4)],
            }
        out[name] = s
    return out


def test_tiny_run_rejudges_to_its_own_rows_and_the_tally_agrees(tmp_path):
    """The tiny preset end to end: ``rejudge`` rebuilds the written rows from the report's numbers
    (the SEs across chains now among them), and ``passes()`` equals the README's tally."""
    import json

    from structmc_papers._report import REPRODUCED, carried_verdicts, claim_tally

    report = lr.run("tiny", tmp_path / "tiny", progress=False)
    on_disk = json.loads((tmp_path / "tiny" / "report.json").read_text())
    assert all("se" in on_disk["numbers"]["scenarios"][n] for n in EXACT)
    rows = lr.rejudge(on_disk)
    assert [v for v, _ in carried_verdicts(rows)] == [c["verdict"] for c in report["comparisons"]]
    t = claim_tally(on_disk)
    assert passes(rows) == (t[REPRODUCED] + t["same ordering, smaller margin"], t["claims"]) and t["claims"] == 27


def test_sd_exact_covariance_interpolates_between_the_mean_field_and_the_posterior():
    """Theorem 3 for the Gaussian target, exactly: (D + ρO)⁻¹ is the posterior at ρ = 1 and Theorem 1's
    structured optimum as ρ → 0, for both partitions; the discretised chain's stationary covariance
    tends to it as ε → 0 and exceeds it by O(ε) (mask and θ̃-draw noise) at ε = 1e-3."""
    data = lr.paper_like_data(lr.Config())
    Lam, mean = data["precision"], data["mean"]
    for ids in ([0, 1, 2, 3], [0, 0, 1, 1]):
        _, q = structured_optimum_gaussian(mean, Lam, custom(4, ids))
        torch.testing.assert_close(lr.sd_limit_covariance(Lam, ids, 1.0), torch.linalg.inv(Lam))
        torch.testing.assert_close(lr.sd_limit_covariance(Lam, ids, 1e-9), q, rtol=1e-6, atol=1e-9)
        for rho in (0.05, 0.5, 0.95):
            limit = lr.sd_limit_covariance(Lam, ids, rho)
            torch.testing.assert_close(lr.sd_ideal_covariance(Lam, ids, rho, 4, 1e-7), limit, rtol=1e-4, atol=0)
            S = lr.sd_ideal_covariance(Lam, ids, rho, 4, 1e-3)
            assert (S.diagonal() > limit.diagonal()).all() and (S.diagonal() < 1.3 * limit.diagonal()).all()
    # the four-group corr(w1, w2) falls strictly from the mean field (0) to the posterior's (-0.977) with ρ
    c = [lr._corr01(lr.sd_limit_covariance(Lam, [0, 1, 2, 3], r / 20)) for r in range(1, 21)]
    assert all(b < a for a, b in zip(c, c[1:])) and -0.04 < c[0] < 0 and c[-1] == pytest.approx(-0.9774, abs=1e-3)


@pytest.mark.parametrize("ids", [[0, 1, 2, 3], [0, 0, 1, 1]])
def test_sd_step_covariance_matches_a_monte_carlo_step(ids):
    """One step of Sd-SGLD on the Gaussian energy, simulated (400,000 draws of δ, K = 3 copies' Bernoulli(0.3)
    masks, θ̃ with an independent past time per group, Gaussian noise) at a step large enough that the
    O(ε²) mask and draw noise is many standard errors: the sample covariance of δ' matches
    sd_step_covariance entrywise within 5 standard errors, and the map without its ε² noise terms does not."""
    g = torch.Generator().manual_seed(0)
    data = lr.paper_like_data(lr.Config())
    Lam = data["precision"]
    rho, K, eps, n = 0.3, 3, 4e-3, 400_000
    gid = torch.tensor(ids)
    same = (gid[:, None] == gid[None, :]).double()
    cov = lr.sd_limit_covariance(Lam, ids, rho) * 3  # any covariance
    delta = torch.randn(n, 4, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    L_draw = torch.linalg.cholesky(cov * same)
    grad = torch.zeros(n, 4, dtype=torch.float64)
    for _ in range(K):
        r = (torch.rand(n, int(gid.max()) + 1, generator=g, dtype=torch.float64) < rho).double()[:, gid]
        tilde = torch.randn(n, 4, generator=g, dtype=torch.float64) @ L_draw.T
        grad += r * ((r * delta + (1 - r) * tilde) @ Lam)
    new = delta - eps / 2 * grad / (K * rho) + eps**0.5 * torch.randn(n, 4, generator=g, dtype=torch.float64)
    emp = new.T @ new / n
    exact = lr.sd_step_covariance(Lam, ids, rho, K, eps, cov)
    se = ((exact.diagonal()[:, None] * exact.diagonal()[None, :] + exact**2) / n).sqrt()
    assert ((emp - exact).abs() / se).max() < 5
    # without the ε² terms (the drift only): off by many standard errors, so the test sees them
    G = Lam * same + rho * (Lam - Lam * same)
    drift_only = cov - eps / 2 * (G @ cov + cov @ G) + eps * torch.eye(4, dtype=torch.float64)
    assert ((emp - drift_only).abs() / se).max() > 10


@pytest.mark.parametrize(
    "fields, exc, phrase",
    [
        ({"rho_grid": (0.5, 0.25)}, ValueError, "rho_grid must be empty"),  # decreasing
        ({"rho_grid": (0.25, 0.25, 0.5)}, ValueError, "rho_grid must be empty"),  # a repeat: not strictly increasing
        ({"rho_grid": (0.0, 0.5)}, ValueError, "rho_grid must be empty"),  # ρ = 0: no group ever live
        ({"rho_grid": (0.5, 1.5)}, ValueError, "rho_grid must be empty"),
        ({"rho_grid": (0.5,)}, ValueError, "rho_grid must be empty"),  # one point: no ordering to judge
        ({"rho_grid": (0.5, float("nan"))}, ValueError, "rho_grid must be empty"),
        ({"rho_grid": 0.5}, TypeError, "rho_grid must be a sequence"),
        ({"sweep_burn_in": 6_000}, ValueError, "sweep_burn_in (6000) must be below sweep_steps (6000)"),
        ({"sweep_chains": 0}, ValueError, "sweep_chains"),
    ],
)
def test_a_bad_sweep_config_is_refused_before_any_compute(tmp_path, monkeypatch, fields, exc, phrase):
    def no_compute(*args, **kwargs):
        raise AssertionError("computed before the config was checked")

    monkeypatch.setattr(lr, "paper_like_data", no_compute)
    with pytest.raises(exc, match=re.escape(phrase)):
        lr.run(lr.Config(**fields), tmp_path / "out")
    assert not (tmp_path / "out").exists()
