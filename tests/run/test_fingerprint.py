"""Target fingerprints at resume (structmc.fingerprint): every change of the target that the
version-1 fingerprint missed is refused, naming the part; an unchanged target resumes to the
uninterrupted chain; what cannot be fingerprinted, and checkpoints of the older scheme, warn."""

from __future__ import annotations

import pickle
import warnings
import zlib

import pytest
import torch
from support.items import Items
from torch import nn

import structmc as sm
from structmc import fingerprint
from structmc.priors import HierarchicalEnergy, Normal
from structmc.storage import RunFolder
from structmc.structured import BernoulliMask, StructuredEnergy

N = 10_000


def _classification(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, 5, generator=g)
    y = torch.randint(0, 3, (N,), generator=g)
    return X, y


def _net(act=nn.Tanh):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), act(), nn.Linear(4, 3))


def _legacy_sampled(n: int) -> set[int]:
    """The flat positions the version-1 fingerprint hashed (4,096 evenly strided ones)."""
    return {i * (n - 1) // 4095 for i in range(4096)}


def _start(tmp_path, energy, data, init=None, steps=4, **kw):
    return sm.sample(
        energy,
        init,
        sm.SGLD(1e-4),
        steps,
        data=data,
        batch_size=50 if data is not None else None,
        out_dir=tmp_path,
        progress=False,
        **kw,
    )


def _refused(tmp_path, energy, data, part, init=None):
    with pytest.raises(ValueError, match=f"cannot resume: the target changed since the checkpoint: {part}"):
        sm.sample(
            energy,
            init,
            sm.SGLD(1e-4),
            8,
            data=data,
            batch_size=50 if data is not None else None,
            out_dir=tmp_path,
            resume=True,
            progress=False,
        )


# -- the data ------------------------------------------------------------------------------------
def _three_labels(X, y):
    y = y.clone()
    seen = _legacy_sampled(N)
    unseen = [i for i in range(1, N) if i not in seen][:3]
    y[unseen] = (y[unseen] + 1) % 3
    return X, y


def _one_feature(X, y):
    X = X.clone()
    assert 1 not in _legacy_sampled(X.numel())
    X[0, 1] += 1000
    return X, y


def _flipped_labels(X, y):
    y = y.clone()
    seen = _legacy_sampled(N)
    unseen = [i for i in range(N) if i not in seen][:3000]
    y[unseen] = (y[unseen] + 1) % 3
    return X, y


@pytest.mark.parametrize("change", [_three_labels, _one_feature, _flipped_labels])
def test_changed_data_is_refused(tmp_path, change):
    """The version-1 fingerprint hashed 4,096 strided elements: these changes avoid them."""
    X, y = _classification()
    energy = sm.ModuleEnergy(_net(), "categorical")
    _start(tmp_path, energy, (X, y))
    X2, y2 = change(X, y)
    assert fingerprint.legacy_data_fingerprint((X, y)) == fingerprint.legacy_data_fingerprint((X2, y2))
    _refused(tmp_path, energy, (X2, y2), r"the data \(data: entry")


def test_a_changed_dataset_item_is_refused(tmp_path):
    """Version 1 fingerprinted a Dataset by class, length and its first 8 items."""
    X, y = _classification()
    energy = sm.ModuleEnergy(_net(), "categorical")
    _start(tmp_path, energy, Items(X, y))
    X2 = X.clone()
    X2[5000, 2] += 1.0
    _refused(tmp_path, energy, Items(X2, y), r"the data \(data: hash")


def test_a_dataset_too_long_to_hash_whole_warns_what_was_not_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint, "DATASET_ITEMS", 1000)
    X, y = _classification()
    energy = sm.ModuleEnergy(_net(), "categorical")
    full = sm.sample(energy, None, sm.SGLD(1e-4), 8, data=Items(X, y), batch_size=50, progress=False)
    _start(tmp_path, energy, Items(X, y))
    with pytest.warns(UserWarning, match=r"9000 of the Dataset's 10000 items \(only 1000 evenly spaced"):
        resumed = sm.sample(
            energy,
            None,
            sm.SGLD(1e-4),
            8,
            data=Items(X, y),
            batch_size=50,
            out_dir=tmp_path,
            resume=True,
            progress=False,
        )
    assert torch.equal(resumed.samples, full.samples)
    X2 = X.clone()
    X2[10, 0] += 1.0  # item 10 is one of the 1000 hashed (every ~10th)
    assert 10 in {i * (N - 1) // 999 for i in range(1000)}
    _refused(tmp_path, energy, Items(X2, y), r"the data")


# -- the module, likelihood and prior ------------------------------------------------------------
def test_a_changed_activation_is_refused(tmp_path):
    X, y = _classification()
    _start(tmp_path, sm.ModuleEnergy(_net(nn.Tanh), "categorical"), (X, y))
    _refused(tmp_path, sm.ModuleEnergy(_net(nn.ReLU), "categorical"), (X, y), r"the module's structure or code")


def _net_from_source(body: str) -> nn.Module:
    """A module of class ``Net`` (the same qualified name every time) whose forward is ``body``."""
    scope = {"nn": nn, "torch": torch, "__name__": "user_model"}
    exec(
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(5, 3)\n"
        f"    def forward(self, x):\n        return {body}\n",
        scope,
    )
    torch.manual_seed(0)
    return scope["Net"]()


def test_an_edited_forward_of_the_same_class_name_is_refused(tmp_path):
    X, y = _classification()
    _start(tmp_path, sm.ModuleEnergy(_net_from_source("torch.tanh(self.fc(x))"), "categorical"), (X, y))
    _refused(
        tmp_path,
        sm.ModuleEnergy(_net_from_source("torch.relu(self.fc(x))"), "categorical"),
        (X, y),
        r"the module's structure or code",
    )


def test_changed_buffers_and_frozen_parameters_are_refused(tmp_path):
    X, y = _classification()

    def net(shift=0.0, frozen=0.0):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 3)).eval()  # eval: statistics are used
        with torch.no_grad():
            m[1].running_mean += shift
            m[0].weight += frozen
        return sm.ModuleEnergy(m, "categorical", sample="2.*")  # the first layer stays fixed

    _start(tmp_path, net(), (X, y))
    _refused(tmp_path, net(shift=0.5), (X, y), r"the module's buffers or frozen")
    _refused(tmp_path, net(frozen=0.01), (X, y), r"the module's buffers or frozen")


def test_a_changed_custom_likelihood_is_refused(tmp_path):
    X, y = _classification()

    def make(temperature):
        def log_lik(out, target):
            return -temperature * torch.nn.functional.cross_entropy(out, target, reduction="sum")

        return log_lik

    _start(tmp_path, sm.ModuleEnergy(_net(), make(1.0)), (X, y))
    _refused(tmp_path, sm.ModuleEnergy(_net(), make(0.5)), (X, y), r"the likelihood")


def test_a_prior_centred_on_swapped_rows_is_refused(tmp_path):
    """Version 1 recorded the sum of the precision and of each loc tensor: a permutation kept both."""
    X, y = _classification()
    centre = {k: v.detach().clone() for k, v in _net().state_dict().items()}
    swapped = dict(centre, **{"0.weight": centre["0.weight"][[1, 0, 2, 3]]})

    def energy(loc):
        return sm.ModuleEnergy(_net(), "categorical", prior=Normal(loc=loc, scale=0.5))

    assert fingerprint.legacy_energy_fingerprint(energy(centre)) == fingerprint.legacy_energy_fingerprint(
        energy(swapped)
    )
    _start(tmp_path, energy(centre), (X, y))
    _refused(tmp_path, energy(swapped), (X, y), r"the prior")
    _refused(
        tmp_path, sm.ModuleEnergy(_net(), "categorical", prior=Normal(loc=centre, scale=0.4)), (X, y), r"the prior"
    )


# -- log densities: code, closures and globals -----------------------------------------------------
def _lambda(src: str, **scope):
    return eval(src, {"torch": torch, **scope})


def test_an_edited_lambda_with_the_same_qualname_is_refused(tmp_path):
    old = _lambda("lambda t, b: -(t * t).sum()")
    new = _lambda("lambda t, b: -2 * (t * t).sum()")
    assert old.__qualname__ == new.__qualname__
    _start(tmp_path, old, None, init=torch.zeros(3))
    _refused(tmp_path, new, None, r"the log density", init=torch.zeros(3))


def test_closure_values_and_global_tensors_of_a_log_density_are_part_of_the_target(tmp_path):
    def make(scale):
        return lambda t, b: -scale * (t * t).sum()

    _start(tmp_path / "closure", make(1.0), None, init=torch.zeros(3))
    _refused(tmp_path / "closure", make(2.0), None, r"the log density", init=torch.zeros(3))
    src = "lambda t, b: -((t - centre) ** 2).sum()"
    _start(tmp_path / "global", _lambda(src, centre=torch.zeros(3)), None, init=torch.zeros(3))
    _refused(tmp_path / "global", _lambda(src, centre=torch.ones(3)), None, r"the log density", init=torch.zeros(3))


def test_a_changed_log_likelihood_is_refused(tmp_path):
    X, y = _classification()
    Xr, yr = X[:200, :3], X[:200, :3].sum(1)

    def energy(noise):
        def log_likelihood(theta, batch):
            return -((batch[0] @ theta - batch[1]) ** 2).sum() / (2 * noise**2)

        return sm.LogDensityEnergy(dim=3, log_likelihood=log_likelihood, log_prior=lambda t: -0.5 * (t * t).sum())

    assert fingerprint.legacy_energy_fingerprint(energy(1.0)) == fingerprint.legacy_energy_fingerprint(energy(2.0))
    _start(tmp_path, energy(1.0), (Xr, yr), init=torch.zeros(3))
    _refused(tmp_path, energy(2.0), (Xr, yr), r"the log-likelihood", init=torch.zeros(3))


# -- wrapped energies ------------------------------------------------------------------------------
def test_wrapped_energies_are_walked_to_their_base(tmp_path):
    from structmc.partitions import round_robin

    X, y = _classification()

    def structured(act):
        base = sm.ModuleEnergy(_net(act), "categorical")
        return StructuredEnergy(base, round_robin(base.space.dim, 2), 50, mask=BernoulliMask(0.5), num_copies=2)

    _start(tmp_path / "s", structured(nn.Tanh), (X, y))
    _refused(tmp_path / "s", structured(nn.ReLU), (X, y), r"the module's structure")
    _start(tmp_path / "h", HierarchicalEnergy(sm.ModuleEnergy(_net(nn.Tanh), "categorical")), (X, y))
    _refused(
        tmp_path / "h",
        HierarchicalEnergy(sm.ModuleEnergy(_net(nn.ReLU), "categorical")),
        (X, y),
        r"the module's structure",
    )
    noisy = lambda f: sm.NoisyGradientEnergy(sm.LogDensityEnergy(f, 3), 0.1)  # noqa: E731
    _start(tmp_path / "n", noisy(_lambda("lambda t, b: -(t * t).sum()")), None, init=torch.zeros(3))
    _refused(
        tmp_path / "n", noisy(_lambda("lambda t, b: -(t * t).sum() / 2")), None, r"the log density", init=torch.zeros(3)
    )


# -- what still resumes ------------------------------------------------------------------------------
def test_an_unchanged_target_built_anew_resumes_bit_identically(tmp_path):
    X, y = _classification()

    def energy():  # a new module, prior, likelihood closure and data tensors every time
        centre = {k: v.detach().clone() for k, v in _net().state_dict().items()}
        return sm.ModuleEnergy(
            _net(),
            lambda o, t: -torch.nn.functional.cross_entropy(o, t, reduction="sum"),
            prior=Normal(loc=centre, scale=0.5),
        )

    kw = dict(data=(X.clone(), y.clone()), batch_size=50, seed=2, progress=False)
    full = sm.sample(energy(), None, sm.SGLD(1e-4), 20, **kw)
    sm.sample(energy(), None, sm.SGLD(1e-4), 10, out_dir=tmp_path, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left unchecked, nothing to warn about
        resumed = sm.sample(energy(), None, sm.SGLD(1e-4), 20, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)


def test_pickle_round_trip_keeps_the_fingerprint():
    centre = {k: v.detach().clone() for k, v in _net().state_dict().items()}
    energy = sm.ModuleEnergy(_net(), "categorical", prior=Normal(loc=centre, scale=0.5), num_data=10)
    for e in (energy, HierarchicalEnergy(energy)):
        assert fingerprint.energy_fingerprint(pickle.loads(pickle.dumps(e))) == fingerprint.energy_fingerprint(e)
    cloudpickle = pytest.importorskip("cloudpickle")  # what the process executors ship closures with
    gaussian = sm.ModuleEnergy(_net(), "gaussian", noise_std=0.3, num_data=10)
    assert fingerprint.energy_fingerprint(
        cloudpickle.loads(cloudpickle.dumps(gaussian))
    ) == fingerprint.energy_fingerprint(gaussian)
    scale = torch.tensor([1.0, 2.0, 3.0])
    density = sm.LogDensityEnergy(lambda t, b: -(scale * t * t).sum(), 3)
    copy = cloudpickle.loads(cloudpickle.dumps(density))
    assert copy.log_prob is not density.log_prob
    assert fingerprint.energy_fingerprint(copy) == fingerprint.energy_fingerprint(density)


def test_what_cannot_be_fingerprinted_is_a_warning_at_resume(tmp_path):
    def log_prob(t, b, checksum=zlib.crc32):  # a C function of an extension module: name only
        return -(t * t).sum()

    _start(tmp_path, log_prob, None, init=torch.zeros(3))
    with pytest.warns(UserWarning, match=r"could not be fingerprinted.*zlib\.crc32"):
        sm.sample(log_prob, torch.zeros(3), sm.SGLD(1e-4), 8, out_dir=tmp_path, resume=True, progress=False)


def test_version_1_checkpoints_are_compared_on_what_they_recorded(tmp_path):
    X, y = _classification()
    energy = sm.ModuleEnergy(_net(), "categorical")
    kw = dict(data=(X, y), batch_size=50, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-4), 8, **kw)
    _start(tmp_path, energy, (X, y))
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    ckpt["settings"]["target"] = ckpt["settings"]["target"]["v1"]  # as structmc 0.1 wrote it
    folder.save_checkpoint(ckpt)
    X2 = X.clone()
    X2[0, 0] += 1.0  # an element version 1 sampled
    _refused(tmp_path, energy, (X2, y), r"the data")
    with pytest.warns(UserWarning, match="weaker fingerprint"):
        resumed = sm.sample(energy, None, sm.SGLD(1e-4), 8, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)


def test_another_python_compares_values_not_bytecode():
    X = torch.randn(20, 3)
    density = lambda src: sm.LogDensityEnergy(_lambda(src), 3)  # noqa: E731
    old = fingerprint.fingerprint(density("lambda t, b: -(t * t).sum()"), (X,))
    edited = fingerprint.fingerprint(density("lambda t, b: -2 * (t * t).sum()"), (X,))
    assert fingerprint.compare(old, edited)[0]  # same Python: the edit is a change
    elsewhere = dict(old, python="3.0")  # written under another Python: bytecode cannot be compared
    changes, warns = fingerprint.compare(elsewhere, edited)
    assert changes == [] and any("Python 3.0" in w for w in warns)
    other_data = fingerprint.fingerprint(density("lambda t, b: -(t * t).sum()"), (X + 1,))
    assert fingerprint.compare(elsewhere, other_data)[0][0].startswith("the data")  # values still count


def test_a_full_hash_of_mnist_sized_data_is_cheap():
    import time

    X = torch.zeros(60_000, 784)
    t0 = time.perf_counter()
    a = fingerprint.tensor_digest(X)
    elapsed = time.perf_counter() - t0
    X[59_999, 783] += 1e-3
    assert fingerprint.tensor_digest(X) != a
    assert elapsed < 5.0, elapsed  # ~0.2 s on one core


# -- the describe()-based energy part keeps version 2's layout and values -----------------------------
def _v2_energy_fingerprint(energy) -> dict:
    """The energy part as version 2 (21e01b9) computed it, walking the objects: checkpoints it
    wrote must compare equal to ``energy.describe()``'s parts (no version bump)."""
    from structmc.energy import LogDensityEnergy, ModuleEnergy, NoisyGradientEnergy

    out, unchecked = {"num_data": energy.num_data}, []

    def add(key, obj, label):
        if key not in out:
            out[key], missing = fingerprint.value_fingerprint(obj, label)
            unchecked.extend(missing)

    kinds, e = [], energy
    while e is not None:
        kinds.append(type(e).__name__)
        part = getattr(e, "partition", None)
        if part is not None and "partition" not in out:
            out["partition"] = {
                "num_groups": int(part.num_groups),
                "group_ids": fingerprint.tensor_digest(part.group_ids),
            }
        if isinstance(e, ModuleEnergy):
            if "module" not in out:
                out["module"], out["module_state"], missing = fingerprint.module_fingerprint(
                    e.module, {i.name for i in e.space.params}
                )
                unchecked.extend(missing)
            add("likelihood", e.likelihood, "the likelihood")
            add("prior", {"prior_std": e.prior_std, "spec": e._prior_spec, "bound": e.prior}, "the prior")
        elif isinstance(e, HierarchicalEnergy):
            add(
                "hierarchical",
                {"config": e.config(), "hyperprior": e.hyperprior, "group_ids": e.group_ids, "net_dim": e.net_dim},
                "the hierarchical prior",
            )
        elif isinstance(e, StructuredEnergy):
            out.setdefault("structured", e.config())
        elif isinstance(e, NoisyGradientEnergy):
            out.setdefault("noise", {"noise_std": e.noise_std, "seed": e.seed})
        elif isinstance(e, LogDensityEnergy):
            for key in ("log_prob", "log_likelihood", "log_prior"):
                if getattr(e, key) is not None:
                    add(
                        key,
                        {"fn": getattr(e, key), "vectorized": bool(e.vectorized)},
                        f"the {key.replace('_', ' ')} function",
                    )
        e = getattr(e, "base", None)
    out["energy"] = kinds
    if unchecked:
        out["unfingerprintable"] = unchecked
    return out


def test_the_energy_part_is_version_2s_for_every_energy():
    from structmc.partitions import round_robin
    from structmc.priors import Laplace

    centre = {k: v.detach().clone() for k, v in _net().state_dict().items()}
    module = sm.ModuleEnergy(_net(), "categorical", prior=Normal(loc=centre, scale=0.5), num_data=10)

    def log_prob(t, b, checksum=zlib.crc32):  # leaves something unfingerprintable
        return -(t * t).sum()

    energies = [
        module,
        sm.ModuleEnergy(_net(), "categorical", prior_std={"*.bias": 10.0, "*": 1.0}),
        sm.ModuleEnergy(_net(), "categorical", prior=Laplace(0.3), sample="2.*"),
        sm.LogDensityEnergy(log_prob, 3),
        sm.LogDensityEnergy(dim=3, log_likelihood=lambda t, b: -(t * t).sum(), log_prior=lambda t: -t.sum()),
        StructuredEnergy(module, round_robin(module.space.dim, 2), 50, mask=BernoulliMask(0.5), num_copies=2),
        HierarchicalEnergy(module),
        sm.NoisyGradientEnergy(sm.LogDensityEnergy(log_prob, 3), 0.1, seed=4),
        StructuredEnergy(HierarchicalEnergy(module), round_robin(module.space.dim + 2, 3), 20),
    ]
    for e in energies:
        new = fingerprint.energy_fingerprint(e)
        assert fingerprint._json(new) == fingerprint._json(_v2_energy_fingerprint(e)), type(e).__name__
        assert new["energy"][0] == type(e).__name__ and "kind" not in new and "base" not in new
