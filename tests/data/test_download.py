"""Downloads against a local HTTP server on 127.0.0.1: success, checksum mismatch,
connection failure, HTTP errors, mirror fallback, truncated transfers, trust on first use."""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import warnings

import pytest
import torch

import structmc.data as D
from structmc.data import checksums, files
from structmc.data.files import Digest, FileSpec

PAYLOAD = b"".join(f"{i} {i * i}\n".encode() for i in range(500))
SHA = hashlib.sha256(PAYLOAD).hexdigest()
YACHT = "\n".join(" ".join(f"{(i * 7 + j) % 13 + 0.5:g}" for j in range(7)) for i in range(30)).encode() + b"\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, bytes] = {}
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        if self.path == "/truncated":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[:100])  # then hang up
            return
        body = self.routes.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture(scope="module")
def server():
    _Handler.routes = {"/file.txt": PAYLOAD, "/other.txt": b"something else\n", "/yacht": YACHT}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "STRUCTMC_DATA"):
        monkeypatch.delenv(var, raising=False)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def spec(*urls, digests=(Digest("sha256", SHA),)) -> FileSpec:
    return FileSpec("testset", "file.txt", urls=tuple(urls), digests=tuple(digests))


def test_download_verifies_and_caches(server, tmp_path):
    s = spec(server + "/file.txt")
    path = files.fetch(s, cache_dir=tmp_path)
    assert path == tmp_path / "testset" / "file.txt" and path.read_bytes() == PAYLOAD
    n = len(_Handler.hits)
    assert files.fetch(s, cache_dir=tmp_path) == path and len(_Handler.hits) == n  # served from the cache
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.txt"]  # no temporary files left


def test_checksum_mismatch_keeps_nothing(server, tmp_path):
    s = spec(server + "/other.txt")
    with pytest.raises(D.ChecksumError, match="does not match"):
        files.fetch(s, cache_dir=tmp_path)
    assert not any((tmp_path / "testset").iterdir())


def test_connection_failure_is_a_clear_error(tmp_path):
    s = spec(f"http://127.0.0.1:{closed_port()}/file.txt")
    with pytest.raises(D.DownloadError, match="offline") as err:
        files.fetch(s, cache_dir=tmp_path, timeout=5)
    assert "STRUCTMC_DATA" in str(err.value) and "127.0.0.1" in str(err.value)
    assert not (tmp_path / "testset" / "file.txt").exists()


def test_http_error_then_mirror_fallback(server, tmp_path):
    with pytest.raises(D.DownloadError, match="404"):
        files.fetch(spec(server + "/missing"), cache_dir=tmp_path)
    path = files.fetch(spec(server + "/missing", server + "/other.txt", server + "/file.txt"), cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD


def test_truncated_transfer(server, tmp_path):
    with pytest.raises(D.DownloadError, match="truncated|IncompleteRead|Connection"):
        files.fetch(spec(server + "/truncated"), cache_dir=tmp_path)
    assert not (tmp_path / "testset" / "file.txt").exists()


def test_trust_on_first_use_then_detects_changes(server, tmp_path):
    s = spec(server + "/file.txt", digests=())
    with pytest.warns(UserWarning, match="no published checksum"):
        path = files.fetch(s, cache_dir=tmp_path)
    assert (tmp_path / "testset" / "file.txt.sha256").read_text().split()[0] == SHA
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert files.fetch(s, cache_dir=tmp_path) == path
    path.write_bytes(PAYLOAD[:-1])
    with pytest.raises(D.ChecksumError):
        files.fetch(s, cache_dir=tmp_path)


def test_local_copy_wins_and_download_false(server, tmp_path):
    local = tmp_path / "local" / "testset"
    local.mkdir(parents=True)
    (local / "file.txt").write_bytes(PAYLOAD)
    n = len(_Handler.hits)
    assert (
        files.fetch(spec(server + "/file.txt"), data_dir=tmp_path / "local", cache_dir=tmp_path / "c")
        == local / "file.txt"
    )
    assert len(_Handler.hits) == n
    with pytest.raises(D.DataNotFoundError):
        files.fetch(spec(server + "/file.txt"), cache_dir=tmp_path / "c", download_missing=False)


def test_a_loader_downloads_into_the_cache(server, tmp_path, monkeypatch):
    yacht = FileSpec(
        "uci",
        "yacht_hydrodynamics.data",
        urls=(server + "/yacht",),
        digests=(Digest("sha256", hashlib.sha256(YACHT).hexdigest()),),
    )
    monkeypatch.setitem(checksums.UCI, "yacht_hydrodynamics.data", yacht)
    ds = D.load_yacht(cache_dir=tmp_path, data_dir=tmp_path / "nothing-here")
    assert (tmp_path / "uci" / "yacht_hydrodynamics.data").read_bytes() == YACHT
    assert ds.x_train.shape[1] == 6 and len(ds.y_train) + len(ds.y_val) + len(ds.y_test) == 30
    assert torch.isfinite(ds.x_train).all()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "x"))
    assert files.default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("STRUCTMC_CACHE")
    assert files.default_cache_dir().parts[-2:] == (".cache", "structmc")


def test_a_missing_file_says_which_files_would_do_and_how_to_get_them(tmp_path):
    """Without download, a set with alternative files (Boston: the CSV copy or UCI's
    housing.data) names them all, the places searched, the checksummed download and the
    folder / variable to set; a file with no download address says so."""
    kw = dict(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    with pytest.raises(D.DataNotFoundError) as err:
        D.load_boston(**kw)
    msg = str(err.value)
    assert msg.startswith("uci/boston.csv or uci/housing.data not found")
    assert (
        str(tmp_path / "data" / "uci" / "boston.csv") in msg and str(tmp_path / "cache" / "uci" / "housing.data") in msg
    )
    assert f"pass download=True to fetch uci/housing.data from {checksums.UCI['housing.data'].urls[0]}" in msg
    assert "checksum" in msg and "data_dir=<dir> or set $STRUCTMC_DATA=<dir>" in msg
    with pytest.raises(
        D.DataNotFoundError, match="has no download address: put the file at <dir>/uci/ENB2012_data.csv"
    ):
        files.Source(**kw).fetch_first([checksums.UCI["ENB2012_data.csv"]])
    # one file (MNIST's): the same form
    with pytest.raises(D.DataNotFoundError, match="download=False; pass download=True to fetch mnist/"):
        D.load_mnist(**kw)
