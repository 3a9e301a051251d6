"""Package the sandbox test charts into repo/ and index them, with the pinned real helm 4.

Run after editing any tensor-fusion-<version>/ directory:

    python examples/charts/package.py

tests/sandbox/test_charts.py fails when repo/ no longer matches the directories.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.binaries import ensure

HERE = Path(__file__).resolve().parent
REPO = HERE / "repo"


def main() -> int:
    helm = str(ensure("helm4", settings.cache_dir()))
    if REPO.exists():
        shutil.rmtree(REPO)
    REPO.mkdir()
    for chart in sorted(HERE.glob("tensor-fusion-*/Chart.yaml")):
        subprocess.run([helm, "lint", str(chart.parent)], check=True, capture_output=True)
        subprocess.run([helm, "package", str(chart.parent), "-d", str(REPO)], check=True)
    subprocess.run([helm, "repo", "index", str(REPO)], check=True)
    print(f"indexed {len(list(REPO.glob('*.tgz')))} archives in {REPO}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
