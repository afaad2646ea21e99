"""The registries behind the CLI and the Python API: samplers (sampler_from_config), data
sets (structmc.data.DATASETS), experiments (structmc_papers.REGISTRY), and the CLI's use
of them (same samplers and models as before for the same flags, ``experiment --list``)."""

from __future__ import annotations

import json
import types

import pytest
import torch
from torch import nn

import structmc.data as D
import structmc_papers as E
from structmc import cli
from structmc.cli import main
from structmc.registry import Registry
from structmc.samplers import PSGLD, SAMPLERS, SGHMC, SGLD, SGNHT, sampler_from_config, sampler_keys
from structmc.schedules import Constant, Cyclical, Polynomial, StepDecay


def _settings(**kw):
    s = dict(cli.SAMPLE_DEFAULTS)
    s.update(kw)
    return s


# -- samplers ---------------------------------------------------------------------------------
def test_unknown_sampler_and_unknown_keys_are_clear_errors():
    assert isinstance(SAMPLERS, Registry) and SAMPLERS.names() == [
        "sgld",
        "psgld",
        "sghmc",
        "sgnht",
        "scale_adapted_sghmc",
    ]
    with pytest.raises(
        ValueError, match="unknown sampler 'hmc'; choose from psgld, scale_adapted_sghmc, sghmc, sgld, sgnht"
    ):
        sampler_from_config({"name": "hmc", "lr": 1e-3})
    with pytest.raises(
        ValueError, match=r"sampler 'sgld': unknown key\(s\) \['friction'\]; it accepts lr, temperature"
    ):
        sampler_from_config({"name": "sgld", "lr": 1e-3, "friction": 0.1})
    with pytest.raises(ValueError, match=r"num_leapfrog=2 \(fixed at 1\)"):
        sampler_from_config({"name": "psgld", "lr": 1e-3, "num_leapfrog": 2})
    with pytest.raises(ValueError, match="needs lr"):
        sampler_from_config({"name": "sghmc"})
    with pytest.raises(ValueError, match="needs 'name'"):
        sampler_from_config({"lr": 1e-3})
    with pytest.raises(ValueError, match=r"schedule 'step_decay': unknown key\(s\) \['gamma'\]"):
        sampler_from_config({"name": "sgld", "lr": {"kind": "step_decay", "lr": 1e-3, "every": 5, "gamma": 2}})
    assert sampler_keys("sgnht") == ["lr", "a", "num_leapfrog", "temperature", "max_friction"]


@pytest.mark.parametrize(
    "sampler",
    [
        SGLD(1e-3, temperature=0.5),
        SGLD(StepDecay(1e-3, every=100, factor=0.7)),
        PSGLD(
            Polynomial(0.1, b=2.0, gamma=0.6),
            alpha=0.9,
            eps=1e-4,
            num_data=50,
            v_init="first",
            include_gamma=True,
            gamma_probes=2,
            temperature=0.3,
        ),
        SGHMC(
            Cyclical(2e-4, num_steps=100, num_cycles=5),
            friction=0.2,
            beta_hat=0.05,
            num_leapfrog=3,
            resample_momentum=True,
            temperature=0.9,
        ),
        SGNHT(Constant(3e-5), a=0.2, num_leapfrog=2, temperature=1.5),
    ],
    ids=lambda s: type(s).__name__,
)
def test_sampler_config_round_trips(sampler):
    for cfg in (sampler.config(), json.loads(json.dumps(sampler.config()))):  # also through a run folder's JSON
        again = sampler_from_config(cfg)
        assert type(again) is type(sampler) and again.config() == sampler.config() and repr(again) == repr(sampler)


@pytest.mark.parametrize(
    "name, flags, expected",
    [
        ("sgld", {}, SGLD(2e-4, temperature=0.7)),
        ("psgld", {}, PSGLD(2e-4, alpha=0.9, temperature=0.7)),
        ("sghmc", {}, SGHMC(2e-4, friction=0.3, num_leapfrog=2, temperature=0.7)),
        ("sgnht", {}, SGNHT(2e-4, a=0.4, num_leapfrog=2, temperature=0.7)),
        ("sgld", {"schedule": {"kind": "step_decay", "every": 50}}, SGLD(StepDecay(2e-4, every=50), temperature=0.7)),
        (
            "sghmc",
            {"schedule": {"kind": "polynomial", "a": 0.1}},
            SGHMC(Polynomial(0.1), friction=0.3, num_leapfrog=2, temperature=0.7),
        ),
    ],
)
def test_cli_flags_give_the_same_sampler_as_before(name, flags, expected):
    """The hand-built samplers are what ``cli.build_sampler`` returned before the registry:
    each sampler gets only its own hyperparameters among the flags."""
    s = _settings(sampler=name, lr=2e-4, temperature=0.7, friction=0.3, a=0.4, alpha=0.9, num_leapfrog=2, **flags)
    cfg = cli.sampler_config(s)
    assert (
        set(cfg) - {"name", "lr"}
        == {
            "sgld": {"temperature"},
            "psgld": {"alpha", "temperature"},
            "sghmc": {"friction", "num_leapfrog", "temperature"},
            "sgnht": {"a", "num_leapfrog", "temperature"},
        }[name]
    )
    got = sampler_from_config(cfg)
    assert type(got) is type(expected) and got.config() == expected.config()


def test_cli_model_is_the_old_sequential_for_the_same_seed():
    """``structmc sample``'s model: nn.Sequential of Linear layers (Flatten first for images),
    the same parameters as the pre-registry builder seeded with --seed."""
    data = D.load("iris", seed=0)
    s = _settings(dataset="iris", model="mlp", hidden=[8, 4], activation="tanh", seed=11)
    energy = cli._model_energy(s, data)
    torch.manual_seed(11)
    old = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 3))
    flat = torch.cat([p.detach().reshape(-1) for p in old.parameters()])
    assert torch.equal(energy.initial_position().reshape(-1), flat)
    assert energy.likelihood.name == "categorical" and energy.prior_std == 1.0
    assert energy.space.names == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    reg = cli._model_energy(_settings(dataset="diabetes", model="linear"), D.load("diabetes"))
    assert reg.likelihood.name == "gaussian" and reg.likelihood.noise_std == 0.7 and reg.space.dim == 11
    with pytest.raises(ValueError, match="not sized from a data set; structmc sample takes linear, mlp"):
        cli._model_energy(_settings(model="mlp_mnist"), data)


# -- data sets --------------------------------------------------------------------------------
def test_one_data_set_registry_knows_paper_sklearn_and_synthetic_sets(capsys):
    reg = D.DATASETS
    assert {"mnist", "adult", "boston", "movielens-100k", "iris", "breast_cancer", "linear-regression"} <= set(reg)
    assert reg.get("mnist").source == "files" and reg.get("mnist").task == "multiclass"
    assert reg.get("iris").source == "scikit-learn" and reg.get("diabetes").task == "regression"
    assert reg.get("movielens-100k").task == "ratings" and reg.get("linear-regression").source == "synthetic"
    for alias, name in [
        ("FMNIST", "fashion-mnist"),
        ("ml_100k", "movielens-100k"),
        ("housing", "boston"),
        ("breast-cancer", "breast_cancer"),
        ("Fashion_MNIST", "fashion-mnist"),
        ("wine", "wine"),
    ]:
        assert reg.resolve(alias) == name
    with pytest.raises(ValueError, match=r"unknown data set 'imagenet'; choose from adult, .*iris.*yacht"):
        D.load("imagenet")
    assert main(["sample", "--dataset", "imagenet", "--quiet"]) == 2
    assert "structmc: error: unknown data set 'imagenet'; choose from adult" in capsys.readouterr().err
    assert D.load("linear-regression", seed=1).x_train.shape == (100, 3)
    iris = D.load("iris", seed=2)
    assert iris.task == "multiclass" and iris.num_classes == 3 and iris.x_train.shape == (120, 4)


def test_user_sampler_and_data_set_run_through_the_cli(tmp_path):
    @SAMPLERS.register("test_cold_sgld")
    class ColdSGLD(SGLD):
        name = "test_cold_sgld"

        def __init__(self, lr, temperature: float = 0.0):
            super().__init__(lr, temperature)

    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).float()
    D.DATASETS.register(
        "test_toy",
        D.DatasetSpec(
            lambda seed=0: D.Dataset("test_toy", "binary", x[:30], y[:30], x[30:], y[30:], num_classes=2),
            "binary",
            "synthetic",
            "a toy set for the tests",
        ),
    )
    try:
        out = tmp_path / "run"
        assert (
            main(
                [
                    "sample",
                    "--dataset",
                    "test_toy",
                    "--sampler",
                    "test_cold_sgld",
                    "--lr",
                    "1e-2",
                    "--steps",
                    "30",
                    "--burn-in",
                    "10",
                    "--chains",
                    "1",
                    "--temperature",
                    "0",
                    "--batch-size",
                    "10",
                    "--out",
                    str(out),
                    "--quiet",
                ]
            )
            == 0
        )
        report = json.loads((out / "report.json").read_text())
        assert report["sampler"]["sampler"] == "test_cold_sgld" and report["sampler"]["temperature"] == 0.0
        assert isinstance(sampler_from_config(report["sampler"]), ColdSGLD)
    finally:
        SAMPLERS.unregister("test_cold_sgld")
        D.DATASETS.unregister("test_toy")
    with pytest.raises(TypeError, match="subclass of structmc.samplers.Sampler"):
        SAMPLERS.register("test_not_a_sampler", object)


def test_cli_runs_with_the_same_seed_are_identical(tmp_path):
    args = [
        "sample",
        "--dataset",
        "iris",
        "--model",
        "mlp",
        "--hidden",
        "4",
        "--sampler",
        "sghmc",
        "--lr",
        "1e-4",
        "--steps",
        "30",
        "--burn-in",
        "10",
        "--chains",
        "1",
        "--seed",
        "4",
        "--quiet",
    ]
    for k in range(2):
        torch.manual_seed(100 + k)  # the global random state does not matter
        assert main(args + ["--out", str(tmp_path / f"r{k}")]) == 0
    a, b = (sorted((tmp_path / f"r{k}" / "run" / "samples").iterdir()) for k in range(2))
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


# -- experiments ------------------------------------------------------------------------------
def test_experiment_records():
    assert isinstance(E.REGISTRY, Registry) and E.REGISTRY.names()[:2] == ["demo", "ssgmcmc-linreg"]
    assert {"gibbs-xor", "gibbs-mnist", "gibbs-augment"} <= set(E.REGISTRY.names())
    for name, exp in E.REGISTRY.items():
        module = E.get(name)
        assert exp.name == name and module is exp.load() and exp.presets == tuple(module.PRESETS)
        assert {"tiny", "quick", "full"} <= set(exp.presets)
        assert all(d in D.DATASETS for d in exp.datasets)
    fig2 = E.REGISTRY.get("structured_linreg")  # the older name, an alias
    assert fig2 is E.REGISTRY.get("ssgmcmc-linreg")
    assert fig2.paper is E.PAPERS["structured-sgmcmc"] and fig2.figure == "Fig. 2"
    assert fig2.published["map"] == [0.52, 0.31, 0.47, 0.84] and fig2.datasets == ("linear-regression",)
    assert E.REGISTRY.get("demo").paper is None and E.REGISTRY.get("demo").datasets == ("diabetes",)
    assert fig2.paper.citation == "Alexos, Boyd & Mandt (2022)"
    assert (
        E.PAPERS["psgld"].citation == "Li et al. (2016)" and E.PAPERS["blocked-gibbs"].citation == "Papamarkou (2023)"
    )
    with pytest.raises(ValueError, match="unknown experiment 'fig9'; choose from demo, gibbs-augment"):
        E.get("fig9")


def test_experiment_list_and_unknown_name(capsys):
    assert main(["experiment", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "paper", "figure", "presets", "data", "sets"]
    row = next(line for line in lines if line.startswith("ssgmcmc-linreg"))
    assert "Alexos, Boyd & Mandt (2022)" in row and "Fig. 2" in row and "tiny, quick, full" in row
    assert any(line.startswith("demo ") and "diabetes" in line for line in lines)
    assert main(["experiment", "fig9"]) == 2
    assert "unknown experiment 'fig9'; choose from demo, gibbs-augment, gibbs-mnist" in capsys.readouterr().err
    assert main(["experiment"]) == 2


def test_user_experiment_runs_through_the_cli(tmp_path, capsys):
    module = types.ModuleType("test_user_experiment")
    module.PRESETS = {"one": 1}

    def run(preset, out, progress=None):
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(f"# user experiment, preset {preset}\n")
        return {"ok": True}

    module.run = run
    E.REGISTRY.register("test_user", E.Experiment("test_user", module, figure="Table 0", published={"x": 1.0}))
    try:
        assert main(["experiment", "--list"]) == 0
        assert any(
            line.startswith("test_user") and "Table 0" in line and "one" in line
            for line in capsys.readouterr().out.splitlines()
        )
        assert main(["experiment", "test_user", "--preset", "one", "--out", str(tmp_path), "--quiet"]) == 0
        assert "preset one" in capsys.readouterr().out
        with pytest.raises(SystemExit, match="unknown preset 'quick'"):
            main(["experiment", "test_user", "--out", str(tmp_path)])
    finally:
        E.REGISTRY.unregister("test_user")


def test_reproduce_list_and_option_errors(capsys, tmp_path):
    assert main(["reproduce", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["name", "paper", "figure"] and "what quick cuts" in lines[0]
    row = next(line for line in lines if line.startswith("psgld-gaussian-2d"))
    assert "Li et al. (2016)" in row and "Fig. 1" in row and " s " in row  # measured quick time

    def usage_error(argv, message):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err

    usage_error(
        ["reproduce", "demo", "--preset", "tiny", "--seed", "1", "--out", str(tmp_path)], "does not take --seed"
    )
    if not torch.cuda.is_available():
        usage_error(
            ["reproduce", "ssgmcmc-linreg", "--preset", "tiny", "--device", "cuda", "--out", str(tmp_path)],
            "no CUDA device",
        )
    usage_error(
        ["reproduce", "ssgmcmc-linreg", "--preset", "tiny", "--seed", "-1", "--out", str(tmp_path)],
        "--seed must be >= 0",
    )


def test_submodules_are_attributes_of_the_package():
    import subprocess
    import sys

    code = (
        "import structmc; "
        "mods = [structmc.diagnostics, structmc.models, structmc.data, structmc.structured, structmc.priors, "
        "structmc.gibbs, structmc.partitions, structmc.tuning, structmc.evaluation]; "
        "assert structmc.data.load and structmc.priors.Laplace and callable(structmc.evaluate); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    import structmc

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        structmc.nope  # noqa: B018


def test_reproduce_resume_of_a_mamba_experiment_reads_back_its_pieces(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    argv = ["reproduce", "mamba-structured", "--preset", "tiny", "--quiet", "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    capsys.readouterr()
    # the tuning's settings name its metric as a folder written before the reproductions left the
    # library did (issue 38: structmc_papers records as structmc.experiments), so such a folder resumes
    trace = json.loads((tmp_path / "run" / "tuning" / "trace.json").read_text())
    assert trace["settings"]["metric"]["function"] == "structmc.experiments._common.log_loss_metric"
    assert main(argv + ["--resume"]) == 0
    assert "finished evaluations read back" in capsys.readouterr().out
    # another seed is another run: refused with one line, before any compute, the pieces kept
    assert main(argv + ["--resume", "--seed", "1"]) == 2
    assert "come from another configuration (seed: 0 there, 1 now)" in capsys.readouterr().err
    assert any((tmp_path / "run" / "units" / "evaluation").rglob("*.json"))
