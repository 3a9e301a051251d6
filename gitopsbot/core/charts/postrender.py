"""The Helm post-renderer's rewrite: make the Git rollout policy the one in effect (F1).

The chart hard-codes ``nodePoolRollingUpdatePolicy`` in the TensorFusionCluster it renders
(autoUpdateHypervisor true, batchPercentage 20, ...) and every ``helm upgrade`` renders it
again, so a rollout could start the moment Helm applies it (F1). Every upgrade the bot runs
passes through this rewrite: in each rendered TensorFusionCluster, each pool's
``spec.gpuPools[].specTemplate.nodeManagerConfig.nodePoolRollingUpdatePolicy`` becomes the
pool's Git policy (R11: the controller copies specTemplate to the GPUPool) with every
``autoUpdate*`` switch CLOSED. The bot opens a switch later, inside the pool's window, by
patching the TensorFusionCluster (docs/rollout-policy.md).

Pure: text in, text out. Documents other than TensorFusionClusters are returned byte for
byte; a TensorFusionCluster is re-serialised with ruamel's round-trip dumper (comments kept).
The policy travels to the ``gitopsbot post-render`` subprocess as a small JSON document
(``encode_policy`` / ``decode_policy``).

Start-up (#13): the post-renderer process (``gitopsbot/post_render.py``) reads the policy
with ``decode_policy_document`` into the small ``PostRender*`` values below, which carry
just what the rewrite needs; ``core.fleet.model`` (and PyYAML, through ``core.fleet.yaml_bounds``)
is imported only by ``decode_policy``, which the bot side calls, and for annotations.
``tests/executor/test_post_render_start.py`` keeps it so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

if TYPE_CHECKING:
    from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy

TFC_KIND = "TensorFusionCluster"
TFC_GROUP = "tensor-fusion.ai"
SWITCHES = ("autoUpdateHypervisor", "autoUpdateWorker", "autoUpdateClient")
POLICY_FORMAT = "gitopsbot.post-render/v1"

# A document separator line: "---" alone or followed by spaces/a comment.
_SEPARATOR = re.compile(r"^---[ \t]*(#.*)?$", re.MULTILINE)


class PostRenderError(ValueError):
    """The manifests or the policy document cannot be understood; helm gets a non-zero exit."""


# Results and values here are NamedTuples, not dataclasses: immutable all the same, and the
# post-renderer process then never imports ``dataclasses`` (with ``inspect``, 7-12 ms of its
# start, #13); each dataclass defined also costs about half a millisecond.
class PostRenderResult(NamedTuple):
    text: str
    # (TensorFusionCluster name, pool name) for each pool rewritten.
    rewritten: tuple[tuple[str, str], ...]
    # Pools rendered by the chart that the Git policy does not name: switches closed,
    # batch settings left as the chart rendered them.
    unmatched_pools: tuple[str, ...]
    # Pools the Git policy names that no rendered TensorFusionCluster has.
    missing_pools: tuple[str, ...]


class PostRenderWindow(NamedTuple):
    """``MaintenanceWindow``'s fields as the policy document carries them."""

    cron: str
    duration_seconds: int
    timezone: str


class PostRenderPool(NamedTuple):
    """The ``PoolPolicy`` fields the policy document carries (``encode_policy``)."""

    name: str
    batch_percentage: int
    batch_interval_seconds: int
    max_duration_seconds: int | None
    maintenance_window: PostRenderWindow | None


class PostRenderPolicy(NamedTuple):
    """The policy document, decoded without ``core.fleet.model``: what ``rewrite_manifests``
    needs, in the post-renderer process (``decode_policy_document``)."""

    pools: tuple[PostRenderPool, ...]


def go_duration(seconds: int) -> str:
    """Seconds as a Go ``time.ParseDuration`` string: 90 → ``1m30s``, 3600 → ``1h``."""
    if seconds < 0:
        raise PostRenderError(f"negative duration: {seconds}s")
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


def rolling_update_policy(pool: PoolPolicy | PostRenderPool | None) -> dict[str, Any]:
    """The ``nodePoolRollingUpdatePolicy`` the bot wants Helm to apply for ``pool``:
    every switch closed; batch settings from Git; window and deadline for the record only
    (R21: the controller ignores them, the bot enforces them)."""
    policy: dict[str, Any] = {switch: False for switch in SWITCHES}
    if pool is None:
        return policy
    policy["batchPercentage"] = pool.batch_percentage
    policy["batchInterval"] = go_duration(pool.batch_interval_seconds)
    if pool.max_duration_seconds is not None:
        policy["maxDuration"] = go_duration(pool.max_duration_seconds)
    if pool.maintenance_window is not None:
        policy["maintenanceWindow"] = {"includes": [pool.maintenance_window.cron]}
    return policy


def rewrite_manifests(manifests: str, policy: RolloutPolicy | PostRenderPolicy) -> PostRenderResult:
    """Rewrite every TensorFusionCluster in a multi-document YAML stream (helm's rendered
    manifests) to ``policy``; everything else is kept byte for byte."""
    pools: dict[str, PoolPolicy | PostRenderPool] = {p.name: p for p in policy.pools}
    yamls = _Yamls()
    rewritten: list[tuple[str, str]] = []
    unmatched: list[str] = []
    chunks = _split(manifests)
    out: list[str] = []
    for chunk in chunks:
        if TFC_KIND not in chunk.body:
            out.append(chunk.separator + chunk.body)
            continue
        doc, style = _load(yamls, chunk.body, chunk.number)
        if not _is_tfc(doc):
            out.append(chunk.separator + chunk.body)
            continue
        name = str(doc.get("metadata", {}).get("name", ""))
        for pool_name in _rewrite_tfc(doc, pools, chunk.number):
            if pool_name in pools:
                rewritten.append((name, pool_name))
            else:
                unmatched.append(pool_name)
        text = _dump(yamls, doc, style, trailing_newline=chunk.body.endswith("\n"))
        out.append(chunk.separator + text)
    seen = {pool for _, pool in rewritten}
    missing = tuple(name for name in pools if name not in seen)
    return PostRenderResult("".join(out), tuple(rewritten), tuple(unmatched), missing)


def encode_policy(policy: RolloutPolicy) -> str:
    """The policy fields the post-renderer needs, as JSON for ``gitopsbot post-render``."""
    pools = []
    for pool in policy.pools:
        entry: dict[str, Any] = {
            "name": pool.name,
            "batchPercentage": pool.batch_percentage,
            "batchIntervalSeconds": pool.batch_interval_seconds,
        }
        if pool.max_duration_seconds is not None:
            entry["maxDurationSeconds"] = pool.max_duration_seconds
        if pool.maintenance_window is not None:
            window = pool.maintenance_window
            entry["maintenanceWindow"] = {
                "cron": window.cron,
                "durationSeconds": window.duration_seconds,
                "timezone": window.timezone,
            }
        pools.append(entry)
    return json.dumps({"format": POLICY_FORMAT, "pools": pools}, indent=2, sort_keys=True) + "\n"


def decode_policy(text: str, *, source: str = "<policy>") -> RolloutPolicy:
    """Inverse of ``encode_policy``. PostRenderError names ``source`` and the field.

    Imports ``core.fleet.model`` on call: the post-renderer process uses
    ``decode_policy_document`` and never loads it."""
    from gitopsbot.core.fleet.model import MaintenanceWindow, PoolPolicy, RolloutPolicy

    pools = []
    for pool in decode_policy_document(text, source=source).pools:
        window = pool.maintenance_window
        pools.append(
            PoolPolicy(
                name=pool.name,
                batch_percentage=pool.batch_percentage,
                batch_interval_seconds=pool.batch_interval_seconds,
                max_duration_seconds=pool.max_duration_seconds,
                maintenance_window=None
                if window is None
                else MaintenanceWindow(
                    cron=window.cron,
                    duration_seconds=window.duration_seconds,
                    timezone=window.timezone,
                ),
            )
        )
    return RolloutPolicy(pools=tuple(pools))


def decode_policy_document(text: str, *, source: str = "<policy>") -> PostRenderPolicy:
    """``decode_policy`` without ``core.fleet.model``: the same checks and messages, into the
    values ``rewrite_manifests`` needs (the post-renderer process's start, #13)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PostRenderError(f"{source}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from e
    if not isinstance(data, Mapping) or data.get("format") != POLICY_FORMAT:
        raise PostRenderError(f"{source}: format: expected {POLICY_FORMAT!r}")
    raw_pools = data.get("pools")
    if not isinstance(raw_pools, list):
        raise PostRenderError(f"{source}: pools: expected a list")
    pools = [_decode_pool(entry, f"{source}: pools[{i}]") for i, entry in enumerate(raw_pools)]
    return PostRenderPolicy(pools=tuple(pools))


def _decode_pool(entry: Any, where: str) -> PostRenderPool:
    if not isinstance(entry, Mapping):
        raise PostRenderError(f"{where}: expected a mapping")

    def integer(key: str, *, required: bool) -> int | None:
        value = entry.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PostRenderError(f"{where}.{key}: expected a non-negative integer")
        return value

    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise PostRenderError(f"{where}.name: expected a non-empty string")
    percentage = integer("batchPercentage", required=True)
    if percentage is None or not 1 <= percentage <= 100:
        raise PostRenderError(f"{where}.batchPercentage: expected 1..100")
    interval = integer("batchIntervalSeconds", required=True)
    window = None
    raw_window = entry.get("maintenanceWindow")
    if raw_window is not None:
        if not isinstance(raw_window, Mapping) or not isinstance(raw_window.get("cron"), str):
            raise PostRenderError(f"{where}.maintenanceWindow.cron: expected a string")
        duration = raw_window.get("durationSeconds", 0)
        if not isinstance(duration, int):
            raise PostRenderError(f"{where}.maintenanceWindow.durationSeconds: expected an integer")
        window = PostRenderWindow(
            cron=raw_window["cron"],
            duration_seconds=duration,
            timezone=str(raw_window.get("timezone", "UTC")),
        )
    return PostRenderPool(
        name=name,
        batch_percentage=percentage,
        batch_interval_seconds=interval or 0,
        max_duration_seconds=integer("maxDurationSeconds", required=False),
        maintenance_window=window,
    )


class _Chunk(NamedTuple):
    number: int  # 0-based document number, for messages
    separator: str  # the "---..." line (with its newline) before the body, or ""
    body: str


def _split(text: str) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    position = 0
    separator = ""
    for match in _SEPARATOR.finditer(text):
        chunks.append(_Chunk(len(chunks), separator, text[position : match.start()]))
        end = match.end()
        if end < len(text) and text[end] == "\n":
            end += 1
        separator = text[match.start() : end]
        position = end
    chunks.append(_Chunk(len(chunks), separator, text[position:]))
    return chunks


def _yaml(style: tuple[int, int] = (2, 0)) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold long strings differently from what helm rendered
    sequence, offset = style
    yaml.indent(mapping=2, sequence=sequence, offset=offset)
    return yaml


class _Yamls:
    """The ruamel instances one ``rewrite_manifests`` call uses: one loader, one dumper per
    list style, each built on first use (not shared between calls, so between threads)."""

    def __init__(self) -> None:
        self._loader: YAML | None = None
        self._dumpers: dict[tuple[int, int], YAML] = {}

    def loader(self) -> YAML:
        if self._loader is None:
            self._loader = _yaml()
        return self._loader

    def dumper(self, style: tuple[int, int]) -> YAML:
        dumper = self._dumpers.get(style)
        if dumper is None:
            dumper = self._dumpers[style] = _yaml(style)
        return dumper


def _load(yamls: _Yamls, body: str, index: int) -> tuple[Any, tuple[int, int]]:
    """The document and its list style (sequence indent, dash offset), so the rewritten
    document keeps the chart's own ``- item`` indentation."""
    try:
        doc = yamls.loader().load(body)
    except YAMLError as e:
        raise PostRenderError(f"rendered document {index + 1}: invalid YAML: {e}") from e
    indent, dash = _guess_indent(body)
    style = (indent, dash) if dash and indent and indent > dash else (2, 0)
    return doc, style


def _guess_indent(text: str) -> tuple[int | None, int | None]:
    """(indent, block sequence indent) as ruamel's ``util.load_yaml_guess_indent`` guesses
    them, line for line (ruamel 0.19.1), without the second parse that function does."""

    def leading_spaces(line: str) -> int:
        idx = 0
        while idx < len(line) and line[idx] == " ":
            idx += 1
        return idx

    map_indent = None
    indent = None
    block_seq_indent = None
    prev_line_key_only = None
    key_indent = 0
    for line in text.splitlines():
        rline = line.rstrip()
        lline = rline.lstrip()
        if lline.startswith("- "):
            l_s = leading_spaces(line)
            block_seq_indent = l_s - key_indent
            idx = l_s + 1
            while line[idx] == " ":
                idx += 1
            if line[idx] == "#":  # comment after -
                continue
            indent = idx - key_indent
            break
        if map_indent is None and prev_line_key_only is not None and rline:
            idx = 0
            while line[idx] in " -":
                idx += 1
            if idx > prev_line_key_only:
                map_indent = idx - prev_line_key_only
        if rline.endswith(":"):
            key_indent = leading_spaces(line)
            idx = 0
            while line[idx] == " ":
                idx += 1
            prev_line_key_only = idx
            continue
        prev_line_key_only = None
    if indent is None and map_indent is not None:
        indent = map_indent
    return indent, block_seq_indent


def _dump(yamls: _Yamls, doc: Any, style: tuple[int, int], *, trailing_newline: bool) -> str:
    stream = _TextSink()
    yamls.dumper(style).dump(doc, stream)
    text = "".join(stream.parts)
    return text if trailing_newline else text.rstrip("\n")


class _TextSink:
    """A write-only text stream for ruamel's dumper (core does no I/O, so no io module)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str | bytes) -> None:
        # ruamel hands a stream without an ``encoding`` attribute UTF-8 bytes.
        self.parts.append(text.decode("utf-8") if isinstance(text, bytes) else text)


def _is_tfc(doc: Any) -> bool:
    if not isinstance(doc, Mapping) or doc.get("kind") != TFC_KIND:
        return False
    return str(doc.get("apiVersion", "")).split("/", 1)[0] == TFC_GROUP


def _rewrite_tfc(
    doc: Any, pools: Mapping[str, PoolPolicy | PostRenderPool], index: int
) -> list[str]:
    """Rewrite the policy of every pool in ``doc`` in place; returns the pool names."""
    spec = doc.get("spec")
    gpu_pools = spec.get("gpuPools") if isinstance(spec, Mapping) else None
    if gpu_pools is None:
        return []
    if not isinstance(gpu_pools, list):
        raise PostRenderError(f"rendered document {index + 1}: spec.gpuPools: expected a list")
    names: list[str] = []
    for i, pool in enumerate(gpu_pools):
        where = f"rendered document {index + 1}: spec.gpuPools[{i}]"
        if not isinstance(pool, dict):
            raise PostRenderError(f"{where}: expected a mapping")
        name = str(pool.get("name", ""))
        template = _child(pool, "specTemplate", where)
        manager = _child(template, "nodeManagerConfig", f"{where}.specTemplate")
        wanted = rolling_update_policy(pools.get(name))
        current = manager.get("nodePoolRollingUpdatePolicy")
        if not isinstance(current, dict):
            current = CommentedMap()
            manager["nodePoolRollingUpdatePolicy"] = current
        if name in pools:
            # Git owns the whole policy: drop what Git does not say (maxDuration, window).
            for key in [k for k in current if k not in wanted]:
                del current[key]
        current.update(wanted)
        names.append(name)
    return names


def _child(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if value is None:
        value = CommentedMap()
        parent[key] = value
    if not isinstance(value, dict):
        raise PostRenderError(f"{where}.{key}: expected a mapping")
    return value
