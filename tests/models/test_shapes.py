"""Forward shapes, parameter counts and layer structure of the papers' models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import structmc as sm
from structmc import models as M
from structmc.zoo import energy_for


def count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize(
    "name, kwargs, params, x_shape, out_shape",
    [
        ("mlp_gibbs", {}, 8180, (3, 1, 28, 28), (3, 10)),
        ("mlp_mnist", {}, 42310, (3, 784), (3, 10)),
        ("mlp_psgld", {}, 478410, (3, 1, 28, 28), (3, 10)),
        ("mlp_mamba", {}, 79510, (3, 784), (3, 10)),
        ("mlp_xor", {}, 9, (5, 2), (5, 1)),
        ("mlp_xor_deep", {}, 39, (5, 2), (5, 1)),
        ("mlp_uci", {"in_features": 8}, 3051, (4, 8), (4, 1)),
        ("linear_regression", {}, 4, (6, 3), (6, 1)),
        ("logistic_regression", {}, 10, (6, 10), (6, 1)),
        ("blr_adult", {}, 106, (6, 105), (6, 1)),
        ("softmax_regression", {}, 7850, (2, 1, 28, 28), (2, 10)),
        ("cnn_psgld", {}, 299306, (2, 1, 28, 28), (2, 10)),
        ("resnet20", {}, 269722, (2, 3, 32, 32), (2, 10)),
        ("resnet20_fmnist", {}, 269434, (2, 1, 28, 28), (2, 10)),
    ],
)
def test_forward_shape_and_parameter_count(name, kwargs, params, x_shape, out_shape):
    model = M.build_model(name, seed=0, **kwargs)
    assert count(model) == params
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(x_shape)).shape == out_shape


def test_paper_figures():
    # structured-SGMCMC: "42,200 parameters" are the weights of 784-50-50-10
    mlp = M.MLP((784, 50, 50, 10))
    assert sum(p.numel() for n, p in mlp.named_parameters() if n.endswith("weight")) == 42200
    assert count(M.MLP((784, 10, 10, 10, 10), "sigmoid")) == 8180
    assert 0.26e6 < count(M.resnet20()) < 0.28e6  # He et al.: 0.27 M
    assert count(M.MLP((784, 1200, 1200, 10))) == 784 * 1200 + 1200 + 1200 * 1200 + 1200 + 12010


def test_mlp_options():
    m = M.MLP((4, 3, 3, 2), ["tanh", "sigmoid"], output_activation="softmax")
    out = m(torch.randn(5, 4))
    assert torch.allclose(out.sum(-1), torch.ones(5))
    assert isinstance(m.activations[0], nn.Tanh) and isinstance(m.activations[1], nn.Sigmoid)
    mamba = M.build_model("mlp_mamba")
    assert isinstance(mamba.activations[0], nn.Softmax)
    with pytest.raises(ValueError):
        M.MLP((4, 3, 2), ["relu", "relu"])
    with pytest.raises(ValueError):
        M.MLP((4,))
    with pytest.raises(ValueError, match="unknown activation"):
        M.MLP((4, 3, 2), "swishy")
    assert count(M.MLP((4, 3, 2), bias=False)) == 18


def test_resnet_options():
    x = torch.randn(2, 3, 32, 32)
    for kwargs in ({"norm": None}, {"norm": "group"}, {"shortcut": "B"}, {"norm": None, "conv_bias": False}):
        net = M.resnet20(**kwargs).eval()
        assert net(x).shape == (2, 10)
    assert not list(M.resnet20(norm="group").buffers())
    assert not any(n.endswith("bias") and "conv" in n for n, _ in M.resnet20().named_parameters())
    nobias = M.resnet20(norm=None, conv_bias=False)
    assert [n for n, _ in nobias.named_parameters() if n.endswith("bias")] == ["fc.bias"]
    assert any("conv1.bias" in n for n, _ in M.resnet20(norm=None).named_parameters())
    assert M.ResNet(32)(x).shape == (2, 10)
    with pytest.raises(ValueError):
        M.ResNet(21)
    with pytest.raises(ValueError):
        M.resnet20(norm="layer")


def test_cnn_padding_option():
    same = M.ConvNet(padding=2)
    assert same.fcs[0].in_features == 64 * 7 * 7 and same(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert M.ConvNet(3, 10, input_size=32)(torch.randn(1, 3, 32, 32)).shape == (1, 10)


def test_layer_structure_mlp_and_unit_groups():
    mlp = M.MLP((3, 4, 2))
    layers = M.layer_structure(mlp)
    assert [(l.name, l.kind, l.weight, l.bias, l.num_units, l.fan_in) for l in layers] == [
        ("layers.0", "linear", "layers.0.weight", "layers.0.bias", 4, 3),
        ("layers.1", "linear", "layers.1.weight", "layers.1.bias", 2, 4),
    ]
    ids = M.unit_ids(mlp)
    space = sm.ParamSpace.from_module(mlp)
    views = space.unflatten(ids)
    # a neuron's incoming weights and its bias share one id
    assert torch.equal(views["layers.0.weight"], torch.arange(4)[:, None].expand(4, 3))
    assert torch.equal(views["layers.0.bias"], torch.arange(4))
    assert torch.equal(views["layers.1.weight"], torch.tensor([4, 5])[:, None].expand(2, 4))
    assert torch.equal(M.layer_ids(mlp), torch.tensor([0] * 16 + [1] * 10))


def test_layer_structure_cnn_and_resnet():
    cnn = M.ConvNet()
    layers = M.layer_structure(cnn)
    assert [l.kind for l in layers] == ["conv", "conv", "linear", "linear", "linear"]
    assert layers[0].num_units == 32 and layers[0].fan_in == 25 and layers[1].fan_in == 32 * 25
    assert len(M.unit_ids(cnn).unique()) == 32 + 64 + 200 + 200 + 10
    net = M.resnet20()
    convs = M.layer_structure(net)
    assert len(convs) == 20 and all(l.bias is None for l in convs[:-1]) and convs[-1].bias == "fc.bias"
    full = M.layer_structure(net, include_norm=True)
    assert sum(l.kind == "norm" for l in full) == 19
    ids = M.unit_ids(net)
    assert int((ids < 0).sum()) == 0  # every parameter belongs to a unit (norm channels included)
    no_norm = M.unit_ids(net, include_norm=False)
    assert int((no_norm < 0).sum()) == 2 * 16 + 6 * (2 * 16) + 6 * (2 * 32) + 6 * (2 * 64)
    frozen = M.MLP((3, 2))
    frozen.layers[0].bias.requires_grad_(False)
    assert M.layer_structure(frozen)[0].bias is None


def test_energy_for_defaults_and_seed():
    e = energy_for("mlp_gibbs", num_data=100, seed=1)
    assert isinstance(e, sm.ModuleEnergy) and e.space.dim == 8180 and e.num_data == 100
    assert abs(e.prior_std - 10**0.5) < 1e-12 and e.likelihood.name == "categorical"
    e2 = energy_for("mlp_gibbs", seed=1)
    assert torch.equal(e.initial_position(), e2.initial_position())
    assert not torch.equal(e.initial_position(), energy_for("mlp_gibbs", seed=2).initial_position())
    reg = energy_for("mlp_uci", in_features=5, noise_std=0.5, prior_std=2.0)
    assert reg.likelihood.name == "gaussian" and reg.likelihood.noise_std == 0.5 and reg.prior_std == 2.0
    big = energy_for("mlp_psgld", hidden=(800, 800))
    assert big.space.dim == 784 * 800 + 800 + 800 * 800 + 800 + 8010
    with pytest.raises(ValueError, match="unknown model"):
        energy_for("vgg16")


def test_pmf_layout():
    pmf = M.PMF(943, 1682)
    assert pmf.dim == (943 + 1682) * 20 + 4 * 20 == 52580
    assert pmf.space.names == ["U", "V", "mu_U", "log_lambda_U", "mu_V", "log_lambda_V"]
    theta = pmf.init(seed=0)
    p = pmf.space.unflatten(theta)
    assert torch.allclose(p["log_lambda_U"], torch.log(torch.tensor(0.8)).expand(20))
    assert float(p["U"].std()) == pytest.approx(0.1, rel=0.05)
