"""The papers' models by name, each with the likelihood and prior its paper uses.

``energy_for(name, num_data=..., **model_kwargs)`` builds the module and wraps it in a
:class:`~structmc.energy.ModuleEnergy` ready for :func:`structmc.sample`; ``"pmf"`` gives
the :class:`~structmc.models.PMF` log density instead. Priors are N(0, σ²) on every
parameter; σ below is the standard deviation.

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
``pmf``                     PMF, d = 20                            gaussian α=3 hierarchical (MAMBA)
==========================  =====================================  ===========  ====================

Widths are arguments: ``energy_for("mlp_psgld", hidden=(1200, 1200))``,
``energy_for("mlp_uci", in_features=8)``, ``energy_for("resnet20", norm="group")``. The
Gaussian regression noise σ is the ``noise_std`` argument (targets standardised: 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import torch
from torch import nn

from .cnn import ConvNet
from .linear import LinearRegression, LogisticRegression, SoftmaxRegression
from .mlp import MLP
from .resnet import resnet20

SQRT10 = math.sqrt(10.0)


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[..., nn.Module]
    likelihood: str
    prior_std: float | Mapping[str, float]
    noise_std: float | None = None
    description: str = ""


def _mlp(default_in: int, hidden, default_out: int, activation: str):
    def build(in_features: int = default_in, hidden=hidden, num_classes: int = default_out, activation=activation,
              **kw) -> MLP:
        return MLP((in_features, *hidden, num_classes), activation, **kw)

    return build


MODELS: dict[str, ModelSpec] = {
    "linear_regression": ModelSpec(lambda in_features=3, **kw: LinearRegression(in_features, **kw), "gaussian", 1.0,
                                   1.0, "structured-SGMCMC 3-coefficient regression, known σ² = 1"),
    "logistic_regression": ModelSpec(lambda in_features=10, bias=False, **kw: LogisticRegression(in_features, bias=bias, **kw),
                                     "bernoulli", SQRT10, None, "MAMBA simulated logistic regression, θ ~ N(0, 10 I)"),
    "blr_adult": ModelSpec(lambda in_features=105, **kw: LogisticRegression(in_features, **kw), "bernoulli", SQRT10,
                           None, "pSGLD Bayesian logistic regression on Adult, σ² = 10"),
    "softmax_regression": ModelSpec(lambda in_features=784, num_classes=10, **kw: SoftmaxRegression(in_features, num_classes, **kw),
                                    "categorical", 1.0),
    "mlp_mnist": ModelSpec(_mlp(784, (50, 50), 10, "relu"), "categorical", 0.3,
                           description="structured-SGMCMC MNIST FNN (42,200 weights)"),
    "mlp_psgld": ModelSpec(_mlp(784, (400, 400), 10, "relu"), "categorical", 1.0,
                           description="pSGLD MNIST FNN; hidden=(800, 800) or (1200, 1200) for the larger ones"),
    "mlp_mamba": ModelSpec(_mlp(784, (100,), 10, "softmax"), "categorical", 1.0,
                           description="MAMBA MNIST BNN, softmax hidden activation as in the authors' code"),
    "mlp_gibbs": ModelSpec(_mlp(784, (10, 10, 10), 10, "sigmoid"), "categorical", SQRT10,
                           description="blocked-Gibbs MLP(784, 10, 10, 10, 10), 8,180 parameters"),
    "mlp_xor": ModelSpec(_mlp(2, (2,), 1, "sigmoid"), "bernoulli", SQRT10, description="blocked-Gibbs MLP(2, 2, 1)"),
    "mlp_xor_deep": ModelSpec(_mlp(2, (2,) * 6, 1, "sigmoid"), "bernoulli", SQRT10,
                              description="blocked-Gibbs MLP(2, 2, 2, 2, 2, 2, 2, 1)"),
    "mlp_uci": ModelSpec(_mlp(13, (50, 50), 1, "relu"), "gaussian", 1.0, 1.0,
                         description="structured-SGMCMC regression network, two hidden layers of 50"),
    "cnn_psgld": ModelSpec(lambda **kw: ConvNet(**kw), "categorical", 1.0, description="pSGLD MNIST CNN"),
    "resnet20": ModelSpec(lambda **kw: resnet20(**kw), "categorical", 0.3, description="ResNet-20, CIFAR-10 / SVHN"),
    "resnet20_fmnist": ModelSpec(lambda **kw: resnet20(**{"in_channels": 1, **kw}), "categorical", 0.3,
                                 description="ResNet-20, Fashion-MNIST (1 × 28 × 28)"),
}


def build_model(name: str, *, seed: int | None = None, **kwargs) -> nn.Module:
    """The module called ``name`` (see the table); ``seed`` fixes its initialisation without
    touching the global random state."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS) + ['pmf']}")
    if seed is None:
        return MODELS[name].build(**kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return MODELS[name].build(**kwargs)


def energy_for(name: str, *, num_data: int | None = None, prior_std=None, noise_std: float | None = None,
               likelihood=None, seed: int | None = None, **model_kwargs):
    """A :class:`~structmc.energy.ModuleEnergy` of model ``name`` with its paper's likelihood
    and prior (overridable), or for ``"pmf"`` the :meth:`PMF.energy` log density (keyword
    arguments go to :class:`~structmc.models.PMF`; ``num_data`` is its N)."""
    from ..energy import ModuleEnergy

    if name == "pmf":
        from .pmf import PMF

        return PMF(num_data=num_data, **model_kwargs).energy()
    module = build_model(name, seed=seed, **model_kwargs)
    spec = MODELS[name]
    lik = likelihood or spec.likelihood
    return ModuleEnergy(module, lik, prior_std=spec.prior_std if prior_std is None else prior_std,
                        num_data=num_data, noise_std=noise_std if noise_std is not None else spec.noise_std)
