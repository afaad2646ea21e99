"""The papers' models by name, each with the likelihood and prior its paper uses.

Models build no energies (a lower layer): :func:`structmc.zoo.energy_for` wraps a model
with its paper's likelihood and prior below. Priors are N(0, σ²) on every parameter; σ
below is the standard deviation.

==========================  =====================================  ===========  ====================
name                        model                                  likelihood   prior σ (source)
==========================  =====================================  ===========  ====================
``linear_regression``       LinearRegression(3)                    gaussian σ=1 1 (S-SGMCMC toy)
``logistic_regression``     LogisticRegression(10, no intercept)   bernoulli    √10 (MAMBA)
``blr_adult``               LogisticRegression(105)                bernoulli    √10 (pSGLD, σ²=10)
``softmax_regression``      SoftmaxRegression(784, 10)             categorical  1
``mlp_mnist``               MLP(784, 50, 50, 10) ReLU              categorical  0.3 (S-SGMCMC code)
``mlp_psgld``               MLP(784, 400, 400, 10) ReLU            categorical  1 (pSGLD, σ²=1)
``mlp_mamba``               MLP(784, 100, 10) softmax hidden       categorical  1 (MAMBA)
``mlp_gibbs``               MLP(784, 10, 10, 10, 10) sigmoid       categorical  √10 (blocked Gibbs)
``mlp_xor``                 MLP(2, 2, 1) sigmoid                   bernoulli    √10 (blocked Gibbs)
``mlp_xor_deep``            MLP(2, 2, 2, 2, 2, 2, 2, 1) sigmoid    bernoulli    √10 (blocked Gibbs)
``mlp_uci``                 MLP(in, 50, 50, 1) ReLU                gaussian σ=1 1 (S-SGMCMC regression)
``cnn_psgld``               ConvNet (pSGLD CNN)                    categorical  1 (pSGLD)
``resnet20``                ResNet-20, 3×32×32                     categorical  0.3 (S-SGMCMC code)
``resnet20_fmnist``         ResNet-20, 1×28×28                     categorical  0.3 (S-SGMCMC code)
``pmf``                     PMF, d = 20 (a log density)            gaussian α=3 hierarchical (MAMBA)
``linear``                  [Flatten,] Linear(in, out)             by task      1 (CLI default)
``mlp``                     [Flatten,] Linear, act, ..., Linear    by task      1 (CLI default)
==========================  =====================================  ===========  ====================

Widths are arguments: ``energy_for("mlp_psgld", hidden=(1200, 1200))``,
``energy_for("mlp_uci", in_features=8)``, ``energy_for("resnet20", norm="group")``. The
Gaussian regression noise σ is the ``noise_std`` argument (targets standardised: 1).

``linear`` and ``mlp`` are the generic models of ``structmc sample``: sized from a data set
(``build_model("mlp", data=ds, hidden=[50], activation="tanh")`` — input features, one output
for regression / binary tasks or one per class, a leading ``nn.Flatten`` for image tensors)
and given the likelihood of its task (:data:`TASK_LIKELIHOODS`). They are plain
``nn.Sequential`` stacks (parameters ``0.weight``, ``0.bias``, ``2.weight``, ...).

:data:`MODELS` is a :class:`~structmc.registry.Registry`: ``MODELS.register("name",
ModelSpec(build, likelihood, prior_std))`` adds a model that :func:`build_model`,
:func:`structmc.zoo.energy_for` and (with ``from_data``) ``structmc sample --model`` find.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..registry import Registry
from .cnn import ConvNet
from .linear import LinearRegression, LogisticRegression, SoftmaxRegression
from .mlp import MLP, make_activation
from .resnet import resnet20

SQRT10 = math.sqrt(10.0)


TASK_LIKELIHOODS = {"regression": "gaussian", "binary": "bernoulli", "multiclass": "categorical"}


@dataclass(frozen=True)
class ModelSpec:
    """A named model: ``build(**kwargs)`` makes it; ``likelihood`` and ``prior_std`` (and the
    Gaussian ``noise_std``) are its paper's, used by :func:`structmc.zoo.energy_for`.

    ``likelihood=None`` means "the data set's task decides" (:data:`TASK_LIKELIHOODS`);
    ``prior_std=None`` that the prior lives in the model (PMF's hierarchical one).
    ``from_data(data) -> kwargs`` sizes the model from a data set (``build_model(..., data=)``)."""

    build: Callable[..., Any]
    likelihood: str | None
    prior_std: float | Mapping[str, float] | None
    noise_std: float | None = None
    description: str = ""
    from_data: Callable[[Any], dict] | None = None


def _check_spec(name: str, entry):
    if not isinstance(entry, ModelSpec):
        raise TypeError(f"model {name!r} must be a structmc.models.ModelSpec, got {type(entry).__name__}")
    return entry


def likelihood_for_task(task: str) -> str:
    try:
        return TASK_LIKELIHOODS[task]
    except KeyError:
        raise ValueError(f"no likelihood for a {task!r} data set; tasks: {sorted(TASK_LIKELIHOODS)}") from None


def data_shape(data) -> dict:
    """``in_features``, ``num_outputs`` (1 for regression and binary tasks, else the number of
    classes) and ``flatten`` (inputs with more than 2 dimensions) of a data set."""
    likelihood_for_task(data.task)  # rejects tasks the generic models cannot fit
    outputs = 1 if data.task in ("regression", "binary") else data.num_classes
    return {"in_features": int(data.num_features), "num_outputs": int(outputs), "flatten": data.x_train.dim() > 2}


def sequential(
    in_features: int, hidden: Sequence[int] = (), num_outputs: int = 1, activation="relu", *, flatten: bool = False
) -> nn.Sequential:
    """``nn.Sequential([Flatten,] Linear, act, ..., Linear)``: the generic ``linear`` /
    ``mlp`` model (layers are created in order, so a seed gives the same weights as any
    stack of ``nn.Linear`` of these widths)."""
    widths = [int(in_features), *(int(h) for h in hidden), int(num_outputs)]
    layers: list[nn.Module] = [nn.Flatten()] if flatten else []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(widths) - 2:
            layers.append(make_activation(activation))
    return nn.Sequential(*layers)


def _generic_linear(in_features: int, num_outputs: int = 1, *, flatten: bool = False) -> nn.Sequential:
    return sequential(in_features, (), num_outputs, flatten=flatten)


def _generic_mlp(
    in_features: int, hidden: Sequence[int] = (50,), num_outputs: int = 1, activation="relu", *, flatten: bool = False
) -> nn.Sequential:
    return sequential(in_features, hidden, num_outputs, activation, flatten=flatten)


def _pmf(**kwargs):
    from .pmf import PMF

    return PMF(**kwargs)


def _mlp(default_in: int, hidden, default_out: int, activation: str):
    def build(
        in_features: int = default_in, hidden=hidden, num_classes: int = default_out, activation=activation, **kw
    ) -> MLP:
        return MLP((in_features, *hidden, num_classes), activation, **kw)

    return build


MODELS: Registry[ModelSpec] = Registry(
    "model",
    {
        "linear_regression": ModelSpec(
            lambda in_features=3, **kw: LinearRegression(in_features, **kw),
            "gaussian",
            1.0,
            1.0,
            "structured-SGMCMC 3-coefficient regression, known σ² = 1",
        ),
        "logistic_regression": ModelSpec(
            lambda in_features=10, bias=False, **kw: LogisticRegression(in_features, bias=bias, **kw),
            "bernoulli",
            SQRT10,
            None,
            "MAMBA simulated logistic regression, θ ~ N(0, 10 I)",
        ),
        "blr_adult": ModelSpec(
            lambda in_features=105, **kw: LogisticRegression(in_features, **kw),
            "bernoulli",
            SQRT10,
            None,
            "pSGLD Bayesian logistic regression on Adult, σ² = 10",
        ),
        "softmax_regression": ModelSpec(
            lambda in_features=784, num_classes=10, **kw: SoftmaxRegression(in_features, num_classes, **kw),
            "categorical",
            1.0,
        ),
        "mlp_mnist": ModelSpec(
            _mlp(784, (50, 50), 10, "relu"),
            "categorical",
            0.3,
            description="structured-SGMCMC MNIST FNN (42,200 weights)",
        ),
        "mlp_psgld": ModelSpec(
            _mlp(784, (400, 400), 10, "relu"),
            "categorical",
            1.0,
            description="pSGLD MNIST FNN; hidden=(800, 800) or (1200, 1200) for the larger ones",
        ),
        "mlp_mamba": ModelSpec(
            _mlp(784, (100,), 10, "softmax"),
            "categorical",
            1.0,
            description="MAMBA MNIST BNN, softmax hidden activation as in the authors' code",
        ),
        "mlp_gibbs": ModelSpec(
            _mlp(784, (10, 10, 10), 10, "sigmoid"),
            "categorical",
            SQRT10,
            description="blocked-Gibbs MLP(784, 10, 10, 10, 10), 8,180 parameters",
        ),
        "mlp_xor": ModelSpec(
            _mlp(2, (2,), 1, "sigmoid"), "bernoulli", SQRT10, description="blocked-Gibbs MLP(2, 2, 1)"
        ),
        "mlp_xor_deep": ModelSpec(
            _mlp(2, (2,) * 6, 1, "sigmoid"),
            "bernoulli",
            SQRT10,
            description="blocked-Gibbs MLP(2, 2, 2, 2, 2, 2, 2, 1)",
        ),
        "mlp_uci": ModelSpec(
            _mlp(13, (50, 50), 1, "relu"),
            "gaussian",
            1.0,
            1.0,
            description="structured-SGMCMC regression network, two hidden layers of 50",
        ),
        "cnn_psgld": ModelSpec(lambda **kw: ConvNet(**kw), "categorical", 1.0, description="pSGLD MNIST CNN"),
        "resnet20": ModelSpec(
            lambda **kw: resnet20(**kw), "categorical", 0.3, description="ResNet-20, CIFAR-10 / SVHN"
        ),
        "resnet20_fmnist": ModelSpec(
            lambda **kw: resnet20(**{"in_channels": 1, **kw}),
            "categorical",
            0.3,
            description="ResNet-20, Fashion-MNIST (1 × 28 × 28)",
        ),
        "pmf": ModelSpec(
            _pmf,
            "gaussian",
            None,
            description="MAMBA probabilistic matrix factorisation, d = 20: a log "
            "density (structmc.models.PMF), not an nn.Module; hierarchical prior, α = 3",
        ),
        "linear": ModelSpec(
            _generic_linear, None, 1.0, description="generic linear model sized from a data set", from_data=data_shape
        ),
        "mlp": ModelSpec(
            _generic_mlp,
            None,
            1.0,
            description="generic MLP sized from a data set (hidden widths, activation)",
            from_data=data_shape,
        ),
    },
    validate=_check_spec,
)


def build_model(name: str, *, seed: int | None = None, data=None, **kwargs):
    """The model called ``name`` in :data:`MODELS`; ``seed`` fixes its initialisation without
    touching the global random state (``None``: the global state draws it). ``data`` sizes it
    through the spec's ``from_data`` (explicit ``kwargs`` win)."""
    spec = MODELS.get(name)
    if data is not None:
        if spec.from_data is None:
            raise ValueError(f"model {name!r} is not sized from a data set; pass its arguments instead of data=")
        kwargs = {**spec.from_data(data), **kwargs}
    if seed is None:
        return spec.build(**kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return spec.build(**kwargs)
