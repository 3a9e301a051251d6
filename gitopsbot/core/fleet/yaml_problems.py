"""What is wrong with a YAML file before it is parsed, or as libyaml refuses it, as located
``Problem``s: too large, binary, not UTF-8, malformed (libyaml's short reason, never the
offending line: it may hold a secret). Pure; used by ``core.fleet.located_yaml``."""

from __future__ import annotations

import yaml

from gitopsbot.core.fleet.yaml_bounds import DEFAULT_LIMITS, Position, YamlLimits
from gitopsbot.errors import Problem


def too_large(file: str, size: int, limits: YamlLimits) -> Problem:
    """The problem of a file over ``limits.max_bytes``."""
    return Problem(
        file,
        0,
        0,
        "",
        f"{size} bytes: larger than the {limits.max_bytes} bytes a file may have",
        "limits.maxBytes in gitopsbot.yaml",
    )


def size_problem(text: str, file: str, limits: YamlLimits) -> Problem | None:
    size = len(text)
    if size <= limits.max_bytes < size * 4:
        size = len(text.encode("utf-8", "surrogatepass"))
    return too_large(file, size, limits) if size > limits.max_bytes else None


def line_col(data: bytes | str, index: int) -> Position:
    head = data[:index]
    if isinstance(head, bytes):
        return head.count(b"\n") + 1, index - (head.rfind(b"\n") + 1) + 1
    return head.count("\n") + 1, index - (head.rfind("\n") + 1) + 1


def decode(data: bytes, file: str) -> tuple[str | None, list[Problem]]:
    """UTF-8 text (a BOM allowed), or None and why not: binary, UTF-16, bad bytes (located)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None, [Problem(file, 1, 1, "", "not UTF-8 text (a UTF-16 byte order mark)")]
    nul = data.find(b"\0")
    if nul >= 0:
        line, column = line_col(data, nul)
        return None, [Problem(file, line, column, "", "a binary file, not YAML text (a NUL byte)")]
    try:
        return data.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        line, column = line_col(data, exc.start)
        return None, [Problem(file, line, column, "", "not UTF-8 text")]


def syntax_problem(
    exc: yaml.YAMLError, text: str, file: str, limits: YamlLimits = DEFAULT_LIMITS
) -> Problem:
    """libyaml's short reason and position; never the offending line (it may be a secret)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        end = line_col(text, len(text))
        if line > end[0] and not text.endswith("\n"):  # libyaml's end of stream: past the text
            line, col = end
        what = (exc.problem or exc.context or "cannot parse").strip()
        if what == "exceeded maximum nesting depth":  # libyaml's own bound: 1000 levels
            return Problem(
                file,
                line,
                col,
                "",
                f"nested deeper than {limits.max_depth} levels",
                "limits.maxDepth in gitopsbot.yaml",
            )
        return Problem(file, line, col, "", f"malformed YAML: {what[:200]}")
    if isinstance(exc, yaml.reader.ReaderError):
        line, col = line_col(text, exc.position)
        return Problem(file, line, col, "", f"malformed YAML: {exc.reason}")
    return Problem(file, 0, 0, "", f"malformed YAML: {type(exc).__name__}")
