"""Reading tables with the standard library: delimited text, ``.xlsx`` (a zip of XML), and
turning string columns into numeric features (numbers as they are, categories one-hot).

``.xls`` (old binary Excel, only the UCI concrete file) needs the optional ``xlrd``.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np

from .files import DataError

MISSING = {"", "?", "na", "nan", "null"}


def decode(data: bytes, where: str) -> str:
    """UTF-8 (BOM tolerated), else Latin-1: the Seoul bike file writes '°' in Windows-1252."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def read_delimited(
    text: str, *, sep: str | None, header: bool, where: str, names: list[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Rows of strings from delimited text; ``sep=None`` splits on runs of whitespace.

    Blank lines are skipped; every other row must have as many fields as the header (a short
    row is how a truncated file usually shows).
    """
    if sep is None:
        rows = [line.split() for line in text.splitlines() if line.strip()]
    else:
        rows = [
            [f.strip() for f in r] for r in csv.reader(io.StringIO(text), delimiter=sep) if any(f.strip() for f in r)
        ]
    if not rows:
        raise DataError(f"{where}: no data rows")
    head = rows.pop(0) if header else None
    if names is not None:
        head = list(names)
    if head is None:
        head = [f"x{i}" for i in range(len(rows[0]))]
    width = len(head)
    for i, r in enumerate(rows):
        if len(r) != width:
            raise DataError(
                f"{where}: data row {i + 1} has {len(r)} fields, expected {width} (truncated or corrupted?)"
            )
    if not rows:
        raise DataError(f"{where}: header but no data rows")
    return head, rows


# ---------------------------------------------------------------------------------------
# .xlsx / .xls
# ---------------------------------------------------------------------------------------
_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"


def _col_index(ref: str) -> int:
    letters = re.match(r"[A-Z]+", ref)
    if letters is None:
        raise ValueError(ref)
    n = 0
    for ch in letters.group(0):
        n = n * 26 + (ord(ch) - 64)
    return n - 1


def _sheet_number(name: str) -> int:
    m = re.search(r"(\d+)\.xml$", name)
    assert m is not None  # only called on names matching xl/worksheets/sheet\d+\.xml
    return int(m.group(1))


def read_xlsx(path, *, sheet: int = 0) -> list[list[str]]:
    """Cell strings of one worksheet of an ``.xlsx`` file (numbers as written, shared and
    inline strings resolved); fully empty rows and trailing empty columns are dropped."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            shared: list[str] = []
            if "xl/sharedStrings.xml" in names:
                for si in ET.fromstring(z.read("xl/sharedStrings.xml")).iter(_NS + "si"):
                    shared.append("".join(t.text or "" for t in si.iter(_NS + "t")))
            sheets = sorted((n for n in names if re.fullmatch(r"xl/worksheets/sheet\d+\.xml", n)), key=_sheet_number)
            if len(sheets) <= sheet:
                raise DataError(f"{path}: no worksheet {sheet}")
            root = ET.fromstring(z.read(sheets[sheet]))
    except (zipfile.BadZipFile, ET.ParseError, KeyError, EOFError) as err:
        raise DataError(f"{path}: not a readable .xlsx file ({type(err).__name__}: {err})") from err
    rows = []
    for row in root.iter(_NS + "row"):
        cells: dict[int, str] = {}
        for pos, c in enumerate(row.findall(_NS + "c")):
            ref = c.get("r")
            col = _col_index(ref) if ref else pos
            kind = c.get("t")
            v = c.find(_NS + "v")
            if kind == "s":
                if v is None or v.text is None:
                    raise DataError(f"{path}: shared-string cell {ref or pos} has no value")
                value = shared[int(v.text)]
            elif kind == "inlineStr":
                value = "".join(t.text or "" for t in c.iter(_NS + "t"))
            else:
                value = "" if v is None or v.text is None else v.text
            cells[col] = value.strip()
        if any(cells.values()):
            width = max(cells) + 1
            rows.append([cells.get(i, "") for i in range(width)])
    if not rows:
        raise DataError(f"{path}: empty worksheet")
    width = max(max((i + 1 for i, v in enumerate(r) if v), default=0) for r in rows)
    return [(r + [""] * width)[:width] for r in rows]


def read_xls(path, *, sheet: int = 0) -> list[list[str]]:
    """Cell strings of an old binary ``.xls`` worksheet (needs ``xlrd``)."""
    try:
        import xlrd
    except ImportError as err:
        raise ImportError(
            f"reading {Path(path).name} (.xls) needs xlrd: pip install xlrd; or provide a CSV export of it"
        ) from err
    try:
        book = xlrd.open_workbook(str(path))
        sh = book.sheet_by_index(sheet)
        rows = [[str(v).strip() for v in sh.row_values(i)] for i in range(sh.nrows)]
    except Exception as err:  # xlrd raises its own XLRDError and others for damaged files
        raise DataError(f"{path}: not a readable .xls file ({type(err).__name__}: {err})") from err
    return [r for r in rows if any(r)]


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------
def _as_float(values: list[str]) -> np.ndarray | None:
    try:
        return np.array([float(v) for v in values], dtype=np.float64)
    except ValueError:
        return None


def encode_columns(
    header: list[str],
    rows: list[list[str]],
    target: str,
    *,
    drop=(),
    target_map: dict | None = None,
    where: str = "table",
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features ``[n, p]``, target ``[n]`` and feature names from string rows.

    Numeric columns are kept as numbers; any other column is categorical: with two values one
    0/1 column (indicator of the later value in sorted order), otherwise one-hot over the
    sorted values. ``target_map`` maps string target values to numbers (ordinal targets).
    """
    if target not in header:
        raise DataError(f"{where}: no target column {target!r} in {header}")
    cols = list(zip(*rows))
    t = header.index(target)
    y: np.ndarray | None
    if target_map is not None:
        try:
            y = np.array([float(target_map[v]) for v in cols[t]])
        except KeyError as err:
            raise DataError(f"{where}: unknown target value {err.args[0]!r}") from err
    else:
        y = _as_float(list(cols[t]))
        if y is None:
            raise DataError(f"{where}: target column {target!r} is not numeric")
    feats, names = [], []
    for j, name in enumerate(header):
        if j == t or name in drop:
            continue
        values = list(cols[j])
        num = _as_float(values)
        if num is not None:
            feats.append(num[:, None])
            names.append(name)
            continue
        if any(v.lower() in MISSING for v in values):
            raise DataError(f"{where}: column {name!r} has missing values")
        cats = sorted(set(values))
        if len(cats) == 2:
            feats.append(np.array([v == cats[1] for v in values], dtype=np.float64)[:, None])
            names.append(f"{name}={cats[1]}")
        else:
            idx = {c: k for k, c in enumerate(cats)}
            onehot = np.zeros((len(values), len(cats)))
            onehot[np.arange(len(values)), [idx[v] for v in values]] = 1.0
            feats.append(onehot)
            names.extend(f"{name}={c}" for c in cats)
    x = np.concatenate(feats, axis=1) if feats else np.zeros((len(rows), 0))
    if not np.isfinite(x).all() or not np.isfinite(y).all():
        raise DataError(f"{where}: non-finite values")
    return x, y, names
