"""Custom resources checked against their CRD's structural openAPIV3Schema, as the real API
server does: defaults applied, unknown fields pruned (unless x-kubernetes-preserve-unknown-
fields), then types, required fields, enums, bounds and patterns validated. Failures are one
422 Invalid listing every bad field.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any

from gitopsbot.sandbox.apiserver.errors import Invalid

if TYPE_CHECKING:
    from gitopsbot.sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
_TOP = {"apiVersion", "kind", "metadata"}


def unknown_fields(obj: Obj, schema: Obj | None) -> list[str]:
    """Paths the schema would prune (what ``fieldValidation=Strict`` rejects)."""
    pruned: list[str] = []
    if schema:
        _check(copy.deepcopy(obj), schema, [], pruned)
    return pruned


def typed_patch_errors(applied: Obj, schema: Obj | None) -> list[str]:
    """Type mismatches and undeclared fields in a server-side apply configuration, as the real
    server finds them while building the typed patch (before validation or pruning):
    ``.spec.size: expected numeric (int or float), got string``, ``.spec.x: field not
    declared in schema``. It answers those with a 500 (no reason), not 422, and does not
    prune on apply as it does on create and update."""
    found: list[str] = []
    if schema:
        _typed({k: v for k, v in applied.items() if k not in _TOP}, schema, "", found)
    return found


_SMD_TYPES = {"integer": "numeric (int or float)", "number": "numeric (int or float)",
              "string": "string", "boolean": "bool", "object": "map", "array": "list"}  # fmt: skip


def _go_type(value: Any) -> str:
    """The Go type the real server names in the message."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    return "map[string]interface {}" if isinstance(value, dict) else "[]interface {}"


def _typed(value: Any, s: Obj, path: str, found: list[str]) -> None:
    if value is None:
        return  # null in an apply configuration clears the field: no type to check
    t = s.get("type")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if t in ("integer", "number") and numeric:
        return  # a float for an integer passes here; validation then refuses it (422)
    if not _type_ok(value, s):
        if t and not s.get("x-kubernetes-int-or-string"):
            found.append(f"{path}: expected {_SMD_TYPES.get(t, t)}, got {_go_type(value)}")
        return
    if isinstance(value, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        open_ = s.get("x-kubernetes-preserve-unknown-fields") or extra is True
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            if sub is not None:
                _typed(v, sub, f"{path}.{k}", found)
            elif not open_:
                found.append(f"{path}.{k}: field not declared in schema")
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for i, v in enumerate(value):
            _typed(v, s["items"], f"{path}[{i}]", found)


def validate_custom_resource(
    obj: Obj, schema: Obj | None, rt: ResourceType, old: Obj | None = None
) -> None:
    if not schema:
        return
    errors: list[tuple[str, str, str]] = []  # (reason, field, message)
    _check(obj, schema, errors, [])
    if old is not None:
        # Validation ratcheting (on by default since Kubernetes 1.30): an update may keep a
        # value that is invalid under the current schema if it does not change it, so a CRD
        # upgrade does not lock existing objects.
        errors = [e for e in errors if _at(obj, e[1]) != _at(old, e[1])]
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        text = ", ".join(m for _, _, m in errors)
        raise Invalid(
            f'{rt.kind}.{rt.group} "{name}" is invalid: {text}',
            kind=rt.kind,
            group=rt.group,
            name=name,
            causes=[(r, f, m.removeprefix(f + ": ")) for r, f, m in errors],
        )


def _check(obj: Obj, schema: Obj, errors: list[tuple[str, str, str]], pruned: list[str]) -> None:
    for k in list(obj):
        if k in _TOP:
            continue
        props = schema.get("properties") or {}
        if k in props:
            obj[k] = _walk(obj[k], props[k], k, errors, pruned)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            del obj[k]  # pruned, like the real server
            pruned.append(k)
    for k, sub in (schema.get("properties") or {}).items():
        if k not in obj and k not in _TOP and "default" in sub:
            obj[k] = sub["default"]
    for req in schema.get("required") or []:
        if req not in obj:
            errors.append(("FieldValueRequired", req, f"{req}: Required value"))


_MISSING = object()


def _at(obj: Any, path: str) -> Any:
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            i = int(part[1:-1])
            if not isinstance(obj, list) or i >= len(obj):
                return _MISSING
            obj = obj[i]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return _MISSING
    return obj


def _type_ok(value: Any, s: Obj) -> bool:
    t = s.get("type")
    if s.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    if t is None:
        return True
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    return True


def _walk(
    value: Any, s: Obj, path: str, errors: list[tuple[str, str, str]], pruned: list[str]
) -> Any:
    if value is None:
        if s.get("nullable"):
            return None
        errors.append(
            (
                "FieldValueTypeInvalid",
                path,
                f'{path}: Invalid value: "null": {path} in body must be of type '
                f"{s.get('type', 'object')}",
            )
        )
        return value
    if not _type_ok(value, s):
        errors.append(
            (
                "FieldValueTypeInvalid",
                path,
                f'{path}: Invalid value: "{_typename(value)}": {path} in body must be'
                f' of type {s.get("type")}: "{_typename(value)}"',
            )
        )
        return value
    if "enum" in s and value not in s["enum"]:
        allowed = ", ".join(f'"{e}"' for e in s["enum"])
        errors.append(
            (
                "FieldValueNotSupported",
                path,
                f'{path}: Unsupported value: "{value}": supported values: {allowed}',
            )
        )
    if isinstance(value, str):
        if "pattern" in s and not re.search(s["pattern"], value):
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f'{path}: Invalid value: "{value}": {path} in body should match '
                    f"'{s['pattern']}'",
                )
            )
        if "maxLength" in s and len(value) > s["maxLength"]:
            errors.append(("FieldValueTooLong", path, f"{path}: Too long"))
        if "minLength" in s and len(value) < s["minLength"]:
            errors.append(("FieldValueInvalid", path, f"{path}: Too short"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in s and value < s["minimum"]:
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f"{path}: Invalid value: {value}: {path} in body should be greater "
                    f"than or equal to {s['minimum']}",
                )
            )
        if "maximum" in s and value > s["maximum"]:
            errors.append(
                (
                    "FieldValueInvalid",
                    path,
                    f"{path}: Invalid value: {value}: {path} in body should be less "
                    f"than or equal to {s['maximum']}",
                )
            )
    if isinstance(value, dict):
        props = s.get("properties")
        extra = s.get("additionalProperties")
        preserve = s.get("x-kubernetes-preserve-unknown-fields")
        for k in list(value):
            if props and k in props:
                value[k] = _walk(value[k], props[k], f"{path}.{k}", errors, pruned)
            elif isinstance(extra, dict):
                value[k] = _walk(value[k], extra, f"{path}.{k}", errors, pruned)
            elif (props is not None and not preserve and extra is not True) or (
                props is None and extra is None and not preserve and s.get("type") == "object"
            ):
                del value[k]
                pruned.append(f"{path}.{k}")
        for k, sub in (props or {}).items():
            if k not in value and isinstance(sub, dict) and "default" in sub:
                value[k] = sub["default"]
        for req in s.get("required") or []:
            if req not in value:
                errors.append(
                    ("FieldValueRequired", f"{path}.{req}", f"{path}.{req}: Required value")
                )
    if isinstance(value, list):
        items = s.get("items")
        if isinstance(items, dict):
            value = [_walk(v, items, f"{path}[{i}]", errors, pruned) for i, v in enumerate(value)]
        if "maxItems" in s and len(value) > s["maxItems"]:
            errors.append(("FieldValueTooMany", path, f"{path}: Too many"))
        if "minItems" in s and len(value) < s["minItems"]:
            errors.append(("FieldValueInvalid", path, f"{path}: Too few"))
    return value


def _typename(value: Any) -> str:
    """The OpenAPI type the real server names in a validation message ("array", "object"):
    not ``core.fleet.fields.kind_of``'s YAML words ("list", "mapping") for a fleet file."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
