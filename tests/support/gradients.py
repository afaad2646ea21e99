"""Small float64 problems with closed-form gradients, shared by the energy, gradient-estimator
and sampler fixed-point tests (moved from ``tests/test_gradients.py``)."""

from __future__ import annotations

import fnmatch
import itertools
import math

import torch
from torch import nn
from torch.func import functional_call

import structmc

DTYPE = torch.float64
N = 8


def _tol():
    return {"rtol": 1e-12, "atol": 1e-12}


# ---------------------------------------------------------------------------------------
# Data and energies
# ---------------------------------------------------------------------------------------
def regression_data(seed=0, d=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=DTYPE)
    y = X @ torch.arange(1.0, d + 1, dtype=DTYPE) + torch.randn(N, generator=g, dtype=DTYPE)
    return X, y


def classification_data(seed=1, d=3, k=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=DTYPE)
    y = torch.randint(k, (N,), generator=g)
    return X, y


def regression_log_prob(theta, batch):
    """Gaussian regression log posterior with the N/n scaling written in (σ = 0.7, σ0 = 2)."""
    x, y = batch
    n = y.shape[0]
    return -(N / n) * 0.5 * (y - x @ theta).square().sum() / 0.49 - 0.5 * theta.square().sum() / 4.0


def regression_full_grad(theta, X, y):
    """Closed-form ∇U = Xᵀ(Xθ - y)/σ² + θ/σ0²."""
    return X.T @ (X @ theta - y) / 0.49 + theta / 4.0


PRIOR_STD = {"*.bias": 10.0, "0.*": 0.5, "*": 2.0}


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).to(DTYPE)


def mlp_energy(seed=0, num_data=N):
    return structmc.ModuleEnergy(mlp(seed), "categorical", prior_std=PRIOR_STD, num_data=num_data)


def independent_mlp_energy(module, theta, X, y, num_data=N):
    """Energy written out by hand: -(N/n) Σ log softmax + ½ Σ_j θ_j²/σ_j², σ_j by name pattern."""
    names = [(n, p.shape) for n, p in module.named_parameters()]
    params, stds, off = {}, [], 0
    for name, shape in names:
        k = math.prod(shape)
        params[name] = theta[off : off + k].view(shape)
        sigma = next(v for pat, v in PRIOR_STD.items() if fnmatch.fnmatchcase(name, pat))
        stds.append(torch.full((k,), sigma, dtype=DTYPE))
        off += k
    sigma = torch.cat(stds)
    out = functional_call(module, params, (X,))
    log_lik = out.log_softmax(-1).gather(-1, y[:, None]).sum()
    return -(num_data / y.shape[0]) * log_lik + 0.5 * (theta.square() / sigma.square()).sum()


def all_subset_batch(data, n):
    """Every size-n subset as one chain each: tensors ``[K, n, ...]`` (K = C(N, n))."""
    subsets = torch.tensor(list(itertools.combinations(range(N), n)))
    return tuple(t[subsets] for t in data), subsets.shape[0]


def all_tuple_batch(data, n):
    """Every ordered n-tuple (batching="with_replacement"): ``[N^n, n, ...]``."""
    tuples = torch.tensor(list(itertools.product(range(N), repeat=n)))
    return tuple(t[tuples] for t in data), tuples.shape[0]


def full_batch(data, C=1):
    return tuple(t.unsqueeze(0).expand(C, *t.shape) for t in data)
