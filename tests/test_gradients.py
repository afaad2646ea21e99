"""Deterministic checks of gradient estimators, energies and sampler fixed points (float64).

* T = 0 with a zero gradient: no sampler moves; T = 0 SGLD is SGD with step ε/2.
* A control variate at its centre returns the full-data gradient on any minibatch.
* The minibatch gradient (N/n scaling) averaged over ALL minibatches is the full gradient.
* ``full_data_value_and_grad`` in chunks equals one pass; ModuleEnergy's single-chain,
  vmapped and reference paths agree.
"""

from __future__ import annotations

import fnmatch
import itertools
import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

import structmc
from structmc.energy import full_data_value_and_grad

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


# ---------------------------------------------------------------------------------------
# Fixed points at T = 0
# ---------------------------------------------------------------------------------------
SAMPLERS_T0 = {
    "sgld": lambda: structmc.SGLD(0.3, temperature=0.0),
    "psgld": lambda: structmc.PSGLD(0.3, temperature=0.0),
    "sghmc": lambda: structmc.SGHMC(0.3, friction=0.5, temperature=0.0),
    "sghmc_leapfrog": lambda: structmc.SGHMC(0.3, friction=0.5, temperature=0.0, num_leapfrog=3,
                                              resample_momentum=True),
    "sgnht": lambda: structmc.SGNHT(0.3, a=0.5, temperature=0.0),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS_T0))
def test_zero_temperature_zero_gradient_does_not_move(name):
    """A flat energy (∇U = 0) at T = 0: momentum starts at N(0, ηT) = 0, no noise, no drift."""
    theta0 = torch.tensor([[0.3, -1.7, 2.5], [1.0, 0.0, -4.0]], dtype=DTYPE)

    def flat(theta, batch):
        return 0.0 * theta.sum()

    chain = structmc.sample(flat, theta0, SAMPLERS_T0[name](), 25, num_chains=2, seed=3, progress=False)
    assert torch.equal(chain.samples, theta0.unsqueeze(1).expand(2, 25, 3))
    # also directly through update(): zero gradient, zero momentum
    sampler = SAMPLERS_T0[name]()
    state = sampler.init(theta0.clone(), torch.Generator().manual_seed(0))
    for _ in range(10):
        state = sampler.update(state, torch.zeros_like(theta0), 0.3, torch.Generator().manual_seed(1))
    assert torch.equal(state.theta, theta0)
    if hasattr(state, "momentum"):
        assert torch.equal(state.momentum, torch.zeros_like(theta0))


def test_zero_temperature_sgld_is_gradient_descent_with_half_step():
    X, y = regression_data()
    theta = torch.tensor([0.5, -0.2, 1.0], dtype=DTYPE)
    lr = 0.01
    chain = structmc.sample(regression_log_prob, theta, structmc.SGLD(lr, temperature=0.0), 3,
                            data=(X, y), progress=False)
    expected = theta.clone()
    for k in range(3):
        expected = expected - 0.5 * lr * regression_full_grad(expected, X, y)
        torch.testing.assert_close(chain.samples[0, k], expected, **_tol())


def test_zero_temperature_sghmc_is_heavy_ball():
    """v ← (1-α)v - η∇U, θ ← θ + v, starting from v = 0 at T = 0."""
    X, y = regression_data()
    theta = torch.tensor([0.5, -0.2, 1.0], dtype=DTYPE)
    lr, alpha = 0.002, 0.3
    chain = structmc.sample(regression_log_prob, theta, structmc.SGHMC(lr, friction=alpha, temperature=0.0), 4,
                            data=(X, y), progress=False)
    th, v = theta.clone(), torch.zeros(3, dtype=DTYPE)
    for k in range(4):
        v = (1 - alpha) * v - lr * regression_full_grad(th, X, y)
        th = th + v
        torch.testing.assert_close(chain.samples[0, k], th, **_tol())


# ---------------------------------------------------------------------------------------
# Control variates
# ---------------------------------------------------------------------------------------
def _energies():
    X, y = regression_data()
    Xc, yc = classification_data()
    return {
        "log_prob": (structmc.LogDensityEnergy(regression_log_prob, 3, num_data=N), (X, y)),
        "module": (mlp_energy(), (Xc, yc)),
    }


@pytest.mark.parametrize("kind", ["log_prob", "module"])
@pytest.mark.parametrize("chunk_size", [3, 4096])
def test_control_variate_at_centre_equals_full_gradient(kind, chunk_size):
    energy, data = _energies()[kind]
    P = energy.space.dim
    g = torch.Generator().manual_seed(5)
    centre = torch.randn(P, generator=g, dtype=DTYPE)
    full_value, full_grad = energy.value_and_grad(centre[None], full_batch(data))
    # the full gradient itself is right (closed form for the regression)
    if kind == "log_prob":
        torch.testing.assert_close(full_grad[0], regression_full_grad(centre, *data), **_tol())
    cv = structmc.ControlVariate(centre, chunk_size=chunk_size)
    subsets, K = all_subset_batch(data, 2)
    theta = centre.expand(K, P).clone()
    cv.prepare(energy, data, theta)
    torch.testing.assert_close(cv._full_grad_c, full_grad.expand(K, P), **_tol())
    # on every minibatch, at θ = centre, the estimate is the full gradient
    value, grad = cv(energy, theta, subsets)
    torch.testing.assert_close(grad, full_grad.expand(K, P), **_tol())
    # ... and its reported energy is the plain minibatch energy
    torch.testing.assert_close(value, energy.value_and_grad(theta, subsets)[0], **_tol())
    # on the full data it is the full gradient too
    cv2 = structmc.ControlVariate(centre, chunk_size=chunk_size)
    cv2.prepare(energy, data, centre[None])
    _, grad_full = cv2(energy, centre[None], full_batch(data))
    torch.testing.assert_close(grad_full, full_grad, **_tol())


def test_control_variate_off_centre_is_unbiased_and_per_chain_centres():
    """Away from the centre the CV estimate averages (over all minibatches) to the full
    gradient; a [C, P] centre gives each chain its own full gradient."""
    energy, data = _energies()["module"]
    P = energy.space.dim
    g = torch.Generator().manual_seed(6)
    subsets, K = all_subset_batch(data, 3)
    centres = torch.randn(K, P, generator=g, dtype=DTYPE)
    theta = torch.randn(P, generator=g, dtype=DTYPE).expand(K, P).clone()
    cv = structmc.ControlVariate(centres, chunk_size=5)
    cv.prepare(energy, data, theta)
    _, full_at_centres = energy.value_and_grad(centres, full_batch(data, K))
    torch.testing.assert_close(cv._full_grad_c, full_at_centres, **_tol())
    # with one shared centre the estimate is unbiased over the K equally likely subsets
    cv1 = structmc.ControlVariate(centres[0])
    cv1.prepare(energy, data, theta)
    _, grad = cv1(energy, theta, subsets)
    _, full_theta = energy.value_and_grad(theta[:1], full_batch(data))
    torch.testing.assert_close(grad.mean(0), full_theta[0], rtol=1e-11, atol=1e-11)
    assert (grad - full_theta).abs().max() > 1e-3  # but not trivially: single batches differ


# ---------------------------------------------------------------------------------------
# Unbiased minibatch gradients
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 5])
def test_minibatch_gradient_unbiased_log_prob(n):
    X, y = regression_data()
    energy = structmc.LogDensityEnergy(regression_log_prob, 3, num_data=N)
    theta = torch.tensor([0.4, -1.1, 0.9], dtype=DTYPE)
    full = regression_full_grad(theta, X, y)
    for batches, K in (all_subset_batch((X, y), n), all_tuple_batch((X, y), min(n, 3))):
        value, grad = structmc.Minibatch()(energy, theta.expand(K, 3).clone(), batches)
        torch.testing.assert_close(grad.mean(0), full, rtol=1e-11, atol=1e-11)
        full_value = -regression_log_prob(theta, (X, y))
        torch.testing.assert_close(value.mean(), full_value, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_minibatch_gradient_unbiased_module_energy(n):
    """ModuleEnergy applies N/n itself: the average over all C(N, n) subsets (vmapped chains)
    is the full-data gradient, which matches an independent hand-written energy with the
    per-group priors of ``PRIOR_STD``."""
    X, y = classification_data()
    energy = mlp_energy(num_data=None).with_num_data(N)
    module = mlp()
    g = torch.Generator().manual_seed(2)
    theta = torch.randn(energy.space.dim, generator=g, dtype=DTYPE)
    leaf = theta.clone().requires_grad_(True)
    u_ref = independent_mlp_energy(module, leaf, X, y)
    (g_ref,) = torch.autograd.grad(u_ref, leaf)
    value_full, grad_full = energy.value_and_grad(theta[None], full_batch((X, y)))
    torch.testing.assert_close(value_full[0], u_ref.detach(), **_tol())
    torch.testing.assert_close(grad_full[0], g_ref, **_tol())
    batches, K = all_subset_batch((X, y), n)
    value, grad = energy.value_and_grad(theta.expand(K, -1).clone(), batches)
    torch.testing.assert_close(grad.mean(0), g_ref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(value.mean(), u_ref.detach(), rtol=1e-11, atol=1e-11)


def test_module_energy_per_group_prior():
    """prior_std patterns: first match wins; with zero data weight the energy is the prior."""
    energy = mlp_energy()
    stds = energy.space.per_param_vector(PRIOR_STD, like=torch.empty(0, dtype=DTYPE))
    expected = {"0.weight": 0.5, "0.bias": 10.0, "2.weight": 2.0, "2.bias": 10.0}
    for info in energy.space.params:
        assert torch.all(stds[info.slice] == expected[info.name])
    theta = torch.randn(1, energy.space.dim, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    X, y = classification_data()
    u_all, g_all = energy.value_and_grad(theta, full_batch((X, y)))
    nll = structmc.ModuleEnergy(mlp(), "categorical", prior_std=1e12, num_data=N).value_and_grad(theta, full_batch((X, y)))
    torch.testing.assert_close(g_all - nll[1], theta / stds**2, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(u_all - nll[0], 0.5 * (theta.square() / stds**2).sum(-1), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Full-data evaluation in chunks
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["log_prob", "module"])
@pytest.mark.parametrize("chunk_size", [1, 3, 5, 8])
def test_full_data_chunked_equals_single_pass(kind, chunk_size):
    energy, data = _energies()[kind]
    theta = torch.randn(3, energy.space.dim, generator=torch.Generator().manual_seed(4), dtype=DTYPE)
    v1, g1 = full_data_value_and_grad(energy, theta, data, chunk_size=4096)
    vk, gk = full_data_value_and_grad(energy, theta, data, chunk_size=chunk_size)
    torch.testing.assert_close(vk, v1, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(gk, g1, rtol=1e-12, atol=1e-10)
    # and the single pass is the energy on the whole data set
    v, g = energy.value_and_grad(theta, full_batch(data, 3))
    torch.testing.assert_close(v1, v, **_tol())
    torch.testing.assert_close(g1, g, **_tol())


def test_full_data_chunked_needs_num_data():
    X, y = classification_data()
    energy = structmc.ModuleEnergy(mlp(), "categorical")  # num_data None: no N/n scaling
    with pytest.raises(ValueError, match="num_data"):
        full_data_value_and_grad(energy, torch.zeros(1, energy.space.dim, dtype=DTYPE), (X, y), chunk_size=3)


# ---------------------------------------------------------------------------------------
# ModuleEnergy: fast paths agree with the reference
# ---------------------------------------------------------------------------------------
def _module_cases():
    Xr, yr = regression_data()
    Xc, yc = classification_data()
    yb = (Xr[:, 0] > 0).to(DTYPE)
    torch.manual_seed(0)
    return {
        "linear_gaussian": (structmc.ModuleEnergy(nn.Linear(3, 1, bias=False).to(DTYPE), "gaussian", noise_std=0.7,
                                                  prior_std=2.0, num_data=N), (Xr, yr)),
        "mlp_categorical": (mlp_energy(), (Xc, yc)),
        "mlp_bernoulli": (structmc.ModuleEnergy(nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 1)).to(DTYPE),
                                                "bernoulli", prior_std={"*.bias": 3.0, "*": 1.5}, num_data=N), (Xr, yb)),
    }


@pytest.mark.parametrize("case", ["linear_gaussian", "mlp_categorical", "mlp_bernoulli"])
def test_module_energy_paths_agree(case):
    energy, data = _module_cases()[case]
    C, n, P = 4, 3, energy.space.dim
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(C, P, generator=g, dtype=DTYPE)
    idx = torch.stack([torch.randperm(N, generator=g)[:n] for _ in range(C)])
    batch = tuple(t[idx] for t in data)
    v_ref, g_ref = energy.reference_value_and_grad(theta, batch)
    v_vm, g_vm = energy.value_and_grad(theta, batch)  # vmapped
    torch.testing.assert_close(v_vm, v_ref, **_tol())
    torch.testing.assert_close(g_vm, g_ref, **_tol())
    torch.testing.assert_close(energy.value(theta, batch), v_ref, **_tol())
    for c in range(C):  # single-chain fast path, called repeatedly (shared flat buffers)
        bc = tuple(t[c : c + 1] for t in batch)
        v1, g1 = energy.value_and_grad(theta[c : c + 1], bc)
        torch.testing.assert_close(v1, v_ref[c : c + 1], **_tol())
        torch.testing.assert_close(g1, g_ref[c : c + 1], **_tol())
        torch.testing.assert_close(energy.value(theta[c : c + 1], bc), v_ref[c : c + 1], **_tol())
    # the returned gradient is not a view of the energy's internal buffer
    _, g_a = energy.value_and_grad(theta[:1], tuple(t[:1] for t in batch))
    energy.value_and_grad(theta[1:2], tuple(t[1:2] for t in batch))
    torch.testing.assert_close(g_a, g_ref[:1], **_tol())


# ---------------------------------------------------------------------------------------
# pSGLD: Hessian diagonal and the Γ term; per-datum scale N
# ---------------------------------------------------------------------------------------
def test_hessian_diag_exact_for_diagonal_hessian():
    """Hutchinson z ⊙ (∇²U z) with Rademacher z is exact when ∇²U is diagonal."""
    h = torch.tensor([2.0, 0.5, 3.0], dtype=DTYPE)
    c = torch.tensor([0.3, 1.0, 0.1], dtype=DTYPE)

    def lp(theta, batch):
        return -(0.5 * h * theta.square() + 0.25 * c * theta.pow(4)).sum()

    theta = torch.tensor([[0.7, -1.2, 0.4], [0.1, 2.0, -3.0]], dtype=DTYPE)
    est = structmc.LogDensityEnergy(lp, 3).hessian_diag(theta, None, torch.Generator().manual_seed(0))
    torch.testing.assert_close(est, h + 3 * c * theta.square(), **_tol())
    # a module whose inputs have one non-zero feature each: XᵀX is diagonal on every batch
    X = torch.zeros(N, 3, dtype=DTYPE)
    X[torch.arange(N), torch.arange(N) % 3] = torch.arange(1.0, N + 1, dtype=DTYPE)
    y = torch.randn(N, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    energy = structmc.ModuleEnergy(nn.Linear(3, 1, bias=False).to(DTYPE), "gaussian", noise_std=0.7,
                                   prior_std={"*": 2.0}, num_data=N)
    batch = tuple(t[:5].unsqueeze(0).expand(2, *t[:5].shape) for t in (X, y))
    est = energy.hessian_diag(theta, batch, torch.Generator().manual_seed(2))
    exact = (N / 5) * X[:5].square().sum(0) / 0.49 + 1 / 4.0
    torch.testing.assert_close(est, exact.expand(2, 3), **_tol())


def test_hessian_diag_module_energy_is_unbiased():
    """For a non-diagonal Hessian (MLP) the probe average converges to diag ∇²U: checked
    against the exact Hessian with a tolerance of 6 SD of the Hutchinson estimate."""
    X, y = classification_data()
    energy = mlp_energy()
    P, K = energy.space.dim, 300
    theta = 0.5 * torch.randn(1, P, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    batch = tuple(t[:5].unsqueeze(0) for t in (X, y))
    H = torch.autograd.functional.hessian(lambda t: independent_mlp_energy(mlp(), t, X[:5], y[:5]), theta[0])
    est = energy.hessian_diag(theta, batch, torch.Generator().manual_seed(4), num_probes=K)[0]
    off = H - torch.diag(torch.diag(H))
    sd = off.square().sum(1).div(K).sqrt()
    assert torch.all((est - torch.diag(H)).abs() <= 6 * sd + 1e-10), (est, torch.diag(H))


@pytest.mark.parametrize("v_init", ["first", "zeros"])
def test_psgld_gamma_term_is_derivative_of_preconditioner(v_init):
    """With include_gamma, θ' = θ - (ε/2)G∇Û + (ε/2)Γ with Γ_i = ∂G_ii/∂θ_i, where
    G(θ) = 1/(λ + √V(θ)) and V(θ) the RMSprop update at θ (ḡ = ∇Û/N). Checked by autograd
    through that update on a separable energy (T = 0, one step)."""
    h = torch.tensor([2.0, 0.5, 3.0], dtype=DTYPE)
    c = torch.tensor([0.3, 1.0, 0.1], dtype=DTYPE)

    def lp(theta, batch):
        return -(0.5 * h * theta.square() + 0.25 * c * theta.pow(4)).sum()

    energy = structmc.LogDensityEnergy(lp, 3)
    theta = torch.tensor([[0.7, -1.2, 0.4]], dtype=DTYPE)
    lr, alpha, eps, num_data = 0.05, 0.9, 1e-3, 5
    v_prev = torch.tensor([[0.3, 0.01, 2.0]], dtype=DTYPE)
    sampler = structmc.PSGLD(lr, alpha=alpha, eps=eps, num_data=num_data, temperature=0.0,
                             include_gamma=True, v_init=v_init)
    state = sampler.init(theta)
    first = v_init == "first"
    if not first:
        state.square_avg.copy_(v_prev)
        state.step = 3

    def precond(th):
        g = (h * th + c * th.pow(3)) / num_data
        v = g.square() if first else alpha * v_prev[0] + (1 - alpha) * g.square()
        return 1 / (eps + v.sqrt())

    G = precond(theta[0])
    Gamma = torch.diagonal(torch.autograd.functional.jacobian(precond, theta[0]))
    _, grad = energy.value_and_grad(theta, None)
    hdiag = energy.hessian_diag(theta, None, torch.Generator().manual_seed(0))
    sampler.update(state, grad, lr, None, hessian_diag=hdiag)
    expected = theta[0] - 0.5 * lr * G * grad[0] + 0.5 * lr * Gamma
    torch.testing.assert_close(state.theta[0], expected, **_tol())
    assert (Gamma.abs() > 1e-4).all()  # the term is not negligible here


def test_psgld_per_datum_scale_follows_each_runs_data():
    """pSGLD's ḡ = ∇Û/N takes N from the run's data when ``num_data`` is None. Reusing a
    sampler object for a second data set must give the same chain as a fresh sampler
    (same seed, same chain); ``sample`` must not leave the first run's N on the sampler."""
    X, y = regression_data(d=3)
    X2 = torch.cat([X, 2 * X]), torch.cat([y, -y])

    def lp_for(n_total):
        def lp(theta, batch):
            x, t = batch
            return -(n_total / t.shape[0]) * 0.5 * (t - x @ theta).square().sum() - 0.5 * theta.square().sum()
        return lp

    theta0 = torch.zeros(3, dtype=DTYPE)
    reused = structmc.PSGLD(1e-3)
    structmc.sample(lp_for(N), theta0, reused, 5, data=(X, y), batch_size=4, progress=False)
    a = structmc.sample(lp_for(2 * N), theta0, reused, 5, data=X2, batch_size=4, progress=False, seed=1)
    b = structmc.sample(lp_for(2 * N), theta0, structmc.PSGLD(1e-3), 5, data=X2, batch_size=4, progress=False, seed=1)
    torch.testing.assert_close(a.samples, b.samples, **_tol())
    assert reused.num_data in (None, 2 * N), f"sampler kept num_data={reused.num_data} from the first run"
