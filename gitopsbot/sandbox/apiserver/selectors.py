"""Label and field selectors in the Kubernetes string syntax."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gitopsbot.sandbox.apiserver.errors import BadRequest

_REQ = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<val>\([^)]*\)|[^,\s]*))?\s*$"
)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op == "=":
            return has and value == self.values[0]
        if self.op == "!=":
            return value != self.values[0]
        if self.op == "in":
            return has and value in self.values
        return value not in self.values  # notin


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str) -> LabelSelector:
    reqs = []
    for part in _split_top(text):
        m = _REQ.match(part)
        if not m:
            raise BadRequest(f"unable to parse requirement: {part!r}")
        key, op, val = m["key"], (m["op"] or "").strip(), m["val"]
        if not op:
            reqs.append(Requirement(key, "!exists" if m["neg"] else "exists", ()))
            continue
        if m["neg"]:
            raise BadRequest(f"unable to parse requirement: {part!r}")
        if op in ("in", "notin"):
            if not val or not val.startswith("("):
                raise BadRequest(f"unable to parse requirement: {part!r}: expected (values)")
            values = tuple(v.strip() for v in val[1:-1].split(",") if v.strip())
            reqs.append(Requirement(key, op, values))
        else:
            reqs.append(Requirement(key, "=" if op in ("=", "==") else "!=", (val or "",)))
    return LabelSelector(tuple(reqs))


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """Equality on dotted paths (metadata.name, metadata.namespace, status.phase, spec.nodeName…).

    A real server allows only a few fields per kind; here any path works.
    """

    terms: tuple[tuple[str, bool, str], ...]  # (path, equal, value)

    def matches(self, obj: dict[str, Any]) -> bool:
        return all((_field(obj, p) == v) == eq for p, eq, v in self.terms)


def parse_field_selector(text: str) -> FieldSelector:
    terms = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise BadRequest(f"invalid field selector: {part!r}")
        terms.append((m[1], m[2] != "!=", m[3]))
    return FieldSelector(tuple(terms))
