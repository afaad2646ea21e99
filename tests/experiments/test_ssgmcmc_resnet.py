"""ssgmcmc-resnet (Table 2, Tables 5-8): tiny end to end; the methods' energies and samplers;
CIFAR-10 / SVHN when absent and when present; an interrupted run resumed."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import structmc
from structmc.data import Dataset
from structmc.experiments import get
from structmc.experiments._report import COMPARISON_FIELDS, REPORT_FIELDS
from structmc.storage import RunFolder
from structmc.structured import StructuredEnergy

rn = get("ssgmcmc-resnet")


def test_methods_build_the_papers_structures():
    cfg = rn.PRESETS["tiny"]
    base = rn.make_energy(cfg, 100)
    assert not any(True for _ in base.module.buffers())  # no normalisation layers: nothing unsampled
    for fam in ("pSGLD", "SGHMC"):
        s4 = rn.make_energy_for(f"S-{fam}_4", None, base, cfg, 10)
        assert isinstance(s4, StructuredEnergy) and s4.partition.num_groups == 4 and s4.mask is None
        assert s4.partition.group_ids[:9].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]  # ordered: i mod M
        sd = rn.make_energy_for(f"Sd-{fam}", 0.5, base, cfg, 10)
        assert sd.partition.num_groups == base.space.dim and sd.num_copies == 2 and sd.mask.rho == 0.5
        assert rn.make_energy_for(fam, None, base, cfg, 10) is base
    assert rn.make_energy(cfg, 100, in_channels=3).module.conv1.in_channels == 3  # CIFAR-10 / SVHN
    # the authors' optimisers in the library's convention
    p = rn.make_sampler("Sd-pSGLD", 1e-3, cfg, 60_000)
    assert isinstance(p, structmc.PSGLD) and p.lr(0) == pytest.approx(2e-3 / 60_000)
    h = rn.make_sampler("S-SGHMC_2", 1e-2, cfg, 60_000)
    assert isinstance(h, structmc.ScaleAdaptedSGHMC) and h.lr(0) == pytest.approx(1e-4)
    assert h.friction == 0.05 and h.adapt_steps == cfg.adapt_steps == 4 and rn.Config().adapt_steps == 150
    with pytest.raises(ValueError, match="unknown method 'HMC'"):
        rn.family("HMC")
    with pytest.raises(ValueError, match="rho"):
        rn.run(rn.Config(runs=(("Sd-SGHMC", None, 1e-2),)), "/nonexistent/never")
    with pytest.raises(ValueError, match="unknown data set"):
        rn.run(rn.Config(datasets=("imagenet",)), "/nonexistent/never")


def test_tiny_end_to_end(tmp_path, fashion_mnist_data):
    # the Fashion-MNIST files, or a stand-in in their IDX format: the "files" path either way
    report = rn.run("tiny", tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    res = report["numbers"]["results"]["fashion-mnist"]
    assert set(res) == {
        "pSGLD, lr 1e-05",
        "S-pSGLD_2, lr 0.001",
        "Sd-pSGLD rho=0.5, lr 0.001",
        "SGHMC, lr 0.01",
        "Sd-SGHMC rho=0.5, lr 0.01",
    }
    assert res["S-pSGLD_2, lr 0.001"]["evaluations_per_step"] == 2
    assert res["Sd-SGHMC rho=0.5, lr 0.01"]["evaluations_per_step"] == 2
    assert all(r["num_draws"] >= 1 and 0 <= r["accuracy"] <= 1 for r in res.values())
    assert report["reduced"] and (tmp_path / "resnet20_fashion-mnist.png").exists()
    mixing = [
        c
        for c in report["comparisons"]
        if " IAC" in c["quantity"] or " ESS" in c["quantity"] or c["quantity"].startswith("Table 2")
    ]
    # a 6-iteration trace: every IAC/ESS row not comparable (the per-run values are checks, issue 26)
    assert mixing and all(c["verdict"].removeprefix("check (").startswith("not comparable") for c in mixing)
    assert all(c["check"] for c in report["comparisons"] if c["quantity"].startswith("FMNIST accuracy"))
    # Table 6 rows are judged for the SGHMC runs (the files, or their stand-in, are there)
    assert "synthetic" not in " ".join(report["notes"])
    quantities = {c["quantity"]: c for c in report["comparisons"]}
    assert quantities["FMNIST accuracy, SGHMC, lr 0.01"]["paper"] == 0.928


def _fake_colour_set(name, n_train=256, n_test=40):
    g = torch.Generator().manual_seed(0)
    return Dataset(
        name,
        "multiclass",
        torch.rand(n_train, 3, 32, 32, generator=g),
        torch.arange(n_train) % 10,
        torch.rand(n_test, 3, 32, 32, generator=g),
        torch.arange(n_test) % 10,
        num_classes=10,
    )


def test_colour_sets_run_when_present_and_say_why_when_absent(tmp_path, monkeypatch):
    cfg = rn.Config(
        runs=(("pSGLD", None, 1e-5), ("SGHMC", None, 1e-3)),
        datasets=("cifar10", "svhn"),
        epochs=1,
        num_draws=2,
        trace_length=4,
        trace_params=10,
        data_dir=str(tmp_path / "empty"),
        download=False,
    )
    report = rn.run(cfg, tmp_path / "absent", progress=False)
    rows = {c["quantity"]: c for c in report["comparisons"]}
    assert rows["CIFAR-10 (Tables 7, 8)"]["verdict"].startswith("not comparable: cifar10: not in")
    assert rows["SVHN (Table 2)"]["verdict"].startswith("not comparable: svhn: not in")
    assert report["numbers"]["results"] == {} and set(report["numbers"]["skipped"]) == {"cifar10", "svhn"}

    import structmc.data as data_module

    monkeypatch.setattr(data_module, "load", lambda name, **kw: _fake_colour_set(name))
    report = rn.run(cfg, tmp_path / "present", progress=False)
    res = report["numbers"]["results"]
    assert set(res) == {"cifar10", "svhn"}
    assert all(r["batch_size"] == 128 and r["steps"] >= 2 for d in res.values() for r in d.values())
    quantities = {c["quantity"] for c in report["comparisons"]}
    assert "CIFAR-10 accuracy, SGHMC, lr 0.001" in quantities  # Table 8 has the rate
    assert not any(q.startswith("SVHN accuracy") for q in quantities)  # SVHN: Table 2 only
    assert (tmp_path / "present" / "resnet20_cifar10.png").exists()


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    cfg = rn.Config(
        runs=(("Sd-SGHMC", 0.5, 1e-2),),
        datasets=("fashion-mnist",),
        epochs=2,
        batch_size=50,
        num_train=200,
        num_test=100,
        trace_length=6,
        trace_params=20,
        num_draws=3,
        data="synthetic",
    )
    whole = rn.run(cfg, tmp_path / "whole", progress=False)["numbers"]["results"]

    real = rn.resumable_iterate

    def interrupted(run, steps, folder, **kw):
        for t, state, info in real(run, steps, folder, **kw):
            yield t, state, info
            if t == 6:  # after the checkpoint at iteration 4 (one epoch)
                raise KeyboardInterrupt

    monkeypatch.setattr(rn, "resumable_iterate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rn.run(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(rn, "resumable_iterate", real)
    folder = tmp_path / "cut" / "runs" / "fashion-mnist" / "Sd-SGHMC_rho=0.5_lr0.01"
    assert RunFolder(folder).load_checkpoint()["run"]["iteration"] == 4
    resumed = rn.run(cfg, tmp_path / "cut", progress=False, resume=True)["numbers"]["results"]
    a, b = whole["fashion-mnist"], resumed["fashion-mnist"]
    for key in a:
        for field in ("accuracy", "iac", "ess", "steps", "num_draws"):
            assert a[key][field] == b[key][field], (key, field)
    assert (folder / "result.json").exists() and RunFolder(folder).checkpoint_file() is None
    again = rn.run(cfg, tmp_path / "cut", progress=False, resume=True)["numbers"]["results"]  # read back
    assert again == resumed


def test_a_diverging_run_is_reported_not_fatal(tmp_path):
    cfg = rn.Config(
        runs=(("pSGLD", None, 1e-5), ("SGHMC", None, 30.0)),
        datasets=("fashion-mnist",),
        epochs=2,
        batch_size=50,
        num_train=200,
        num_test=100,
        trace_length=6,
        trace_params=20,
        num_draws=3,
        adapt_steps=4,
        data="synthetic",
    )
    report = rn.run(cfg, tmp_path, progress=False)
    res = report["numbers"]["results"]["fashion-mnist"]
    assert "diverged_at" in res["SGHMC, lr 30"] and res["pSGLD, lr 1e-05"]["num_draws"] >= 1
    assert (tmp_path / "resnet20_fashion-mnist.png").exists()


def _resnet_rows(cfg, answer, datasets=("fashion-mnist", "cifar10")):
    """The report's rows for an answer ``{run key: {(data set, lr, quantity): value}}``."""
    results = {}
    for name in datasets:
        results[name] = {}
        for method, rho, lr in cfg.runs:
            cell = answer.get(rn._key(method, rho), {})
            r = {q: cell.get((name, lr, q), float("nan")) for q in ("iac", "ess", "accuracy")}
            results[name][f"{rn._key(method, rho)}, lr {lr:g}"] = r
    return rn.comparisons(dataclasses.replace(cfg, datasets=datasets), results, dict.fromkeys(datasets, "files"), {})


def _resnet_paper(runs, datasets=("fashion-mnist", "cifar10")):
    paper: dict = {}
    for name in datasets:
        for (method, rho, lr), (iac, ess, acc) in rn.PAPER_TABLES[name].items():
            if (method, rho, lr) in runs:
                cells = paper.setdefault(rn._key(method, rho), {})
                cells.update({(name, lr, "iac"): iac, (name, lr, "ess"): ess, (name, lr, "accuracy"): acc})
    return paper


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1). Value rows are checks (within 0.9 × the smallest gap
    between the tables' rows); the claims are orderings: a structured run against its base
    sampler at the same rate, and Table 2's ranking. The paper's own per-rate numbers pass every
    pair ordering; constants, numbers shuffled across methods and reversed rankings fail them."""
    from structmc.experiments._report import NOT_REPRODUCED, TIED, Tolerance

    from .adversarial import constants, passes, reversed_ranks, shuffled

    for name in ("fashion-mnist", "cifar10"):
        tol = rn.value_tolerances(name)
        assert tol == pytest.approx({"iac": 0.9, "ess": 0.009, "accuracy": 0.0009})
    # the former rule: ±25 % of the paper's IAC let a constant 800 pass 29 of the 32 FMNIST IAC cells
    fm = [v[0] for v in rn.PAPER_TABLES["fashion-mnist"].values()]
    assert sum(Tolerance(rel=0.25).judge(800.0, p) == "reproduced" for p in fm) == 29 and len(fm) == 32

    # every published rate of Tables 5-8: the pair orderings per step size
    grid = tuple(dict.fromkeys(k for n in ("fashion-mnist", "cifar10") for k in rn.PAPER_TABLES[n]))
    cfg = rn.Config(runs=grid, trace_length=5_000)
    paper = _resnet_paper(grid)
    rows = _resnet_rows(cfg, paper)
    values = [r for r in rows if r.check and " than " not in r.quantity]
    assert len(values) == 192 and all(r.verdict == "check (reproduced)" for r in values)  # the paper's own cells
    pairs = _only_pairs(cfg, paper)
    assert passes(pairs) == (73, 73) and sum(r.check for r in pairs) == 19  # 19 pairs within 1 %: checks
    for answer in constants(paper):
        assert passes(_only_pairs(cfg, answer)) == (0, 73)
        assert all(r.verdict.startswith(TIED) for r in _only_pairs(cfg, answer) if not r.check)
    assert passes(_only_pairs(cfg, reversed_ranks(paper))) == (0, 73)
    assert all(r.verdict.startswith(NOT_REPRODUCED) for r in _only_pairs(cfg, reversed_ranks(paper)) if not r.check)
    # shuffled: 32 of 73 pass, because the paper's S-/Sd- variants of one family mostly sit on the same side
    # of their base sampler at a given rate, so a variant given another variant's numbers keeps the claim's
    # direction; where a base sampler gets a variant's numbers (or its own) the row fails
    assert passes(_only_pairs(cfg, shuffled(paper)))[0] <= 32

    # the default runs (the full preset): pair orderings and Table 2's rankings together
    cfg = rn.Config(trace_length=5_000)
    paper = _resnet_paper(cfg.runs)
    # FMNIST: all 6 claims (4 pair orderings, 2 Table 2 rankings); CIFAR-10: its 2 pair orderings, but
    # not Table 2's rankings, which Tables 7-8's own numbers do not give (the module's notes)
    assert passes(_resnet_rows(cfg, paper)) == (8, 10)
    for answer in [*constants(paper), reversed_ranks(paper)]:
        assert passes(_resnet_rows(cfg, answer)) == (0, 10)
    assert passes(_resnet_rows(cfg, shuffled(paper)))[0] <= 4  # S-SGHMC_8 given S-SGHMC_16's numbers: both worse


def _only_pairs(cfg, answer):
    return [r for r in _resnet_rows(cfg, answer) if " than " in r.quantity]
