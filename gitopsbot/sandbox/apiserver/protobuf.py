"""Decode the protobuf request bodies helm sends for its release Secrets and ConfigMaps.

client-go's typed clientset writes ``k8s\\0`` + ``runtime.Unknown`` (TypeMeta, raw bytes) where
the raw bytes are a ``v1.Secret`` or ``v1.ConfigMap`` message. Only the fields those kinds and
their ObjectMeta carry are mapped; responses stay JSON (helm's Accept allows it).
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
        elif num == 7:
            meta["generation"] = val
        elif num == 8:
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
    if kind not in ("Secret", "ConfigMap"):
        raise UnsupportedMediaType(
            f"the emulator decodes protobuf only for Secret and ConfigMap, not {kind!r}"
        )
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
