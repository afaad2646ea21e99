"""Every ```python block of README.md and docs/**/*.md runs.

The blocks of one page continue each other: they run in order in one namespace (a fresh one
per page), in a temporary working directory, with ``torch.set_num_threads(1)`` and
``torch.manual_seed(0)`` at the start of the page. A failing block is reported with its page,
block number and the line of the markdown file.

Markers, HTML comments placed right before a block's fence (only blank lines or other
markers between), so they stay invisible on the rendered page:

* ``<!-- doc-test: skip (REASON) -->``: the block cannot run here (needs a GPU, a cluster, a
  downloaded data set, hours); it is reported as skipped with REASON. Keep these rare.
* ``<!-- doc-test: replace OLD -> NEW -->``: in the test only, the text OLD of the block is
  replaced by NEW (e.g. ``num_steps=2000 -> num_steps=200``), to keep the suite fast. OLD must
  occur in the block, so a marker cannot go stale silently.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))

_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclass
class Block:
    page: str  # path relative to the repository root
    number: int  # 1-based among the page's python blocks
    line: int  # 1-based line of the first code line in the markdown file
    source: str
    skip: str | None = None
    replacements: list[tuple[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}#{self.number}"


def _parse_marker(text: str, where: str) -> tuple[str, object]:
    m = re.fullmatch(r"skip\s*\((.+)\)", text)
    if m:
        return "skip", m.group(1).strip()
    m = re.fullmatch(r"replace\s+(.+?)\s+->\s+(.+)", text)
    if m:
        return "replace", (m.group(1), m.group(2))
    raise ValueError(f"{where}: unknown doc-test marker {text!r}; use 'skip (reason)' or 'replace OLD -> NEW'")


def extract(path: Path) -> list[Block]:
    """The page's python blocks with their markers (the markers' syntax is checked here)."""
    rel = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[str, object, int]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _MARKER.match(line)
        if m:
            kind, value = _parse_marker(m.group(1), f"{rel}:{i + 1}")
            pending.append((kind, value, i + 1))
            i += 1
            continue
        f = _FENCE.match(line)
        if f:
            indent, fence, lang = f.groups()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            if lang == "python":
                body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]]
                b = Block(rel, len(blocks) + 1, i + 2, "\n".join(body) + "\n")
                for kind, value, _ in pending:
                    if kind == "skip":
                        b.skip = value
                    else:
                        b.replacements.append(value)
                blocks.append(b)
            elif pending:
                raise ValueError(
                    f"{rel}:{pending[0][2]}: a doc-test marker before a {lang or 'plain'} block "
                    "(markers apply to the next ```python block only)"
                )
            pending = []
            i = j + 1
            continue
        if line.strip() and pending:
            raise ValueError(f"{rel}:{pending[0][2]}: a doc-test marker must come right before a ```python block")
        i += 1
    if pending:
        raise ValueError(f"{rel}:{pending[0][2]}: a doc-test marker after the last block")
    return blocks


def _prepared(block: Block) -> str:
    src = block.source
    for old, new in block.replacements:
        if old not in src:
            raise AssertionError(
                f"{block.page}, block {block.number} (line {block.line}): the replace marker's "
                f"text {old!r} does not occur in the block"
            )
        src = src.replace(old, new)
    return src


@dataclass
class Outcome:
    status: str  # "passed", "skipped", "failed", "blocked"
    message: str = ""


@functools.cache
def run_page(rel: str) -> dict[int, Outcome]:
    """The outcome of each block of the page, the page run once per session."""
    return execute_page(rel)


def execute_page(rel: str) -> dict[int, Outcome]:
    """Runs the page's blocks in order in one namespace; the outcome of each block."""
    blocks = extract(ROOT / rel)
    out: dict[int, Outcome] = {}
    namespace: dict = {"__name__": "__doc_page__"}
    cwd, threads = os.getcwd(), torch.get_num_threads()
    failed = None
    with tempfile.TemporaryDirectory(prefix="doc_blocks_") as tmp:
        os.chdir(tmp)
        torch.set_num_threads(1)
        torch.manual_seed(0)
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            pass
        try:
            for b in blocks:
                if failed is not None:
                    out[b.number] = Outcome("blocked", f"block {failed} of {rel} failed first")
                    continue
                if b.skip is not None:
                    out[b.number] = Outcome("skipped", f"{b.id} (line {b.line}): {b.skip}")
                    continue
                filename = f"<{rel} block {b.number}>"
                try:
                    code = compile(_prepared(b), filename, "exec")
                    exec(code, namespace)
                except BaseException as e:  # noqa: BLE001 - reported with its location
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    failed = b.number
                    offset = None
                    for fr in traceback.extract_tb(e.__traceback__):
                        if fr.filename == filename:
                            offset = fr.lineno
                    if offset is None and isinstance(e, SyntaxError) and e.filename == filename:
                        offset = e.lineno
                    where = f"{rel}, block {b.number}"
                    if offset is not None:
                        src_line = _prepared(b).splitlines()[offset - 1].strip()
                        where += f", line {b.line + offset - 1} of {rel}: {src_line}"
                    else:
                        where += f" (starting at line {b.line})"
                    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
                    out[b.number] = Outcome("failed", f"{where}\n{type(e).__name__}: {e}\n\n{tb}")
                else:
                    out[b.number] = Outcome("passed")
        finally:
            os.chdir(cwd)
            torch.set_num_threads(threads)
            if "matplotlib.pyplot" in sys.modules:  # close the figures a block left open
                sys.modules["matplotlib.pyplot"].close("all")
    return out


def _all_blocks() -> list[Block]:
    return [b for page in PAGES for b in extract(page)]


def test_markers_are_well_formed_and_the_pages_have_blocks():
    blocks = _all_blocks()  # raises on a malformed or misplaced marker
    pages = {b.page for b in blocks}
    assert "README.md" in pages and "docs/index.md" in pages
    for b in blocks:
        _prepared(b)  # every replace marker matches its block
    # skips stay rare: at most a quarter of the blocks
    assert sum(b.skip is not None for b in blocks) <= len(blocks) // 4, [b.id for b in blocks if b.skip]


@pytest.mark.parametrize("block", _all_blocks(), ids=lambda b: b.id)
def test_doc_block_runs(block):
    outcome = run_page(block.page)[block.number]
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    if outcome.status == "blocked":
        pytest.fail(f"{block.id} not run: {outcome.message}", pytrace=False)
    if outcome.status == "failed":
        pytest.fail(outcome.message, pytrace=False)


# the harness itself: a failing block is reported with its page, block and line


def _page(tmp_path, text: str) -> str:
    (tmp_path / "page.md").write_text(text)
    return "page.md"


def test_harness_reports_page_block_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    rel = _page(
        tmp_path,
        "# t\n\n```python\nx = 1\n```\n\ntext\n\n<!-- doc-test: replace x + 2 -> x + 5 -->\n"
        "```python\ny = x + 2\nassert y == 3, y\n```\n\n<!-- doc-test: skip (needs CUDA) -->\n"
        "```python\nraise SystemExit\n```\n",
    )
    out = execute_page(rel)
    assert out[1].status == "passed"
    assert out[2].status == "failed" and "page.md, block 2, line 12 of page.md: assert y == 3, y" in out[2].message
    assert "AssertionError: 6" in out[2].message  # the replacement was applied: y = 1 + 5
    assert out[3].status == "blocked"
    blocks = extract(tmp_path / rel)
    assert blocks[2].skip == "needs CUDA" and blocks[1].replacements == [("x + 2", "x + 5")]
    assert os.getcwd() != str(tmp_path) and torch.get_num_threads() >= 1


def test_harness_rejects_stale_and_stray_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(ValueError, match="right before"):
        extract(tmp_path / _page(tmp_path, "<!-- doc-test: skip (x) -->\ntext\n```python\npass\n```\n"))
    with pytest.raises(ValueError, match="unknown doc-test marker"):
        extract(tmp_path / _page(tmp_path, "<!-- doc-test: skipp (x) -->\n```python\npass\n```\n"))
    (b,) = extract(tmp_path / _page(tmp_path, "<!-- doc-test: replace zz -> b -->\n```python\npass\n```\n"))
    with pytest.raises(AssertionError, match="does not occur"):
        _prepared(b)
