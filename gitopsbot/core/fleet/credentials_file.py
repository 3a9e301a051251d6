"""``clusters/<name>/credentials.yaml`` and the secret references it shares with
gitopsbot.yaml (kubernetesSecret, file, env)."""

from __future__ import annotations

from typing import Any

from gitopsbot.core.fleet import secrets
from gitopsbot.core.fleet.fields import DNS_LABEL, ENV_VAR, FieldReader, join
from gitopsbot.core.fleet.located_yaml import LocatedMap
from gitopsbot.core.fleet.model import (
    CredentialsSpec,
    Location,
    SecretRef,
)

_SECRET_REF_KEYS = ("kubernetesSecret", "file", "env")
_K8S_SECRET_KEYS = ("name", "key", "namespace")


def secret_ref(
    r: FieldReader, node: Any, fld: str, at: tuple[int, int], values_path: str
) -> SecretRef | None:
    ref = r.mapping(node, fld, at, _SECRET_REF_KEYS)
    if ref is None:
        return None
    given = [k for k in _SECRET_REF_KEYS if k in ref]
    if len(given) != 1:
        r.add(at, fld, "give exactly one source", "one of kubernetesSecret, file, env")
        return None
    source = given[0]
    if source == "env":
        name = r.string(
            ref, "env", fld, required=True, pattern=ENV_VAR, what="environment variable name"
        )
        return SecretRef(values_path, "env", name) if name else None
    if source == "file":
        path = r.string(ref, "file", fld, required=True)
        return SecretRef(values_path, "file", path) if path else None
    sub_fld = join(fld, "kubernetesSecret")
    sub = r.mapping(
        ref["kubernetesSecret"], sub_fld, r.value_at(ref, "kubernetesSecret"), _K8S_SECRET_KEYS
    )
    if sub is None:
        return None
    name = r.string(sub, "name", sub_fld, required=True)
    key = r.string(sub, "key", sub_fld, required=True)
    namespace = r.string(sub, "namespace", sub_fld, pattern=DNS_LABEL, what="namespace")
    if not (name and key):
        return None
    return SecretRef(values_path, "kubernetes-secret", name, key=key, namespace=namespace)


def setting_ref(
    r: FieldReader,
    node: LocatedMap,
    key: str,
    fld: str,
    *,
    plain: str = "",
    local: tuple[str, str] | None = None,
    hint: str = "",
) -> SecretRef | None:
    """The secret reference a bot setting holds under ``key`` (None when absent or wrong),
    named in messages by where it is written (``gitopsbot.yaml:7: forge.token``): it fills
    no Helm value. ``plain``: the problem a plain string is (with ``hint``), for a value
    that must not be written in the file; ``local``: the problem and hint a
    ``kubernetesSecret:`` is, for a value the bot needs before it reaches any cluster."""
    if node.get(key) is None:
        return None
    at = r.value_at(node, key)
    if plain and isinstance(node[key], str):
        r.add(at, fld, plain, hint)
        return None
    ref = secret_ref(r, node[key], fld, at, f"{r.file}:{at[0]}: {fld}")
    if ref is not None and local is not None and ref.source == "kubernetes-secret":
        r.add(at, fld, *local)
        return None
    return ref


# -- clusters/<name>/credentials.yaml -----------------------------------------------------------

_CREDENTIALS_KEYS = ("agentReconnectTimeout", "rotation", "secretPaths", "secrets")


def read_credentials(
    r: FieldReader, doc: Any, locations: dict[str, Location] | None = None
) -> CredentialsSpec:
    """``locations`` gets "credentials.yaml:rotation" and "credentials.yaml:secrets.<path>"
    (where a rotation's cause is written, for its verdicts)."""
    top = r.document(doc, _CREDENTIALS_KEYS)
    if top is None:
        return CredentialsSpec()
    if locations is not None and "rotation" in top:
        locations["credentials.yaml:rotation"] = r.loc(r.key_at(top, "rotation"))
    declared, declared_at = r.string_list(top, "secretPaths", "", ())
    good_paths: list[str] = []
    for i, (path, at) in enumerate(zip(declared, declared_at, strict=True)):
        try:
            secrets.split_path(path)
        except ValueError:
            r.add(
                at,
                f"secretPaths[{i}]",
                f"'{path}' is not a values path",
                "dotted, e.g. agent.agentId",
            )
            continue
        good_paths.append(path)
    refs: list[SecretRef] = []
    if top.get("secrets") is not None:
        node = r.mapping(top["secrets"], "secrets", r.value_at(top, "secrets"))
        for path, ref_node in (node or {}).items():
            fld = join("secrets", path)
            try:
                secrets.split_path(str(path))
            except ValueError:
                r.add(
                    r.key_at(node, path), fld, "not a values path", "dotted, e.g. agent.enrollToken"
                )
                continue
            ref = secret_ref(r, ref_node, fld, r.value_at(node, path), str(path))
            if ref is not None:
                refs.append(ref)
                if locations is not None:
                    locations[f"credentials.yaml:{fld}"] = r.loc(r.key_at(node, path))
    return CredentialsSpec(
        secrets=tuple(refs),
        rotation=r.integer(top, "rotation", "", 0, low=0),
        secret_paths=tuple(good_paths),
        agent_reconnect_timeout_seconds=r.duration(
            top, "agentReconnectTimeout", "", 600, minimum=30
        ),
    )
