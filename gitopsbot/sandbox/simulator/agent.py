"""The TensorFusion console agent, as the controller pods' ``cluster-agent`` container plays it.

The chart (examples/charts/tensor-fusion-1.8.7/templates/controller-deployment.yaml) runs a
``cluster-agent`` container beside the controller when ``agent.agentId`` is set: env
``AGENT_ID`` (plain) and ``ENROLL_TOKEN`` (``valueFrom.secretKeyRef``: Secret
``<fullname>-agent``, key ``enrollToken``). When a controller pod starts, the simulator asks
this module for the container's log: the console accepts the token (``SimConfig.
console_tokens``: None accepts any non-empty token, else exactly those) and the agent logs
``connected to TensorFusion console as agent <AGENT_ID>``, or it refuses it and the agent logs
``enroll rejected by TensorFusion console: 401 unauthorized``. The log goes into the pod
annotation ``sandbox.gitopsbot.io/log.cluster-agent`` (the emulator serves it as the
container's log, apiserver/pod_logs.py), which is what R18's reconnect check reads.

The token is compared and forgotten: it is never written into the log, an annotation, an
Event or a Python log line (tests/sandbox/test_sim_controller_pods.py greps for a canary).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gitopsbot.sandbox.apiserver.pod_logs import log_annotation
from gitopsbot.sandbox.simulator.rollout import format_time

Obj = dict[str, Any]
CONTAINER = "cluster-agent"
ANNOTATION = log_annotation(CONTAINER)
TOKEN_ENV = "ENROLL_TOKEN"
AGENT_ID_ENV = "AGENT_ID"

SecretReader = Callable[[str, str], Obj | None]  # (namespace, name) → the Secret or None


def agent_container(template_spec: Obj) -> Obj | None:
    """The pod spec's ``cluster-agent`` container, or None when the pod has none."""
    for container in template_spec.get("containers") or []:
        if container.get("name") == CONTAINER:
            return dict(container)
    return None


def _env(container: Obj, name: str) -> Obj | None:
    for entry in container.get("env") or []:
        if entry.get("name") == name:
            return dict(entry)
    return None


def _secret_value(secret: Obj | None, key: str) -> str | None:
    if secret is None:
        return None
    plain = (secret.get("stringData") or {}).get(key)
    if plain is not None:
        return str(plain)
    encoded = (secret.get("data") or {}).get(key)
    if encoded is None:
        return None
    try:
        return base64.b64decode(str(encoded), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def resolve_token(container: Obj, namespace: str, read_secret: SecretReader) -> str | None:
    """``ENROLL_TOKEN`` of the container: a plain ``value``, or ``valueFrom.secretKeyRef``
    read from the Secret in the pod's namespace. None when absent or unreadable."""
    entry = _env(container, TOKEN_ENV)
    if entry is None:
        return None
    if "value" in entry:
        return str(entry.get("value") or "")
    ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
    if not ref.get("name") or not ref.get("key"):
        return None
    return _secret_value(read_secret(namespace, str(ref["name"])), str(ref["key"]))


def accepted(token: str | None, console_tokens: frozenset[str] | None) -> bool:
    """Whether the console takes the token: any non-empty one when ``console_tokens`` is
    None, else one of them."""
    if not token:
        return False
    return console_tokens is None or token in console_tokens


def agent_log(
    container: Obj,
    namespace: str,
    *,
    read_secret: SecretReader,
    console_tokens: frozenset[str] | None,
    now: datetime,
) -> str:
    """The log the agent writes when its pod starts at ``now``; never the token."""
    stamp = format_time(now).split(".")[0] + "Z"
    agent_entry = _env(container, AGENT_ID_ENV) or {}
    agent_id = str(agent_entry.get("value") or "unknown")
    token = resolve_token(container, namespace, read_secret)
    lines = [f"{stamp} INFO cluster-agent starting, console enrollment as agent {agent_id}"]
    if not token:
        lines.append(
            f"{stamp} ERROR no enroll token: {TOKEN_ENV} is empty or its Secret is missing"
        )
    elif accepted(token, console_tokens):
        lines.append(f"{stamp} INFO connected to TensorFusion console as agent {agent_id}")
    else:
        lines.append(f"{stamp} ERROR enroll rejected by TensorFusion console: 401 unauthorized")
    del token
    return "".join(line + "\n" for line in lines)
