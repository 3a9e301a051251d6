"""Decode the protobuf request bodies client-go's typed clientset sends.

client-go writes ``k8s\\0`` + ``runtime.Unknown`` (TypeMeta, raw bytes) where the raw bytes are
the object's message. Helm stores releases as Secrets/ConfigMaps this way, and kubectl's
imperative ``create namespace|deployment|serviceaccount|job`` send their objects this way too:
client-go has no JSON fallback for request bodies (a 415 just fails the command), so the
emulator decodes them. Only the fields those kinds (and what they nest: pod templates,
containers, selectors) carry are mapped, from the field numbers of k8s.io/api's
``generated.proto``; unknown fields are dropped and status is left to the server. Responses
stay JSON (the clients' Accept allows it).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from gitopsbot.sandbox.apiserver.errors import UnsupportedMediaType

MAGIC = b"k8s\x00"
Fields = list[tuple[int, int, Any]]  # (field number, wire type, value)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Fields:
    out: Fields = []
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(buf, i)
            out.append((num, wt, v))
        elif wt == 2:
            n, i = _varint(buf, i)
            out.append((num, wt, buf[i : i + n]))
            i += n
        elif wt == 1:
            out.append((num, wt, buf[i : i + 8]))
            i += 8
        elif wt == 5:
            out.append((num, wt, buf[i : i + 4]))
            i += 4
        else:
            raise UnsupportedMediaType(f"unsupported protobuf wire type {wt}")
    return out


def _map(entries: list[bytes]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for e in entries:
        k, v = b"", b""
        for num, _, val in _fields(e):
            if num == 1:
                k = val
            elif num == 2:
                v = val
        out[k.decode()] = v
    return out


def _seconds(buf: bytes) -> int:
    return next((int(val) for num, _, val in _fields(buf) if num == 1), 0)


def _time(buf: bytes) -> str:
    secs = 0
    for num, _, val in _fields(buf):
        if num == 1:
            secs = val
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _object_meta(buf: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    labels: list[bytes] = []
    annotations: list[bytes] = []
    finalizers: list[str] = []
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for num, _, val in _fields(buf):
        if num in strings and val:
            meta[strings[num]] = val.decode()
        elif num == 7 and val:
            meta["generation"] = val
        elif num == 8 and _seconds(val):
            # a nested template's ObjectMeta carries an empty Time: unset, not 1970
            meta["creationTimestamp"] = _time(val)
        elif num == 11:
            labels.append(val)
        elif num == 12:
            annotations.append(val)
        elif num == 14:
            finalizers.append(val.decode())
    if labels:
        meta["labels"] = {k: v.decode() for k, v in _map(labels).items()}
    if annotations:
        meta["annotations"] = {k: v.decode() for k, v in _map(annotations).items()}
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


def decode(body: bytes) -> dict[str, Any]:
    """A Secret or ConfigMap (or an ignorable DeleteOptions) as its JSON form."""
    if not body.startswith(MAGIC):
        raise UnsupportedMediaType("protobuf body without the k8s magic prefix")
    api_version = kind = ""
    raw = b""
    for num, _, val in _fields(body[len(MAGIC) :]):
        if num == 1:
            for n2, _, v2 in _fields(val):
                if n2 == 1:
                    api_version = v2.decode()
                elif n2 == 2:
                    kind = v2.decode()
        elif num == 2:
            raw = val
    obj: dict[str, Any] = {"apiVersion": api_version or "v1", "kind": kind}
    if kind == "DeleteOptions":
        return obj
    if kind in KINDS:
        return {**obj, **_message(raw, KINDS[kind])}
    if kind not in ("Secret", "ConfigMap"):
        known = ", ".join(sorted({"Secret", "ConfigMap", *KINDS}))
        raise UnsupportedMediaType(f"the emulator decodes protobuf only for {known}, not {kind!r}")
    data: list[bytes] = []
    other: list[bytes] = []
    for num, _, val in _fields(raw):
        if num == 1:
            obj["metadata"] = _object_meta(val)
        elif num == 2:
            data.append(val)
        elif num == 3 and kind == "Secret":
            obj["type"] = val.decode()
        elif num == 3:
            other.append(val)  # ConfigMap binaryData
        elif num == 4 and kind == "Secret":
            other.append(val)  # stringData
        elif num == 5 or (num == 4 and kind == "ConfigMap"):
            obj["immutable"] = bool(val)
    if kind == "Secret":
        if data:
            obj["data"] = {k: base64.b64encode(v).decode() for k, v in _map(data).items()}
        if other:
            obj["stringData"] = {k: v.decode() for k, v in _map(other).items()}
    else:
        if data:
            obj["data"] = {k: v.decode() for k, v in _map(data).items()}
        if other:
            obj["binaryData"] = {k: base64.b64encode(v).decode() for k, v in _map(other).items()}
    return obj


# -- schema-driven decoding of the kinds kubectl's imperative ``create`` sends -------------------
# field number → (JSON name, type, flags). type: "str", "int", "bool", "strmap" (map<string,
# string>), "qtymap" (map<string, Quantity>), "intstr" (IntOrString), "meta" (ObjectMeta), or a
# nested schema. flags: "r" repeated; "p" a pointer field whose zero value is meaningful
# (replicas: 0). Non-pointer scalars are always on the wire; their zero values mean "unset".
Schema = dict[int, tuple[str, Any, str]]

_OBJECT_REFERENCE: Schema = {
    1: ("kind", "str", ""),
    2: ("namespace", "str", ""),
    3: ("name", "str", ""),
    4: ("uid", "str", ""),
    5: ("apiVersion", "str", ""),
    6: ("resourceVersion", "str", ""),
    7: ("fieldPath", "str", ""),
}
_LOCAL_REFERENCE: Schema = {1: ("name", "str", "")}
_SELECTOR: Schema = {
    1: ("matchLabels", "strmap", ""),
    2: (
        "matchExpressions",
        {1: ("key", "str", ""), 2: ("operator", "str", ""), 3: ("values", "str", "r")},
        "r",
    ),
}
_CONTAINER: Schema = {
    1: ("name", "str", ""),
    2: ("image", "str", ""),
    3: ("command", "str", "r"),
    4: ("args", "str", "r"),
    5: ("workingDir", "str", ""),
    6: (
        "ports",
        {
            1: ("name", "str", ""),
            2: ("hostPort", "int", ""),
            3: ("containerPort", "int", ""),
            4: ("protocol", "str", ""),
            5: ("hostIP", "str", ""),
        },
        "r",
    ),
    7: ("env", {1: ("name", "str", ""), 2: ("value", "str", "")}, "r"),
    8: ("resources", {1: ("limits", "qtymap", ""), 2: ("requests", "qtymap", "")}, ""),
    9: (
        "volumeMounts",
        {
            1: ("name", "str", ""),
            2: ("readOnly", "bool", ""),
            3: ("mountPath", "str", ""),
            4: ("subPath", "str", ""),
        },
        "r",
    ),
    13: ("terminationMessagePath", "str", ""),
    14: ("imagePullPolicy", "str", ""),
    16: ("stdin", "bool", ""),
    17: ("stdinOnce", "bool", ""),
    18: ("tty", "bool", ""),
    20: ("terminationMessagePolicy", "str", ""),
}
_POD_SPEC: Schema = {
    2: ("containers", _CONTAINER, "r"),
    3: ("restartPolicy", "str", ""),
    4: ("terminationGracePeriodSeconds", "int", "p"),
    5: ("activeDeadlineSeconds", "int", "p"),
    6: ("dnsPolicy", "str", ""),
    7: ("nodeSelector", "strmap", ""),
    8: ("serviceAccountName", "str", ""),
    9: ("serviceAccount", "str", ""),
    10: ("nodeName", "str", ""),
    11: ("hostNetwork", "bool", ""),
    15: ("imagePullSecrets", _LOCAL_REFERENCE, "r"),
    19: ("schedulerName", "str", ""),
    20: ("initContainers", _CONTAINER, "r"),
    21: ("automountServiceAccountToken", "bool", "p"),
    22: (
        "tolerations",
        {
            1: ("key", "str", ""),
            2: ("operator", "str", ""),
            3: ("value", "str", ""),
            4: ("effect", "str", ""),
            5: ("tolerationSeconds", "int", "p"),
        },
        "r",
    ),
    24: ("priorityClassName", "str", ""),
}
_POD_TEMPLATE: Schema = {1: ("metadata", "meta", ""), 2: ("spec", _POD_SPEC, "")}
_DEPLOYMENT_SPEC: Schema = {
    1: ("replicas", "int", "p"),
    2: ("selector", _SELECTOR, ""),
    3: ("template", _POD_TEMPLATE, ""),
    4: (
        "strategy",
        {
            1: ("type", "str", ""),
            2: (
                "rollingUpdate",
                {1: ("maxUnavailable", "intstr", ""), 2: ("maxSurge", "intstr", "")},
                "",
            ),
        },
        "",
    ),
    5: ("minReadySeconds", "int", ""),
    6: ("revisionHistoryLimit", "int", "p"),
    7: ("paused", "bool", ""),
    9: ("progressDeadlineSeconds", "int", "p"),
}
_JOB_SPEC: Schema = {
    1: ("parallelism", "int", "p"),
    2: ("completions", "int", "p"),
    3: ("activeDeadlineSeconds", "int", "p"),
    4: ("selector", _SELECTOR, ""),
    5: ("manualSelector", "bool", "p"),
    6: ("template", _POD_TEMPLATE, ""),
    7: ("backoffLimit", "int", "p"),
    8: ("ttlSecondsAfterFinished", "int", "p"),
    9: ("completionMode", "str", ""),
    10: ("suspend", "bool", "p"),
}
KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", "meta", ""), 2: ("spec", {1: ("finalizers", "str", "r")}, "")},
    "ServiceAccount": {
        1: ("metadata", "meta", ""),
        2: ("secrets", _OBJECT_REFERENCE, "r"),
        3: ("imagePullSecrets", _LOCAL_REFERENCE, "r"),
        4: ("automountServiceAccountToken", "bool", "p"),
    },
    "Deployment": {1: ("metadata", "meta", ""), 2: ("spec", _DEPLOYMENT_SPEC, "")},
    "Job": {1: ("metadata", "meta", ""), 2: ("spec", _JOB_SPEC, "")},
}


def _signed(value: int) -> int:
    # int32/int64 negatives are 10-byte two's-complement varints
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(kind: Any, val: Any) -> Any:
    if kind == "str":
        return val.decode()
    if kind == "int":
        return _signed(val)
    if kind == "bool":
        return bool(val)
    if kind == "meta":
        return _object_meta(val)
    if kind == "intstr":
        fields = {num: v for num, _, v in _fields(val)}
        if fields.get(1, 0) == 0:
            return _signed(fields.get(2, 0))
        return bytes(fields.get(3, b"")).decode()
    if isinstance(kind, dict):
        return _message(val, kind)
    raise UnsupportedMediaType(f"protobuf schema type {kind!r}")  # pragma: no cover


def _message(buf: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    maps: dict[str, tuple[str, list[bytes]]] = {}
    for num, _, val in _fields(buf):
        if num not in schema:
            continue
        name, kind, flags = schema[num]
        if kind in ("strmap", "qtymap"):
            maps.setdefault(name, (kind, []))[1].append(val)
            continue
        value = _scalar(kind, val)
        if "r" in flags:
            out.setdefault(name, []).append(value)
        elif isinstance(value, dict) or "p" in flags or value not in ("", 0, False):
            out[name] = value
        # else: a non-pointer scalar's zero value, i.e. unset
    for name, (kind, entries) in maps.items():
        decoded = _map(entries)
        if kind == "qtymap":
            # Quantity is a message whose field 1 is the canonical string
            out[name] = {
                k: next((bytes(q).decode() for n, _, q in _fields(v) if n == 1), "")
                for k, v in decoded.items()
            }
        else:
            out[name] = {k: v.decode() for k, v in decoded.items()}
    return out
