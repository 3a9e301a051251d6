"""The sandbox Git remote: git http-backend behind basic auth, driven by the real git CLI."""

from __future__ import annotations

import base64
import gzip
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.sandbox.gitremote import GitRemote, create_fleet_repo

GitCli = Callable[..., str]


def _get(
    url: str, auth: tuple[str, str] | None = None, **kw: object
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, **kw)  # type: ignore[arg-type]
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_basic_auth_is_required(http_remote: GitRemote, fleet_source: Path) -> None:
    USER, PASSWORD = http_remote.username or "", http_remote.password or ""
    url = http_remote.create_fleet_repo("auth-required", fleet_source)
    refs = f"{url}/info/refs?service=git-upload-pack"
    status, headers, _ = _get(refs)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Basic ")
    assert _get(refs, ("someone", PASSWORD))[0] == 401
    assert _get(refs, (USER, "wrong"))[0] == 401
    status, headers, body = _get(refs, (USER, PASSWORD))
    assert status == 200
    assert headers["Content-Type"] == "application/x-git-upload-pack-advertisement"
    assert b"# service=git-upload-pack" in body and b"refs/heads/main" in body
    # The CGI's own Status header passes through.
    assert _get(f"{http_remote.url}/no-such.git/info/refs", (USER, PASSWORD))[0] == 404


def test_gzip_request_body(
    http_remote: GitRemote, fleet_source: Path, tmp_path: Path, run_git: GitCli
) -> None:
    git = run_git
    USER, PASSWORD = http_remote.username or "", http_remote.password or ""
    url = http_remote.create_fleet_repo("gzip-body", fleet_source)
    sha = git(
        "ls-remote", url.replace("http://", f"http://{USER}:{PASSWORD}@"), "main", cwd=tmp_path
    ).split()[0]

    def pkt(line: str) -> bytes:
        return f"{len(line) + 4:04x}{line}".encode()

    request = pkt(f"want {sha} ofs-delta\n") + b"0000" + pkt("done\n")
    status, headers, body = _get(
        f"{url}/git-upload-pack",
        (USER, PASSWORD),
        data=gzip.compress(request),
        method="POST",
        headers={
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
        },
    )
    assert status == 200, body
    assert headers["Content-Type"] == "application/x-git-upload-pack-result"
    assert b"PACK" in body


def test_large_chunked_push_and_clone(
    http_remote: GitRemote, fleet_source: Path, tmp_path: Path, run_git: GitCli
) -> None:
    """A push larger than http.postBuffer goes chunked; the pack must arrive whole."""
    git = run_git
    USER, PASSWORD = http_remote.username or "", http_remote.password or ""
    url = http_remote.create_fleet_repo("chunked-push", fleet_source)
    authed = url.replace("http://", f"http://{USER}:{PASSWORD}@")
    work = tmp_path / "work"
    git("clone", "--quiet", authed, str(work), cwd=tmp_path)
    (work / "big.bin").write_bytes(os.urandom(300_000))  # incompressible
    git("add", "big.bin", cwd=work)
    git("commit", "--quiet", "-m", "big", cwd=work)
    git("-c", "http.postBuffer=4096", "push", "--quiet", "origin", "main", cwd=work)
    again = tmp_path / "again"
    git("clone", "--quiet", authed, str(again), cwd=tmp_path)
    assert (again / "big.bin").read_bytes() == (work / "big.bin").read_bytes()


def test_create_fleet_repo(tmp_path: Path, fleet_source: Path, run_git: GitCli) -> None:
    git = run_git
    url = create_fleet_repo(tmp_path / "remotes", "fleet", fleet_source)
    assert url == (tmp_path / "remotes" / "fleet.git").resolve().as_uri()
    work = tmp_path / "clone"
    git("clone", "--quiet", url, str(work), cwd=tmp_path)
    assert git("branch", "--show-current", cwd=work).strip() == "main"
    assert (work / "clusters/alpha/release.yaml").read_text() == "version: 1.0.0\n"
    assert git("rev-list", "--count", "HEAD", cwd=work).strip() == "1"
    with pytest.raises(FileExistsError):
        create_fleet_repo(tmp_path / "remotes", "fleet.git", fleet_source)
    with pytest.raises(ValueError, match="invalid repository name"):
        create_fleet_repo(tmp_path / "remotes", "../escape", fleet_source)


def test_examples_fleet_if_present(tmp_path: Path, run_git: GitCli) -> None:
    git = run_git
    source = Path(__file__).resolve().parents[2] / "examples" / "fleet"
    if not source.is_dir():
        pytest.skip("examples/fleet not in this checkout yet")
    url = create_fleet_repo(tmp_path, "example", source)
    work = tmp_path / "clone"
    git("clone", "--quiet", url, str(work), cwd=tmp_path)
    assert (work / "clusters").is_dir()


def test_start_stop(tmp_path: Path, run_git: GitCli) -> None:
    git = run_git
    remote = GitRemote(tmp_path, username=None, password=None)
    with pytest.raises(RuntimeError):
        _ = remote.url
    with remote:
        url = remote.create_fleet_repo("anon", None)
        work = tmp_path / "w"
        git("clone", "--quiet", url, str(work), cwd=tmp_path)
        git("commit", "--quiet", "--allow-empty", "-m", "anon push", cwd=work)
        git("push", "--quiet", "origin", "main", cwd=work)
    with pytest.raises(RuntimeError):
        _ = remote.url
