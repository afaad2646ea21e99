"""The former names of this package's modules (issue 38): until the reproductions left the
library they were ``structmc.experiments.<module>`` (and the demo ``structmc.experiments.demo``,
now the library's ``structmc.demo``). A run folder written then may hold pickles naming them; so
that it still resumes, importing this package installs a finder that answers
``structmc.experiments[.<module>]`` with this package's module of the same name (the same module
object, not a second copy), and :func:`structmc.fingerprint.register_library` records this
package's names as ``structmc.experiments...`` in fingerprints, as they were recorded then.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

#: the package's former name
OLD = "structmc.experiments"
NEW = "structmc_papers"
#: modules that went elsewhere than this package
MOVED = {"structmc.experiments.demo": "structmc.demo"}


def current_name(fullname: str) -> str | None:
    """The module now at former name ``fullname`` (``None``: not a former name)."""
    if fullname in MOVED:
        return MOVED[fullname]
    if fullname == OLD or fullname.startswith(OLD + "."):
        return NEW + fullname[len(OLD) :]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its own name


class FormerNames(importlib.abc.MetaPathFinder):
    """``import structmc.experiments.gibbs_xor`` -> the module ``structmc_papers.gibbs_xor``."""

    def find_spec(self, fullname, path=None, target=None):
        current = current_name(fullname)
        if current is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, _Alias(current), is_package=fullname == OLD)
        if spec is not None and fullname == OLD:
            spec.submodule_search_locations = []  # a package: its submodules come through this finder
        return spec


def install() -> None:
    """Put :class:`FormerNames` on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, FormerNames) for f in sys.meta_path):
        sys.meta_path.insert(0, FormerNames())
