"""Models of the four papers as ``nn.Module`` s (plus PMF as a log density), their paper's
likelihoods and priors (wrapped as energies by :func:`structmc.zoo.energy_for`), and their layer structure for partitions
(:func:`layer_structure`). Building a model loads no data."""

from __future__ import annotations

from .catalogue import MODELS, TASK_LIKELIHOODS, ModelSpec, build_model
from .cnn import ConvNet
from .linear import LinearRegression, LogisticRegression, SoftmaxRegression
from .mlp import ACTIVATIONS, MLP
from .pmf import PMF, pmf_rmse
from .resnet import ResNet, resnet20
from .structure import LayerInfo, layer_ids, layer_structure, unit_ids

__all__ = [
    "LinearRegression",
    "LogisticRegression",
    "SoftmaxRegression",
    "MLP",
    "ACTIVATIONS",
    "ConvNet",
    "ResNet",
    "resnet20",
    "PMF",
    "pmf_rmse",
    "LayerInfo",
    "layer_structure",
    "unit_ids",
    "layer_ids",
    "MODELS",
    "ModelSpec",
    "build_model",
    "TASK_LIKELIHOODS",
]
