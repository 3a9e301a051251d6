"""Resolve ``core.fleet.model.SecretRef``s at apply time: a Kubernetes Secret, a file, or an env
var.

The values go straight into ``core.fleet.secrets.merge_secrets`` and from there into helm's 0600
values file. Nothing here logs a value; every error names the reference (source, name, key,
values path) and never what was read. Each value resolved is also told to the log
formatters' mask (``adapters.redaction.KNOWN``): should it turn up in an error or a step's
detail anyway, no log line shows it (docs/logging.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.redaction import KNOWN, KnownSecrets
from gitopsbot.core.fleet.model import SecretRef
from gitopsbot.errors import KubeError, SecretUnavailable
from gitopsbot.ports.cluster import Cluster

log = logging.getLogger(__name__)


def describe(ref: SecretRef) -> str:
    """How a ref is named in messages (never its value)."""
    if ref.source == "kubernetes-secret":
        where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        return f"{ref.values_path} (kubernetes-secret {where} key {ref.key!r})"
    return f"{ref.values_path} ({ref.source} {ref.name})"


class SecretResolver:
    """Turns refs into values. ``cluster`` is needed only for kubernetes-secret refs;
    ``default_namespace`` (the release namespace) applies when a ref names none; relative
    ``file`` paths are taken from ``base_dir``."""

    def __init__(
        self,
        cluster: Cluster | None = None,
        *,
        default_namespace: str = "",
        base_dir: Path | None = None,
        environment: Callable[[str], str | None] = settings.environment_value,
        known: KnownSecrets = KNOWN,
    ) -> None:
        self._cluster = cluster
        self._namespace = default_namespace
        self._base = base_dir
        self._environment = environment
        self._known = known

    def resolve(self, ref: SecretRef) -> str:
        if ref.source == "kubernetes-secret":
            value = self._kubernetes(ref)
        elif ref.source == "file":
            value = self._file(ref)
        elif ref.source == "env":
            found = self._environment(ref.name)
            if found is None:
                raise SecretUnavailable(f"{describe(ref)}: environment variable is not set")
            value = found
        else:
            raise SecretUnavailable(f"{describe(ref)}: unknown source")
        if not value:
            # An empty secret would blank the credential in the cluster (F8).
            raise SecretUnavailable(f"{describe(ref)}: the value is empty")
        self._known.add(value)  # masked in every log line from now on
        log.debug("secret resolved: %s", describe(ref))
        return value

    def resolve_all(self, refs: Iterable[SecretRef]) -> dict[str, str]:
        """values path → value, for ``core.fleet.secrets.merge_secrets``."""
        return {ref.values_path: self.resolve(ref) for ref in refs}

    def _kubernetes(self, ref: SecretRef) -> str:
        namespace = ref.namespace or self._namespace
        if self._cluster is None or not namespace or not ref.key:
            missing = "a cluster" if self._cluster is None else "a namespace and a key"
            raise SecretUnavailable(f"{describe(ref)}: needs {missing}")
        try:
            return self._cluster.read_secret(namespace, ref.name, ref.key)
        except KubeError as e:
            # Kube* messages from read_secret name the Secret and key only.
            raise SecretUnavailable(f"{describe(ref)}: {e}") from None

    def _file(self, ref: SecretRef) -> str:
        path = Path(ref.name)
        if not path.is_absolute() and self._base is not None:
            path = self._base / path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SecretUnavailable(f"{describe(ref)}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise SecretUnavailable(f"{describe(ref)}: cannot read: {reason}") from None
        # A file written by `echo` or a mounted Secret may end in one newline; it is not part
        # of the credential.
        return text[:-1] if text.endswith("\n") else text
