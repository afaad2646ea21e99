"""Finding, downloading and verifying data files.

Where a file is looked for, first hit wins:

1. ``data_dir`` (the loaders' argument) or, when it is not given, the folder named by the
   ``STRUCTMC_DATA`` environment variable — a local copy, e.g. the project's reference
   copies in ``shared/data``;
2. the cache: ``cache_dir`` (argument), else ``$STRUCTMC_CACHE``, else
   ``~/.cache/structmc``.

In each of these roots a file is looked for as ``<root>/<folder>/<name>`` (e.g.
``mnist/train-images-idx3-ubyte.gz``) and as ``<root>/<name>`` (a root that *is* the data
set's folder), under its canonical name and its aliases (e.g. the uncompressed IDX file).
If no root holds it and ``download=True``, it is downloaded from its mirrors, in order, into
the cache (to a temporary name, moved into place only after it verified).

Checksums (:mod:`structmc.data.checksums`)
------------------------------------------
Every :class:`FileSpec` carries a tuple of accepted :class:`Digest` s; a file is good when
*any one* of them matches. A digest is taken either over the file's bytes (``of="file"``)
or over its content (``of="content"``: the decompressed bytes of a gzip file, the file's
bytes otherwise). This is what lets one entry accept several legitimate copies of the same
data: for MNIST the table lists the SHA-256 of upstream's ``.gz`` files, the SHA-256 of
the re-gzipped reference copies in ``shared/data`` (different gzip bytes), and the MD5 that
upstream publishes for the *decompressed* files — which any correct copy, however it was
compressed, matches. Cheap file digests are tried first; the content digest costs one
decompression. Files for which no checksum is published (some UCI files) have no digest:
their first download records its SHA-256 in a ``<name>.sha256`` file beside the cached copy
("trust on first use", with a warning) and later loads are checked against it.

A file that matches no digest — corrupted, truncated, or a different version — raises
:class:`ChecksumError` naming the file and what was expected; it is never used silently.
Parsers also check structure (IDX sizes, row lengths, gzip CRC) so that ``verify=False``
still catches truncation.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("structmc.data")

ENV_DATA = "STRUCTMC_DATA"
ENV_CACHE = "STRUCTMC_CACHE"
_CHUNK = 1 << 20


class DataError(RuntimeError):
    """A data file is missing, unreadable, malformed, or failed verification."""


class ChecksumError(DataError):
    """A file's checksum matches none of the accepted digests."""


class DownloadError(DataError):
    """No mirror could deliver a file (offline, HTTP error, truncated transfer)."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A file is in none of the searched folders and downloading was not allowed."""


DIGEST_OF = ("file", "content", "text")


@dataclass(frozen=True)
class Digest:
    """One accepted checksum: ``algorithm`` (hashlib name), hex ``value``, what it is taken
    over (``"file"`` bytes, decompressed ``"content"``, or ``"text"``: the decompressed content
    as whitespace-normalised lines, see :func:`normalized_text`), and where the value comes
    from. ``"text"`` pins a plain-text table's every field while accepting copies that differ
    only in line endings, trailing blanks or the final newline."""

    algorithm: str
    value: str
    of: str = "file"
    source: str = ""

    def __post_init__(self):
        if self.of not in DIGEST_OF:
            raise ValueError(f"Digest.of must be one of {DIGEST_OF}, got {self.of!r}")
        object.__setattr__(self, "value", self.value.lower())


@dataclass(frozen=True)
class FileSpec:
    """A data file: where it lives under a data root, where to get it, how to check it."""

    folder: str
    name: str
    urls: tuple[str, ...] = ()
    digests: tuple[Digest, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.folder}/{self.name}"


# ---------------------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """``$STRUCTMC_CACHE`` or ``~/.cache/structmc``."""
    env = os.environ.get(ENV_CACHE)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "structmc"


def _local_root(data_dir) -> Path | None:
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_DATA)
    return Path(env).expanduser() if env else None


def _roots(data_dir, cache_dir) -> list[tuple[Path, bool]]:
    """(root, is_cache) in search order."""
    roots = []
    local = _local_root(data_dir)
    if local is not None:
        roots.append((local, False))
    roots.append((Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(), True))
    return roots


def find(spec: FileSpec, *, data_dir=None, cache_dir=None, include_cache: bool = True) -> Path | None:
    """The first existing copy of ``spec`` in the search order, or ``None``."""
    for root, is_cache in _roots(data_dir, cache_dir):
        if is_cache and not include_cache:
            continue
        for name in (spec.name, *spec.aliases):
            for cand in (root / spec.folder / name, root / name):
                if cand.is_file():
                    return cand
    return None


def searched(spec: FileSpec, data_dir=None, cache_dir=None) -> list[str]:
    return [str(root / spec.folder / spec.name) for root, _ in _roots(data_dir, cache_dir)]


# ---------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------
_verified: dict[tuple, bool] = {}  # (path, size, mtime, digests) -> ok; re-hashing 50 MB per load is wasteful


def _new_hash(algorithm: str):
    try:
        return hashlib.new(algorithm, usedforsecurity=False)
    except TypeError:  # pragma: no cover - very old hashlib
        return hashlib.new(algorithm)


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def hash_file(path: Path, algorithms, *, content: bool = False) -> dict[str, str]:
    """Hex digests of a file's bytes (or of its decompressed content) in one pass."""
    hashes = {a: _new_hash(a) for a in set(algorithms)}
    path = Path(path)
    try:
        opener = gzip.open if (content and _is_gzip(path)) else open
        with opener(path, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                for h in hashes.values():
                    h.update(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ChecksumError(f"{path}: truncated or corrupted gzip file ({err})") from err
    return {a: h.hexdigest() for a, h in hashes.items()}


def normalized_text(data: bytes) -> bytes:
    """A plain-text table in one canonical form: each non-blank line's whitespace-separated
    fields joined by one space, lines joined by ``\n``, a final ``\n`` (what a ``"text"``
    digest is taken over)."""
    lines = [b" ".join(line.split()) for line in data.splitlines() if line.strip()]
    return b"\n".join(lines) + b"\n"


def hash_text(path: Path, algorithms) -> dict[str, str]:
    """Hex digests of :func:`normalized_text` of a file's (decompressed) content."""
    text = normalized_text(read_bytes(path))
    out = {}
    for a in set(algorithms):
        h = _new_hash(a)
        h.update(text)
        out[a] = h.hexdigest()
    return out


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify_file(path, spec: FileSpec, *, use_memo: bool = True) -> None:
    """Raise :class:`ChecksumError` unless ``path`` matches one of ``spec``'s digests.

    With no registered digest, a ``<name>.sha256`` file written at download time is used if
    present; otherwise the file is accepted (its parser still checks its structure).
    """
    path = Path(path)
    st = path.stat()
    digests = spec.digests
    if not digests:
        side = _sidecar(path)
        if not side.is_file():
            return
        digests = (Digest("sha256", side.read_text().split()[0], "file", f"recorded at download in {side.name}"),)
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, digests)
    if use_memo and _verified.get(key):
        return
    got: dict[tuple[str, str], str] = {}
    for of in DIGEST_OF:  # cheap file digests first, decompression only if needed
        group = [d for d in digests if d.of == of]
        if not group:
            continue
        algorithms = [d.algorithm for d in group]
        hashed = hash_text(path, algorithms) if of == "text" else hash_file(path, algorithms, content=(of == "content"))
        for alg, value in hashed.items():
            got[(of, alg)] = value
        if any(got[(of, d.algorithm)] == d.value for d in group):
            _verified[key] = True
            return
    expected = "\n".join(
        f"  {d.algorithm} of {d.of} = {d.value}" + (f"  ({d.source})" if d.source else "") for d in digests
    )
    computed = "\n".join(f"  {alg} of {of} = {v}" for (of, alg), v in got.items())
    raise ChecksumError(
        f"{path} ({st.st_size} bytes) does not match any accepted checksum for {spec.label}: it is corrupted, "
        f"truncated or a different version. Delete it (a cached copy is then downloaded again) or pass "
        f"verify=False to use it anyway.\nexpected one of:\n{expected}\ncomputed:\n{computed}"
    )


# ---------------------------------------------------------------------------------------
# Download
# ---------------------------------------------------------------------------------------
def _stream(url: str, dest: Path, timeout: float) -> int:
    req = urllib.request.Request(url, headers={"User-Agent": "structmc-data/0.1"})
    written = 0
    with urllib.request.urlopen(req, timeout=timeout) as resp, open(dest, "wb") as out:
        length = resp.headers.get("Content-Length")
        for chunk in iter(lambda: resp.read(_CHUNK), b""):
            out.write(chunk)
            written += len(chunk)
    if length is not None and written != int(length):
        raise DownloadError(f"truncated transfer: got {written} of {length} bytes")
    return written


def download(spec: FileSpec, cache_dir=None, *, timeout: float = 60.0) -> Path:
    """Download ``spec`` into the cache, verify it, and return its path.

    Mirrors are tried in order; a mirror whose file fails verification is skipped. The file
    appears under its final name only once verified.
    """
    if not spec.urls:
        raise DataNotFoundError(
            f"{spec.label} has no download address; place the file in a folder given by data_dir=... or ${ENV_DATA}"
        )
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    dest = root / spec.folder / spec.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    mismatches: list[str] = []
    for url in spec.urls:
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
        try:
            log.info("downloading %s from %s", spec.label, url)
            _stream(url, tmp, timeout)
            if spec.digests:
                verify_file(tmp, spec, use_memo=False)
            else:
                sha = hash_file(tmp, ["sha256"])["sha256"]
                _sidecar(dest).write_text(f"{sha}  {dest.name}\n")
                warnings.warn(
                    f"{spec.label}: no published checksum is known; recorded SHA-256 {sha} of the "
                    f"download from {url} in {_sidecar(dest)} and will check later loads against it",
                    stacklevel=3,
                )
            os.replace(tmp, dest)
            return dest
        except ChecksumError as err:
            mismatches.append(f"{url}: {err}")
        except (OSError, ValueError, http.client.HTTPException, DownloadError) as err:
            # URLError, HTTPError, timeouts and refused connections are OSErrors
            failures.append(f"{url}: {type(err).__name__}: {err}")
        finally:
            tmp.unlink(missing_ok=True)
    if mismatches:
        raise ChecksumError(
            f"downloaded {spec.label} does not match its registered checksum (nothing was kept):\n"
            + "\n".join(mismatches + failures)
        )
    raise DownloadError(
        f"could not download {spec.label}:\n  "
        + "\n  ".join(failures)
        + f"\nIf this machine is offline, copy the file to {dest} or to <dir>/{spec.folder}/{spec.name} and pass "
        f"data_dir=<dir> (or set ${ENV_DATA}=<dir>)."
    )


def missing_message(specs, data_dir=None, cache_dir=None, *, download: bool = False) -> str:
    """What is missing (``specs`` are alternatives: any one will do), where it was looked for,
    and how to provide it: a checksummed download where an address is known, or a local
    folder given by ``data_dir=`` / ``$STRUCTMC_DATA``."""
    specs = list(specs)
    names = " or ".join(s.label for s in specs)
    looked = ", ".join(p for s in specs for p in searched(s, data_dir, cache_dir))
    first = specs[0]
    local = (
        f"put {'the file' if len(specs) == 1 else 'one of the files'} at <dir>/{first.folder}/{first.name} "
        f"and pass data_dir=<dir> or set ${ENV_DATA}=<dir>"
    )
    online = [s for s in specs if s.urls]
    if not online:
        how = f"{'it has' if len(specs) == 1 else 'they have'} no download address: {local}"
    elif download:
        how = local
    else:
        s = online[0]
        cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        check = "its registered checksum" if s.digests else "the SHA-256 recorded on first download"
        how = (
            f"pass download=True to fetch {s.label} from {s.urls[0]} into {cache} (checked against {check}), or {local}"
        )
    return f"{names} not found (looked for {looked}){'' if download else ' and download=False'}; {how}"


def fetch(
    spec: FileSpec,
    *,
    data_dir=None,
    cache_dir=None,
    download_missing: bool = True,
    verify: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Path to a verified copy of ``spec``: found locally, else downloaded into the cache."""
    path = find(spec, data_dir=data_dir, cache_dir=cache_dir)
    if path is None:
        if not download_missing:
            raise DataNotFoundError(missing_message([spec], data_dir, cache_dir, download=False))
        return download(spec, cache_dir, timeout=timeout)
    if verify:
        verify_file(path, spec)
    return path


@dataclass(frozen=True)
class Source:
    """The loaders' common options: where to look, whether to download, whether to verify."""

    data_dir: str | os.PathLike | None = None
    cache_dir: str | os.PathLike | None = None
    download: bool = True
    verify: bool = True
    timeout: float = 60.0

    def fetch(self, spec: FileSpec) -> Path:
        return fetch(
            spec,
            data_dir=self.data_dir,
            cache_dir=self.cache_dir,
            download_missing=self.download,
            verify=self.verify,
            timeout=self.timeout,
        )

    def find(self, spec: FileSpec) -> Path | None:
        """A verified local copy, or ``None`` (no download)."""
        path = find(spec, data_dir=self.data_dir, cache_dir=self.cache_dir)
        if path is not None and self.verify:
            verify_file(path, spec)
        return path

    def fetch_first(self, specs) -> tuple[FileSpec, Path]:
        """The first of several alternative files found locally, else the first one that can be
        downloaded (e.g. a reference CSV copy, or the upstream file)."""
        specs = list(specs)
        for spec in specs:
            path = self.find(spec)
            if path is not None:
                return spec, path
        if self.download:
            for spec in specs:
                if spec.urls:
                    return spec, self.fetch(spec)
        raise DataNotFoundError(missing_message(specs, self.data_dir, self.cache_dir, download=self.download))


def read_bytes(path: Path) -> bytes:
    """A file's bytes, gunzipped when it is a gzip file (CRC and length checked)."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise DataError(f"{path}: truncated or corrupted gzip file ({err})") from err
    return data
