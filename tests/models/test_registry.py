"""The shared Registry type and the model registry (structmc.models.MODELS, build_model,
structmc.zoo.energy_for)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import structmc as sm
from structmc import models as M
from structmc.data import Dataset
from structmc.registry import Registry, UnknownNameError
from structmc.zoo import energy_for


# -- Registry ---------------------------------------------------------------------------------
def test_registry_lookup_errors_list_the_choices():
    reg = Registry("widget", {"b": 2, "a": 1})
    assert reg.get("a") == 1 and reg["b"] == 2 and reg.names() == ["b", "a"] and reg.choices() == ["a", "b"]
    assert list(reg) == ["b", "a"] and len(reg) == 2 and "a" in reg and "c" not in reg
    assert dict(reg.items()) == {"a": 1, "b": 2}
    with pytest.raises(UnknownNameError, match=r"unknown widget 'c'; choose from a, b") as err:
        reg.get("c")
    assert isinstance(err.value, ValueError) and isinstance(err.value, KeyError)
    assert str(err.value) == "unknown widget 'c'; choose from a, b"  # no KeyError quoting
    with pytest.raises(KeyError):
        reg["c"]
    assert reg.get("c", None) is None


def test_registry_register_decorator_aliases_and_unregister():
    reg = Registry("thing", normalize=str.lower, validate=lambda name, e: e if callable(e) else 1 / 0)

    @reg.register("double", aliases=("twice",))
    def double(x):
        return 2 * x

    assert reg.get("double") is double and reg.get("TWICE")(3) == 6 and reg.resolve("Twice") == "double"
    with pytest.raises(ValueError, match="already registered"):
        reg.register("double", abs)
    reg.register("double", abs, overwrite=True)
    assert reg.get("twice") is abs
    with pytest.raises(ZeroDivisionError):  # the validate hook runs on registration
        reg.register("bad", 3)
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", abs)
    assert reg.unregister("twice") is abs and "double" not in reg and "twice" not in reg


# -- models -----------------------------------------------------------------------------------
def test_unknown_model_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown model 'vgg16'; choose from .*linear.*mlp_mnist.*pmf"):
        M.build_model("vgg16")
    with pytest.raises(ValueError, match="unknown model 'vgg16'"):
        energy_for("vgg16")
    assert isinstance(M.MODELS, Registry) and {"linear", "mlp", "pmf", "resnet20"} <= set(M.MODELS)


def _split(x, task="multiclass", num_classes=3):
    n = len(x)
    y = torch.randint(0, num_classes, (n,)) if task == "multiclass" else torch.randn(n)
    return Dataset("toy", task, x, y, x[:2], y[:2], num_classes=num_classes if task != "regression" else None)


def _hand_built(widths, act, flatten, seed):
    """What ``structmc sample`` built before the registry: seed, then Linear layers in order."""
    torch.manual_seed(seed)
    layers = [nn.Flatten()] if flatten else []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


@pytest.mark.parametrize(
    "name, kwargs, task, x_shape, widths, act",
    [
        ("linear", {}, "regression", (10, 4), [4, 1], nn.ReLU),
        ("mlp", {"hidden": [8, 5], "activation": "tanh"}, "multiclass", (10, 4), [4, 8, 5, 3], nn.Tanh),
        ("mlp", {"hidden": [6]}, "multiclass", (10, 1, 3, 2), [6, 6, 3], nn.ReLU),
        ("mlp", {"hidden": [7], "activation": "sigmoid"}, "binary", (10, 5), [5, 7, 1], nn.Sigmoid),
    ],
)
def test_generic_models_are_sized_from_data_and_match_the_old_cli_builder(name, kwargs, task, x_shape, widths, act):
    data = _split(torch.randn(x_shape), task, 2 if task == "binary" else 3)
    model = M.build_model(name, seed=5, data=data, **kwargs)
    old = _hand_built(widths, act, len(x_shape) > 2, seed=5)
    assert repr(model) == repr(old)
    new_sd, old_sd = model.state_dict(), old.state_dict()
    assert list(new_sd) == list(old_sd) and all(torch.equal(new_sd[k], old_sd[k]) for k in old_sd)
    assert model(data.x_train).shape == (len(data.x_train), widths[-1])


def test_build_model_seed_leaves_global_state_and_data_kwargs_can_be_overridden():
    data = _split(torch.randn(6, 4))
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = M.build_model("mlp", seed=1, data=data, hidden=[3])
    assert torch.equal(torch.get_rng_state(), before)
    b = M.build_model("mlp", seed=1, data=data, hidden=[3])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    wide = M.build_model("mlp", data=data, hidden=[3], num_outputs=7)
    assert wide[-1].out_features == 7
    with pytest.raises(ValueError, match="not sized from a data set"):
        M.build_model("mlp_mnist", data=data)
    ratings = _split(torch.randn(6, 2), task="regression")
    ratings.task = "ratings"
    with pytest.raises(ValueError, match="no likelihood for a 'ratings'"):
        M.build_model("linear", data=ratings)


def test_energy_for_takes_the_likelihood_of_the_data_task():
    e = energy_for("mlp", data=_split(torch.randn(8, 4)), hidden=[5], seed=0)
    assert isinstance(e, sm.ModuleEnergy) and e.likelihood.name == "categorical" and e.space.dim == 4 * 5 + 5 + 18
    reg = energy_for("linear", data=_split(torch.randn(8, 4), task="regression"), noise_std=0.5)
    assert reg.likelihood.name == "gaussian" and reg.likelihood.noise_std == 0.5
    with pytest.raises(ValueError, match="pass data= or likelihood="):
        energy_for("linear", in_features=3)
    assert energy_for("linear", in_features=3, likelihood="bernoulli").likelihood.name == "bernoulli"


def test_pmf_is_registered_and_energy_for_keeps_its_log_density():
    assert M.MODELS.get("pmf").prior_std is None
    assert isinstance(M.build_model("pmf", num_users=3, num_items=4), M.PMF)
    e = energy_for("pmf", num_users=3, num_items=4, num_data=10)
    assert isinstance(e, sm.LogDensityEnergy) and isinstance(e.model, M.PMF) and e.num_data == 10


def test_user_model_registration_reaches_build_model_and_energy_for():
    spec = M.ModelSpec(
        lambda in_features=2, **kw: nn.Linear(in_features, 1, **kw), "bernoulli", 2.0, description="test model"
    )
    M.MODELS.register("test_user_linear", spec)
    try:
        assert isinstance(M.build_model("test_user_linear", in_features=4), nn.Linear)
        e = energy_for("test_user_linear", in_features=4, seed=0)
        assert e.space.dim == 5 and e.prior_std == 2.0 and e.likelihood.name == "bernoulli"
        with pytest.raises(ValueError, match="already registered"):
            M.MODELS.register("test_user_linear", spec)
        with pytest.raises(TypeError, match="ModelSpec"):
            M.MODELS.register("test_not_a_spec", lambda: nn.Linear(1, 1))
    finally:
        M.MODELS.unregister("test_user_linear")
    assert "test_user_linear" not in M.MODELS
