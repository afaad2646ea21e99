"""structmc.evaluate: streaming sums equal the direct computation for any batch / draw chunk
size, per chain and pooled; the regression intervals of the exact posterior predictive are
calibrated (coverage = level within Monte Carlo error over data sets drawn from the prior)."""

from __future__ import annotations

import math

import pytest
import torch
from support.items import Items
from torch import nn

import structmc as sm
from structmc.diagnostics.calibration import classification_metrics

F64 = torch.float64


def _classifier(out=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, out)).double()


@pytest.mark.parametrize("likelihood", ["categorical", "bernoulli"])
def test_classification_metrics_equal_the_direct_computation(likelihood):
    out = 3 if likelihood == "categorical" else 1
    e = sm.ModuleEnergy(_classifier(out), likelihood)
    g = torch.Generator().manual_seed(2)
    draws = e.initial_position() + 0.5 * torch.randn(3, 5, e.space.dim, generator=g, dtype=F64)  # [C, D, P]
    x = torch.randn(23, 4, generator=g, dtype=F64)
    y = torch.randint(0, 3 if out == 3 else 2, (23,), generator=g)
    if likelihood == "bernoulli":
        y = y.double()
    res = sm.evaluate(e, draws, (x, y), batch_size=7, draws_per_call=2)
    big = sm.evaluate(e, draws, (x, y), batch_size=1000, draws_per_call=100)
    assert res["task"] == "classification" and res["num_draws"] == 15 and res["num_inputs"] == 23
    for k in res["pooled"]:
        assert res["pooled"][k] == pytest.approx(big["pooled"][k], rel=1e-12, abs=1e-14)
    outs = e.forward_draws(draws.reshape(15, -1), (x,))
    per_draw = (
        outs.softmax(-1) if out == 3 else torch.stack([1 - outs.squeeze(-1).sigmoid(), outs.squeeze(-1).sigmoid()], -1)
    )
    probs = per_draw.mean(0)
    torch.testing.assert_close(res["probs"], probs, rtol=1e-12, atol=1e-14)
    expected = classification_metrics(probs, y.long(), 10)
    assert res["pooled"] == pytest.approx(expected, rel=1e-12)
    ent = lambda p: -(p * p.log()).sum(-1)  # noqa: E731
    torch.testing.assert_close(res["entropy"], ent(probs), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(res["mutual_information"], ent(probs) - ent(per_draw).mean(0), rtol=1e-8, atol=1e-12)
    assert bool((res["mutual_information"] >= -1e-12).all())
    for c in range(3):
        pc = per_draw.view(3, 5, 23, -1)[c].mean(0)
        assert res["per_chain"][c] == pytest.approx(classification_metrics(pc, y.long(), 10), rel=1e-12)


def _blr(n, g, w_true, noise):
    x = torch.randn(n, 2, generator=g, dtype=F64)
    return x, x @ w_true[:2] + w_true[2] + noise * torch.randn(n, generator=g, dtype=F64)


def test_regression_nll_is_the_exact_mixture_and_intervals_are_calibrated():
    noise, prior_sd = 0.7, 1.5
    e = sm.ModuleEnergy(nn.Linear(2, 1).double(), "gaussian", noise_std=noise, prior_std=prior_sd)
    g = torch.Generator().manual_seed(0)
    covers, first = [], None
    for _rep in range(150):
        w_true = prior_sd * torch.randn(3, generator=g, dtype=F64)  # θ from the prior: the predictive is calibrated
        x, y = _blr(15, g, w_true, noise)
        xt, yt = _blr(40, g, w_true, noise)
        X = torch.cat([x, torch.ones(15, 1, dtype=F64)], 1)  # flat order: weight (2), bias
        prec = X.T @ X / noise**2 + torch.eye(3, dtype=F64) / prior_sd**2
        cov = torch.linalg.inv(prec)
        mean = cov @ X.T @ y / noise**2
        draws = mean + torch.randn(400, 3, generator=g, dtype=F64) @ torch.linalg.cholesky(cov).T  # exact posterior
        res = sm.evaluate(e, draws, (xt, yt), batch_size=16, draws_per_call=64, levels=(0.5, 0.9))
        covers.append([res["pooled"]["coverage"]["0.5"], res["pooled"]["coverage"]["0.9"]])
        if first is None:
            f = draws[:, :2] @ xt.T + draws[:, 2:]  # [S, n]
            log_n = torch.distributions.Normal(f, noise).log_prob(yt)
            nll = -(torch.logsumexp(log_n, 0) - math.log(400)).mean()
            assert res["pooled"]["nll"] == pytest.approx(float(nll), rel=1e-10)
            assert res["pooled"]["rmse"] == pytest.approx(float((f.mean(0) - yt).square().mean().sqrt()), rel=1e-10)
            torch.testing.assert_close(res["std"], (f.var(0, unbiased=False) + noise**2).sqrt(), rtol=1e-8, atol=0)
            first = res
    cov_t = torch.tensor(covers)
    m, se = cov_t.mean(0), cov_t.std(0) / math.sqrt(len(covers))
    assert bool(((m - torch.tensor([0.5, 0.9], dtype=F64)).abs() < 4.5 * se).all()), (m, se)
    assert bool((4.5 * se < 0.05).all())  # power: intervals 5 points off would be caught


def test_bad_input_is_a_clear_error():
    e = sm.ModuleEnergy(_classifier(), "categorical")
    x, y = torch.randn(5, 4, dtype=F64), torch.zeros(5, dtype=torch.long)
    d = e.initial_position().unsqueeze(0)
    with pytest.raises(ValueError, match="data must be"):
        sm.evaluate(e, d, x)
    with pytest.raises(ValueError, match="levels must lie in"):
        sm.evaluate(e, d, (x, y), levels=(0.9, 1.0))
    with pytest.raises(ValueError, match="same first dimension"):
        sm.evaluate(e, d, (x, y[:3]))
    with pytest.raises(TypeError, match="needs a ModuleEnergy"):
        sm.evaluate(sm.LogDensityEnergy(lambda t, b: -t.square().sum(), 3), d, (x, y))


def test_evaluate_takes_the_datasets_that_sample_takes():
    """A TensorDataset, a map-style Dataset and a DataSource give exactly the metrics of the
    tensors (issue 22 §6.1: evaluate used to refuse them with 'data must be (inputs..., targets)')."""
    from torch.utils.data import TensorDataset

    e = sm.ModuleEnergy(_classifier(), "categorical")
    g = torch.Generator().manual_seed(4)
    draws = e.initial_position() + 0.5 * torch.randn(2, 4, e.space.dim, generator=g, dtype=F64)
    x, y = torch.randn(23, 4, generator=g, dtype=F64), torch.randint(0, 3, (23,), generator=g)
    ref = sm.evaluate(e, draws, (x, y), batch_size=7, draws_per_call=3)
    for data in (TensorDataset(x, y), Items(x, y), sm.DataSource(Items(x, y)), sm.DataSource(TensorDataset(x, y))):
        res = sm.evaluate(e, draws, data, batch_size=7, draws_per_call=3)
        assert res["num_inputs"] == 23 and res["pooled"] == ref["pooled"] and res["per_chain"] == ref["per_chain"]
        torch.testing.assert_close(res["probs"], ref["probs"], rtol=0, atol=0)
        torch.testing.assert_close(res["mutual_information"], ref["mutual_information"], rtol=0, atol=0)
    with pytest.raises(ValueError, match="collate into one tensor"):
        sm.evaluate(e, draws, sm.DataSource(Items(x, y), collate_fn=lambda items: torch.stack([a for a, _ in items])))
    with pytest.raises(ValueError, match="empty"):
        sm.evaluate(e, draws, Items(x[:0], y[:0]))


def test_auroc_is_the_mann_whitney_probability_with_ties_as_halves():
    g = torch.Generator().manual_seed(3)
    for _ in range(4):
        neg = torch.randint(0, 5, (31,), generator=g).float()
        pos = torch.randint(0, 6, (17,), generator=g).float()
        brute = sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in neg.tolist() for b in pos.tolist()) / (31 * 17)
        assert abs(float(sm.diagnostics.auroc(neg, pos)) - brute) < 1e-12
    assert float(sm.diagnostics.auroc(torch.zeros(3), torch.ones(2))) == 1.0
    assert float(sm.diagnostics.auroc(torch.ones(3), torch.zeros(2))) == 0.0
    assert float(sm.diagnostics.auroc(torch.ones(3), torch.ones(2))) == 0.5  # constant scores: no separation
    with pytest.raises(ValueError, match="NaN"):
        sm.diagnostics.auroc(torch.tensor([0.0, float("nan")]), torch.ones(2))
    with pytest.raises(ValueError, match="both sides"):
        sm.diagnostics.auroc(torch.zeros(0), torch.ones(2))


def test_evaluate_scores_out_of_distribution_inputs_by_entropy_and_mutual_information():
    """Issue 39 §4: ``evaluate(..., ood=inputs)`` adds the AUROC of the predictive entropy and
    of the mutual information telling the OOD inputs from the test inputs, pooled and per chain,
    equal to the AUROC of the per-input values computed from each draw's predictive."""
    from support.runs import mlp_energy

    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 60, data=(X, y), batch_size=16, num_chains=2, thin=5, progress=False)
    far = 20 * X[:30]
    out = sm.evaluate(energy, chain, (X, y), ood=far, batch_size=7, draws_per_call=5)

    def uncertainty(inputs, c=None):
        probs = sm.predictive(energy, chain, inputs, per_draw=True, chain=c)["probs"].reshape(-1, inputs.shape[0], 3)
        mean = probs.mean(0)
        entropy = -(mean * mean.log()).sum(-1)
        return entropy, entropy + (probs * probs.log()).sum(-1).mean(0)

    (h_in, mi_in), (h_out, mi_out) = uncertainty(X), uncertainty(far)
    torch.testing.assert_close(out["ood"]["entropy"].to(h_out), h_out, rtol=1e-4, atol=1e-5)
    for key, inside, outside in (("entropy", h_in, h_out), ("mutual_information", mi_in, mi_out)):
        assert abs(out["pooled"][f"ood_auroc_{key}"] - float(sm.diagnostics.auroc(inside, outside))) < 1e-9
    (h1_in, _), (h1_out, _) = uncertainty(X, 1), uncertainty(far, 1)
    assert abs(out["per_chain"][1]["ood_auroc_entropy"] - float(sm.diagnostics.auroc(h1_in, h1_out))) < 1e-9
    same = sm.evaluate(energy, chain, (X, y), ood=X)["pooled"]
    assert same["ood_auroc_entropy"] == same["ood_auroc_mutual_information"] == 0.5  # the same inputs: no separation
    with pytest.raises(ValueError, match="1 tensor"):
        sm.evaluate(energy, chain, (X, y), ood=(far, far))
    lin = sm.ModuleEnergy(torch.nn.Linear(2, 1), "gaussian", noise_std=0.5)
    with pytest.raises(ValueError, match="classification"):
        sm.evaluate(lin, torch.zeros(2, 3), (torch.randn(5, 2), torch.randn(5)), ood=torch.randn(4, 2))


def test_evaluate_probs_is_evaluate_on_the_members_probabilities():
    """Issue 39 §4: ``evaluate_probs(members [M, n, K], y, ood_probs=...)`` scores any model by
    its probabilities (an ensemble, a Laplace approximation) with evaluate's own code: on a
    chain's per-draw probabilities it returns evaluate's pooled metrics, per-input entropy and
    mutual information and OOD AUROCs; the AUROCs equal auroc() of the hand-computed
    uncertainties; one predictive [n, K] is one member (mutual information 0)."""
    from support.runs import mlp_energy

    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 60, data=(X, y), batch_size=16, num_chains=2, thin=5, progress=False)
    far = 20 * X[:30]
    ref = sm.evaluate(energy, chain, (X, y), ood=far)
    members = sm.predictive(energy, chain, X, per_draw=True)["probs"].reshape(-1, X.shape[0], 3)
    ood_members = sm.predictive(energy, chain, far, per_draw=True)["probs"].reshape(-1, far.shape[0], 3)
    out = sm.evaluate_probs(members, y, ood_probs=ood_members)
    assert out["num_draws"] == ref["num_draws"] == members.shape[0] and out["num_inputs"] == 90
    assert set(out) == set(ref) - {"per_chain"}
    assert out["pooled"] == pytest.approx(ref["pooled"], rel=1e-5, abs=1e-6)  # float32 draws: rounding only
    for key in ("probs", "entropy", "mutual_information"):
        torch.testing.assert_close(out[key], ref[key].to(out[key]), rtol=1e-4, atol=1e-6)
    m = members.double()
    ent = lambda p: -(p * p.log()).sum(-1)  # noqa: E731
    h_in, h_out = ent(m.mean(0)), ent(ood_members.double().mean(0))
    mi_out = h_out - ent(ood_members.double()).mean(0)
    torch.testing.assert_close(out["ood"]["mutual_information"], mi_out)
    assert out["pooled"]["ood_auroc_entropy"] == pytest.approx(float(sm.diagnostics.auroc(h_in, h_out)), abs=1e-12)
    assert out["pooled"] == pytest.approx({**classification_metrics(m.mean(0), y, 10), **out["pooled"]})
    one = sm.evaluate_probs(m.mean(0), y, ood_probs=ood_members.double().mean(0))
    assert one["num_draws"] == 1 and float(one["mutual_information"].abs().max()) < 1e-12
    assert one["pooled"]["ood_auroc_mutual_information"] == 0.5  # all zero on both sides: no separation
    assert {k: one["pooled"][k] for k in ("accuracy", "nll", "ece")} == pytest.approx(
        {k: out["pooled"][k] for k in ("accuracy", "nll", "ece")}, rel=1e-12
    )


@pytest.mark.parametrize(
    ("probs", "labels", "ood", "match"),
    [
        (torch.randn(4, 3), torch.zeros(4, dtype=torch.long), None, "probabilities in"),  # logits, not probabilities
        (torch.full((4, 3), 0.5), torch.zeros(4, dtype=torch.long), None, "sum to 1"),
        (torch.full((2, 4, 3), 1 / 3), torch.zeros(5, dtype=torch.long), None, "4 inputs in probs but 5 labels"),
        (torch.full((4, 3), 1 / 3), torch.full((4,), 3), None, r"labels must lie in \[0, 2\]"),
        (torch.full((4, 3), 1 / 3), torch.zeros(4), None, "integer tensor"),
        (torch.full((2, 4, 3), 1 / 3), torch.zeros(4, dtype=torch.long), torch.full((3, 5, 3), 1 / 3), "2 member"),
        (torch.full((4,), 0.5), torch.zeros(4, dtype=torch.long), None, r"\[M, n, K\]"),
    ],
)
def test_evaluate_probs_refuses_what_is_not_probabilities_of_the_labels(probs, labels, ood, match):
    with pytest.raises(ValueError, match=match):
        sm.evaluate_probs(probs, labels, ood_probs=ood)
