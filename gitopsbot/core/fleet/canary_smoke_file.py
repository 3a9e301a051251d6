"""``clusters/<name>/canary-smoke.yaml``: the GPU canary's smoke Pod (issue 18), run after a
pool's canary batch on a node that batch updated (``core.rollouts.canary_smoke``)."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet.canary_spec import DEFAULT_TIMEOUT, CanarySmoke
from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.pod_file import pod_manifest, top_and_timeout
from gitopsbot.core.fleet.values_file import plain_manifest

_KEYS = ("timeout", "pools", "manifest")
# The bot sets these itself: a value written in the file would be overwritten silently.
_BOT_OWNED_SPEC = ("nodeName",)


def read_canary_smoke(r: FieldReader, doc: Any) -> CanarySmoke | None:
    """The file's ``CanarySmoke``; None when the file is empty or has problems (recorded in
    ``r`` with file, line and field)."""
    found = top_and_timeout(r, doc, _KEYS, DEFAULT_TIMEOUT)
    if found is None:
        return None
    top, timeout = found
    pools, where = r.string_list(top, "pools", "", ())
    for i, (name, at) in enumerate(zip(pools, where, strict=True)):
        if not name.strip():
            r.add(at, f"pools[{i}]", "must not be empty", "a pool name from rollout.yaml")
    manifest = pod_manifest(r, top, "the GPU canary smoke workload")
    if manifest is None:
        return None
    spec = manifest.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        at = r.value_at(manifest, "spec") if "spec" in manifest else r.node_at(manifest)
        r.add(at, "manifest.spec.containers", "required: the container that makes the GPU call")
        return None
    for key in _BOT_OWNED_SPEC:
        if key in spec:
            r.add(
                r.key_at(spec, key),
                f"manifest.spec.{key}",
                "set by the bot (a node the canary batch updated)",
                "remove it",
            )
    plain = plain_manifest(manifest, r)
    return CanarySmoke(manifest=plain, timeout_seconds=timeout, pools=tuple(pools))
