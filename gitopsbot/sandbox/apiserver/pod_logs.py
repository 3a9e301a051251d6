"""Container logs: ``GET /api/v1/namespaces/{ns}/pods/{name}/log``, answered as text/plain.

There is no kubelet and no container runtime, so a container's log is whatever the pod
annotation ``sandbox.gitopsbot.io/log.<container>`` holds (a sandbox-only convention; the
controller simulator writes it for the console agent, tests write it directly). One line per
log line, each starting with an RFC 3339 timestamp (``2026-12-04T10:00:00Z INFO ...``), which
is what ``sinceTime``/``sinceSeconds`` filter on; a line without one continues the line before
it. The lines are served whole: the timestamp is part of the stored text, so ``timestamps``
(true or false) neither adds nor strips anything.

Query: ``container`` (optional when the pod has exactly one container, as on the real
server), ``sinceTime`` (RFC 3339), ``sinceSeconds``, ``tailLines``, ``timestamps``. Errors as
kube-apiserver words them: 404 when the pod is missing; 400 "container X is not valid for pod
Y" for a container not in the pod's spec (containers, initContainers, ephemeralContainers);
400 "a container name must be specified for pod Y, choose one of: [a b]" without a container
when the pod has several; 400 "container "X" in pod "Y" is waiting to start: <reason>" (the
kubelet's words) when the pod's status says the container is waiting. A pod with no annotation
for the container has an empty log. Differs from the real server: there, a pod not yet bound to
a node answers 200 with an empty body whatever its annotations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gitopsbot.sandbox.apiserver.errors import BadRequest

LOG_ANNOTATION_PREFIX = "sandbox.gitopsbot.io/log."

Obj = dict[str, Any]


def log_annotation(container: str) -> str:
    """The pod annotation that holds ``container``'s log text in the sandbox."""
    return LOG_ANNOTATION_PREFIX + container


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 timestamp (``Z`` or an offset, optional fraction), or None."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def select_lines(text: str, *, since: datetime | None, tail_lines: int | None) -> str:
    """The lines of ``text`` written at or after ``since`` (by each line's leading timestamp;
    a line without one belongs to the line before it, and leading ones without any are
    dropped when ``since`` is given), then the last ``tail_lines`` of them."""
    lines = text.splitlines()
    if since is not None:
        kept: list[str] = []
        keep = False
        for line in lines:
            at = parse_time(line.split(" ", 1)[0])
            if at is not None:
                keep = at >= since
            if keep:
                kept.append(line)
        lines = kept
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines > 0 else []
    return "".join(line + "\n" for line in lines)


def container_names(pod: Obj) -> list[str]:
    spec = pod.get("spec") or {}
    names: list[str] = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        names += [str(c.get("name")) for c in spec.get(field) or [] if c.get("name")]
    return names


def resolve_container(pod: Obj, container: str | None) -> str:
    """The container a log request means, or BadRequest as kube-apiserver words it."""
    name = pod["metadata"]["name"]
    if not container:
        regular = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
        if len(regular) == 1:
            return regular[0]
        if not regular:
            raise BadRequest(f"a container name must be specified for pod {name}")
        names = " ".join(container_names(pod))
        raise BadRequest(
            f"a container name must be specified for pod {name}, choose one of: [{names}]"
        )
    if container not in container_names(pod):
        raise BadRequest(f"container {container} is not valid for pod {name}")
    return container


def pod_log(pod: Obj, query: dict[str, str], *, now: datetime | None = None) -> str:
    """The log text a ``GET .../pods/{name}/log`` with ``query`` answers for ``pod``."""
    container = resolve_container(pod, query.get("container"))
    name = pod["metadata"]["name"]
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if status.get("name") == container and waiting is not None:
            reason = waiting.get("reason") or "ContainerCreating"
            raise BadRequest(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
    since: datetime | None = None
    if query.get("sinceTime"):
        since = parse_time(query["sinceTime"])
        if since is None:
            raise BadRequest(f"sinceTime: invalid RFC 3339 time {query['sinceTime']!r}")
    elif query.get("sinceSeconds"):
        seconds = _positive(query, "sinceSeconds")
        since = (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    tail = _positive(query, "tailLines", zero_ok=True) if query.get("tailLines") else None
    text = ((pod["metadata"].get("annotations") or {}).get(log_annotation(container))) or ""
    return select_lines(str(text), since=since, tail_lines=tail)


def _positive(query: dict[str, str], key: str, *, zero_ok: bool = False) -> int:
    try:
        value = int(query[key])
    except ValueError:
        raise BadRequest(f"{key}: invalid value {query[key]!r}") from None
    if value < 0 or (value == 0 and not zero_ok):
        raise BadRequest(f"{key}: must be {'non-negative' if zero_ok else 'greater than 0'}")
    return value
