"""Reliability of ModuleEnergy / LogDensityEnergy: random modules are refused (never a silently
ignored seed), BatchNorm predictive uses each chain's buffers, data are checked before compute,
prior patterns and num_data are validated."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import structmc as sm
from structmc import energy as energy_module
from structmc.energy import LogDensityEnergy, ModuleEnergy


def _cls_data(n=40, d=3, k=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, k, (n,), generator=g)


# ---------------------------------------------------------------------------------------
# A. random ops
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [nn.Dropout, nn.AlphaDropout])
def test_dropout_in_training_mode_is_refused_naming_the_module(cls):
    net = nn.Sequential(nn.Linear(3, 8), cls(0.5), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"'1'.*training mode.*seed.*\.eval\(\)"):
        ModuleEnergy(net)


class _FunctionalDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(F.dropout(torch.tanh(self.fc1(x)), 0.5, self.training))


@pytest.mark.parametrize("num_chains", [1, 2])
def test_random_forward_is_refused_at_first_evaluation(num_chains):
    """F.dropout inside forward (no Dropout module): refused with a clear message for one chain
    (which used to ignore `seed`) and for several (which used to fail in vmap)."""
    X, y = _cls_data()
    energy = ModuleEnergy(_FunctionalDropout(), num_data=40)
    with pytest.raises(ValueError, match=r"random numbers in training mode.*seed.*\.eval\(\)"):
        sm.sample(energy, None, sm.SGLD(1e-3), 3, data=(X, y), batch_size=10, num_chains=num_chains, progress=False)
    with pytest.raises(ValueError, match="random numbers"):
        energy.check_data((X, y))


def test_global_rng_untouched_by_the_randomness_check():
    X, y = _cls_data()
    energy = ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), num_data=40)
    torch.manual_seed(7)
    before = torch.get_rng_state()
    energy.check_data((X, y))
    energy.value(energy.initial_position()[None], (X[None, :10], y[None, :10]))
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("num_chains", [1, 2])
def test_eval_mode_dropout_samples_and_follows_seed(num_chains):
    X, y = _cls_data()
    net = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 2)).eval()
    draws = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        draws.append(
            sm.sample(
                ModuleEnergy(net),
                None,
                sm.SGLD(1e-3),
                5,
                data=(X, y),
                batch_size=10,
                num_chains=num_chains,
                seed=3,
                progress=False,
            ).samples
        )
    assert torch.equal(draws[0], draws[1])


# ---------------------------------------------------------------------------------------
# B. BatchNorm predictive per chain
# ---------------------------------------------------------------------------------------
def _bn_run():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(40, 3, generator=g) + 2.0, torch.randint(0, 3, (40,), generator=g)
    run = sm.Run(ModuleEnergy(net, num_data=40), None, sm.SGLD(1e-2), data=(X, y), batch_size=10, num_chains=2)
    chain = run.sample(12)
    return run.energy, chain, X


def _manual_probs(energy, samples, buffers, X):
    module = energy.module.eval()
    outs = [functional_call(module, {**energy.space.unflatten(s), **buffers}, (X,)) for s in samples]
    return torch.stack(outs).softmax(-1).mean(0)


def test_predictive_uses_each_chains_own_batchnorm_buffers():
    energy, chain, X = _bn_run()
    b0, b1 = energy.chain_buffers(0), energy.chain_buffers(1)
    assert not torch.allclose(b0["1.running_mean"], b1["1.running_mean"])
    for c, b in enumerate((b0, b1)):
        expected = _manual_probs(energy, chain.samples[c], b, X)
        torch.testing.assert_close(sm.predictive(energy, chain, X, chain=c)["probs"], expected)
        torch.testing.assert_close(sm.predictive(energy, chain.samples[c], X, chain=c)["probs"], expected)
    pooled = (_manual_probs(energy, chain.samples[0], b0, X) + _manual_probs(energy, chain.samples[1], b1, X)) / 2
    torch.testing.assert_close(sm.predictive(energy, chain, X, batch_size=7, draws_per_call=5)["probs"], pooled)
    torch.testing.assert_close(sm.predictive(energy, chain.samples, X)["probs"], pooled)


def test_predictive_refuses_buffers_of_another_number_of_chains():
    energy, chain, X = _bn_run()
    three = torch.cat([chain.samples, chain.samples[:1]])
    with pytest.raises(ValueError, match="2 chains.*3 chains"):
        sm.predictive(energy, three, X)


# ---------------------------------------------------------------------------------------
# C. data checks
# ---------------------------------------------------------------------------------------
def test_check_data_float64_features_with_float32_module():
    X, y = _cls_data()
    energy = ModuleEnergy(nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"input 0 has dtype torch.float64.*float32.*x.to\(torch.float32\)"):
        energy_module.validate_data(energy, (X.double(), y))


def test_check_data_integer_features():
    X, y = _cls_data()
    with pytest.raises(ValueError, match=r"integer dtype torch.int64.*x.to\(torch.float32\)"):
        ModuleEnergy(nn.Linear(3, 2)).check_data((X.round().long(), y))
    # integer inputs of an embedding are fine
    emb = nn.Sequential(nn.Embedding(5, 4), nn.Flatten(), nn.Linear(8, 2))
    ModuleEnergy(emb).check_data((torch.randint(0, 5, (10, 2)), torch.randint(0, 2, (10,))))


def test_check_data_input_width_names_the_shapes():
    X, y = _cls_data(d=5)
    with pytest.raises(ValueError, match=r"\[40, 5\].*in_features=3"):
        ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))).check_data((X, y))


def test_check_data_categorical_labels():
    X, y = _cls_data(k=2)
    energy = ModuleEnergy(nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"in \[0, 2\).*\[0, 2\]"):
        energy.check_data((X, torch.where(torch.arange(40) == 7, 2, y)))  # one label 2 with 2 logits
    with pytest.raises(ValueError, match=r"in \[0, 2\).*\[-1, 1\]"):
        energy.check_data((X, torch.where(torch.arange(40) == 3, -1, y)))
    with pytest.raises(ValueError, match=r"integer class indices.*float32.*y.long\(\)"):
        energy.check_data((X, y.float()))
    energy.check_data((X, y))
    energy.check_data((X, F.one_hot(y, 2).float()))  # class probabilities


def test_check_data_bernoulli_and_gaussian_targets():
    X, y = _cls_data()
    bern = ModuleEnergy(nn.Linear(3, 1), "bernoulli")
    bern.check_data((X, y.float()))
    with pytest.raises(ValueError, match="0 or 1"):
        bern.check_data((X, y.float() * 2 - 1))
    with pytest.raises(ValueError, match="one logit per label"):
        ModuleEnergy(nn.Linear(3, 2), "bernoulli").check_data((X, y.float()))
    gauss = ModuleEnergy(nn.Linear(3, 1), "gaussian", noise_std=1.0)
    gauss.check_data((X, torch.randn(40)))
    with pytest.raises(ValueError, match=r"gaussian targets of shape \[40, 2\].*\[4, 1\]"):
        gauss.check_data((X, torch.randn(40, 2)))


def test_a_data_set_found_finite_is_checked_again_after_an_in_place_write():
    """The finite check is remembered per tensor (a data set passed to sample() again is not
    rescanned), and forgotten when the tensor or a view of it is written in place."""
    from structmc.energy_checks import _FINITE

    X, y = _cls_data()
    energy = ModuleEnergy(nn.Linear(3, 2), "categorical")
    energy.check_data((X, y))
    assert id(X) in _FINITE
    energy.check_data((X, y))  # remembered
    X.view(-1)[7] = float("inf")  # through a view: the version counter is shared
    with pytest.raises(ValueError, match="input 0 has NaN or Inf values in 1 row"):
        energy.check_data((X, y))
    X.view(-1)[7] = 0.0
    energy.check_data((X, y))
    key = id(X)
    del X
    assert key not in _FINITE  # forgotten with the tensor (its id may be reused)


def test_check_data_non_finite_features():
    X, y = _cls_data()
    X[5, 1] = float("nan")
    with pytest.raises(ValueError, match="input 0 has NaN or Inf values in 1 row"):
        ModuleEnergy(nn.Linear(3, 2)).check_data((X, y))


def test_validate_data_passes_through_wrappers_and_ignores_energies_without_checks():
    X, y = _cls_data()
    noisy = sm.energy.NoisyGradientEnergy(ModuleEnergy(nn.Linear(3, 2)), 0.1)
    with pytest.raises(ValueError, match="input 0 has dtype torch.float64"):
        energy_module.validate_data(noisy, (X.double(), y))
    energy_module.validate_data(LogDensityEnergy(lambda t, b: -t.square().sum(), 2), (X, y))
    energy_module.validate_data(ModuleEnergy(nn.Linear(3, 2)), None)


def test_check_data_does_not_update_batchnorm_statistics():
    X, y = _cls_data()
    energy = ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    before = {k: v.clone() for k, v in energy.module.named_buffers()}
    energy.check_data((X + 3, y))
    assert all(torch.equal(before[k], v) for k, v in energy.module.named_buffers())


@pytest.mark.parametrize("kind", ["log_prob", "log_likelihood", "log_prior"])
@pytest.mark.parametrize("num_chains", [1, 3])
def test_log_density_returning_a_vector_fails_at_the_first_call(kind, num_chains):
    X = torch.randn(20, 2)
    per_datum = lambda t, b: -0.5 * (b[0] - t).square().sum(-1)  # noqa: E731  (forgot .sum())
    if kind == "log_prob":
        energy = LogDensityEnergy(per_datum, 2)
    elif kind == "log_likelihood":
        energy = LogDensityEnergy(dim=2, log_likelihood=per_datum, log_prior=lambda t: -t.square().sum())
    else:
        energy = LogDensityEnergy(dim=2, log_likelihood=lambda t, b: per_datum(t, b).sum(), log_prior=lambda t: -t)
    theta = torch.zeros(num_chains, 2)
    batch = (X[:5].expand(num_chains, 5, 2),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not be vmapped" fallback on the way
        with pytest.raises(ValueError, match=rf"{kind} returned a tensor of shape \[(5|2)\].*scalar"):
            energy.value_and_grad(theta, batch)


def test_vectorized_log_density_with_wrong_shape():
    energy = LogDensityEnergy(lambda t, b: -t.square(), 2, vectorized=True)
    with pytest.raises(ValueError, match=r"one value per chain \[3\], got \[3, 2\]"):
        energy.value(torch.zeros(3, 2), None)


# ---------------------------------------------------------------------------------------
# D. prior patterns and num_data
# ---------------------------------------------------------------------------------------
def test_prior_pattern_matching_no_parameter_is_an_error():
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"'\*\.biass'.*no parameter.*0\.weight, 0\.bias, 2\.weight, 2\.bias"):
        ModuleEnergy(net, prior_std={"*.biass": 10.0, "*": 1.0})
    ModuleEnergy(net, prior_std={"*.bias": 10.0, "*": 1.0})


@pytest.mark.parametrize("bad", [100.5, 0, -3, True, "100"])
def test_num_data_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="num_data"):
        ModuleEnergy(nn.Linear(3, 2), num_data=bad)
    with pytest.raises(ValueError, match="num_data"):
        ModuleEnergy(nn.Linear(3, 2)).with_num_data(bad)
    with pytest.raises(ValueError, match="num_data"):
        LogDensityEnergy(lambda t, b: -t.square().sum(), 2, num_data=bad)
    with pytest.raises(ValueError, match="num_data"):
        LogDensityEnergy(lambda t, b: -t.square().sum(), 2).with_num_data(bad)


def test_integral_num_data_is_accepted():
    assert ModuleEnergy(nn.Linear(3, 2), num_data=100.0).num_data == 100
    assert ModuleEnergy(nn.Linear(3, 2), num_data=torch.tensor(7)).num_data == 7


def test_check_finite_at_names_the_bad_chains():
    energy = LogDensityEnergy(lambda t, b: -t.square().sum() + torch.log(t[0]), 2)
    theta = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match=r"not finite at the initial point for chain\(s\) \[1\]"):
        energy_module.check_finite_at(energy, theta, None)
    value, grad = energy_module.check_finite_at(energy, theta[[0, 2]], None)
    assert value.shape == (2,) and grad.shape == (2, 2)


def test_sample_returns_each_chains_buffers_for_predictive_with_the_users_energy():
    """sample() works on a copy of the energy (num_data is filled in): the Chain carries each
    chain's BatchNorm statistics, so predictive(user_energy, chain) uses them, no warning."""
    import warnings

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(40, 3, generator=g) + 2.0, torch.randint(0, 3, (40,), generator=g)
    user = ModuleEnergy(net)  # num_data=None: sample() copies it
    chain = sm.sample(user, None, sm.SGLD(1e-2), 12, data=(X, y), batch_size=10, num_chains=2, progress=False)
    assert chain.buffers is not None and len(chain.buffers) == 2
    assert not torch.allclose(chain.buffers[0]["1.running_mean"], chain.buffers[1]["1.running_mean"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        probs = sm.predictive(user, chain, X)["probs"]
    pooled = (
        _manual_probs(user, chain.samples[0], chain.buffers[0], X)
        + _manual_probs(user, chain.samples[1], chain.buffers[1], X)
    ) / 2
    torch.testing.assert_close(probs, pooled)
    torch.testing.assert_close(
        sm.predictive(user, chain, X, chain=1)["probs"], _manual_probs(user, chain.samples[1], chain.buffers[1], X)
    )
