"""Summary tables and parameter-subset helpers."""

import numpy as np
import pytest
import torch

from structmc import Chain, ParamSpace
from structmc.diagnostics import (
    ess_bulk,
    ess_tail,
    integrated_time,
    param_labels,
    rhat,
    select_random,
    select_top_variance,
    summary,
)

from .conftest import ar1


@pytest.fixture(scope="module")
def chain():
    space = ParamSpace([("w", (3, 2)), ("b", (2,)), ("s", ())])
    x = ar1(3, 400, space.dim, torch.linspace(0.0, 0.8, space.dim), seed=3)
    x = x * torch.arange(1, space.dim + 1, dtype=torch.float64)  # column j has scale j + 1
    return Chain(x, space, torch.arange(1, 401) * 5, {}, {})


def test_summary_chain_by_name_pattern_and_index(chain):
    t = summary(chain, ["w"])
    assert t.labels == ["w[0,0]", "w[0,1]", "w[1,0]", "w[1,1]", "w[2,0]", "w[2,1]"]
    x = chain["w"].reshape(3, 400, 6)
    pooled = x.reshape(-1, 6).numpy()
    np.testing.assert_allclose(t["mean"].numpy(), pooled.mean(0), rtol=1e-12)
    np.testing.assert_allclose(t["sd"].numpy(), pooled.std(0, ddof=1), rtol=1e-12)
    for q in (5, 50, 95):
        np.testing.assert_allclose(t[f"q{q}"].numpy(), np.quantile(pooled, q / 100, axis=0), rtol=1e-12)
    torch.testing.assert_close(t["ess_bulk"], ess_bulk(x))
    torch.testing.assert_close(t["ess_tail"], ess_tail(x))
    torch.testing.assert_close(t["rhat"], rhat(x))
    torch.testing.assert_close(t["iac"], integrated_time(x))
    assert summary(chain, "b*").labels == ["b[0]", "b[1]"]
    assert summary(chain, [8, 6]).labels == ["s", "b[0]"]
    assert len(summary(chain)) == 9
    assert t.row("w[1,0]")["mean"] == pytest.approx(float(t["mean"][2]))
    assert t.to_dict()["label"][0] == "w[0,0]"
    with pytest.raises(KeyError):
        summary(chain, ["nope"])


def test_summary_function_space_tensor():
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(2, 50, 3, generator=g)  # [C, D, K] predictive probabilities of K test points
    t = summary(probs, name="p")
    assert t.labels == ["p[0]", "p[1]", "p[2]"]
    assert t["mean"].dtype == torch.float32
    assert summary(probs[..., 0], scalar=True).labels == ["x"]
    assert summary(probs.reshape(2, 50, 3, 1), params=[2]).labels == ["x[2,0]"]
    assert summary(probs, labels=["a", "b", "c"]).labels == ["a", "b", "c"]
    with pytest.raises(ValueError, match="max_rows"):
        summary(probs, max_rows=0)


def test_summary_past_max_rows_keeps_the_worst_mixing_rows():
    """A whole-network chain (P > max_rows) gives the worst-mixing rows, worst first, with the
    same statistics as asking for those rows, and per-tensor worst values in the notes; it used
    to raise (the first example of docs/index.md failed)."""
    space = ParamSpace([("0.weight", (40, 30)), ("0.bias", (40,))])  # P = 1,240
    phi = torch.full((space.dim,), 0.1)
    phi[[5, 1210, 700]] = torch.tensor([0.99, 0.95, 0.9])  # the three slowest rows, slowest first
    x = ar1(4, 200, space.dim, phi, seed=7)
    x[:, :, 33] = 1.5  # a stuck coordinate (NaN R-hat) counts as the worst
    chain = Chain(x, space, torch.arange(1, 201), {}, {})
    t = summary(chain, max_rows=10)
    assert len(t) == 10 and t.labels[:4] == ["0.weight[1,3]", "0.weight[0,5]", "0.bias[10]", "0.weight[23,10]"]
    ess = torch.minimum(t["ess_bulk"], t["ess_tail"])[1:]
    assert torch.all(ess[1:] >= ess[:-1])
    ref = summary(chain, [33, 5, 1210, 700] + [space.dim - 1])
    for k in ("mean", "sd", "q5", "ess_bulk", "rhat", "iac"):
        torch.testing.assert_close(t[k][:4], ref[k][:4], equal_nan=True)
    text = str(t)
    assert "1240 rows > max_rows=10" in text and "0.bias" in text.splitlines()[-1]
    bias_line = text.splitlines()[-1].split()
    assert float(bias_line[1]) == pytest.approx(float(t["ess_bulk"][2]), abs=0.5)  # 0.bias[10] is the bias' worst
    assert len(summary(chain)) == 1000  # the default: 1,000 of 1,240
    g = torch.rand(2, 10, 2000, generator=torch.Generator().manual_seed(0))
    u = summary(g, labels=[f"u{i}" for i in range(2000)])  # a tensor past max_rows
    assert len(u) == 1000 and all(lab.startswith("u") for lab in u.labels) and "all 2000 rows" in str(u)


def test_summary_str(chain):
    text = str(summary(chain, ["b", "s"]))
    lines = text.splitlines()
    assert lines[0].split() == ["param", "mean", "sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "rhat", "iac"]
    assert lines[1].startswith("b[0]") and lines[3].startswith("s")
    assert "3 chains x 400 draws" in text
    assert len({len(l) for l in lines[:4]}) == 1  # aligned columns


def test_select_random_and_top_variance(chain):
    a = select_random(chain, 4, seed=1)
    assert torch.equal(a, select_random(9, 4, seed=1))
    assert a.unique().numel() == 4 and torch.all(a[1:] > a[:-1]) and int(a.max()) < 9
    assert not torch.equal(select_random(10_000, 20, seed=1), select_random(10_000, 20, seed=2))
    assert select_random(chain, 50).numel() == 9
    top = select_top_variance(chain, 3)
    assert top.tolist() == [8, 7, 6]  # columns were scaled by j + 1
    assert torch.equal(select_top_variance(chain.samples, 3, chunk=2), top)
    assert param_labels(chain.space, top) == ["s", "b[1]", "b[0]"]


def test_summary_refuses_an_undeclared_2d_tensor():
    """A [5, 10] tensor (e.g. predictive probabilities of 5 inputs, 10 classes) used to be read
    silently as 5 chains x 10 draws (issue 22 §6.10); it needs scalar=True, and the message points
    to per-draw predictions."""
    probs = torch.softmax(torch.randn(5, 10, generator=torch.Generator().manual_seed(0)), -1)
    with pytest.raises(ValueError, match=r"5 chains x 10 draws.*scalar=True.*per_draw=True"):
        summary(probs)
    t = summary(probs, scalar=True)
    assert (t.num_chains, t.num_draws) == (5, 10) and t.labels == ["x"]
    with pytest.raises(TypeError, match="scalar must be True or False"):
        summary(probs.unsqueeze(-1), scalar=1)
