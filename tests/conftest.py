"""Shared fixtures: the ../shared data (skipped with a reason where absent), binaries."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TENSOR_FUSION = SHARED / "tensor-fusion"


@pytest.fixture(scope="session")
def tensor_fusion() -> Path:
    """../shared/tensor-fusion: the real chart's CRDs, values and index (read-only)."""
    if not TENSOR_FUSION.is_dir():
        pytest.skip("../shared/tensor-fusion is absent: real chart data not available here")
    return TENSOR_FUSION


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    """Pinned helm 4, helm 3 and kubectl (fetched once into the cache)."""
    from gitopsbot import settings
    from gitopsbot.adapters import binaries as bins

    return {k: v for k, v in bins.ensure_all(settings.cache_dir()).items()}
