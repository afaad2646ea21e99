"""ssgmcmc-uci (Alexos et al. 2022, Tables 1, 3, 4): the tiny preset runs end to end and writes
the common report with a verdict on every published Housing number, the four partitions cover
the parameters with the expected group counts, the sampler learns (with a likelihood that can
fit), runs are reproducible, and a data set that cannot be had fails with a clear message.

Boston and concrete are the files where the experiment finds them, else stand-ins in their CSV
format (tests/experiments/conftest.py: 506 and 1030 rows, the same ranges), so every test runs
on a fresh clone."""

import json
import math
from dataclasses import replace

import pytest
import torch

import structmc.data as D
import structmc_papers as E
from structmc.data.files import DataError
from structmc_papers import ssgmcmc_uci as U
from structmc_papers._report import (
    COMPARISON_FIELDS,
    NOT_REPRODUCED,
    REPORT_FIELDS,
    REPRODUCED,
    WithinNoise,
    carried_verdicts,
    claim_tally,
    smallest_gap,
    tally,
)

pytestmark = pytest.mark.usefixtures("uci_data")


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory, uci_data):
    out = tmp_path_factory.mktemp("ssgmcmc-uci") / "tiny"
    return out, U.run("tiny", out, progress=False)


def test_tiny_preset_writes_the_common_report(tiny_report):
    out, report = tiny_report
    on_disk = json.loads((out / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and on_disk["preset"] == "tiny" and on_disk["reduced"] is True
    assert all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    for fig in (U.FIGURE_MSE, U.FIGURE_LR):
        assert fig in on_disk["figures"] and (out / fig).is_file() and (out / fig).stat().st_size > 10_000
    assert (out / "report.md").is_file() and "Scaling evidence" in (out / "report.md").read_text()
    # both temperatures side by side (issue 26 §2), the tally the reference code's T = 1/2
    assert on_disk["paper_setting"] == "T = 0.5" and on_disk["verdicts"] == on_disk["verdicts_by_setting"]["T = 0.5"]
    assert {c["setting"] for c in on_disk["comparisons"]} == {"T = 1", "T = 0.5"}
    assert len([c for c in on_disk["comparisons"] if c["setting"] == "T = 1"]) * 2 == len(on_disk["comparisons"])
    rows = {c["quantity"]: c for c in on_disk["comparisons"] if c["setting"] == "T = 1"}
    pub = E.REGISTRY.get("ssgmcmc-uci").published
    for lab in U.PARTITIONS.values():
        if lab not in pub["mse"]:
            continue
        mse = rows[f"housing: test MSE, {lab}"]
        assert mse["paper"] == pub["mse"][lab]["housing"][0]
        # a claim judged on the noise of both sides (issue 35 §1): 3·√(SE_ours² + (sd_paper/√5)²)
        assert not mse["check"] and mse["verdict"].startswith((REPRODUCED, NOT_REPRODUCED))
        assert mse["rule"].startswith("|ours − paper| ≤ 3·√(") and "/ √5" in mse["rule"]
        assert math.isfinite(mse["ours"]) and 0 < mse["ours"] < 1  # min-max units
        lr = rows[f"housing: best learning rate, {lab}"]
        assert (
            lr["paper"] == pub["best_lr"][lab]["housing"]
            and lr["ours"] == 1e-4
            and lr["verdict"] == "check (not judged)"
            and "Table 4" in lr["check_reason"]
        )
    # Table 3's other columns: every claim a row, "not run" (tiny runs Housing alone)
    for col in ("concrete", "wine", "obesity", "bike", "airfoil"):
        assert rows[f"{col}: test MSE, By Layer"]["verdict"].startswith("not run: data set not in this run")
    assert sum(c["verdict"].startswith("not run") for c in rows.values()) == 5 * 4 + 5 + 4
    # the report's tally is the rows' (README and adversarial.passes count alike)
    assert claim_tally(on_disk) == tally(on_disk["comparisons"], "T = 0.5")
    assert on_disk["verdicts"]["claims"] == 6 * 4 + 6 + 4
    # every chain at the reference code's T = 1/2 too: its own numbers, its own folders (T = 1 keeps its names)
    by_t = on_disk["numbers"]["by_temperature"]
    assert set(by_t) == {"T = 1", "T = 0.5"} and by_t["T = 1"]["mse"] == on_disk["numbers"]["mse"]
    half, one = (by_t[t]["mse_by_lr"]["housing"]["Random (M = 3)"]["0.0001"]["test_mse"] for t in ("T = 0.5", "T = 1"))
    assert len(half) == 2 and all(math.isfinite(v) for v in half) and half != one
    names = {f.name for f in (out / "runs" / "boston").iterdir()}
    assert {"random_lr0.0001_seed0", "random_lr0.0001_seed0-T0.5"} <= names and len(names) == 16
    trend = [c for q, c in rows.items() if "no systematic trend" in q]
    assert (
        len(trend) == 6
        and trend[0]["weak"]
        and trend[0]["paper"] == pytest.approx(0.0003 / math.sqrt((3 * 0.003**2 + 0.002**2) / 4))
    )
    # the step-size mapping states the convention: SGLD(lr = 2η)
    assert any("SGLD(lr = 2η = 0.0002, temperature ∈ {1, 0.5})" in s for s in on_disk["step_size_mapping"])
    # the scaling evidence: the mean predictor scores ≈ 0.03-0.05 in min-max units, ≈ 1 standardised
    ev = on_disk["numbers"]["scaling"]["housing"]
    assert 0.02 < ev["mean_predictor_mse_minmax"] < 0.06 and 0.5 < ev["mean_predictor_mse_standardized"] < 1.5
    assert 20 < ev["mean_predictor_mse_raw"] < 150


def test_partitions_cover_the_parameters_with_the_expected_groups(tiny_report):
    _, report = tiny_report
    assert report["numbers"]["num_groups"]["housing"] == {
        "Random (M = 3)": 3,
        "By Layer": 3,
        "By Neurons": 101,
        "Fully-Factorized": 3301,
    }
    cfg = U.Config()
    base = U.make_energy(cfg, 13, seed=0)
    P = base.space.dim
    assert P == 13 * 50 + 50 + 50 * 50 + 50 + 50 + 1 == 3301
    expected = {
        "random": [1101, 1100, 1100],
        "layer": [14 * 50, 51 * 50, 51],
        "neuron": [14] * 50 + [51] * 50 + [51],
        "factorized": [1] * P,
    }
    for kind, sizes in expected.items():
        part = U.make_partition(cfg, kind, base, seed=3)
        ids = part.group_ids
        assert ids.shape == (P,) and int(ids.min()) == 0 and int(ids.max()) == part.num_groups - 1
        assert torch.bincount(ids, minlength=part.num_groups).tolist() == part.sizes().tolist()
        assert sorted(part.sizes().tolist()) == sorted(sizes), kind
    # by layer: every group is exactly one Linear layer (weight and bias); by neuron: one unit's row and bias
    layer = U.make_partition(cfg, "layer", base, 0)
    offsets = [0, 700, 700 + 2550, P]
    for g in range(3):
        assert layer.members(g).tolist() == list(range(offsets[g], offsets[g + 1]))
    neuron = U.make_partition(cfg, "neuron", base, 0)
    w0 = base.space.params[0]  # first Linear weight [50, 13]
    unit0 = neuron.members(0).tolist()
    assert unit0[:13] == list(range(w0.offset, w0.offset + 13)) and len(unit0) == 14
    # the random partition changes with the seed; the fully factorised one runs Sd-SGLD with the paper's rho, K
    assert not torch.equal(
        U.make_partition(cfg, "random", base, 0).group_ids, U.make_partition(cfg, "random", base, 1).group_ids
    )
    fact = U.structured_energy(cfg, "factorized", base, U.make_partition(cfg, "factorized", base, 0), 0, 11)
    assert fact.config()["kind"] == "Sd-SGMCMC" and fact.num_copies == 16 and fact.mask.rho == 0.1
    exact = U.structured_energy(
        U.Config(factorized="s"), "factorized", base, U.make_partition(cfg, "factorized", base, 0), 0, 11
    )
    assert exact.config()["kind"] == "S-SGMCMC" and exact.num_copies == P
    assert U.structured_energy(cfg, "neuron", base, neuron, 0, 11).num_copies == 101


def test_same_seed_same_numbers_and_another_seed_differs(tiny_report, tmp_path):
    _, report = tiny_report
    again = U.run("tiny", tmp_path / "again", progress=False)

    def mses(rep):  # every MSE of every run (timings excluded)
        return {
            (p, lr): (v["val_mse"], v["test_mse"], v["diverged"])
            for p, by_lr in rep["numbers"]["mse_by_lr"]["housing"].items()
            for lr, v in by_lr.items()
        }

    assert mses(again) == mses(report) and len(mses(report)) == 4
    assert again["numbers"]["mse"] == report["numbers"]["mse"]
    # --resume: every finished chain is read back from out/runs (one made unreadable shows it is read)
    done = sorted((tmp_path / "again" / "runs" / "boston").glob("*/result.json"))
    assert len(done) >= 4
    resumed = U.run("tiny", tmp_path / "again", progress=False, resume=True)
    assert mses(resumed) == mses(report)
    done[0].write_text("{not json")
    with pytest.raises(ValueError):
        U.run("tiny", tmp_path / "again", progress=False, resume=True)
    other = U.run(
        U.Config(
            datasets=("boston",),
            partitions=("random",),
            lrs=(1e-4,),
            seeds=1,
            num_steps=40,
            num_draws=10,
            noise_check=None,
            download=False,
        ),
        tmp_path / "other",
        progress=False,
        seed=7,
    )
    assert other["seed"] == 7
    ours = other["numbers"]["mse_by_lr"]["housing"]["Random (M = 3)"]["0.0001"]["test_mse"][0]
    assert ours != report["numbers"]["mse_by_lr"]["housing"]["Random (M = 3)"]["0.0001"]["test_mse"][0]


@pytest.mark.parametrize("kind", ["random", "factorized"])
def test_sampler_beats_the_mean_predictor_with_a_fitting_likelihood(kind):
    """With σ = 0.1 (a likelihood that can fit min-max targets) a short S-SGLD / Sd-SGLD run's
    posterior predictive beats predicting the training mean by a wide margin; σ = 1 (the
    paper's reading) cannot, which is what the report's noise check shows."""
    cfg = U.Config(noise_std=0.1, num_steps=300, num_draws=50, download=False)
    data = U.load_split(cfg, "boston", 0)
    base = U.scaling_evidence(data)["mean_predictor_mse_minmax"]
    r = U.run_one(cfg, data, kind, 1e-5, seed=0)
    assert not r["diverged"] and r["num_draws"] == 50 and r["steps"] == 300
    assert r["test_mse"] < 0.5 * base, (r["test_mse"], base)
    assert r["val_mse"] < 0.5 * float((data["y_val"] - data["y_train"].mean()).square().mean())


def test_data_are_min_max_scaled_on_the_training_part_and_split_75_10_15():
    cfg = U.Config(download=False)
    d = U.load_split(cfg, "housing", 0)
    assert d["name"] == "boston" and d["paper"] == "housing"
    n_tr, n_va, n_te = len(d["y_train"]), len(d["y_val"]), len(d["y_test"])
    assert n_tr + n_va + n_te == 506 and n_va == 51 and n_te == 76
    assert float(d["x_train"].min()) == 0.0 and float(d["x_train"].max()) == 1.0
    assert float(d["y_train"].min()) == 0.0 and float(d["y_train"].max()) == 1.0 and d["y_scale"] == 45.0
    other = U.load_split(cfg, "boston", 1)
    assert not torch.equal(other["y_test"], d["y_test"])  # resplit per seed
    std = U.load_split(U.Config(scaling="standard", download=False), "concrete", 0)
    assert abs(float(std["y_train"].mean())) < 1e-5 and abs(float(std["y_train"].std()) - 1) < 1e-5


def test_a_missing_data_set_fails_with_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    cfg = U.Config(datasets=("wine",), download=False, data_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"'wine' \(wine-red\) is not available.*Config.datasets"):
        U.load_split(cfg, "wine", 0)
    # Boston (the default set): the message names both files that would do, where they were
    # looked for, the checksummed download and the folder / variable to set, and does not
    # claim the set cannot be downloaded
    with pytest.raises(DataError) as err:
        U.load_split(U.Config(download=False, data_dir=str(tmp_path)), "housing", 0)
    msg = str(err.value)
    assert "uci/boston.csv or uci/housing.data not found" in msg and str(tmp_path / "uci" / "boston.csv") in msg
    assert "set Config.download=True" in msg and "housing/housing.data" in msg and "checksum" in msg
    assert "$STRUCTMC_DATA" in msg and "offline" not in msg
    with pytest.raises(ValueError, match="unknown data set"):
        U.dataset_key("iris")
    with pytest.raises(ValueError, match="unknown partition"):
        U.run(U.Config(partitions=("by-weight",)), tmp_path / "x")
    with pytest.raises(ValueError, match="unknown preset"):
        U.run("huge", tmp_path / "y")


def test_a_missing_data_file_stops_the_run_before_any_chain(tmp_path, monkeypatch):
    """Issue 35 §5: every data set's file is read before the first chain, so a missing second set
    (here Wine, offline) stops the run before Boston's chains are computed, naming the set."""
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))

    def no_chain(*args, **kwargs):
        raise AssertionError("a chain ran before every data file was found")

    monkeypatch.setattr(U, "run_one", no_chain)
    cfg = U.Config(datasets=("boston", "wine"), lrs=(1e-4,), seeds=1, num_steps=20, download=False, noise_check=None)
    with pytest.raises(DataError, match=r"'wine-red' \(wine-red\) is not available.*winequality-red.csv"):
        U.run(cfg, tmp_path / "out", progress=False)


def test_a_diverging_learning_rate_is_recorded_not_chosen():
    cfg = U.Config(num_steps=300, num_draws=10, download=False)
    data = U.load_split(cfg, "boston", 0)
    r = U.run_one(cfg, data, "layer", 1e-2, seed=0)
    assert r["diverged"] and r["test_mse"] == math.inf
    runs = {"layer": {1e-2: [r], 1e-4: [dict(r, diverged=False, val_mse=0.05, test_mse=0.04, ms_per_step=1.0)]}}
    ev = [U.scaling_evidence(data)]
    summary = U._summarise(cfg, "boston", runs, ev, {"layer": 3}, None, "x")
    assert summary["chosen"]["layer"]["lr"] == 1e-4 and summary["per_lr"]["layer"][1e-2]["diverged"] == 1


def test_registry_lists_the_experiment_and_its_published_numbers():
    exp = E.REGISTRY.get("ssgmcmc-uci")
    assert exp.load() is U and {"tiny", "quick", "full"} <= set(exp.presets)
    assert all(d in D.DATASETS for d in exp.datasets) and set(exp.datasets) == set(U.Config().datasets)
    for lab, cols in exp.published["mse"].items():
        for col, (m, s) in cols.items():
            assert U.PAPER_MSE[lab][col] == (m, s)
            assert U.PAPER_LR[lab][col] == exp.published["best_lr"][lab][col]
    full = U.PRESETS["full"]
    assert full.lrs == (1e-3, 1e-4, 1e-5, 1e-6, 1e-7) and full.seeds == 5 and full.hidden == (50, 50)
    assert full.split == (0.75, 0.10, 0.15) and full.random_groups == 3


COLS = {"boston": "housing", "concrete": "concrete"}
PAPER = {lab: {col: U.PAPER_MSE[lab][col][0] for col in COLS.values()} for lab in U.PAPER_MSE}


def _results(answer: dict, sd=None) -> dict:
    """``comparisons``' results from a table ``{partition label: {column: mean MSE}}``, every
    partition's sd over 5 seeds the paper's (or ``sd``); a label missing from ``answer`` is a
    partition that did not run."""
    return {
        key: {
            "chosen": {
                p: {
                    "lr": 1e-5,
                    "test_mean": answer[lab][col],
                    "test_sd": U.PAPER_MSE[lab][col][1] if sd is None else sd,
                }
                for p, lab in U.PARTITIONS.items()
                if lab in answer and col in answer[lab]
            }
        }
        for key, col in COLS.items()
    }


def _rows(answer: dict, cfg=None, sd=None):
    return U.comparisons(cfg or U.Config(), _results(answer, sd))


def _allowed(lab: str, col: str, k: float = 3.0) -> float:
    """The noise rule's allowed difference for one cell (stated independently of the module, so a
    loosened rule there fails the offsets below): k·√((sd/√5)² + (sd_paper/√5)²), our sd the paper's."""
    sd = U.PAPER_MSE[lab][col][1]
    return k * math.hypot(sd / math.sqrt(5), sd / math.sqrt(5))


def test_published_values_are_claims_judged_on_both_sides_noise():
    """Every published MSE of Table 3 is a claim (issue 35 §1): the paper's own numbers pass all
    of them, each with the rule 3·√(SE_ours² + SE_paper²), SE_paper = sd/√5 (Table 3: 5 seeds);
    the converged record's Housing By Layer (0.0360 ± 0.0030 against 0.0236 ± 0.003: 6.5 SEs)
    fails; the learning-rate rows are checks that say why; every cell of Table 3 and every
    claim about it has a row, run or not."""
    rows = _rows(PAPER)
    values = [r for r in rows if "test MSE" in r.quantity]
    run = [r for r in values if not r.verdict.startswith("not run")]
    assert len(values) == 24 and len(run) == 8 and all(not r.check and r.verdict == REPRODUCED for r in run)
    assert all(isinstance(r.rule, WithinNoise) and r.rule.k == 3 for r in values)
    by_q = {r.quantity: r for r in rows}
    w = by_q["housing: test MSE, By Layer"].rule
    assert w.ours_se == pytest.approx(0.003 / math.sqrt(5)) and w.paper_se == pytest.approx(0.003 / math.sqrt(5))
    lrs = [r for r in rows if "learning rate" in r.quantity]
    assert len(lrs) == 8 and all(r.check and "Table 4" in r.check_reason for r in lrs)
    # Tables 1/3 on the sets that are not offline: 4 MSEs each, the trend claim, and "random lowest" on Wine,
    # Bike and Airfoil (Table 3 has Random strictly lowest there; Obesity's lowest is Fully-Factorized)
    not_run = [r for r in rows if r.verdict.startswith("not run")]
    assert len(not_run) == 16 + 4 + 3 and all("not available offline" in r.verdict for r in not_run)
    assert {r.quantity.split(":")[0] for r in not_run} == {"wine", "obesity", "bike", "airfoil"}
    trend = [r for r in rows if "no systematic trend" in r.quantity]
    assert len(trend) == 6 and all(r.weak for r in trend)
    t = tally(rows)
    assert (t["claims"], t["run"], t[REPRODUCED], t["not run"], t["check"]) == (34, 11, 11, 23, 8)
    # the converged record's By Layer on Housing at T = 1/2 (per-seed values of report.json): 6.5 combined SEs
    seeds = [0.04091063319185997, 0.035307703597893446, 0.0359104786277475, 0.03546040108635309, 0.032541566175679694]
    answer = {lab: dict(v) for lab, v in PAPER.items()}
    answer["By Layer"]["housing"] = sum(seeds) / 5
    results = _results(answer)
    results["boston"]["chosen"]["layer"] |= {"test_sd": float(torch.tensor(seeds).std()), "test_mse": seeds}
    row = {r.quantity: r for r in U.comparisons(U.Config(), results)}["housing: test MSE, By Layer"]
    assert row.verdict.startswith(NOT_REPRODUCED) and "6.5 combined SEs" in row.verdict
    # the rule states its numbers; a loosened rule (k = 30) passes that row
    loose = {r.quantity: r for r in U.comparisons(U.Config(noise_k=30.0), results)}["housing: test MSE, By Layer"]
    assert loose.verdict == REPRODUCED


def test_wrong_answers_do_not_pass_the_verdicts():
    """The five families of issue 35 §4, each through ``comparisons``: per-partition offsets just
    beyond each cell's noise rule, the right order with absurd values (every MSE × 10, negative
    MSEs), NaN or inf for a partition and for all, a partition not run, fractions for the numbers
    (/100): each passes at most a quarter of the counted claims, and at most a quarter of those
    run. The weak "no trend" claims cannot carry a wrong answer's tally."""
    from .adversarial import absurd, at_most_a_quarter, fractions, missing_method, non_finite, offsets, passes

    own = _rows(PAPER)
    full = passes(own)
    assert full == (11, 34)

    def quarter(rows, what):
        at_most_a_quarter(rows, what)
        t = tally(rows)
        assert t[REPRODUCED] + t["same ordering, smaller margin"] <= t["run"] / 4, (what, t)

    for answer in offsets(PAPER, lambda m, c, v: _allowed(m, c)):
        quarter(_rows(answer), "offsets")
        # a loosened rule (k = 30 instead of 3) lets these offsets pass: the test would see it
        assert passes(_rows(answer, U.Config(noise_k=30.0)))[0] > tally(own)["run"] / 4
    for answer in absurd(PAPER, low=0.0):
        quarter(_rows(answer), "absurd")
    times10 = _rows({lab: {c: 10 * v for c, v in by.items()} for lab, by in PAPER.items()})
    assert passes(times10)[0] <= 1  # only Concrete's "random lowest" (the order is kept)
    neg = list(absurd(PAPER, low=0.0))[1]
    assert all("implausible" in r.verdict for r in _rows(neg) if "test MSE" in r.quantity and r.ours is not None)
    quarter(_rows(fractions(PAPER)), "fractions")
    # NaN or inf for one partition: its rows (2 MSEs, the trend and the ordering claims) fail, nothing leaves the
    # denominator; the other partitions keep the paper's numbers and still pass theirs (their rows are right)
    answers = list(non_finite(PAPER))
    for answer in answers[:-1]:
        bad = next(m for m, by in answer.items() if not all(math.isfinite(v) for v in by.values()))
        rows = _rows(answer)
        assert passes(rows)[1] == full[1]
        hit = [r for r in rows if bad in r.quantity or "no systematic trend" in r.quantity or "lowest" in r.quantity]
        hit = [r for r in hit if r.ours is not None and "learning rate" not in r.quantity]
        assert hit and all(r.verdict.startswith(f"{NOT_REPRODUCED}: the run produced") for r in hit), bad
        assert passes(rows)[0] <= full[0] - len(hit)
    quarter(_rows(answers[-1]), "NaN everywhere")
    assert passes(_rows(answers[-1]))[0] == 0
    # a partition not run: its rows and the claims over all four are "not run", in the denominator (no KeyError)
    for lab, answer in missing_method(PAPER):
        rows = _rows(answer)
        assert passes(rows)[1] == full[1]
        gone = [r for r in rows if f"test MSE, {lab}" in r.quantity and not r.quantity.startswith(("wine", "obes"))]
        assert len([r for r in gone if r.quantity.split(":")[0] in COLS.values()]) == 2
        assert all(r.verdict.startswith("not run") for r in gone)
        trend = [r for r in rows if "no systematic trend" in r.quantity and r.quantity.split(":")[0] in COLS.values()]
        assert all(r.verdict.startswith("not run") and lab in r.verdict for r in trend)
    # a partition left out of the config: the same
    cfg = U.Config(partitions=("random", "layer", "neuron"))
    rows = U.comparisons(cfg, _results({k: v for k, v in PAPER.items() if k != "Fully-Factorized"}))
    assert passes(rows)[1] == full[1] and sum(r.verdict.startswith("not run") for r in rows) == 23 + 2 + 2 + 1


def test_old_families_and_what_the_noise_of_table_3_cannot_tell():
    """Constants, shuffled and reversed answers (issue 26 §1) fail the one ordering claim Table 3
    makes on the offline data ("random performs better" on Concrete) and cannot carry the weak
    "no trend" claims through it. Table 3's own noise is a fact the rows state: its sd/√5 (0.0004-
    0.0013) exceeds the gaps between its partitions (0.0003-0.0017), so a constant near the
    column's middle passes the value rows, as any run whose partitions tie would."""
    from .adversarial import constants, passes, reversed_ranks, shuffled

    def strong(rows):  # the run claims that are neither values nor weak
        return [r for r in rows if "lowest" in r.quantity and not r.verdict.startswith("not run")]

    for answer in [*constants(PAPER), shuffled(PAPER), reversed_ranks(PAPER)]:
        rows = _rows(answer)
        assert passes(strong(rows)) == (0, 1)
    middle = list(constants(PAPER))[2]
    values = [r for r in _rows(middle) if "test MSE" in r.quantity and r.ours is not None]
    assert sum(r.verdict == REPRODUCED for r in values) >= 6  # the paper's noise, stated in the module's docstring
    assert max(smallest_gap([PAPER[lab][c] for lab in PAPER]) for c in COLS.values()) < min(
        _allowed(lab, c) / 3 for lab in PAPER for c in COLS.values()
    )


def test_rejudge_rebuilds_the_rows_of_a_written_report(tiny_report):
    """``rejudge`` rebuilds the same rows from a report's numbers and config (issue 35 §7), and
    ``passes()`` equals the README's tally (``claim_tally``) of the written report."""
    from .adversarial import passes

    _, report = tiny_report
    rows = U.rejudge(json.loads(json.dumps(report)))
    carried = [v for s in ("T = 1", "T = 0.5") for v, _ in carried_verdicts([r for r in rows if r.setting == s])]
    assert carried == [c["verdict"] for c in report["comparisons"]]
    t = claim_tally(report)
    assert passes(rows, "T = 0.5") == (t[REPRODUCED] + t["same ordering, smaller margin"], t["claims"])


def test_early_stopping_stops_after_patience_and_leaves_the_chain_alone():
    """App. G's early stopping: a chain that does not stop is the fixed-budget chain, bit for bit
    (the same MSEs); with a short patience it stops once the validation MSE of its current
    network has not improved for that many epochs, and predicts from its own second half."""
    cfg = U.Config(num_steps=330, num_draws=20, download=False, early_stopping=False)
    data = U.load_split(cfg, "boston", 0)
    fixed = U.run_one(cfg, data, "random", 1e-5, seed=0)
    on = U.run_one(replace(cfg, early_stopping=True, patience=1000), data, "random", 1e-5, seed=0)
    assert not on["stopped_early"] and on["stopped_at_epoch"] == 30
    assert (on["val_mse"], on["test_mse"], on["num_draws"]) == (fixed["val_mse"], fixed["test_mse"], 20)
    assert "stopped_early" not in fixed and U.Config().early_stopping and U.Config().patience == 100
    short = U.run_one(replace(cfg, early_stopping=True, patience=3), data, "random", 1e-5, seed=0)
    assert short["stopped_early"] and short["stopped_at_epoch"] == short["best_val_epoch"] + 3
    assert short["steps_run"] == 11 * short["stopped_at_epoch"] < 330 and 1 <= short["num_draws"] <= 20
    assert math.isfinite(short["test_mse"]) and short["test_mse"] != fixed["test_mse"]
    with pytest.raises(ValueError, match="patience"):
        U.run(U.Config(patience=0), "/nonexistent/never")
