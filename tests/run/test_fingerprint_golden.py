"""Fingerprints are stable across refactors: the fingerprints (version 2 and the version-1 part)
of structmc's own energies and priors, as structmc wrote them at commit 2ccb883 (before the
priors, hierarchical energy and fingerprint code moved between modules), still compare equal.
A run folder or tuning folder written then therefore still resumes. Library code is named by
module and qualified name in a fingerprint, so moving a class without keeping its
``__module__`` would fail here, as it would refuse every old run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import structmc as sm
from structmc import fingerprint
from structmc.priors import HierarchicalEnergy, Laplace, Normal, ScaleMixtureNormal, StudentT
from structmc.structured import BernoulliMask, StructuredEnergy, round_robin

GOLDEN = json.loads((Path(__file__).parent / "golden_fingerprints.json").read_text())


def energies() -> dict:
    """The energies of golden_fingerprints.json, built as they were when it was written."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    es = dict(
        module=sm.ModuleEnergy(net, num_data=10),
        pattern_priors=sm.ModuleEnergy(net, num_data=10, prior={"0.*": Laplace(0.0, 1.0), "2.*": StudentT(3.0)}),
        normal=sm.ModuleEnergy(net, num_data=10, prior=Normal(0.0, 0.5)),
        scale_mixture=sm.ModuleEnergy(net, num_data=10, prior=ScaleMixtureNormal(0.5, 1.0, 0.1)),
    )
    es["structured"] = StructuredEnergy(
        es["module"], round_robin(es["module"].space.dim, 3), 5, mask=BernoulliMask(0.5), num_copies=2, seed=1
    )
    es["hierarchical"] = HierarchicalEnergy(es["module"])
    return es


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fingerprints_written_before_the_refactor_still_match(name):
    e = energies()[name]
    now = fingerprint.target_fingerprint(
        fingerprint.energy_fingerprint(e), {"data": None}, fingerprint.legacy_energy_fingerprint(e)
    )
    changes, _ = fingerprint.compare(GOLDEN[name], now)
    assert changes == [], changes


def test_the_golden_comparison_can_fail():
    """A different prior scale is a different target: the comparison above is not vacuous."""
    e = sm.ModuleEnergy(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), num_data=10, prior_std=2.0)
    torch.manual_seed(0)
    now = fingerprint.target_fingerprint(
        fingerprint.energy_fingerprint(e), {"data": None}, fingerprint.legacy_energy_fingerprint(e)
    )
    changes, _ = fingerprint.compare(GOLDEN["module"], now)
    assert changes
