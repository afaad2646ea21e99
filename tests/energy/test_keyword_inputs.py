"""Keyword inputs (one dict of tensors, ``module(**inputs)``) and structured outputs (a mapping's
``logits``) of ModuleEnergy: the same numbers as a positional twin of the module, rows of the
dict minibatched together, bad dicts refused before any compute, vmap's refusal falling back to a
loop. The Hugging Face example itself runs in tests/test_examples.py."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.energy import full_data_value_and_grad

KEYS = ("tokens", "weights")


class Keyword(nn.Module):
    """forward(tokens=[n, 3], weights=[n]) -> {"logits": [n, 2], "hidden": ...}"""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.scale = nn.Parameter(torch.tensor([0.5, -0.3]))

    def forward(self, tokens, weights):
        logits = self.lin(tokens) + weights.unsqueeze(-1) * self.scale
        return {"logits": logits, "hidden": tokens.sum(-1)}


class Positional(Keyword):
    """The same network called positionally, returning the logits tensor."""

    def forward(self, tokens, weights):
        return super().forward(tokens, weights)["logits"]


class Branching(Keyword):
    """Branches on its inputs' values: vmap over chains refuses it."""

    def forward(self, tokens, weights):
        if bool((weights > 100).any()):  # never true here; a data-dependent branch all the same
            raise AssertionError
        return super().forward(tokens, weights)


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(n, 3, generator=g)
    weights = torch.rand(n, generator=g)
    y = (tokens[:, 0] + weights > 0.5).long()
    return {"tokens": tokens, "weights": weights}, y


def _twins(cls=Keyword, **kw):
    torch.manual_seed(0)
    keyword = cls()
    positional = Positional()
    positional.load_state_dict(keyword.state_dict())
    return (
        sm.ModuleEnergy(keyword, "categorical", prior_std=2.0, input_keys=KEYS, **kw),
        sm.ModuleEnergy(positional, "categorical", prior_std=2.0),
    )


def _chain_batch(x, y, C):
    return (*(x[k].unsqueeze(0).expand(C, *x[k].shape) for k in KEYS), y.unsqueeze(0).expand(C, -1))


@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("evaluation", ["vmap", "loop"])
def test_value_and_grad_is_the_hand_written_loss(chains, evaluation):
    x, y = _data()
    energy, _ = _twins(chain_evaluation=evaluation)
    energy = energy.with_num_data(100)
    g = torch.Generator().manual_seed(1)
    theta = energy.initial_position("prior", generator=g, num_chains=chains)
    u, grad = energy.value_and_grad(theta, _chain_batch(x, y, chains))
    for c in range(chains):  # -(N/n) Σ log softmax(f(x))_y + Σ θ²/(2σ²), by hand
        leaf = theta[c].clone().requires_grad_()
        named = energy.space.unflatten(leaf)
        w, b, s = named["lin.weight"], named["lin.bias"], named["scale"]
        logits = x["tokens"] @ w.T + b + x["weights"].unsqueeze(-1) * s
        hand = 100 / 40 * nn.functional.cross_entropy(logits, y, reduction="sum") + (leaf**2).sum() / 8
        (hand_grad,) = torch.autograd.grad(hand, leaf)
        torch.testing.assert_close(u[c], hand.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad[c], hand_grad, rtol=1e-5, atol=1e-5)


def test_sample_minibatches_the_dict_rows_together():
    """The chain on (dict, y) is the positional twin's chain on (tokens, weights, y), draw for
    draw: every tensor of the dict indexed with the same rows (a shuffled key would change it)."""
    x, y = _data()
    keyword, positional = _twins()
    kw = dict(num_chains=2, batch_size=10, seed=3, progress=False)
    a = sm.sample(keyword, None, sm.SGLD(1e-3), 30, data=(x, y), **kw)
    b = sm.sample(positional, None, sm.SGLD(1e-3), 30, data=(x["tokens"], x["weights"], y), **kw)
    assert torch.equal(a.samples, b.samples)
    shuffled = {"tokens": x["tokens"], "weights": x["weights"].flip(0)}
    c = sm.sample(keyword, None, sm.SGLD(1e-3), 30, data=(shuffled, y), **kw)
    assert not torch.equal(a.samples, c.samples)
    # the predictive, the evaluation, the network and the full-data gradient take the dict too
    probs = sm.predictive(keyword, a, x)["probs"]
    torch.testing.assert_close(probs, sm.predictive(positional, b, (x["tokens"], x["weights"]))["probs"])
    bayes = sm.PosteriorPredictive(keyword, a)
    torch.testing.assert_close(bayes(**x)["probs"], probs)
    torch.testing.assert_close(bayes(x)["probs"], probs)
    ev_kw, ev_pos = sm.evaluate(keyword, a, (x, y)), sm.evaluate(positional, b, (x["tokens"], x["weights"], y))
    assert ev_kw["pooled"] == pytest.approx(ev_pos["pooled"])
    ev_ood = sm.evaluate(keyword, a, (x, y), ood={k: v + 3 for k, v in x.items()})
    assert 0 <= ev_ood["pooled"]["ood_auroc_entropy"] <= 1
    theta = a.samples[:, -1]
    full_kw = full_data_value_and_grad(keyword.with_num_data(40), theta, (x, y), chunk_size=16)
    full_pos = full_data_value_and_grad(positional.with_num_data(40), theta, (x["tokens"], x["weights"], y), 16)
    torch.testing.assert_close(full_kw, full_pos)
    point = sm.find_map(keyword, keyword.initial_position(), data=(x, y), batch_size=10, num_steps=20)
    assert torch.equal(
        point,
        sm.find_map(
            positional, positional.initial_position(), data=(x["tokens"], x["weights"], y), batch_size=10, num_steps=20
        ),
    )


def test_bad_dicts_are_refused_before_any_compute():
    x, y = _data()
    keyword, positional = _twins()
    short = {"tokens": x["tokens"], "weights": x["weights"][:35]}
    with pytest.raises(ValueError, match=r"'tokens' has 40, 'weights' has 35"):
        sm.sample(keyword, None, sm.SGLD(1e-3), 5, data=(short, y), progress=False)
    with pytest.raises(ValueError, match=r"missing \['weights'\].*not declared \['mask'\]"):
        sm.sample(keyword, None, sm.SGLD(1e-3), 5, data=({"tokens": x["tokens"], "mask": y}, y), progress=False)
    with pytest.raises(ValueError, match=r"input_keys=\('tokens', 'weights'\)"):
        sm.sample(positional, None, sm.SGLD(1e-3), 5, data=(x, y), progress=False)
    with pytest.raises(ValueError, match="'weights' must be a tensor"):
        sm.predictive(keyword, keyword.initial_position().unsqueeze(0), {"tokens": x["tokens"], "weights": 1.0})
    with pytest.raises(ValueError, match="distinct keyword names"):
        sm.ModuleEnergy(Keyword(), "categorical", input_keys=("a", "a"))


def test_output_selects_what_the_likelihood_reads():
    x, y = _data()
    batch = _chain_batch(x, y, 1)
    by_default, _ = _twins()
    named, _ = _twins(output="logits")
    called, _ = _twins(output=lambda out: out["logits"])
    theta = by_default.initial_position().unsqueeze(0)
    u = by_default.value(theta, batch)
    assert torch.equal(named.value(theta, batch), u) and torch.equal(called.value(theta, batch), u)
    wrong, _ = _twins(output="scores")
    with pytest.raises(ValueError, match=r"output='scores'.*keys \['logits', 'hidden'\]"):
        wrong.value(theta, batch)


def test_a_forward_vmap_refuses_runs_chains_in_a_loop_with_a_warning():
    x, y = _data()
    branching, _ = _twins(Branching)
    looped, _ = _twins(Branching, chain_evaluation="loop")
    theta = branching.initial_position("prior", generator=torch.Generator().manual_seed(2), num_chains=3)
    batch = _chain_batch(x, y, 3)
    with pytest.warns(UserWarning, match="cannot be vmapped over chains"):
        u, g = branching.value_and_grad(theta, batch)
    u_loop, g_loop = looped.value_and_grad(theta, batch)
    torch.testing.assert_close(u, u_loop)
    torch.testing.assert_close(g, g_loop)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: the loop is remembered
        branching.value_and_grad(theta, batch)
