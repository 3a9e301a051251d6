"""A Pod written in a cluster file (``smoke-test.yaml``, ``canary-smoke.yaml``): the file's
top mapping with its ``timeout``, and its ``manifest``, which must be a Pod. One reader for
both files; each adds its own keys and checks (``smoke_test_file``, ``canary_smoke_file``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.located_yaml import LocatedMap


def top_and_timeout(
    r: FieldReader, doc: Any, keys: Sequence[str], default_timeout: int
) -> tuple[LocatedMap, int] | None:
    """The file's top mapping (its keys checked against ``keys``) and its ``timeout``; None
    when the file is empty or not a mapping (recorded in ``r``)."""
    top = r.document(doc, tuple(keys))
    if top is None:
        return None
    return top, r.duration(top, "timeout", "", default_timeout)


def pod_manifest(r: FieldReader, top: LocatedMap, what: str) -> LocatedMap | None:
    """The file's ``manifest``, located, when it is there and a Pod; None otherwise (the
    problem recorded in ``r``: ``what`` names the Pod in the message)."""
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
            f"{what} must be a Pod (kind: Pod)",
        )
        return None
    return manifest
