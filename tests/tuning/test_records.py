"""The tuners' typed records (issue 23): what a task carries and returns pickles and converts to
the trace entries traces have always had; a Problem refuses what a Run refuses, with Run's own
message, before any compute; an arm's structured settings round-trip the structured energy's
own config, older traces' names included."""

import importlib
import json
import math
import pickle

import pytest
import torch
from support.tuning import InterruptedKSD, linreg

import structmc as sm
from structmc import Budget
from structmc.executors import ProcessPoolExecutor
from structmc.tuning import Arm, Problem, arm_seed, grid, mamba
from structmc.tuning.arms import structured_energy
from structmc.tuning.records import ArmCarry, ArmResult, ArmTimings, TuningSettings
from structmc.tuning.task import ArmTask, run_arm

# the keys (and their order) of a trace entry, as trace.json files have always held them
TRACE_KEYS = [
    "index",
    "round",
    "label",
    "iterations",
    "grad_evals",
    "seconds",
    "setup_s",
    "scores_s",
    "metric_s",
    "kept",
    "scored",
    "thin",
    "metric",
    "error",
    "wall_s",
]


def _settings(**kw):
    return TuningSettings("mamba", Budget(iterations=40), "ksd", 3, **{"thin": 1, **kw})


# -- records ---------------------------------------------------------------------------------------
def test_a_task_is_what_the_tuner_runs_and_its_result_is_the_trace_entry():
    """run_arm on a hand-built ArmTask gives, bit for bit, the entry mamba records for that
    arm-round (seed, budget and settings as the driver passes them)."""
    energy, data, _ = linreg(N=12, d=2)
    init = torch.zeros(2, dtype=torch.float64)
    arms = grid("sgld", lr=[0.02, 0.05, 0.1])
    res = mamba(energy, init, arms, Budget(iterations=120), data=data, seed=4, thin=1, progress=False)
    problem = Problem(energy, init, data=data, seed=4)
    settings = TuningSettings("mamba", Budget(iterations=120), "ksd", 3, seed=4, thin=1)
    for entry in res.rounds[0]["results"]:
        i = entry["index"]
        out = run_arm(problem, ArmTask(i, arms[i], 0, Budget(**res.rounds[0]["budget"]), arm_seed(4, i), settings))
        assert isinstance(out, ArmResult) and out.error is None and out.carry.state is not None
        d = out.to_dict()
        assert list(d) == TRACE_KEYS == list(entry)
        timeless = lambda x: {k: v for k, v in x.items() if not k.endswith("_s") and k != "seconds"}
        assert timeless(d) == timeless(entry)
        assert ArmResult.from_dict(d) == ArmResult(**{**out.__dict__, "carry": ArmCarry()})


def test_records_pickle_and_settings_travel_without_the_executor():
    """Executors ship tasks pickled: a task keeps every field; the settings drop a live executor
    (a pool does not pickle) and nothing else."""
    with ProcessPoolExecutor(1) as ex:
        settings = _settings(executor=ex, samples="all", restart="position", out_dir="runs/x")
        with pytest.raises(TypeError, match="pickle"):
            pickle.dumps(ex)  # the reason the settings leave it behind
        task = ArmTask(
            3,
            Arm({"name": "sgld", "lr": 0.1}, 6),
            1,
            Budget(iterations=7),
            11,
            settings,
            ArmCarry({"iteration": 5}, torch.ones(2, 3), torch.zeros(4, 3)),
        )
        back = pickle.loads(pickle.dumps(task))
    assert back.settings.executor is None and settings.executor is ex
    plain = lambda st: {k: v for k, v in vars(st).items() if k not in ("executor", "metric")}
    assert plain(back.settings) == plain(settings) and back.settings.metric.config() == settings.metric.config()
    assert (back.index, back.arm, back.round, back.budget, back.seed) == (3, task.arm, 1, Budget(iterations=7), 11)
    assert back.start.state == {"iteration": 5} and torch.equal(back.start.theta, torch.ones(2, 3))
    r = ArmResult(3, 1, "x", 7, 7, 0.5, ArmTimings(0.1, 0.2, 0.3, 1.0), 4, 4, 2, 0.25, None, None, task.start)
    assert pickle.loads(pickle.dumps(r)).to_dict() == r.to_dict()


def test_carry_start_follows_restart_and_samples():
    c = ArmCarry({"s": 1}, torch.ones(1, 2), torch.zeros(3, 2))
    assert c.start(_settings()) == ArmCarry({"s": 1}, None, None)
    assert c.start(_settings(restart="position")).state is None
    assert torch.equal(c.start(_settings(restart="position")).theta, c.theta)
    assert torch.equal(c.start(_settings(samples="all")).samples, c.samples)
    assert ArmCarry.from_dict(c.to_dict()).state == {"s": 1} and ArmCarry.from_dict(None) == ArmCarry()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(thin=0), "thin must be an integer >= 1"),
        (dict(warmup=1.5), "warmup must be an integer >= 0"),
        (dict(samples="some"), "samples must be"),
        (dict(restart="chain"), "restart must be"),
        (dict(metric_cost=0.0), "metric_cost must be > 0"),
        (dict(resume=True), "resume=True needs out_dir"),
    ],
)
def test_settings_are_checked_on_construction(kw, match):
    with pytest.raises(ValueError, match=match):
        _settings(**kw)


# -- a Problem refuses what a Run refuses ---------------------------------------------------------
def _bad(name):
    energy, (X, y), _ = linreg(N=12, d=2)
    init = torch.zeros(2, dtype=torch.float64)
    return (
        energy,
        init,
        {
            "wide inputs": dict(data=(torch.randn(12, 3, dtype=torch.float64), y)),
            "float32 inputs": dict(data=(X.float(), y)),
            "fractional num_chains": dict(data=(X, y), num_chains=2.5),
            "NaN start": dict(data=(X, y), init=torch.tensor([math.nan, 0.0], dtype=torch.float64)),
            "unknown batching": dict(data=(X, y), batching="bogus"),
        }[name],
    )


@pytest.mark.parametrize(
    "name", ["wide inputs", "float32 inputs", "fractional num_chains", "NaN start", "unknown batching"]
)
def test_the_tuners_refuse_what_run_refuses_with_its_message_before_any_compute(name, monkeypatch):
    """Problem and its arms' checks go through Run.__init__ itself. Before, inputs the data
    could not run on were found by every worker (a RuntimeError after round 0's tasks) and a
    fractional num_chains was truncated."""
    energy, init, kw = _bad(name)
    init = kw.pop("init", init)
    with pytest.raises((ValueError, TypeError)) as ran:
        sm.Run(
            energy,
            init,
            sm.SGLD(lr=0.01),
            data=kw["data"],
            num_chains=kw.get("num_chains", 1),
            batching=kw.get("batching", "epoch"),
        )
    tuning_mamba = importlib.import_module("structmc.tuning.mamba")  # the module (the package exports the function)

    def no_task(*a, **k):
        raise AssertionError("a task was submitted")

    monkeypatch.setattr(tuning_mamba, "run_arm", no_task)
    with pytest.raises(type(ran.value)) as tuned:
        mamba(energy, init, grid("sgld", lr=[0.01, 0.02]), Budget(iterations=100), thin=1, progress=False, **kw)
    assert str(tuned.value) == str(ran.value)


# -- structured settings are the structured energy's own ------------------------------------------
STRUCTURED = [
    {"partition": "random", "num_groups": 3, "seed": 2},  # S-SGMCMC
    {
        "partition": "round_robin",
        "num_groups": 2,
        "mask": "bernoulli",
        "rho": 0.4,
        "at_least_one": True,
        "num_copies": 3,
        "history": 20,
        "warmup_steps": 4,
    },
    {"partition": "factorized", "mask": "beta", "a": 2.0, "b": 3.0, "num_copies": 2, "seed": 5},
    {
        "partition": "random",
        "num_groups": 2,
        "mask": "uniform",
        "num_copies": 2,
        "split_batch": True,
        "history": {"capacity": 16, "mode": "reservoir", "thin": 2, "dtype": "torch.float32"},
    },
]


def _chain(energy, data, batch):
    run = sm.Run(
        energy,
        torch.zeros(3, 4, dtype=torch.float64),
        sm.SGLD(lr=0.01),
        data=data,
        batch_size=batch,
        num_chains=3,
        seed=9,
    )
    for _ in run.iterate(30):
        pass
    return run.theta


@pytest.mark.parametrize("s", STRUCTURED, ids=["S", "Sd-bernoulli", "Sd-beta", "Sd-uniform-split"])
def test_structured_settings_round_trip_the_energys_config(s):
    """Arm(structured=energy.config() + partition) builds the same energy: the same config,
    the same groups and the same chain, bit for bit; the arm survives JSON."""
    base, data, _ = linreg(N=12, d=4)
    base = base.with_num_data(12)
    first = structured_energy(base, Arm({"name": "sgld", "lr": 0.01}, 4, structured=s).structured)
    cfg = first.config()
    arm = Arm({"name": "sgld", "lr": 0.01}, 4, structured={"partition": s["partition"], **json.loads(json.dumps(cfg))})
    again = structured_energy(base, arm.structured)
    assert again.config() == cfg
    assert torch.equal(again.partition.group_ids, first.partition.group_ids)
    assert torch.equal(_chain(again, data, 4), _chain(first, data, 4))
    assert Arm.from_dict(json.loads(json.dumps(arm.to_dict()))) == arm
    assert "kind" not in arm.structured and all(
        not isinstance(v, dict) or k == "history" for k, v in arm.structured.items()
    )


def test_older_traces_beta_mask_names_read_as_a_b_and_resume(tmp_path):
    """Traces written before the schema followed StructuredEnergy spelt the Beta mask's a, b as
    alpha, beta: such arms equal today's, and such a folder resumes to the same result."""
    old = {"partition": "random", "num_groups": 2, "mask": "beta", "alpha": 2.0, "beta": 3.0, "num_copies": 2}
    new = {"partition": "random", "num_groups": 2, "mask": "beta", "a": 2.0, "b": 3.0, "num_copies": 2}
    sampler = {"name": "sgld", "lr": 0.02}
    assert Arm(sampler, 4, structured=old) == Arm(sampler, 4, structured=new)
    assert Arm(sampler, 4, structured=old).structured == {**new, "num_copies": 2}
    with pytest.raises(ValueError, match="'a' or its old name 'alpha'"):
        Arm(sampler, 4, structured={**new, "alpha": 2.0})

    energy, data, _ = linreg(N=12, d=2)
    arms = [
        Arm(sampler, 4, structured=new),
        Arm(sampler, 4, structured={**new, "a": 1.0}),
        Arm(sampler, 6),
        Arm({"name": "sgld", "lr": 0.05}, 6),
    ]  # eta 2: rounds of 4 and 2 arms

    def tune(out_dir, metric="ksd", resume=False):
        return mamba(
            energy,
            torch.zeros(2, dtype=torch.float64),
            arms,
            Budget(iterations=240),
            data=data,
            eta=2,
            thin=1,
            progress=False,
            seed=3,
            out_dir=out_dir,
            metric=metric,
            resume=resume,
        )

    full = tune(tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):  # in round 1: progress.pt holds round 0 and its arms' states
        tune(tmp_path / "old", metric=InterruptedKSD(at=len(arms) + 1))
    saved = torch.load(tmp_path / "old" / "progress.pt", weights_only=False)
    assert len(saved["trace"]["rounds"]) == 1 and saved["states"]
    for a in saved["trace"]["arms"]:  # as an older version wrote them
        if a["structured"]:
            a["structured"] = {_OLD.get(k, k): v for k, v in a["structured"].items()}
    torch.save(saved, tmp_path / "old" / "progress.pt")
    _as_folder_from_before_manifests(tmp_path / "old")
    resumed = tune(tmp_path / "old", resume=True)
    strip = lambda r: [[(x["index"], x["metric"], x["iterations"]) for x in rnd["results"]] for rnd in r.rounds]
    assert resumed.best_index == full.best_index and strip(resumed) == strip(full)
    assert [a.to_dict() for a in resumed.arms] == [a.to_dict() for a in full.arms]  # now written as a, b


_OLD = {"a": "alpha", "b": "beta"}


def _as_folder_from_before_manifests(path):
    """A tuning folder as an earlier structmc left it: no manifest, trace.json without folder_format."""
    import json

    (path / "manifest.json").unlink()
    trace = json.loads((path / "trace.json").read_text())
    del trace["folder_format"]
    (path / "trace.json").write_text(json.dumps(trace))
