"""``clusters/<name>/smoke-test.yaml``: a CUDA test Pod run after the rollout."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.model import (
    SmokeTest,
)
from gitopsbot.core.fleet.values_file import plain_manifest

_SMOKE_KEYS = ("timeout", "manifest")


def read_smoke_test(r: FieldReader, doc: Any) -> SmokeTest | None:
    if doc is None:
        return None
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return None
    r.known_keys(top, "", _SMOKE_KEYS)
    timeout = r.duration(top, "timeout", "", 300)
    if "manifest" not in top:
        r.add(r.node_at(top), "manifest", "required key is missing", "a Pod manifest")
        return None
    manifest = r.mapping(top["manifest"], "manifest", r.value_at(top, "manifest"))
    if manifest is None:
        return None
    if manifest.get("kind") != "Pod":
        r.add(
            r.value_at(manifest, "kind") if "kind" in manifest else r.node_at(manifest),
            "manifest.kind",
            "the smoke test must be a Pod (kind: Pod)",
        )
        return None
    plain = plain_manifest(manifest, r)
    return SmokeTest(manifest=plain, timeout_seconds=timeout)
