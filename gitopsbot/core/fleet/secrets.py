"""Which Helm values are secret, and what the bot does with them: mask, refuse, merge.

Secret material never sits in a fleet repository: values.yaml leaves a secret empty (or a
placeholder) and ``credentials.yaml`` says where it comes from. The bot masks secret paths in
every diff it shows, refuses a secret-looking literal in values.yaml, and merges the real
values only at apply time (``merge_secrets``), in memory, right before ``helm upgrade``.

Values paths are dotted (``agent.enrollToken``); list items are ``[n]``
(``dynamicConfig.alertRules[0].name``); a key containing ``.`` or ``[`` is written
``["nvidia.com/gpu"]``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"

# The chart's own secret inputs (tensorfusion-facts §1.5): the cluster-agent enroll token, the
# GreptimeDB cloud password, the cloud vendor access/secret keys. ``agent.agentId`` is an
# identifier, not a credential, so it is not on this list; a team may declare it.
BUILTIN_SECRET_PATHS: tuple[str, ...] = (
    "agent.enrollToken",
    "greptime.password",
    "cloudVendorCredentials.accessKey",
    "cloudVendorCredentials.secretKey",
)

# A key that names secret material. Matched on the last path segment, case-insensitively.
_SECRET_KEY = re.compile(
    r"(password|passwd|passphrase|secret|token|api[-_]?key|private[-_]?key|access[-_]?key"
    r"|credential|auth[-_]?key|^ak$|^sk$)",
    re.IGNORECASE,
)
# ...unless it names *where* a secret is, or a setting about it (``secretName``,
# ``tokenFile``, ``existingSecretRef``, ``passwordEnabled``): those are safe to show.
_NOT_SECRET_SUFFIX = re.compile(
    r"(name|names|ref|file|path|dir|mount|mountpath|enabled|enable|url|endpoint|namespace"
    r"|type|ttl|header|policy|selector|template|source|provider)$",
    re.IGNORECASE,
)
# Values that are secret whatever their key: well-known token shapes. Deliberately specific
# (no entropy guessing): image digests and hashes in values must not trip it.
_TOKEN_SHAPES = re.compile(
    r"^(gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab personal access token
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # JWT
    r"|sk-[A-Za-z0-9]{20,})$"  # common API secret keys
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----",
)
# Literals that stand for "no secret here": allowed under a secret key.
_PLACEHOLDERS = frozenset(
    {
        "",
        "dummy",
        "changeme",
        "change-me",
        "placeholder",
        "redacted",
        "replace-me",
        "replace_me",
        "todo",
        "none",
        "null",
        "-",
        MASK,
    }
)
_PLACEHOLDER_SHAPES = re.compile(r"^(<[^<>]*>|\$\{[^{}]*\}|\*+|x+)$", re.IGNORECASE)

_SEGMENT = re.compile(r'\.?(?:\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|([^.\[\]]+))')


def split_path(path: str) -> tuple[str | int, ...]:
    """``a.b[0]["c.d"]`` → ``("a", "b", 0, "c.d")``. Raises ValueError on a malformed path."""
    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if m is None or m.end() == pos or (pos == 0 and path.startswith(".")):
            raise ValueError(f"malformed values path {path!r}")
        quoted, index, plain = m.groups()
        if quoted is not None:
            parts.append(json.loads(f'"{quoted}"'))
        elif index is not None:
            parts.append(int(index))
        else:
            parts.append(plain)
        pos = m.end()
    if not parts:
        raise ValueError("empty values path")
    return tuple(parts)


def join_path(parts: Iterable[str | int]) -> str:
    """Inverse of ``split_path``."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif "." in part or "[" in part or "]" in part or '"' in part or not part:
            out.append(f"[{json.dumps(part)}]")
        else:
            out.append(f".{part}" if out else part)
    return "".join(out)


# Pure function of a short string, called once per values key on every plan; the set of key
# names in a chart is small, so a bounded cache turns two regex searches into a dict lookup.
@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Does this mapping key name secret material (``password``, ``secretKey``, ``sk``...)?"""
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET_SUFFIX.search(key)


def is_placeholder(value: object) -> bool:
    """An empty or obviously fake literal: allowed where a secret belongs."""
    if value is None:
        return True
    if isinstance(value, str):
        text = value.strip()
        return text.lower() in _PLACEHOLDERS or bool(_PLACEHOLDER_SHAPES.match(text))
    return False


def looks_like_token(value: object) -> bool:
    """A string shaped like a well-known credential, whatever key it sits under."""
    return isinstance(value, str) and bool(_TOKEN_SHAPES.search(value.strip()))


def under_declared(path: tuple[str | int, ...], declared: Iterable[tuple[str | int, ...]]) -> bool:
    """Is ``path`` one of the ``declared`` secret paths or under one?"""
    return any(path[: len(d)] == d for d in declared)


def declared_paths(extra_paths: Iterable[str]) -> tuple[tuple[str | int, ...], ...]:
    """The built-in secret paths and the team's ``extra_paths``, split (a malformed one
    skipped)."""
    out = [split_path(p) for p in BUILTIN_SECRET_PATHS]
    for p in extra_paths:
        try:
            out.append(split_path(p))
        except ValueError:
            continue  # the loader reports malformed declared paths with their location
    return tuple(out)


def is_secret_path(path: str, extra_paths: Iterable[str] = ()) -> bool:
    """Is the value at ``path`` secret: a built-in or declared path (or under one), or a
    secret-looking key anywhere along it?"""
    parts = split_path(path)
    if under_declared(parts, declared_paths(extra_paths)):
        return True
    return any(isinstance(p, str) and is_secret_key(p) for p in parts)


def _walk(
    node: Any, path: tuple[str | int, ...], inherited: bool
) -> Iterator[tuple[tuple[str | int, ...], Any, bool]]:
    """Yield (path, scalar, under a secret key) for every leaf."""
    if isinstance(node, Mapping):
        for key, child in node.items():
            k = str(key)
            yield from _walk(child, (*path, k), inherited or is_secret_key(k))
    elif isinstance(node, list | tuple):
        for i, child in enumerate(node):
            yield from _walk(child, (*path, i), inherited)
    else:
        yield path, node, inherited


def _secret_leaves(
    values: Mapping[str, Any], extra_paths: Iterable[str]
) -> Iterator[tuple[tuple[str | int, ...], Any, bool]]:
    """Yield (path, leaf, declared) for every secret leaf; ``declared`` means a built-in or
    team-declared path rather than a secret-looking key or a token shape."""
    declared = declared_paths(extra_paths)
    for path, leaf, under_key in _walk(values, (), False):
        is_declared = under_declared(path, declared)
        if under_key or is_declared or looks_like_token(leaf):
            yield path, leaf, is_declared


def find_secret_literals(values: Mapping[str, Any], extra_paths: Iterable[str] = ()) -> list[str]:
    """Paths in ``values`` holding a secret-looking literal, in document order.

    A string counts when it sits at a secret path (secret-looking key, built-in or declared
    path) and is not empty or a placeholder, or when it has the shape of a well-known token
    anywhere. Numbers count only at built-in or declared paths (``maxTokens: 4096`` is a
    count, not a token); booleans never count. Used by the loader and by
    ``gitopsbot validate``; the returned paths never include the value itself.
    """
    found: list[str] = []
    for path, leaf, is_declared in _secret_leaves(values, extra_paths):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, str):
            if looks_like_token(leaf) or not is_placeholder(leaf):
                found.append(join_path(path))
        elif isinstance(leaf, int | float) and is_declared:
            found.append(join_path(path))
    return found


def secret_strings(values: Mapping[str, Any], extra_paths: Iterable[str] = ()) -> list[str]:
    """The secret material in ``values``, as text to mask in free text (helm's stderr),
    longest first: every string at a secret path (secret-looking key, built-in or declared
    path) that is not empty or a placeholder, every string shaped like a well-known token,
    and numbers at built-in or declared paths. Nothing else: the other values stay readable
    in messages."""
    found: set[str] = set()
    for _path, leaf, is_declared in _secret_leaves(values, extra_paths):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, str):
            if looks_like_token(leaf) or not is_placeholder(leaf):
                found.add(leaf)
        elif isinstance(leaf, int | float) and is_declared:
            found.add(str(leaf))
    return sorted(found, key=len, reverse=True)


def mask(values: Mapping[str, Any], extra_paths: Iterable[str] = ()) -> dict[str, Any]:
    """A deep copy of ``values`` with every non-empty secret leaf replaced by ``***``."""
    out: dict[str, Any] = copy.deepcopy(dict(values))
    for path, leaf, is_declared in list(_secret_leaves(out, extra_paths)):
        if leaf is None or leaf == "" or isinstance(leaf, bool):
            continue
        if not isinstance(leaf, str) and not is_declared:
            continue
        _assign(out, path, MASK)
    return out


def _assign(root: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = root
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, dict):
            child = node.get(part)
            if not isinstance(child, dict | list):
                child = [] if isinstance(nxt, int) else {}
                node[part] = child
            node = child
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            if not isinstance(node[part], dict | list):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
        else:
            raise ValueError(
                f"cannot set {join_path(path)}: {join_path(path[: i + 1])} is no mapping"
            )
    last = path[-1]
    in_list = isinstance(node, list) and isinstance(last, int) and last < len(node)
    if not (isinstance(node, dict) or in_list):
        raise ValueError(f"cannot set {join_path(path)}")
    node[last] = value


def merge_secrets(values: Mapping[str, Any], resolved: Mapping[str, str]) -> dict[str, Any]:
    """A deep copy of ``values`` with each resolved secret set at its path (apply time only).

    Missing intermediate mappings are created. The result holds secret material: hand it to
    Helm on its standard input, never to a file, a log, a commit or a message.
    """
    out: dict[str, Any] = copy.deepcopy(dict(values))
    for path, secret in resolved.items():
        _assign(out, split_path(path), secret)
    return out
