"""Chart sources against the real thing: a Helm repository served over loopback HTTP, archives
built with tarfile from the real chart files, and local directories."""

from __future__ import annotations

import hashlib
import http.server
import io
import shutil
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitopsbot.adapters.chartrepo import HttpChartSource, LocalChartSource, unpack_chart_archive
from gitopsbot.errors import ChartInvalid, ChartNotFound, ChartUnavailable

pytestmark = pytest.mark.shared


def build_archive(chart_dir: Path, dest: Path, *, name: str = "tensor-fusion") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(chart_dir.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=f"{name}/{p.relative_to(chart_dir).as_posix()}")
    data = buf.getvalue()
    dest.write_bytes(data)
    return data


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def repo(tmp_path: Path, tensor_fusion: Path) -> Iterator[tuple[str, Path]]:
    """A Helm repo dir on loopback HTTP: the real index as real-index/, plus a repo whose
    index lists an archive built from the real chart 1.8.7 (relative URL, true digest)."""
    root = tmp_path / "www"
    (root / "real").mkdir(parents=True)
    shutil.copy(tensor_fusion / "index.yaml", root / "real" / "index.yaml")
    charts = root / "charts"
    charts.mkdir()
    data = build_archive(tensor_fusion / "chart-1.8.7", charts / "tensor-fusion-1.8.7.tgz")
    digest = hashlib.sha256(data).hexdigest()
    (charts / "index.yaml").write_text(
        "apiVersion: v1\nentries:\n  tensor-fusion:\n"
        f"  - version: 1.8.7\n    appVersion: 2.17.0\n    digest: {digest}\n"
        "    urls: [tensor-fusion-1.8.7.tgz]\n"
        "  - version: 1.8.6\n    appVersion: 2.16.3\n    digest: " + "0" * 64 + "\n"
        "    urls: [tensor-fusion-1.8.6.tgz]\n"
        "  - version: 1.8.5\n    appVersion: 2.17.0\n    digest: " + "1" * 64 + "\n"
        "    urls: [tensor-fusion-1.8.7.tgz]\n"
    )

    def handler(*args: object, **kw: object) -> Quiet:
        return Quiet(*args, directory=str(root), **kw)  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "cache"
    finally:
        server.shutdown()
        server.server_close()


def test_real_index_over_http(repo: tuple[str, Path]) -> None:
    url, cache = repo
    source = HttpChartSource(cache_dir=cache)
    try:
        index = source.index(url + "/real")
        latest = index.latest("tensor-fusion")
        assert latest is not None and (latest.version, latest.app_version) == ("1.8.7", "2.17.0")
        entry = index.get("tensor-fusion", "1.8.0")
        assert entry is not None and entry.app_version == "2.13.0"
    finally:
        source.close()


def test_chart_archive_download_verify_and_cache(repo: tuple[str, Path]) -> None:
    url, cache = repo
    source = HttpChartSource(cache_dir=cache)
    try:
        chart = source.chart(url + "/charts", "tensor-fusion", "1.8.7")
    finally:
        source.close()
    assert (chart.version, chart.app_version) == ("1.8.7", "2.17.0")
    assert chart.schema is not None and len(chart.crds) == 12
    cached = list((cache / "charts").glob("*.tgz"))
    assert len(cached) == 1 and cached[0].stem == chart.digest
    # A second source reads the archive from the cache; the index still comes over HTTP,
    # so break the archive on the server to prove it is not fetched again.
    (Path(str(cache)).parent / "www" / "charts" / "tensor-fusion-1.8.7.tgz").write_bytes(b"x")
    again = HttpChartSource(cache_dir=cache)
    try:
        assert again.chart(url + "/charts", "tensor-fusion", "1.8.7").digest == chart.digest
    finally:
        again.close()


def test_digest_mismatch_and_missing(repo: tuple[str, Path]) -> None:
    url, cache = repo
    source = HttpChartSource(cache_dir=cache)
    try:
        with pytest.raises(ChartInvalid, match="does not match the index digest"):
            source.chart(url + "/charts", "tensor-fusion", "1.8.5")
        with pytest.raises(ChartNotFound, match="404"):
            source.chart(url + "/charts", "tensor-fusion", "1.8.6")
        with pytest.raises(ChartNotFound, match=r"9\.9\.9 is not in"):
            source.chart(url + "/charts", "tensor-fusion", "9.9.9")
        with pytest.raises(ChartNotFound, match="404"):
            source.index(url + "/nowhere")
    finally:
        source.close()


def test_unreachable_repository_is_transient(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    source = HttpChartSource(cache_dir=tmp_path)
    try:
        with pytest.raises(ChartUnavailable) as info:
            source.index(f"http://user:pa55w0rd@127.0.0.1:{port}/charts")
    finally:
        source.close()
    assert "pa55w0rd" not in str(info.value)


def _tar(members: list[tarfile.TarInfo], payload: bytes = b"version: 1.0.0\n") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            if m.isfile():
                m.size = len(payload)
                tar.addfile(m, io.BytesIO(payload))
            else:
                tar.addfile(m)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("member", "fragment"),
    [
        (tarfile.TarInfo("../evil/Chart.yaml"), "unsafe path"),
        (tarfile.TarInfo("/abs/Chart.yaml"), "unsafe path"),
    ],
)
def test_unsafe_archives(member: tarfile.TarInfo, fragment: str) -> None:
    with pytest.raises(ChartInvalid, match=fragment):
        unpack_chart_archive(_tar([member]), source="evil.tgz")


def test_links_and_garbage_refused() -> None:
    link = tarfile.TarInfo("c/crds/x.yaml")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    with pytest.raises(ChartInvalid, match="not a regular file"):
        unpack_chart_archive(_tar([tarfile.TarInfo("c/Chart.yaml"), link]), source="l.tgz")
    with pytest.raises(ChartInvalid, match="not a chart archive"):
        unpack_chart_archive(b"not a tarball", source="g.tgz")
    with pytest.raises(ChartInvalid, match=r"no <chart>/Chart\.yaml"):
        unpack_chart_archive(_tar([tarfile.TarInfo("c/values.yaml")]), source="n.tgz")


def test_local_source_dirs_and_archives(tmp_path: Path, tensor_fusion: Path) -> None:
    build_archive(tensor_fusion / "chart-1.8.0", tmp_path / "tensor-fusion-1.8.0.tgz")
    shutil.copytree(tensor_fusion / "chart-1.8.7", tmp_path / "tf-187")
    source = LocalChartSource([tmp_path])
    index = source.index("https://ignored")
    assert [v.version for v in index.versions("tensor-fusion")] == ["1.8.7", "1.8.0"]
    assert source.chart("x", "tensor-fusion", "1.8.0").app_version == "2.13.0"
    assert LocalChartSource([tmp_path / "tf-187"]).chart("x", "tensor-fusion", "1.8.7").schema
    with pytest.raises(ChartNotFound, match=r"have: 1\.8\.0, 1\.8\.7"):
        source.chart("x", "tensor-fusion", "1.7.5")
    with pytest.raises(ChartNotFound, match="no such chart directory"):
        LocalChartSource([tmp_path / "missing"]).index("x")
