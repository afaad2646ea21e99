"""The reproductions were ``structmc.experiments`` until issue 38: under the companion package
``structmc_papers`` the former module names still import (the same module objects), pickles that
name them load, and fingerprints record the companion's names as they were recorded then, so a
run folder written before the move resumes."""

from __future__ import annotations

import importlib
import pickle
import sys
import types

import pytest

import structmc_papers
from structmc.fingerprint import register_library, value_fingerprint
from structmc_papers import _report


def test_the_former_module_names_are_the_companions_modules():
    old = importlib.import_module("structmc.experiments")
    assert old is structmc_papers
    assert importlib.import_module("structmc.experiments.gibbs_xor") is importlib.import_module(
        "structmc_papers.gibbs_xor"
    )
    assert importlib.import_module("structmc.experiments._report") is _report
    assert importlib.import_module("structmc.experiments.demo") is importlib.import_module("structmc.demo")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("structmc.experiments.no_such_experiment")


def test_a_pickle_naming_a_former_module_loads():
    """Protocol 0 names a class by module and name in text: one written before the move named
    ``structmc.experiments._report``."""
    claim = _report.Claim
    data = pickle.dumps(claim, protocol=0)
    assert b"structmc_papers._report" in data
    old = data.replace(b"structmc_papers._report", b"structmc.experiments._report")
    assert pickle.loads(old) is claim


def _probe_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec("def f(x):\n    return x + 1\n", module.__dict__)
    module.f.__module__ = name
    sys.modules[name] = module
    return module


def test_fingerprints_record_the_companions_names_as_before_the_move():
    """A function of the companion is identified by its name, recorded under
    ``structmc.experiments``: the same digest as the same function of a module named
    ``structmc.experiments.<m>`` had (structmc's own code, identified by name), and unlike a
    user's module, whose function is hashed by what it computes."""
    names = ("structmc_papers._probe", "structmc.experiments._probe_old", "user_pkg_issue38._probe")
    try:
        new, old, user = (_probe_module(n) for n in names)
        old.__name__ = "structmc.experiments._probe"
        old.f.__module__ = "structmc.experiments._probe"
        sys.modules["structmc.experiments._probe"] = old
        digest_new, unchecked_new = value_fingerprint(new.f, "f")
        digest_old, _ = value_fingerprint(old.f, "f")
        digest_user, _ = value_fingerprint(user.f, "f")
        assert digest_new == digest_old and not unchecked_new
        assert digest_user != digest_new
    finally:
        for n in (*names, "structmc.experiments._probe"):
            sys.modules.pop(n, None)


def test_register_library_refuses_what_is_not_a_package_name():
    with pytest.raises(ValueError, match="top-level package"):
        register_library("not.a.top.level")
    with pytest.raises(ValueError, match="library"):
        register_library("some_pkg_issue38", recorded_as="elsewhere.names")


def test_hierarchical_energy_keeps_its_first_path_without_a_circle():
    """Issue 38 item 4: ``structmc.priors.HierarchicalEnergy`` (the class's first home, which
    pickles written then name) is the class of ``structmc.hierarchical``, set by the package root;
    the priors module itself names no energy."""
    import inspect

    import structmc.hierarchical
    import structmc.priors

    cls = structmc.hierarchical.HierarchicalEnergy
    assert structmc.priors.HierarchicalEnergy is cls and cls.__module__ == "structmc.hierarchical"
    old = pickle.dumps(cls, protocol=0).replace(b"structmc.hierarchical", b"structmc.priors")
    assert b"cstructmc.priors\nHierarchicalEnergy" in old and pickle.loads(old) is cls
    assert "hierarchical" not in inspect.getsource(structmc.priors).split('"""', 2)[2].replace("Hierarchical", "")
    # fingerprints name it as they did when it lived in structmc.priors
    from structmc.fingerprint.hashing import _qualified

    assert _qualified(cls) == "structmc.priors.HierarchicalEnergy"
    assert structmc.__version__
