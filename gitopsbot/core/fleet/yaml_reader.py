"""The located YAML reader of the fleet files: one document, with line and column kept;
malformed YAML and duplicate keys become located problems."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

from gitopsbot.core.fleet.fields import join
from gitopsbot.errors import Problem

# -- YAML --------------------------------------------------------------------------------------


def duplicate_keys(node: Node | None, path: str = "") -> Iterator[tuple[Node, str, int]]:
    """(second key node, dotted path, first line) for every duplicate key under ``node``."""
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key != "<<":
                if key in seen:
                    yield key_node, join(path, key), seen[key]
                else:
                    seen[key] = key_node.start_mark.line + 1
            yield from duplicate_keys(value_node, join(path, key))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from duplicate_keys(item, f"{path}[{i}]")


def load_yaml(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Round-trip load one document. Messages carry the location and ruamel's short problem
    text, never the offending source line (it may hold a secret)."""
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text), []
    except DuplicateKeyError:
        problems = [
            Problem(
                file,
                key_node.start_mark.line + 1,
                key_node.start_mark.column + 1,
                key,
                "duplicate key",
                f"first defined at line {first}",
            )
            for key_node, key, first in duplicate_keys(YAML(typ="rt").compose(text))
        ]
        return None, problems or [Problem(file, 0, 0, "", "duplicate key")]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        what = (exc.problem or exc.context or "cannot parse").strip()
        return None, [Problem(file, line, col, "", f"malformed YAML: {what[:200]}")]
    except YAMLError as exc:  # unmarked: no location to give
        return None, [Problem(file, 0, 0, "", f"malformed YAML: {type(exc).__name__}")]
