"""``clusters/<name>/smoke-test.yaml``: a CUDA test Pod run after the rollout."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.model import SmokeTest
from gitopsbot.core.fleet.pod_file import pod_manifest, top_and_timeout
from gitopsbot.core.fleet.values_file import plain_manifest

_SMOKE_KEYS = ("timeout", "manifest")


def read_smoke_test(r: FieldReader, doc: Any) -> SmokeTest | None:
    found = top_and_timeout(r, doc, _SMOKE_KEYS, 300)
    if found is None:
        return None
    top, timeout = found
    manifest = pod_manifest(r, top, "the smoke test")
    if manifest is None:
        return None
    return SmokeTest(manifest=plain_manifest(manifest, r), timeout_seconds=timeout)
