"""``clusters/<name>/release.yaml``: chart source, version, release name, namespace."""

from __future__ import annotations

import re
from typing import Any

from gitopsbot.core.fleet.fields import CHART_REPO, DNS_LABEL, RELEASE_NAME, FieldReader, is_semver
from gitopsbot.core.fleet.layout import RELEASE_FILE
from gitopsbot.core.fleet.located_yaml import LocatedMap
from gitopsbot.core.fleet.model import (
    Environment,
    KubeconfigSecretRef,
    Location,
    ReleaseSpec,
)

_RELEASE_KEYS = (
    "chart",
    "release",
    "kubeContext",
    "kubeconfigSecret",
    "environment",
    "labels",
)
_KUBECONFIG_SECRET_KEYS = ("name", "key")
# A Secret's name (DNS-1123 subdomain) and a key of its data.
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_CHART_KEYS = ("repository", "name", "version", "digest")
# chart.digest: the archive's sha256, as `sha256sum` and the index print it, prefixed.
_CHART_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_RELEASE_NAME_KEYS = ("name", "namespace")
_ENVIRONMENTS = tuple(e.value for e in Environment)


def read_release(
    r: FieldReader, doc: Any, locations: dict[str, Location] | None = None
) -> tuple[ReleaseSpec, Environment, dict[str, str]] | None:
    """The release, the cluster's environment and its ``labels:`` (what waves select on)."""
    top = r.mapping(doc, "", (1, 1))
    if top is None:
        return None
    if locations is not None:
        # Where each value sits, for messages: "release.yaml:chart.version" → file, line.
        for key in ("kubeContext", "kubeconfigSecret", "environment", "labels"):
            if key in top:
                locations[f"{RELEASE_FILE}:{key}"] = r.loc(r.value_at(top, key))
        for section in ("chart", "release"):
            node = top.get(section)
            if isinstance(node, LocatedMap):
                for key in node:
                    locations[f"{RELEASE_FILE}:{section}.{key}"] = r.loc(r.value_at(node, key))
    r.known_keys(top, "", _RELEASE_KEYS)
    before = len(r.problems)
    for key in ("chart", "release", "environment"):
        if key not in top:
            r.add(r.node_at(top), key, "required key is missing")
    chart = r.section(top, "chart", "", _CHART_KEYS) if "chart" in top else LocatedMap()
    rel = r.section(top, "release", "", _RELEASE_NAME_KEYS) if "release" in top else LocatedMap()
    repo = r.string(
        chart,
        "repository",
        "chart",
        required="chart" in top,
        pattern=CHART_REPO,
        what="chart repository URL (https://, http:// or oci://)",
    )
    name = r.string(chart, "name", "chart", required="chart" in top)
    version = r.string(chart, "version", "chart", required="chart" in top)
    if version and not is_semver(version):
        r.add(
            r.value_at(chart, "version"),
            "chart.version",
            f"'{version}' is not a SemVer version",
            "write MAJOR.MINOR.PATCH, e.g. 1.8.7",
        )
    digest = r.string(
        chart,
        "digest",
        "chart",
        pattern=_CHART_DIGEST,
        what="chart archive digest (sha256: and 64 lowercase hex digits, e.g. the index's "
        "digest prefixed with sha256:)",
    )
    release_name = r.string(
        rel,
        "name",
        "release",
        required="release" in top,
        pattern=RELEASE_NAME,
        what="Helm release name (lowercase, digits, '-' and '.')",
    )
    if len(release_name) > 53:
        r.add(r.value_at(rel, "name"), "release.name", "longer than Helm's 53 characters")
    namespace = r.string(
        rel,
        "namespace",
        "release",
        required="release" in top,
        pattern=DNS_LABEL,
        what="namespace (DNS-1123 label)",
    )
    env = r.choice(top, "environment", "", "", _ENVIRONMENTS, required=False)
    kube_context = r.string(top, "kubeContext", "")
    kubeconfig_secret = _kubeconfig_secret(r, top, kube_context)
    labels = r.labels(top, "labels", "")
    if len(r.problems) > before:
        return None
    spec = ReleaseSpec(
        chart_repo_url=repo,
        chart_name=name,
        version=version,
        release_name=release_name,
        namespace=namespace,
        kube_context=kube_context,
        kubeconfig_secret=kubeconfig_secret,
        chart_digest=digest,
    )
    return spec, Environment(env), labels


def _kubeconfig_secret(
    r: FieldReader, top: LocatedMap, kube_context: str
) -> KubeconfigSecretRef | None:
    """``kubeconfigSecret: {name, key}``: a remote cluster's kubeconfig in a Secret of the
    bot's own namespace; exclusive with ``kubeContext`` (docs/cluster-access.md)."""
    if top.get("kubeconfigSecret") is None:
        return None
    node = r.section(top, "kubeconfigSecret", "", _KUBECONFIG_SECRET_KEYS)
    if not isinstance(top["kubeconfigSecret"], LocatedMap):
        return None  # "expected a mapping" is already reported
    name = r.string(
        node, "name", "kubeconfigSecret", required=True, pattern=_SECRET_NAME,
        what="Secret name (DNS-1123 subdomain)",
    )  # fmt: skip
    key = r.string(
        node, "key", "kubeconfigSecret", "kubeconfig", pattern=_SECRET_KEY,
        what="Secret key (letters, digits, '-', '_', '.')",
    )  # fmt: skip
    if kube_context:
        r.add(
            r.key_at(top, "kubeconfigSecret"),
            "kubeconfigSecret",
            "kubeContext and kubeconfigSecret are exclusive",
            "keep kubeContext to use the bot's --kubeconfig, or kubeconfigSecret to read the "
            "cluster's kubeconfig from a Secret; not both",
        )
        return None
    return KubeconfigSecretRef(name=name, key=key or "kubeconfig") if name else None
