"""Issue 36, item 23: ``examples/distributed_sgld.py`` finishes without matplotlib (the chains
and their comparison are its point; the plot is skipped with a line saying how to get it)."""

from __future__ import annotations

import importlib.util
import sys

from support.paths import REPO_ROOT


def test_distributed_sgld_without_matplotlib(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    spec = importlib.util.spec_from_file_location("_distributed_sgld", REPO_ROOT / "examples" / "distributed_sgld.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--steps", "20", "--out", str(tmp_path)])
    assert result["png"] is None and result["num_draws"] == 1
    assert result["max_abs_difference"] == 0.0  # one process: the same chain
    out = capsys.readouterr().out
    assert "no plot (matplotlib is not installed: pip install matplotlib)" in out
    assert not (tmp_path / "distributed_sgld.png").exists()
