"""The HTTP chart source's index cache: a TTL on an injected clock, and conditional requests
(ETag / Last-Modified) against a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gitopsbot.adapters.chartrepo import HttpChartSource


def index_yaml(*versions: str) -> str:
    entries = "".join(
        f"  - version: {v}\n    appVersion: {v}\n    digest: {'0' * 64}\n"
        f"    urls: [tensor-fusion-{v}.tgz]\n"
        for v in versions
    )
    return f"apiVersion: v1\nentries:\n  tensor-fusion:\n{entries}"


@dataclass
class Repo:
    """What the server publishes, and what it was asked."""

    body: str
    etag: str | None = '"v1"'
    last_modified: str | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def repo() -> Iterator[Repo]:
    state = Repo(body=index_yaml("1.8.0"))

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append({k.lower(): v for k, v in self.headers.items()})
            fresh_etag = state.etag and self.headers.get("If-None-Match") == state.etag
            fresh_date = (
                state.etag is None
                and state.last_modified
                and self.headers.get("If-Modified-Since") == state.last_modified
            )
            if fresh_etag or fresh_date:
                self.send_response(304)
                self.end_headers()
                return
            data = state.body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-yaml")
            self.send_header("Content-Length", str(len(data)))
            if state.etag:
                self.send_header("ETag", state.etag)
            if state.last_modified:
                self.send_header("Last-Modified", state.last_modified)
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/charts"
    yield state
    server.shutdown()
    server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def versions(source: HttpChartSource, url: str) -> list[str]:
    return [v.version for v in source.index(url).versions("tensor-fusion")]


def test_index_is_cached_within_the_ttl(repo: Repo, tmp_path: Path) -> None:
    clock = Clock()
    source = HttpChartSource(cache_dir=tmp_path, index_ttl_seconds=300, clock=clock)
    assert versions(source, repo.url) == ["1.8.0"]
    repo.body, repo.etag = index_yaml("1.8.1", "1.8.0"), '"v2"'
    clock.now += 299
    assert versions(source, repo.url) == ["1.8.0"]
    assert len(repo.requests) == 1


def test_new_version_seen_after_the_ttl(repo: Repo, tmp_path: Path) -> None:
    clock = Clock()
    source = HttpChartSource(cache_dir=tmp_path, index_ttl_seconds=300, clock=clock)
    assert versions(source, repo.url) == ["1.8.0"]
    repo.body, repo.etag = index_yaml("1.8.1", "1.8.0"), '"v2"'
    clock.now += 300
    assert versions(source, repo.url) == ["1.8.1", "1.8.0"]
    # The stale copy was revalidated with its ETag; the changed index came back in full.
    assert repo.requests[1].get("if-none-match") == '"v1"'


def test_unchanged_index_revalidates_with_etag(repo: Repo, tmp_path: Path) -> None:
    clock = Clock()
    source = HttpChartSource(cache_dir=tmp_path, index_ttl_seconds=60, clock=clock)
    first = source.index(repo.url)
    clock.now += 61
    again = source.index(repo.url)
    assert again is first  # 304: the parsed index is kept, not re-downloaded
    assert [r.get("if-none-match") for r in repo.requests] == [None, '"v1"']
    # A 304 restarts the TTL.
    clock.now += 59
    source.index(repo.url)
    assert len(repo.requests) == 2


def test_last_modified_is_used_without_etag(repo: Repo, tmp_path: Path) -> None:
    repo.etag = None
    repo.last_modified = "Wed, 02 Dec 2026 10:00:00 GMT"
    clock = Clock()
    source = HttpChartSource(cache_dir=tmp_path, index_ttl_seconds=10, clock=clock)
    first = source.index(repo.url)
    clock.now += 10
    assert source.index(repo.url) is first
    assert repo.requests[1].get("if-modified-since") == repo.last_modified
    assert "if-none-match" not in repo.requests[1]


def test_default_ttl_is_five_minutes(repo: Repo, tmp_path: Path) -> None:
    clock = Clock()
    source = HttpChartSource(cache_dir=tmp_path, clock=clock)
    source.index(repo.url)
    clock.now += 299.9
    source.index(repo.url)
    assert len(repo.requests) == 1
    clock.now += 0.1
    source.index(repo.url)
    assert len(repo.requests) == 2
