"""The package's layers: the import contracts of pyproject.toml's ``[tool.importlinter]`` hold
(the library never imports the papers' reproductions, ``structmc_papers`` in ``papers/``; those
use the public API only and their experiments are independent of each other; the CLI above the
demo above the library; data sets and models below energies and runs), they list every
experiment module, no experiment reaches into the library's private names, the public API the
reproductions use is the one docs/guides/papers-api.md lists, no two modules share a name and
the layer records sit below the parameter space."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "papers" / "src" / "structmc_papers"  # the companion package (issue 38)
PAPERS_API = ROOT / "docs" / "guides" / "papers-api.md"


def _contracts() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_the_import_contracts_hold():
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]' installs it)")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is installed but its lint-imports command is not on the path")
    paths = [str(ROOT / "src"), str(EXPERIMENTS.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run(
        [exe, "--no-cache", "--no-logo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{len(_contracts())} kept, 0 broken" in proc.stdout


def test_the_independence_contract_lists_every_experiment_module():
    from structmc_papers import REGISTRY

    listed = set(_contracts()["experiments-independent"]["modules"])
    modules = {f"structmc_papers.{p.stem}" for p in EXPERIMENTS.glob("*.py") if not p.stem.startswith("_")}
    assert listed == modules  # a new experiment module is added to the contract
    registered = {REGISTRY.get(name).module_path for name in REGISTRY.choices()}
    assert registered - listed == {"structmc.demo"}  # the library's own demo, listed in the registry too


def _private_uses(path: Path) -> list[str]:
    """``from structmc.<module> import _name`` and ``from structmc._private import name`` (the
    library: the companion package imports it absolutely), ``import structmc._private``, and
    ``x._name`` on anything but ``self``, ``cls`` or a module of the companion package."""
    tree = ast.parse(path.read_text())
    internal = {"self", "cls"}  # names bound to the experiments package's own modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            library = node.level == 0 and module.split(".")[0] == "structmc"
            if library and any(part.startswith("_") for part in module.split(".")):
                found.append(f"{path.name}:{node.lineno} imports from the private module {module}")
            for alias in node.names:
                if node.level == 1 and not module:  # from . import _mamba as M
                    internal.add(alias.asname or alias.name)
                elif library and alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} imports {alias.name} from {'.' * node.level}{module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "structmc" and any(p.startswith("_") for p in parts):
                    found.append(f"{path.name}:{node.lineno} imports the private module {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in internal)
        ):
            found.append(f"{path.name}:{node.lineno} uses .{node.attr}")
    return found


def test_experiments_use_no_private_name_of_the_library():
    found = [use for p in sorted(EXPERIMENTS.glob("*.py")) for use in _private_uses(p)]
    assert not found, "experiments use private names of the library (give it a public function):\n" + "\n".join(found)


def _library_names_used() -> dict[str, set[str]]:
    """``{module: names}`` the companion package imports from the library (``from structmc.x
    import a``; ``import structmc.x`` counts as the module itself, ``"*"``)."""
    used: dict[str, set[str]] = {}
    for path in sorted(EXPERIMENTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "structmc":
                used.setdefault(node.module or "", set()).update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "structmc":
                        used.setdefault(a.name, set()).add("*")
    return used


def _listed_names() -> dict[str, set[str]]:
    """The table of docs/guides/papers-api.md: ``| `structmc.x` | `a`, `b` |`` rows."""
    import re

    listed: dict[str, set[str]] = {}
    for line in PAPERS_API.read_text().splitlines():
        m = re.fullmatch(r"\|\s*`(structmc[\w.]*)`\s*\|(.*)\|\s*", line)
        if m:
            listed.setdefault(m.group(1), set()).update(re.findall(r"`([\w*]+)`", m.group(2)))
    return listed


def test_the_public_api_the_papers_use_is_listed_in_one_place():
    """Issue 38 item 2: the library's names the reproductions import are the ones
    docs/guides/papers-api.md lists (a new use is added there; a name no longer used leaves it)."""
    used, listed = _library_names_used(), _listed_names()
    missing = {m: sorted(n - listed.get(m, set())) for m, n in used.items() if n - listed.get(m, set())}
    extra = {m: sorted(n - used.get(m, set())) for m, n in listed.items() if n - used.get(m, set())}
    assert not missing and not extra, f"papers-api.md: not listed {missing}; listed but not used {extra}"


PACKAGE = ROOT / "src" / "structmc"


def test_no_two_modules_of_the_package_share_a_name():
    """One name, one thing (issue 23): no two modules or subpackages of structmc have the same
    last name (``__init__`` aside), as ``structmc/zoo.py`` and ``structmc/models/zoo.py`` or
    ``structmc/registry.py`` and ``structmc/data/registry.py`` once did."""
    paths: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(PACKAGE.parent)
        if path.name == "__init__.py":
            if path.parent != PACKAGE:
                paths.setdefault(path.parent.name, []).append(rel.parent.as_posix())
            continue
        paths.setdefault(path.stem, []).append(rel.as_posix())
    shared = {name: where for name, where in paths.items() if len(where) > 1}
    assert not shared, "modules that share a name (rename one so the name says what it is): " + "; ".join(
        f"{name}: {', '.join(where)}" for name, where in sorted(shared.items())
    )


def test_the_layer_records_import_no_module_of_the_package():
    """``structmc.layers`` (ParamInfo, LayerInfo, the layer readers) is the bottom of the
    parameter space: ``structmc.space`` imports it and it imports nothing of structmc, not even
    for type checking (the import graph counts those), so the two never form a circle."""
    tree = ast.parse((PACKAGE / "layers.py").read_text())
    found = [
        f"layers.py:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == "structmc"))
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "structmc" for a in node.names))
    ]
    assert not found, "structmc.layers imports structmc: " + ", ".join(found)


def test_ruff_finds_nothing():
    """``ruff check`` with pyproject.toml's rules (pyflakes, pycodestyle, import order,
    pyupgrade, bugbear) is clean on the source, tests, benchmarks and examples, and they are
    laid out as ``ruff format`` lays them out; .ci/run runs both too."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    root = Path(__file__).resolve().parents[2]
    for command in (["check"], ["format", "--check"]):
        proc = subprocess.run(
            [ruff, *command, "src", "papers/src", "tests", "bench", "examples"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing():
    """``mypy`` with pyproject.toml's [tool.mypy] (all of src/structmc, no module excepted:
    no ``ignore_errors`` override) passes; .ci/run runs it too."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    mypy = shutil.which("mypy") or str(Path(sys.executable).parent / "mypy")
    if not Path(mypy).exists():
        pytest.skip("mypy is not installed (it is in the test extra: pip install -e '.[test]')")
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    assert not any(o.get("ignore_errors") for o in config.get("overrides", [])), "a module is excepted from mypy"
    proc = subprocess.run([mypy], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
