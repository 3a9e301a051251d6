"""Rule documents (``policies/*.yaml``, the built-in ones and a fleet's own) parsed into
``Rule`` values, every problem located by file, line, column and field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.located_yaml import LocatedList, LocatedMap
from gitopsbot.core.policy.checks import CHECKS, OPS, PARAMS, suggest
from gitopsbot.core.policy.verdicts import NAME_FORMAT, Rule, Severity, rule_doc
from gitopsbot.errors import FleetError, Problem

_RULE_KEYS = (
    "id", "name", "description", "severity", "enforces", "check", "environments", "link",
)  # fmt: skip


BUILTIN_SOURCE = "<builtin>/"  # the built-in documents' labels (adapters.builtin_policies)


def parse_rules(text: str, *, source: str) -> tuple[Rule, ...]:
    """Parse one rule document. Raises FleetError naming file, line and field."""
    doc = located_yaml.load(text, source, located=True)  # FleetError: located, bounded
    problems: list[Problem] = []
    rules: list[Rule] = []

    def at(node: Any, key: Any = None) -> tuple[int, int]:
        if isinstance(node, LocatedMap):
            return node.key_pos.get(key, node.pos)
        if isinstance(node, LocatedList):
            ok = isinstance(key, int) and 0 <= key < len(node)
            return node.item_pos[key] if ok else node.pos
        return 0, 0

    if doc is None:
        return ()
    if isinstance(doc, list):
        doc = {"rules": doc}  # a bare list of rules is accepted too
    if not isinstance(doc, Mapping) or not isinstance(doc.get("rules"), list):
        raise FleetError([Problem(source, 1, 1, "rules", "expected a mapping with a 'rules' list")])
    for key in doc:
        if key != "rules":
            line, col = at(doc, key)
            problems.append(Problem(source, line, col, str(key), "unknown key", "known: rules"))
    for i, raw in enumerate(doc["rules"]):
        where = f"rules[{i}]"
        line, col = at(doc["rules"], i)
        if not isinstance(raw, Mapping):
            problems.append(Problem(source, line, col, where, "expected a mapping"))
            continue
        bad = False
        for key in raw:
            if key not in _RULE_KEYS:
                kl, kc = at(raw, key)
                problems.append(
                    Problem(
                        source,
                        kl,
                        kc,
                        f"{where}.{key}",
                        "unknown key",
                        suggest(str(key), _RULE_KEYS),
                    )
                )
                bad = True
        for req in ("id", "severity", "check"):
            if req not in raw:
                problems.append(Problem(source, line, col, f"{where}.{req}", "missing"))
                bad = True
        name = raw.get("name", "")
        if name != "" and (not isinstance(name, str) or not NAME_FORMAT.match(name)):
            nl, nc = at(raw, "name")
            problems.append(
                Problem(
                    source, nl, nc, f"{where}.name",
                    f"{name!r} is not a short name",
                    "lower-case words joined by '-', e.g. controller-ha-replicas",
                )
            )  # fmt: skip
            bad = True
        if bad:
            continue
        sev = str(raw["severity"])
        if sev not in {s.value for s in Severity}:
            sl, sc = at(raw, "severity")
            problems.append(
                Problem(
                    source,
                    sl,
                    sc,
                    f"{where}.severity",
                    f"unknown severity {sev!r}",
                    suggest(sev, [s.value for s in Severity]),
                )
            )
            continue
        check = raw["check"]
        cl, cc = at(raw, "check")
        if not isinstance(check, Mapping) or "kind" not in check:
            problems.append(
                Problem(source, cl, cc, f"{where}.check", "expected a mapping with 'kind'")
            )
            continue
        kind = str(check["kind"])
        if kind not in CHECKS:
            kl, kc = at(check, "kind")
            problems.append(
                Problem(
                    source,
                    kl,
                    kc,
                    f"{where}.check.kind",
                    f"unknown check kind {kind!r}",
                    suggest(kind, list(CHECKS)),
                )
            )
            continue
        params = {str(k): _plain(v) for k, v in check.items() if k != "kind"}
        allowed = PARAMS.get(kind, frozenset())
        for key in params:
            if key not in allowed:
                kl, kc = at(check, key)
                hint = suggest(key, sorted(allowed)) if allowed else f"{kind} takes no parameters"
                problems.append(
                    Problem(source, kl, kc, f"{where}.check.{key}", "unknown parameter", hint)
                )
                bad = True
        if kind == "path":
            for req in ("path", "op"):
                if req not in params:
                    problems.append(Problem(source, cl, cc, f"{where}.check.{req}", "missing"))
                    bad = True
            if params.get("op") is not None and params.get("op") not in OPS:
                ol, oc = at(check, "op")
                problems.append(
                    Problem(
                        source,
                        ol,
                        oc,
                        f"{where}.check.op",
                        f"unknown op {params['op']!r}",
                        suggest(str(params["op"]), list(OPS)),
                    )
                )
                bad = True
        if bad:
            continue
        envs = raw.get("environments") or []
        rules.append(
            Rule(
                id=str(raw["id"]),
                description=str(raw.get("description", "")).strip(),
                severity=Severity(sev),
                kind=kind,
                params=params,
                procedure=str(raw.get("enforces", "")),
                environments=tuple(str(e) for e in envs),
                link=str(raw.get("link", "")),
                source=f"{source}:{line}",
                name=str(name),
                doc=rule_doc(str(raw["id"]), str(name))
                if source.startswith(BUILTIN_SOURCE)
                else "",
            )
        )
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            problems.append(
                Problem(
                    source,
                    int(r.source.rsplit(":", 1)[1]),
                    0,
                    "id",
                    f"duplicate rule id {r.id!r} (first at {seen[r.id]})",
                )
            )
        seen[r.id] = r.source
    if problems:
        raise FleetError(problems)
    return tuple(rules)


def _plain(value: Any) -> Any:
    """ruamel round-trip nodes → plain Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def load_rules(documents: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> tuple[Rule, ...]:
    """Rules from several documents (built-in first, then the fleet's own); ids are unique."""
    rules: list[Rule] = []
    problems: list[Problem] = []
    for path, text in documents:
        try:
            rules.extend(parse_rules(text, source=path))
        except FleetError as exc:
            problems.extend(exc.problems)
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen and seen[r.id] != r.source:
            file, _, line = r.source.rpartition(":")
            problems.append(
                Problem(
                    file,
                    int(line or 0),
                    0,
                    "id",
                    f"rule id {r.id!r} is already defined at {seen[r.id]}",
                )
            )
        seen.setdefault(r.id, r.source)
    if problems:
        raise FleetError(problems)
    return tuple(rules)
