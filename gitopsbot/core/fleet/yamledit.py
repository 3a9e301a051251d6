"""Edit YAML text in memory, changing only the bytes that must change (str → str).

Used to bump ``release.yaml``'s ``chart.version`` and to set values such as
``cluster.hypervisorImage`` in ``values.yaml``. Comments, key order, quoting and every
untouched byte stay as they were:

* an existing plain or quoted scalar is replaced in place (its quote style kept);
* a missing key is inserted as a new line at the end of its (block) parent mapping, with the
  parent's indentation, creating missing intermediate mappings;
* anything else (anchors, block scalars, flow collections, replacing a whole collection) falls
  back to a ruamel.yaml round-trip dump, which keeps comments and key order but may re-indent.

Every result is parsed again and checked to hold the new value before it is returned.
Paths use the ``core.fleet.secrets.split_path`` syntax (``a.b[0]["c.d"]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gitopsbot.core.fleet.secrets import join_path, split_path

_MISSING = object()


class YamlEditError(ValueError):
    """The edit cannot be made (malformed text, a path through a scalar, a list too short)."""


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _lookup(data: Any, parts: tuple[str | int, ...]) -> Any:
    node = data
    for part in parts:
        in_map = isinstance(node, Mapping) and not isinstance(part, int) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_map or in_list):
            return _MISSING
        node = node[part]
    return node


def _load(text: str) -> Any:
    try:
        return YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise YamlEditError(f"cannot parse the document: {type(exc).__name__}") from None


def get_value(text: str, path: str) -> Any:
    """The plain value at ``path``; KeyError when absent."""
    found = _lookup(_load(text), split_path(path))
    if found is _MISSING:
        raise KeyError(path)
    return _plain(found)


def _plain_scalar_ok(text: str) -> bool:
    """Would ``text`` survive as an unquoted scalar (same string back, nothing swallowed)?"""
    if not text or text != text.strip() or "\n" in text or "#" in text:
        return False
    try:
        return bool(YAML(typ="safe").load(f"k: {text}\n") == {"k": text})
    except YAMLError:
        return False


def _render_key(key: str) -> str:
    return key if _plain_scalar_ok(key) else json.dumps(key, ensure_ascii=False)


def render_scalar(value: Any, style: str | None = None) -> str:
    """YAML text for one value on one line; ``style`` is the quote style to keep, if any."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        if style == "'" and "\n" not in value:
            return "'" + value.replace("'", "''") + "'"
        if style != '"' and _plain_scalar_ok(value):
            return value
        # YAML reads NEL and the Unicode line/paragraph separators as line breaks: escape them.
        odd = any(c in value for c in "\x85\u2028\u2029\ufeff")
        return json.dumps(value, ensure_ascii=odd)
    # Collections: JSON is valid YAML flow style.
    return json.dumps(_plain(value), ensure_ascii=False)


def _key_node(mapping: MappingNode, key: str) -> tuple[Node, Node] | None:
    for key_node, value_node in mapping.value:
        if isinstance(key_node, ScalarNode) and str(key_node.value) == key:
            return key_node, value_node
    return None


def _last_leaf(node: Node) -> Node:
    while isinstance(node, MappingNode | SequenceNode) and node.value and not node.flow_style:
        last = node.value[-1]
        node = last[1] if isinstance(node, MappingNode) else last
    return node


def _surgical(text: str, parts: tuple[str | int, ...], value: Any) -> str | None:
    """The in-place edit, or None when only a round-trip dump can do it."""
    root = YAML(typ="rt").compose(text)
    newline = "\r\n" if "\r\n" in text else "\n"
    if root is None:
        if any(isinstance(p, int) for p in parts):
            return None
        prefix = text if not text or text.endswith("\n") else text + newline
        return prefix + _block(parts, value, 0, newline)
    node: Node = root
    for i, part in enumerate(parts):
        if isinstance(part, int):
            if not isinstance(node, SequenceNode) or not 0 <= part < len(node.value):
                raise YamlEditError(f"{join_path(parts[: i + 1])}: no such list item")
            node = node.value[part]
            continue
        if not isinstance(node, MappingNode):
            raise YamlEditError(f"{join_path(parts[:i]) or 'document'} is not a mapping")
        pair = _key_node(node, part)
        if pair is None:
            return _insert(text, node, parts[i:], value, newline)
        node = pair[1]
    return _replace(text, node, value)


def _replace(text: str, node: Node, value: Any) -> str | None:
    if not isinstance(node, ScalarNode) or getattr(node, "anchor", None) is not None:
        return None
    start, end = node.start_mark.index, node.end_mark.index
    current = text[start:end]
    style = node.style
    if style is None:
        if current != node.value:  # a tag, or a multi-line plain scalar
            return None
    elif style in ("'", '"'):
        if not (current.startswith(style) and current.endswith(style)) or "\n" in current:
            return None
    else:  # block scalars: | and >
        return None
    if isinstance(value, Mapping | list | tuple):
        return None
    keep = style if isinstance(value, str) else None
    return text[:start] + render_scalar(value, keep) + text[end:]


def _block(parts: tuple[str | int, ...], value: Any, indent: int, newline: str) -> str:
    lines: list[str] = []
    for depth, part in enumerate(parts[:-1]):
        lines.append(" " * (indent + 2 * depth) + _render_key(str(part)) + ":")
    depth = len(parts) - 1
    lines.append(
        " " * (indent + 2 * depth) + _render_key(str(parts[-1])) + ": " + render_scalar(value)
    )
    return newline.join(lines) + newline


def _insert(
    text: str, mapping: MappingNode, parts: tuple[str | int, ...], value: Any, newline: str
) -> str | None:
    if mapping.flow_style or not mapping.value or any(isinstance(p, int) for p in parts):
        return None
    indent = mapping.value[0][0].start_mark.column
    leaf = _last_leaf(mapping)
    pos = leaf.end_mark.index
    if not (pos > 0 and text[pos - 1] == "\n"):
        eol = text.find("\n", pos)
        if eol == -1:
            text = text + newline
            pos = len(text)
        else:
            pos = eol + 1
    return text[:pos] + _block(parts, value, indent, newline) + text[pos:]


class _Sink:
    """A write-only text stream for ruamel's dump (core holds no io objects)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, data: str | bytes) -> None:
        self.parts.append(data.decode("utf-8") if isinstance(data, bytes) else data)


def _roundtrip(text: str, parts: tuple[str | int, ...], value: Any) -> str:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    data = _load(text)
    if data is None:
        data = CommentedMap()
    node = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(node, CommentedMap) and not isinstance(part, int):
            if part not in node or not isinstance(node[part], CommentedMap | CommentedSeq):
                node[part] = CommentedMap()
            node = node[part]
        else:
            raise YamlEditError(f"cannot set {join_path(parts)} at {join_path(parts[: i + 1])}")
    last = parts[-1]
    in_list = isinstance(node, CommentedSeq) and isinstance(last, int) and 0 <= last < len(node)
    if not (in_list or (isinstance(node, CommentedMap) and not isinstance(last, int))):
        raise YamlEditError(f"cannot set {join_path(parts)}")
    node[last] = value
    sink = _Sink()
    yaml.dump(data, sink)
    return "".join(sink.parts)


def set_value(text: str, path: str, value: Any) -> str:
    """``text`` with ``path`` set to ``value``, everything else kept (see the module doc)."""
    try:
        parts = split_path(path)
    except ValueError as exc:
        raise YamlEditError(str(exc)) from None
    _load(text)  # a malformed document is refused before any edit
    edited = _surgical(text, parts, value)
    if edited is not None:
        try:
            if _plain(_lookup(_load(edited), parts)) == _plain(value):
                return edited
        except YamlEditError:
            pass
    result = _roundtrip(text, parts, value)
    if _plain(_lookup(_load(result), parts)) != _plain(value):
        raise YamlEditError(f"could not set {path}")
    return result


def set_values(text: str, changes: Mapping[str, Any]) -> str:
    """Apply several ``set_value`` edits in order."""
    for path, value in changes.items():
        text = set_value(text, path, value)
    return text
