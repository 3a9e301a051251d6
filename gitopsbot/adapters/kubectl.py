"""R7 done the way the upgrade page says: ``kubectl apply --server-side --force-conflicts``.

The CRDs of the target chart are written to a private directory and applied in one call;
each CRD must print ``serverside-applied`` (a transient API failure is retried with backoff,
``adapters.api_failures``); then ``kubectl wait --for=condition=Established``
and one ``kubectl get -o json`` confirm each and read its ``status.storedVersions``.

``KubeCluster(crd_applier=KubectlCrdApplier(...).apply_crds)`` uses it; without one,
``KubeCluster.apply_crds`` does the same server-side apply through the Python client
(docs/helm.md says when each is used). The kubectl binary is injected: the pinned one from
``adapters.binaries`` in tests and development, the one on PATH in production.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gitopsbot.adapters.api_failures import is_transient
from gitopsbot.adapters.kube import MESSAGE_LIMIT
from gitopsbot.adapters.tool_env import cluster_flags, tool_environment
from gitopsbot.core.charts.kube_objects import CrdDocumentError, parse_crd_documents
from gitopsbot.core.charts.observed import CrdApplyResult
from gitopsbot.errors import KubeFailed, KubeInvalid, KubeServerError
from gitopsbot.ports.cluster import FIELD_MANAGER

log = logging.getLogger(__name__)

_APPLIED = re.compile(
    r"^customresourcedefinition\.apiextensions\.k8s\.io/(?P<name>\S+) serverside-applied\s*$",
    re.MULTILINE,
)


class KubectlCrdApplier:
    """``apply_crds`` of the Cluster port, by the real kubectl."""

    def __init__(
        self,
        binary: Path | str,
        *,
        home: Path,
        kubeconfig: Path | str | None = None,
        kube_context: str = "",
        established_timeout_seconds: int = 60,
        command_timeout_seconds: float = 180.0,
        environ: Mapping[str, str] | None = None,
        retry_delays: Sequence[float] = (1.0, 2.0, 4.0),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.binary = str(binary)
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self._kubeconfig = str(kubeconfig) if kubeconfig else ""
        self._context = kube_context
        self._established_timeout = established_timeout_seconds
        self._command_timeout = command_timeout_seconds
        self._environ = dict(os.environ if environ is None else environ)
        # A transient API failure (409 on a stale read, 429, 5xx, a dropped connection) is
        # retried after each of these delays: a server-side apply is idempotent.
        self._retry_delays = tuple(retry_delays)
        self._sleep = sleep
        self.last_retries = 0  # retries the last apply_crds needed (logged, counted)

    def apply_crds(self, documents: Mapping[str, str]) -> list[CrdApplyResult]:
        try:
            crds = parse_crd_documents(documents)  # refuses anything that is not a CRD
        except CrdDocumentError as e:
            raise KubeInvalid(str(e)) from None
        names = sorted({str(crd["metadata"]["name"]) for crd in crds})
        if not names:
            return []
        work = Path(tempfile.mkdtemp(prefix="crds-", dir=self.home))
        try:
            for index, (file_name, text) in enumerate(sorted(documents.items())):
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(file_name).name) or "crd.yaml"
                (work / f"{index:03d}-{safe}").write_text(text, encoding="utf-8")
            apply = self._apply(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        applied = set(_APPLIED.findall(apply.stdout))
        failure = _tail(apply.stderr) if apply.returncode != 0 else ""
        waited = ""
        if applied:
            wait = self._run(
                ["wait", "--for=condition=Established",
                 f"--timeout={self._established_timeout}s",
                 *(f"customresourcedefinition/{n}" for n in sorted(applied))]
            )  # fmt: skip
            if wait.returncode != 0:
                # Not fatal (the get below decides), but a refused watch or a timeout is the
                # reason a CRD reads as not Established: say so.
                waited = _wait_failure(wait.stderr)
                log.warning("kubectl wait for the CRDs to be Established failed: %s", waited)
        observed = self._observe(sorted(applied)) if applied else {}
        results = []
        for name in names:
            if name not in applied:
                message = failure or "kubectl did not report serverside-applied"
                results.append(CrdApplyResult(name, False, False, (), message))
                continue
            conditions, stored = observed.get(name, ({}, ()))
            established = conditions.get("Established") == "True"
            message = "" if established else "not Established" + (f" ({waited})" if waited else "")
            results.append(CrdApplyResult(name, True, established, stored, message))
        return results

    def _apply(self, work: Path) -> subprocess.CompletedProcess[str]:
        argv = ["apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                "-f", str(work)]  # fmt: skip
        self.last_retries = 0
        for delay in (*self._retry_delays, None):
            done = self._run(argv)
            if done.returncode == 0 or delay is None or not is_transient(done.stderr):
                return done
            self.last_retries += 1
            log.warning(
                "kubectl apply of the CRDs: transient failure (retry %d in %gs): %s",
                self.last_retries,
                delay,
                _tail(done.stderr).splitlines()[-1:] or "",
            )
            self._sleep(delay)
        raise AssertionError("unreachable")  # the loop returns on its last round

    def _observe(self, names: list[str]) -> dict[str, tuple[dict[str, str], tuple[str, ...]]]:
        done = self._run(["get", *(f"customresourcedefinition/{n}" for n in names), "-o", "json"])
        if done.returncode != 0:
            raise KubeFailed(f"kubectl get crds: {_tail(done.stderr)}")
        data = json.loads(done.stdout)
        items = data.get("items", [data]) if isinstance(data, dict) else []
        seen = {}
        for item in items:
            status = item.get("status") or {}
            conditions = {
                str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or []
            }
            stored = tuple(str(v) for v in status.get("storedVersions") or ())
            seen[str(item["metadata"]["name"])] = (conditions, stored)
        return seen

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        flags = cluster_flags(self._kubeconfig, self._context, context_flag="--context")
        private = {"KUBECACHEDIR": str(self.home / "kube-cache")}
        env = tool_environment(self._environ, kubeconfig=self._kubeconfig, private=private)
        log.debug("kubectl: %s", " ".join(argv))
        try:
            return subprocess.run(
                [self.binary, *flags, *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self._command_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise KubeServerError(
                f"kubectl {argv[0]}: no answer after {self._command_timeout:g}s"
            ) from None
        except OSError as e:
            raise KubeFailed(f"kubectl {argv[0]}: cannot run {self.binary}: {e.strerror}") from None


def _tail(text: str) -> str:
    return text.strip()[-MESSAGE_LIMIT:]


def _wait_failure(stderr: str) -> str:
    """Why ``kubectl wait`` failed: its last line ("timed out waiting ..."), after the RBAC
    refusal its client logged on the way, if any (a refused watch is retried until the
    timeout, so the refusal is many lines up and never in the tail)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    refused = [line for line in lines if " is forbidden: " in line]
    if not refused:
        return last[-MESSAGE_LIMIT:]
    reason = refused[-1].replace('\\"', '"')
    reason = reason[reason.find(" is forbidden: ") + 4 :].split(" reflector=")[0].rstrip('"')
    return f"{reason[:MESSAGE_LIMIT]}; {last[-MESSAGE_LIMIT:]}"
