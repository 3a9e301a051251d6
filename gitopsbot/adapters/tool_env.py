"""How helm and kubectl are run for a cluster: an allow-listed environment, the kube flags.

Passed: PATH, HOME (kubeconfig exec credential plugins such as ``aws eks get-token`` read
``~/.aws``), proxy and CA settings, in-cluster service discovery, and the cloud SDK variables
those plugins need (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``, ``CLOUDSDK_*``). Everything else
(forge tokens, webhook secrets, the bot's own settings) stays out, and so does anything the
plugins do not need. Callers add their private directories (HELM_*_HOME, KUBECACHEDIR).
The kubeconfig and context are named on the command line (``cluster_flags``); with no
kubeconfig given, the child reads ``KUBECONFIG``.
"""

from __future__ import annotations

from collections.abc import Mapping

PASSED = frozenset(
    {
        "PATH",
        "HOME",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        # The post-renderer is ``python -m gitopsbot``: same interpreter, same packages.
        "PYTHONPATH",
        "VIRTUAL_ENV",
    }
)
PASSED_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "CLOUDSDK_")


def tool_environment(
    environ: Mapping[str, str], *, kubeconfig: str, private: Mapping[str, str]
) -> dict[str, str]:
    """The allow-listed part of ``environ`` plus ``private``; ``KUBECONFIG`` is passed only
    when no ``--kubeconfig`` is given on the command line."""
    env = {k: v for k, v in environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    if not kubeconfig and "KUBECONFIG" in environ:
        env["KUBECONFIG"] = environ["KUBECONFIG"]
    env.update(private)
    return env


def cluster_flags(kubeconfig: str, context: str, *, context_flag: str) -> list[str]:
    """``--kubeconfig`` and the context flag (helm's ``--kube-context``, kubectl's
    ``--context``), each where given."""
    flags = ["--kubeconfig", kubeconfig] if kubeconfig else []
    return flags + ([context_flag, context] if context else [])
