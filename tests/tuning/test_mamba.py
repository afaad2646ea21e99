"""MAMBA (Coullon, South & Nemeth 2023, Algorithm 1): round and budget arithmetic, the choice
against exact stationary laws, failing arms, validation, traces and resume."""

import json
import math

import pytest
import torch
from support.tuning import InterruptedKSD, exact_distance, linreg, posterior_draws

from structmc import Budget
from structmc.tuning import (
    Arm,
    TuningResult,
    grid,
    grid_search,
    heuristic,
    lr_from_paper,
    mamba,
    num_rounds,
    round_budget,
    round_sizes,
    survivors,
)


# -- Algorithm 1 arithmetic ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "arms, eta, sizes",
    [
        (9, 3, [9, 3]),
        (27, 3, [27, 9, 3]),
        (10, 3, [10, 3]),
        (26, 3, [26, 8]),
        (81, 3, [81, 27, 9, 3]),
        (8, 2, [8, 4, 2]),
        (56, 3, [56, 18, 6]),
        (2, 3, [2]),
        (1, 3, [1]),
    ],
)
def test_rounds_and_survivors(arms, eta, sizes):
    assert round_sizes(arms, eta) == sizes
    assert num_rounds(arms, eta) == len(sizes)
    if arms >= eta:
        assert num_rounds(arms, eta) == math.floor(math.log(arms) / math.log(eta) + 1e-12)
    assert survivors(9, 3) == 3 and survivors(3, 3) == 1 and survivors(10, 3) == 3 and survivors(2, 3) == 1


def test_round_budgets_follow_algorithm_1():
    T = Budget(seconds=12.0)
    # r_i = T / (|S_i| R): 9 arms -> R = 2: 9 x 12/18, then 3 x 12/6; each round spends T/R
    assert round_budget(T, 9, 2).seconds == pytest.approx(12.0 / 18)
    assert round_budget(T, 3, 2).seconds == pytest.approx(2.0)
    assert round_budget(Budget(iterations=5400), 27, 3).iterations == 66  # floor(5400 / 81)
    assert round_budget(Budget(grad_evals=100), 9, 2).grad_evals == 5
    assert round_budget(Budget(iterations=5), 9, 2).iterations == 1  # at least one


# -- the choice against exact answers ---------------------------------------------------------------
LRS = [0.02, 0.1, 5.0]  # 5.0 >> 4/λ_max: overflows within round 0
BATCHES = [None, 6, 3]  # of N = 12, drawn without replacement (exact law below)


def _tune(seed=0, executor=None, budget=Budget(iterations=4500), lrs=LRS, **kw):
    energy, data, model = linreg(N=12, d=2)
    init = posterior_draws(model, 48)  # chains start at the target: the law, not burn-in, decides
    arms = grid("sgld", lr=lrs, batch_size=BATCHES)
    res = mamba(
        energy,
        init,
        arms,
        budget,
        data=data,
        num_chains=48,
        batching="without_replacement",
        seed=seed,
        thin=1,
        executor=executor,
        progress=False,
        max_samples=2000,
        metric_cost=None,
        **kw,
    )
    return res, arms, model


def test_chooses_the_arm_whose_exact_law_is_closest_and_records_the_divergent_one():
    res, arms, model = _tune()
    dist = {i: exact_distance(model, a.sampler["lr"], a.batch_count(12)) for i, a in enumerate(arms)}
    stable = {i: d for i, d in dist.items() if math.isfinite(d)}
    assert len(stable) == 6  # the three lr = 5 arms have no stationary law
    best = min(stable, key=stable.get)
    assert res.best_index == best, (res.summary(), dist)
    first = res.rounds[0]
    diverged = {i for i, a in enumerate(arms) if a.sampler["lr"] == 5.0}
    by_index = {r["index"]: r for r in first["results"]}
    for i in diverged:
        assert by_index[i]["metric"] == math.inf and "diverged" in by_index[i]["error"]
        assert by_index[i]["iterations"] < first["budget"]["iterations"]
    pruned = {p["index"]: p["reason"] for p in first["pruned"]}
    assert diverged <= set(pruned) and all(pruned[i].startswith("failed") for i in diverged)
    # KSD orders the stable arms of round 0 like their exact distances (close pairs may swap)
    from scipy.stats import spearmanr

    stable_results = [r for r in first["results"] if r["index"] in stable]
    rho = spearmanr([r["metric"] for r in stable_results], [stable[r["index"]] for r in stable_results])[0]
    assert rho >= 0.8, rho
    # budget bookkeeping: each round spends T / R in iterations
    for r in res.rounds:
        per = r["budget"]["iterations"]
        assert per == 4500 // (len(r["arms"]) * 2)
        assert all(x["iterations"] == per for x in r["results"] if not x["error"])


def test_same_seed_same_choice_and_trace():
    a, _, _ = _tune(seed=3)
    b, _, _ = _tune(seed=3)
    strip = lambda res: [
        [{k: v for k, v in x.items() if not k.endswith("_s") and k != "seconds"} for x in r["results"]]
        for r in res.rounds
    ]
    assert a.best_index == b.best_index and strip(a) == strip(b)


def test_arms_continue_their_run_across_rounds(tmp_path):
    """restart="state": the surviving arm is one chain of r_0 + r_1 iterations, bit for bit."""
    from structmc.tuning import Problem, arm_seed

    energy, data, model = linreg(N=12, d=2)
    init = torch.zeros(2, dtype=torch.float64)
    arms = grid("sgld", lr=[0.02, 0.05, 0.1], batch_size=[None, 6, 3])
    res = mamba(energy, init, arms, Budget(iterations=360), data=data, seed=5, thin=1, out_dir=tmp_path, progress=False)
    best = res.best_index
    total = sum(r["budget"]["iterations"] for r in res.rounds)  # 20 + 60
    assert total == 80 and all(best in r["arms"] for r in res.rounds)
    saved = torch.load(tmp_path / "progress.pt", weights_only=False)["states"][best]["state"]
    direct = Problem(energy, init, data=data).run(arms[best], seed=arm_seed(5, best))
    direct.sample(total)
    assert saved["iteration"] == total
    assert torch.equal(saved["sampler_state"]["theta"], direct.theta.cpu())
    # restart="position" re-seeds each round: the same arm ends elsewhere
    other = mamba(
        energy,
        init,
        arms,
        Budget(iterations=360),
        data=data,
        seed=5,
        thin=1,
        restart="position",
        out_dir=tmp_path / "position",
        progress=False,
    )
    if other.best_index == best:
        pos = torch.load(tmp_path / "position" / "progress.pt", weights_only=False)["states"][best]["theta"]
        assert not torch.equal(pos, direct.theta.cpu())


def test_all_samples_option_and_fssd_metric_run():
    res, arms, _ = _tune(budget=Budget(iterations=900), samples="all", metric="fssd", lrs=[0.02, 0.1, 0.3])
    assert res.complete and res.best is not None
    # lr = 0.3 (just unstable) has grown ~10^4-fold in 50 iterations without overflowing: FSSD (Gaussian
    # kernel, median bandwidth) must not mistake spread-out samples for good ones
    exploding = {i for i, a in enumerate(arms) if a.sampler["lr"] == 0.3}
    assert not exploding & set(res.rounds[0]["kept"])
    assert res.settings["metric"]["name"] == "fssd" and res.settings["samples"] == "all"
    r1 = res.rounds[1]["results"]
    assert all(x["kept"] > 900 // 18 for x in r1 if not x["error"])  # earlier rounds' samples included


def test_a_segment_shorter_than_thin_x_min_samples_is_refused():
    """4 iterations per arm at thin 10 used to be scored on one draw each and a winner named."""
    energy, data, _ = linreg(N=12, d=2)
    with pytest.raises(ValueError, match="too small to score.*at least iterations=300"):
        mamba(
            energy,
            torch.zeros(2, dtype=torch.float64),
            grid("sgld", lr=[0.01, 0.02, 0.03]),
            Budget(iterations=12),
            data=data,
            thin=10,
            progress=False,
        )  # 4 iterations per arm


def test_user_metric_and_grid_search_and_heuristic():
    energy, data, model = linreg(N=12, d=2)
    pm, _ = model.posterior()

    def mean_error(samples, problem):  # any function of the samples, lower is better
        return float((samples.mean(0) - torch.as_tensor(pm)).norm())

    arms = grid("sgld", lr=[0.02, 0.1])
    res = grid_search(
        energy,
        torch.zeros(2, dtype=torch.float64),
        arms,
        Budget(iterations=300),
        data=data,
        batch_size=0.5,
        metric=mean_error,
        thin=1,
        progress=False,
    )
    assert len(res.rounds) == 1 and len(res.rounds[0]["results"]) == 2
    assert all(a.batch_size == 0.5 for a in res.arms)
    assert all(r["iterations"] == 300 for r in res.rounds[0]["results"])
    assert res.settings["metric"]["name"] == "mean_error"
    h = heuristic(1000, "sgld")
    assert h.sampler["lr"] == pytest.approx(2e-3) and h.batch_size == 0.1
    assert heuristic(1000, "sghmc", num_leapfrog=10).sampler == {"name": "sghmc", "num_leapfrog": 10, "lr": 1e-3}
    assert lr_from_paper("sgnht", 1e-5) == 1e-5 and lr_from_paper("sgld", 1e-5) == 2e-5


def test_control_variate_and_structured_arms():
    energy, data, model = linreg(N=12, d=2)
    pm, _ = model.posterior()
    arms = [
        Arm({"name": "sgld", "lr": 0.02}, 3, "cv"),
        Arm({"name": "sghmc", "lr": 1e-3, "num_leapfrog": 2}, 3, "cv"),
        Arm({"name": "sgld", "lr": 0.02}, 3, structured={"partition": "factorized"}),
        Arm(
            {"name": "sgld", "lr": 0.02},
            3,
            structured={"partition": "factorized", "mask": "bernoulli", "rho": 0.5, "num_copies": 2},
        ),
    ]
    res = mamba(
        energy,
        torch.zeros(2, dtype=torch.float64),
        arms,
        Budget(grad_evals=400),
        data=data,
        centre=torch.as_tensor(pm),
        thin=1,
        progress=False,
    )
    r0 = {r["index"]: r for r in res.rounds[0]["results"]}
    assert all(r["error"] is None for r in r0.values())
    # a grad_evals budget: CV costs 2 per update, SGHMC-CV 2 per leapfrog step, S-SGLD M = 2, Sd-SGLD K = 2
    per = res.rounds[0]["budget"]["grad_evals"]
    assert per == 100
    assert r0[0]["iterations"] == 50 and r0[1]["iterations"] == 25 and r0[2]["iterations"] == 50
    assert all(abs(r["grad_evals"] - per) < 4 for r in r0.values())


# -- bad input, before any compute ---------------------------------------------------------------
def test_bad_input_is_refused_before_compute():
    energy, data, _ = linreg(N=12, d=2)
    init = torch.zeros(2, dtype=torch.float64)
    arms = grid("sgld", lr=[0.01, 0.02, 0.03])
    with pytest.raises(ValueError, match="empty"):
        mamba(energy, init, [], Budget(iterations=10), data=data)
    with pytest.raises(ValueError, match="empty"):
        grid("sgld", lr=[])
    with pytest.raises(ValueError, match="eta"):
        mamba(energy, init, arms, Budget(iterations=10), data=data, eta=1)
    with pytest.raises(ValueError, match="positive"):
        mamba(energy, init, arms, Budget(iterations=0), data=data)
    with pytest.raises(ValueError, match="exactly one"):
        mamba(energy, init, arms, Budget(iterations=10, seconds=1.0), data=data)
    with pytest.raises(TypeError, match="Budget"):
        mamba(energy, init, arms, 10, data=data)
    with pytest.raises(ValueError, match="no hyperparameter.*friction"):
        grid("sgld", lr=[0.1], friction=[0.1])
    with pytest.raises(ValueError, match="unknown key"):
        Arm({"name": "sgnht", "lr": 0.1, "alpha": 0.1})
    with pytest.raises(ValueError, match="exceeds"):
        mamba(energy, init, [Arm({"name": "sgld", "lr": 0.1}, 50)], Budget(iterations=1000), data=data)
    with pytest.raises(ValueError, match="fraction"):
        Arm({"name": "sgld", "lr": 0.1}, 1.5)
    with pytest.raises(ValueError, match="unknown metric"):
        mamba(energy, init, arms, Budget(iterations=10), data=data, metric="kds")
    with pytest.raises(ValueError, match="num_copies"):
        Arm({"name": "sgld", "lr": 0.1}, structured={"partition": "factorized", "num_copies": 2})


def test_every_arm_failing_is_an_error_naming_them():
    energy, data, _ = linreg(N=12, d=2)
    arms = grid("sgld", lr=[5.0, 6.0])
    with pytest.raises(RuntimeError, match="every arm failed.*diverged"):
        mamba(energy, torch.zeros(2, dtype=torch.float64), arms, Budget(iterations=200), data=data, progress=False)


# -- trace, plot, resume --------------------------------------------------------------------------
def test_trace_is_json_and_resume_continues_exactly(tmp_path):
    full, arms, _ = _tune(seed=1, budget=Budget(iterations=2700), out_dir=tmp_path / "full")
    on_disk = json.loads((tmp_path / "full" / "trace.json").read_text())
    assert on_disk["best_index"] == full.best_index and on_disk["complete"]
    assert on_disk["rounds"][0]["results"][-1]["metric"] == "inf"  # JSON has no inf: written as a string
    assert (tmp_path / "full" / "metric_by_round.png").stat().st_size > 0
    again = TuningResult.load(tmp_path / "full" / "trace.json")
    assert again.best == full.best and [r["kept"] for r in again.rounds] == [r["kept"] for r in full.rounds]
    assert again.rounds[0]["results"][-1]["metric"] == math.inf

    part = tmp_path / "part"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C in round 1 (6 stable arms scored in round 0)
        _tune(seed=1, budget=Budget(iterations=2700), out_dir=part, metric=InterruptedKSD(at=8))
    trace = json.loads((part / "trace.json").read_text())
    assert len(trace["rounds"]) == 1 and not trace["complete"]
    resumed, _, _ = _tune(seed=1, budget=Budget(iterations=2700), out_dir=part, resume=True)
    strip = lambda res: [[(x["index"], x["metric"], x["iterations"]) for x in r["results"]] for r in res.rounds]
    assert resumed.best_index == full.best_index and strip(resumed) == strip(full)
    with pytest.raises(ValueError, match="cannot resume"):
        _tune(seed=2, budget=Budget(iterations=2700), out_dir=part, resume=True)


@pytest.mark.parametrize(
    "key, value", [("num_copies", 2.5), ("num_groups", 0), ("history", "100"), ("num_copies", True)]
)
def test_structured_integer_settings_are_checked_not_truncated(key, value):
    s = {"partition": "random", "num_groups": 2, "mask": "bernoulli", "rho": 0.5, "num_copies": 2, key: value}
    with pytest.raises(ValueError, match=key):
        Arm({"name": "sgld", "lr": 0.1}, structured=s)
