"""The run loop: validation, reproducibility, checkpoint/resume, divergence, storage."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.storage import RunFolder


def gaussian_log_prob(theta, batch):
    return -0.5 * (theta * theta).sum()


def linreg_problem(n=64, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.tensor([1.0, -2.0, 0.5])[:d] + 0.3 * torch.randn(n, generator=g)
    return X, y


def mlp_energy(seed=0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(90, 4, generator=g)
    y = torch.randint(0, 3, (90,), generator=g)
    return sm.ModuleEnergy(net, "categorical", prior_std={"*.bias": 3.0, "*": 1.0}), (X, y)


ALL_SAMPLERS = [
    lambda: sm.SGLD(1e-3),
    lambda: sm.PSGLD(1e-4),
    lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2, resample_momentum=True),
    lambda: sm.SGNHT(1e-4, a=0.1, num_leapfrog=2),
]


# ---------------------------------------------------------------------------------------
# validation: clear ValueError before any compute
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"thin": 0}, "thin"),
        ({"burn_in": -1}, "burn_in"),
        ({"burn_in": 10}, "burn_in"),
        ({"num_chains": 0}, "num_chains"),
        ({"batch_size": 100}, "batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"batching": "random"}, "batching"),
        ({"init": torch.zeros(5)}, "init must have shape"),
        ({"init": torch.zeros(3, 2)}, "init must have shape"),
        ({"init": torch.tensor([0.0, math.nan])}, "NaN"),
        ({"checkpoint_every": 5}, "out_dir"),
        ({"resume": True}, "out_dir"),
        ({"keep_in_memory": False}, "out_dir"),
        ({"num_steps": 5, "burn_in": 2, "thin": 4}, "no draw"),
        ({"seed": -1}, "seed"),
    ],
)
def test_invalid_arguments_raise_before_compute(kwargs, match):
    calls = []

    def log_prob(theta, batch):
        calls.append(1)
        return -0.5 * (theta * theta).sum()

    args = dict(num_steps=10, data=(torch.randn(20, 1),), init=torch.zeros(2))
    args.update(kwargs)
    init, num_steps = args.pop("init"), args.pop("num_steps")
    with pytest.raises(ValueError, match=match):
        sm.sample(sm.LogDensityEnergy(log_prob, 2), init, sm.SGLD(0.1), num_steps, **args)
    assert not calls, "the target was evaluated before the arguments were validated"


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: sm.SGLD(-0.1), "lr"),
        (lambda: sm.SGLD(0.1, temperature=-1), "temperature"),
        (lambda: sm.PSGLD(0.1, alpha=1.0), "alpha"),
        (lambda: sm.SGHMC(0.1, friction=0.0), "friction"),
        (lambda: sm.SGHMC(0.1, friction=0.1, beta_hat=0.2), "beta_hat"),
        (lambda: sm.SGHMC(0.1, num_leapfrog=0), "num_leapfrog"),
        (lambda: sm.SGNHT(0.1, a=-1), "a must"),
        (lambda: sm.StepDecay(0.1, every=0), "every"),
        (lambda: sm.Polynomial(0.1, b=1, gamma=2), "gamma"),
        (lambda: sm.Cyclical(0.1, num_steps=2, num_cycles=3), "num_cycles"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), "gaussian"), "noise_std"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), "poisson"), "likelihood"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), prior_std=0.0), "prior_std"),
        (lambda: sm.ModuleEnergy(nn.Linear(2, 1), prior_std={"bias": 1.0}), "matches no pattern"),
    ],
)
def test_invalid_configuration(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_data_shape_mismatch():
    with pytest.raises(ValueError, match="first dimension"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 5, data=(torch.randn(10, 2), torch.randn(9)))


# ---------------------------------------------------------------------------------------
# draws, thinning, info
# ---------------------------------------------------------------------------------------
def test_burn_in_thin_and_info_layout():
    chain = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.1), 25, burn_in=5, thin=4, num_chains=2,
                      progress=False)
    assert chain.samples.shape == (2, 5, 3)
    assert chain.draw_steps.tolist() == [9, 13, 17, 21, 25]
    assert chain.info["lr"].shape == (25,) and torch.allclose(chain.info["lr"], torch.full((25,), 0.1, dtype=torch.float64))
    assert chain.info["energy"].shape == (2, 25) and bool(torch.isfinite(chain.info["energy"]).all())
    assert bool((chain.info["time"].diff() >= 0).all())


def test_draws_are_the_states_after_the_kept_iterations():
    seen = {}
    chain = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 6, thin=2, progress=False,
                      callback=lambda t, state: seen.__setitem__(t, state.theta.clone()))
    for k, t in enumerate(chain.draw_steps.tolist()):
        assert torch.equal(chain.samples[:, k], seen[t])


def test_schedule_is_applied_per_iteration():
    sched = sm.StepDecay(0.4, every=3, factor=0.5)
    chain = sm.sample(gaussian_log_prob, torch.zeros(1), sm.SGLD(sched), 7, progress=False)
    assert chain.info["lr"].tolist() == [0.4, 0.4, 0.4, 0.2, 0.2, 0.2, 0.1]


def test_named_views_of_module_parameters():
    energy, data = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-4), 4, data=data, batch_size=30, progress=False)
    assert chain["0.weight"].shape == (1, 4, 6, 4)
    assert chain["2.bias"].shape == (1, 4, 3)
    assert torch.equal(chain["2.bias"][0, -1], chain.samples[0, -1, -3:])


# ---------------------------------------------------------------------------------------
# reproducibility
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_SAMPLERS)
@pytest.mark.parametrize("num_chains", [1, 3])
def test_same_seed_same_chain(make, num_chains):
    energy, data = mlp_energy()
    run = lambda seed: sm.sample(energy, None, make(), 12, data=data, batch_size=30, seed=seed,
                                 num_chains=num_chains, progress=False)
    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a.samples, b.samples)
    assert not torch.equal(a.samples, c.samples)


def test_chains_are_independent_streams():
    chain = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.5), 50, num_chains=4, progress=False)
    x = chain.samples[:, -1, 0]
    assert len(set(x.tolist())) == 4


@pytest.mark.parametrize("batching", ["epoch", "with_replacement", "without_replacement"])
def test_batches_differ_between_chains(batching):
    X, y = linreg_problem(n=40)
    seen = []

    def log_prob(theta, batch):
        seen.append(batch[0].clone())
        return -0.5 * (theta * theta).sum(-1)

    sm.sample(sm.LogDensityEnergy(log_prob, 2, vectorized=True), torch.zeros(2), sm.SGLD(0.1), 1, data=(X, y),
              batch_size=8, batching=batching, num_chains=3, progress=False)
    xb = seen[0]
    assert xb.shape == (3, 8, 3)
    assert not torch.equal(xb[0], xb[1])


def test_epoch_batching_visits_every_point_once_per_epoch():
    X = torch.arange(20.0).unsqueeze(1)
    seen = []

    def log_prob(theta, batch):
        seen.append(batch[0].reshape(-1).clone())
        return -0.5 * (theta * theta).sum()

    sm.sample(log_prob, torch.zeros(1), sm.SGLD(0.1), 8, data=(X,), batch_size=6, progress=False)
    # 20 // 6 = 3 steps per epoch; two points are dropped at random each epoch
    epoch1 = torch.cat(seen[:3])
    assert len(set(epoch1.tolist())) == 18
    assert not torch.equal(torch.cat(seen[3:6]), epoch1)


# ---------------------------------------------------------------------------------------
# checkpoint / resume
# ---------------------------------------------------------------------------------------
class Interrupt(Exception):
    pass


@pytest.mark.parametrize("make", ALL_SAMPLERS + [lambda: sm.SGLD(sm.Cyclical(1e-3, num_steps=40, num_cycles=3))])
@pytest.mark.parametrize("num_chains", [1, 2])
def test_resume_gives_the_uninterrupted_chain(tmp_path, make, num_chains):
    energy, data = mlp_energy()
    kwargs = dict(data=data, batch_size=20, seed=3, num_chains=num_chains, burn_in=5, thin=3, progress=False)
    full = sm.sample(energy, None, make(), 40, **kwargs)

    def interrupt(t, state):
        if t == 23:
            raise Interrupt

    with pytest.raises(Interrupt):
        sm.sample(energy, None, make(), 40, out_dir=tmp_path, checkpoint_every=10, chunk_draws=2,
                  callback=interrupt, **kwargs)
    resumed = sm.sample(energy, None, make(), 40, out_dir=tmp_path, checkpoint_every=10, chunk_draws=2,
                        resume=True, **kwargs)
    assert torch.equal(resumed.samples, full.samples)
    assert torch.equal(resumed.draw_steps, full.draw_steps)
    assert torch.equal(resumed.info["lr"], full.info["lr"])
    assert torch.equal(resumed.info["energy"], full.info["energy"])
    on_disk = sm.Chain.load(tmp_path)
    assert torch.equal(on_disk.samples, full.samples)


def test_resume_with_control_variates(tmp_path):
    energy, data = mlp_energy()
    centre = energy.initial_position() + 0.01
    kwargs = dict(data=data, batch_size=30, seed=1, progress=False, gradient=sm.ControlVariate(centre))
    full = sm.sample(energy, None, sm.SGLD(1e-3), 20, **kwargs)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, out_dir=tmp_path, **kwargs)
    longer = sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kwargs)
    assert torch.equal(longer.samples, full.samples)


def test_extend_a_finished_run(tmp_path):
    kwargs = dict(seed=4, num_chains=2, progress=False)
    full = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 30, **kwargs)
    sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 17, out_dir=tmp_path, **kwargs)
    extended = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGHMC(0.01, friction=0.2), 30, out_dir=tmp_path,
                         resume=True, **kwargs)
    assert torch.equal(extended.samples, full.samples)


def test_resume_refuses_changed_settings(tmp_path):
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="cannot resume"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.2), 20, out_dir=tmp_path, resume=True, progress=False)
    with pytest.raises(ValueError, match="cannot resume"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 20, out_dir=tmp_path, resume=True, seed=1,
                  progress=False)


def test_streaming_to_disk_without_memory(tmp_path):
    full = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 25, thin=2, progress=False)
    streamed = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 25, thin=2, progress=False,
                         out_dir=tmp_path, keep_in_memory=False, chunk_draws=5)
    assert len(RunFolder(tmp_path).chunk_files()) == 3  # 12 draws in chunks of 5, 5, 2
    assert torch.equal(streamed.samples, full.samples)


def test_chain_save_load_roundtrip(tmp_path):
    energy, data = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-4), 6, data=data, progress=False)
    chain.save(tmp_path / "c")
    back = sm.Chain.load(tmp_path / "c")
    assert torch.equal(back.samples, chain.samples)
    assert back.space.names == chain.space.names
    assert back.config["sampler"]["sampler"] == "sgld"


# ---------------------------------------------------------------------------------------
# divergence
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_SAMPLERS)
def test_divergence_names_step_and_sampler_and_keeps_draws(tmp_path, make):
    def log_prob(theta, batch):  # finite for 7 iterations, then NaN
        log_prob.calls += 1
        bad = log_prob.calls > 7 * sampler.num_leapfrog
        return -0.5 * (theta * theta).sum() + (math.nan if bad else 0.0)

    log_prob.calls = 0
    sampler = make()
    with pytest.raises(sm.DivergenceError, match=rf"{sampler.name}: non-finite energy at iteration 8") as info:
        sm.sample(log_prob, torch.ones(2), sampler, 20, thin=2, out_dir=tmp_path, chunk_draws=100, progress=False)
    err = info.value
    assert err.step == 8
    assert err.chain.samples.shape == (1, 3, 2)  # draws after iterations 2, 4, 6
    assert err.chain.draw_steps.tolist() == [2, 4, 6]
    assert torch.equal(sm.Chain.load(tmp_path).samples, err.chain.samples)
    assert (tmp_path / "diverged.json").exists()


def test_divergence_of_a_too_large_step():
    with pytest.raises(sm.DivergenceError, match="sgld: non-finite") as info:
        sm.sample(gaussian_log_prob, torch.ones(2), sm.SGLD(5.0), 5000, progress=False)
    assert 1 < info.value.step < 5000
    assert bool(torch.isfinite(info.value.chain.samples).all())


# ---------------------------------------------------------------------------------------
# module energies: paths agree, buffers, predictive
# ---------------------------------------------------------------------------------------
def test_module_paths_agree_float64():
    energy, (X, y) = mlp_energy()
    energy.to(dtype=torch.float64)
    energy = energy.with_num_data(90)
    g = torch.Generator().manual_seed(0)
    theta = energy.initial_position().expand(3, -1) + 0.1 * torch.randn(3, energy.space.dim, generator=g,
                                                                         dtype=torch.float64)
    batch = (X.double()[:30].expand(3, 30, 4), y[:30].expand(3, 30))
    v_ref, g_ref = energy.reference_value_and_grad(theta, batch)
    v_vm, g_vm = energy.value_and_grad(theta, batch)
    assert torch.allclose(v_vm, v_ref, atol=1e-10) and torch.allclose(g_vm, g_ref, atol=1e-10)
    for c in range(3):
        v1, g1 = energy.value_and_grad(theta[c : c + 1], tuple(t[c : c + 1] for t in batch))
        assert torch.allclose(v1, v_ref[c : c + 1], atol=1e-10) and torch.allclose(g1, g_ref[c : c + 1], atol=1e-10)
    assert torch.allclose(energy.value(theta, batch), v_ref, atol=1e-10)


def test_module_energy_does_not_touch_the_users_module():
    net = nn.Linear(3, 2)
    before = [p.detach().clone() for p in net.parameters()]
    energy = sm.ModuleEnergy(net)
    sm.sample(energy, None, sm.SGLD(0.1), 5, data=(torch.randn(10, 3), torch.randint(0, 2, (10,))), progress=False)
    assert all(torch.equal(a, p) for a, p in zip(before, net.parameters()))


def test_batchnorm_buffers_are_per_chain_and_not_sampled():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    energy = sm.ModuleEnergy(net)
    assert "1.running_mean" not in energy.space.names
    X, y = torch.randn(40, 3) + 2.0, torch.randint(0, 2, (40,))
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 10, data=(X, y), batch_size=10, num_chains=2, progress=False)
    assert chain.samples.shape == (2, 10, energy.space.dim)
    means = [energy.chain_buffers(c)["1.running_mean"] for c in range(2)]
    assert not torch.equal(means[0], means[1])  # each chain updated its own statistics
    assert bool((means[0] > 0.1).any())


def test_predictive_classification_and_regression():
    energy, (X, y) = mlp_energy()
    chain = sm.sample(energy, None, sm.SGLD(1e-3), 20, data=(X, y), batch_size=30, num_chains=2, progress=False)
    out = sm.predictive(energy, chain, X, batch_size=7, draws_per_call=8)
    manual = torch.stack([torch.func.functional_call(energy.module, energy.space.unflatten(s), (X,)).softmax(-1)
                          for s in chain.flat_draws()]).mean(0)
    assert torch.allclose(out["probs"], manual, atol=1e-6)

    lin = sm.ModuleEnergy(nn.Linear(2, 1), "gaussian", noise_std=0.5)
    Xr = torch.randn(30, 2)
    ch = sm.sample(lin, None, sm.SGLD(1e-3), 30, data=(Xr, Xr.sum(1)), num_chains=2, progress=False)
    pred = sm.predictive(lin, ch, Xr)
    f = ch.flat_draws()[:, :2] @ Xr.T + ch.flat_draws()[:, 2:3]
    assert torch.allclose(pred["mean"], f.mean(0), atol=1e-5)
    assert torch.allclose(pred["var"], f.var(0, unbiased=False) + 0.25, atol=1e-5)


def test_find_map_reaches_the_linear_regression_mode():
    X, y = linreg_problem(n=200)
    energy = sm.ModuleEnergy(nn.Linear(3, 1, bias=False), "gaussian", noise_std=0.3, prior_std=10.0)
    theta = sm.find_map(energy, energy.initial_position(), data=(X, y), num_steps=1500, lr=5e-2)
    A = X.T @ X / 0.09 + torch.eye(3) / 100.0
    exact = torch.linalg.solve(A, X.T @ y / 0.09)
    assert torch.allclose(theta, exact, atol=2e-3)
