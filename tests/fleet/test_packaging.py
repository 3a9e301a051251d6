"""The wheel carries the built-in policies (policies/ is their source of truth) and an installed
copy loads them from the package, not from a checkout next to it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.core.policy import load_rules

ROOT = Path(__file__).resolve().parents[2]


def test_editable_install_reads_the_top_level_policies_directory() -> None:
    docs = dict(builtin_policy_documents())
    assert docs["<builtin>/builtin.yaml"] == (ROOT / "policies" / "builtin.yaml").read_text()
    assert load_rules(list(docs.items()))


@pytest.mark.slow
def test_wheel_ships_policies_and_installed_copy_loads_them(tmp_path: Path) -> None:
    # Build from a copy of what the Containerfile's build stage copies, so the checkout gets no
    # build/ directory (stale build/lib files would leak into later wheels).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("gitopsbot", "policies"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(wheels)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("gitopsbot-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("gitopsbot/_builtin_policies/builtin.yaml").decode()
    assert shipped == (ROOT / "policies" / "builtin.yaml").read_text()

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), wheel],
        check=True,
        capture_output=True,
    )
    # PYTHONPATH comes before site-packages, so this imports the installed copy; cwd is not the
    # checkout, so nothing can fall back to ../policies.
    probe = (
        "import gitopsbot, sys\n"
        "from importlib import resources\n"
        "from gitopsbot.adapters.builtin_policies import builtin_policy_documents\n"
        "from gitopsbot.core.policy import load_rules\n"
        "print(gitopsbot.__file__)\n"
        "print(resources.files('gitopsbot._builtin_policies'))\n"
        "print(len(load_rules(builtin_policy_documents())))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    module_file, policies_dir, count = proc.stdout.split("\n")[:3]
    assert module_file.startswith(str(site))
    assert policies_dir.startswith(str(site))
    assert int(count) > 0
