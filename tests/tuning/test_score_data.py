"""Stochastic scores of MAMBA's KSD/FSSD, ``Problem(score_data=m, score_batches=...)``: the paper's
estimator (Coullon, South & Nemeth 2023, App. B.2: every draw its own minibatch, the sampler's
stochastic gradient) is the default and unbiased; the fixed subset of structmc 0.1.0 is kept,
bit for bit, and is biased (it ranks the arms against the subset's posterior)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import kendalltau
from support.tuning import linreg

from structmc import Budget
from structmc.energy import full_data_value_and_grad
from structmc.tuning import Arm, Problem, mamba


def _at(theta, n):
    return theta.expand(n, theta.shape[0]).clone()


def test_default_stochastic_scores_are_per_draw_and_unbiased():
    """``score_data=m`` (no score_batches): every draw's score is the N/m-scaled gradient on its
    own minibatch, so at one fixed θ the mean of 4,000 draws' scores is the full-data score
    within 4 standard errors (a fixed subset gives one value, the subset's, for every draw)."""
    energy, data, _ = linreg(N=200, d=3, seed=1)
    theta = torch.tensor([0.4, -0.3, 0.8], dtype=torch.float64)
    full = Problem(energy, theta, data=data).scores(theta[None])[0]
    p = Problem(energy, theta, data=data, score_data=5, seed=2)
    assert p.score_batches == "per_draw" and p.score_cost() == 5
    s = p.scores(_at(theta, 4000))
    assert s.shape == (4000, 3) and float(s.std(0).min()) > 0
    z = (s.mean(0) - full) / (s.std(0) / math.sqrt(4000))
    assert float(z.abs().max()) < 4.0, z


def test_per_draw_scores_are_each_draws_own_seeded_minibatch():
    """Draw i is scored on rows ``idx[i]`` of ``torch.randint(N, (n, m))`` from a generator seeded
    with ``seed`` at every call (what the mamba-logreg App. B.2 check drew): same seed, same
    scores, whatever the chunking; another seed, other scores."""
    energy, data, _ = linreg(N=50, d=2, seed=3)
    theta = torch.randn(30, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p = Problem(energy, theta[0], data=data, score_data=4, score_batches="per_draw", seed=7)
    s = p.scores(theta)
    idx = torch.randint(50, (30, 4), generator=torch.Generator().manual_seed(7))
    for i in (0, 13, 29):
        _, g = p.energy.value_and_grad(theta[i : i + 1], tuple(t[idx[i]][None] for t in data))  # N/m-scaled
        torch.testing.assert_close(s[i], -g[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(s, p.scores(theta))  # the same draws, the same scores, call after call
    again = Problem(energy, theta[0], data=data, score_data=4, seed=7, max_score_examples=12)  # 3 draws a call
    torch.testing.assert_close(again.scores(theta), s, rtol=1e-12, atol=1e-12)
    other = Problem(energy, theta[0], data=data, score_data=4, seed=8).scores(theta)
    assert not torch.allclose(other, s)


@pytest.mark.parametrize("m, chunk, per_call", [(7, 4096, 2**18), (40, 16, 64), (50, 4096, 2**18)])
def test_fixed_subset_reproduces_structmc_0_1_0_bit_for_bit(m, chunk, per_call):
    """``score_batches="fixed"`` is 0.1.0's ``score_data=m``: the first m rows of
    ``randperm(N)`` seeded with ``seed``, every draw scored on them (chunked as then)."""
    energy, data, _ = linreg(N=50, d=2, seed=3)
    theta = torch.randn(20, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p = Problem(
        energy,
        theta[0],
        data=data,
        score_data=m,
        score_batches="fixed",
        seed=11,
        score_chunk=chunk,
        max_score_examples=per_call,
    )
    idx = torch.randperm(50, generator=torch.Generator().manual_seed(11))[:m]
    subset = tuple(t.index_select(0, idx) for t in data)
    k = max(1, per_call // min(chunk, m))
    old = torch.cat(
        [full_data_value_and_grad(p.energy, theta[i : i + k], subset, min(chunk, m))[1].neg() for i in range(0, 20, k)]
    )
    assert torch.equal(p.scores(theta), old)
    same = p.scores(_at(theta[3], 3))
    assert torch.equal(same[0], same[1]) and torch.equal(same[1], same[2])  # one subset for every draw
    assert p.score_cost() == m


def test_score_options_are_checked_before_compute():
    energy, data, _ = linreg(N=20, d=2)
    init = torch.zeros(2, dtype=torch.float64)
    for kw, match in (
        (dict(score_data=5, score_batches="per-draw"), "score_batches must be 'per_draw'"),
        (dict(score_data=5, score_batches=True), "score_batches must be 'per_draw'"),
        (dict(score_batches="fixed"), "score_batches='fixed' needs score_data"),
        (dict(score_data=2.5), "score_data must be an integer >= 1, got 2.5"),
        (dict(score_data=0), "score_data must be an integer >= 1"),
        (dict(score_data=21), r"score_data must lie in \[1, 20\]"),
    ):
        with pytest.raises(ValueError, match=match):
            Problem(energy, init, data=data, **kw)

    class Untouchable:  # any evaluation of the target would raise
        def __getattr__(self, name):
            raise AssertionError(f"computed before the check: {name}")

    with pytest.raises(ValueError, match="score_batches must be"):
        mamba(
            Untouchable(),
            init,
            [Arm({"name": "sgld", "lr": 0.01})] * 3,
            Budget(iterations=90),
            data=data,
            score_data=5,
            score_batches="fresh",
            thin=1,
            progress=False,
        )


def _tune(out_dir, score_data=4, **kw):
    energy, data, _ = linreg(N=12, d=2)
    arms = [Arm({"name": "sgld", "lr": lr}, 4) for lr in (0.02, 0.05, 0.1)]
    return mamba(
        energy,
        torch.zeros(2, dtype=torch.float64),
        arms,
        Budget(iterations=90),
        data=data,
        seed=5,
        thin=1,
        out_dir=out_dir,
        progress=False,
        score_data=score_data,
        **kw,
    )


def test_resume_refuses_the_other_score_batches(tmp_path):
    """The trace records ``score_batches`` with ``score_data``: resuming with the other
    estimator is refused; a trace from before the option (a fixed subset) resumes as "fixed"."""
    first = _tune(tmp_path)
    assert first.settings["score_data"] == 4 and first.settings["score_batches"] == "per_draw"
    with pytest.raises(ValueError, match=r"settings or arms differ \(score_batches\)"):
        _tune(tmp_path, resume=True, score_batches="fixed")
    assert _tune(tmp_path, resume=True).best_index == first.best_index
    assert "score_batches" not in _tune(tmp_path / "full", score_data=None).settings  # full-data traces as before

    fixed = _tune(tmp_path / "old", score_batches="fixed")
    saved = torch.load(tmp_path / "old" / "progress.pt", weights_only=False)
    del saved["trace"]["settings"]["score_batches"]  # as structmc 0.1.0 wrote it
    torch.save(saved, tmp_path / "old" / "progress.pt")
    _as_folder_from_before_manifests(tmp_path / "old")
    with pytest.raises(ValueError, match=r"\(score_batches\)"):
        _tune(tmp_path / "old", resume=True)  # 0.1.0 scored on a fixed subset: not the new default
    assert _tune(tmp_path / "old", resume=True, score_batches="fixed").best_index == fixed.best_index


@pytest.mark.parametrize("seed", [0, 1])
def test_per_draw_scores_rank_arms_like_the_full_data_the_fixed_subset_does_not(seed):
    """App. B.2 / Sect. 3.3 ("the stochastic KSD/FSSD produces results similar to the fullbatch"),
    in small: SGLD at batch m = 1 % over five step sizes h = c/N, c ∈ {1e-4, …, 1} (lr = 2h),
    from 30 posterior sds off the mode, one MAMBA round. The per-draw scores pick the full-data
    KSD's best arm and rank all five alike; the fixed subset (its posterior's centre ~√(N/m) = 10
    posterior sds away) picks another arm. The chains are the same in all three runs."""
    energy, data, model = linreg(N=4000, d=2, seed=seed)
    mean, cov = model.posterior()
    init = torch.as_tensor(mean) + 30 * torch.as_tensor(cov).diagonal().sqrt()
    arms = [Arm({"name": "sgld", "lr": 2 * c / 4000}, 40) for c in (1e-4, 1e-3, 1e-2, 1e-1, 1.0)]
    kw = dict(data=data, seed=seed, thin=3, max_samples=200, metric_cost=None, warmup=0, progress=False)
    runs = {
        name: mamba(energy, init, arms, Budget(iterations=5 * 600), **kw, **extra)
        for name, extra in (
            ("full", {}),
            ("per_draw", dict(score_data=40)),
            ("fixed", dict(score_data=40, score_batches="fixed")),
        )
    }
    metric = {
        k: [r["metric"] for r in sorted(res.rounds[0]["results"], key=lambda r: r["index"])] for k, res in runs.items()
    }
    iterations = {k: [r["iterations"] for r in res.rounds[0]["results"]] for k, res in runs.items()}
    assert iterations["full"] == iterations["per_draw"] == iterations["fixed"] == [600] * 5
    assert runs["per_draw"].best_index == runs["full"].best_index == 3
    assert kendalltau(metric["full"], metric["per_draw"])[0] == pytest.approx(1.0)
    assert runs["fixed"].best_index != runs["full"].best_index


def _as_folder_from_before_manifests(path):
    """A tuning folder as an earlier structmc left it: no manifest, trace.json without folder_format."""
    import json

    (path / "manifest.json").unlink()
    trace = json.loads((path / "trace.json").read_text())
    del trace["folder_format"]
    (path / "trace.json").write_text(json.dumps(trace))
