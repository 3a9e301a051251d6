"""The gitopsbot chart (deploy/chart) rendered by real helm 3 and 4: lint, the schema's
refusals naming the field, the Deployment's security context, volumes, probes and arguments,
the RBAC of both modes (the TensorFusion rules equal deploy/rbac/rules.yaml), the Services and
the optional ServiceMonitor and PodDisruptionBudget, Secrets referenced by name only."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import yaml

from tests.deploy.chart_support import (
    CHART,
    CHART_RULES,
    FLEET_URL,
    RULES,
    Helm,
    Rendered,
    doc_values,
    rule_rows,
    rules_yaml,
    with_values,
)

pytestmark = pytest.mark.slow  # real helm 3 and 4 in subprocesses (docs/testing.md)

ROOT = CHART.parents[1]
NS = "gitopsbot"
SA = {"kind": "ServiceAccount", "name": "bot-gitopsbot", "namespace": NS}
TWO_SOURCES = {"name": "tf", "configMap": "tf", "secret": "tf"}  # a keyring from both


# -- lint, and the schema ----------------------------------------------------------------------


def test_lint_passes(helm: Helm) -> None:
    out = helm.ok("lint", str(CHART), "--strict", "--set", f"fleet.url={FLEET_URL}")
    assert "0 chart(s) failed" in out


def test_lint_without_the_fleet_url_fails(helm: Helm) -> None:
    done = helm.run("lint", str(CHART))
    assert done.returncode != 0
    assert "url" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({}, ["fleet", "url"]),  # no fleet.url at all
        ({"fleet": {"url": ""}}, ["fleet", "url"]),  # given, empty
        ({"replicas": "two"}, ["replicas"]),  # a wrong type
        ({"logFormat": "xml"}, ["logFormat"]),  # not one of text, json
        ({"replica": 3}, ["replica"]),  # an unknown top-level key (a typo)
        ({"tensorFusion": {"sameCluser": False}}, ["sameCluser"]),  # unknown, in our object
        ({"secrets": {"forgeToken": {"value": "s3cr3t"}}}, ["value"]),  # no place for values
        ({"remoteClusters": [{"name": "east", "secretName": "east-kc"}]}, ["key"]),
        ({"image": {"digest": "latest"}}, ["digest"]),
        ({"extraEnv": [{"valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}, ["extraEnv", "name"]),
        ({"extraEnv": [{"name": "A"}]}, ["extraEnv", "value"]),  # neither value nor valueFrom
        ({"extraEnv": [{"name": "TMPDIR", "value": "/x"}]}, ["extraEnv", "name"]),  # the chart's
        ({"githubApp": {"appId": "my-app", "apiUrl": ""}}, ["appId"]),  # the number, not a name
        ({"chartKeyrings": [{"name": "../tf", "configMap": "tf", "key": "k"}]}, ["name"]),
        ({"chartKeyrings": [{"name": "tf", "key": "k"}]}, ["chartKeyrings", "configMap"]),
        ({"chartKeyrings": [{**TWO_SOURCES, "key": "k"}]}, ["chartKeyrings", "oneOf"]),
        ({"chartKeyrings": [{"name": "tf", "configMap": "tf"}]}, ["chartKeyrings", "key"]),
    ],
    ids=[
        "missing-url",
        "empty-url",
        "type",
        "enum",
        "unknown-top",
        "unknown-nested",
        "secret-value",
        "remote-no-key",
        "digest",
        "env-no-name",
        "env-no-value",
        "env-charts-own",
        "app-id",
        "keyring-path",
        "keyring-no-source",
        "keyring-two-sources",
        "keyring-no-key",
    ],
)
def test_the_schema_refuses_naming_the_field(
    helm: Helm, values: dict[str, Any], names: list[str]
) -> None:
    merged: dict[str, Any] = {"fleet": {"url": FLEET_URL}}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    if not values:
        merged = {}
    done = helm.template(merged)
    assert done.returncode != 0, done.stdout[:500]
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    for name in names:
        assert name in done.stderr, done.stderr
    assert "s3cr3t" not in done.stderr + done.stdout


def test_the_schema_is_draft_07_and_closed() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert "fleet" in schema["required"] and "url" in schema["properties"]["fleet"]["required"]

    def closed(node: dict[str, Any], where: str) -> None:
        # Our objects (they list their properties) refuse unknown keys; Kubernetes types
        # passed through (resources, affinity...) are open on purpose.
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, where
            for key, child in node["properties"].items():
                closed(child, f"{where}.{key}")
        if isinstance(node.get("items"), dict):
            closed(node["items"], f"{where}[]")

    closed(schema, "values")
    # values.yaml is valid against it except for the one required value it cannot know.
    import jsonschema

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["fleet"]["url"] = FLEET_URL
    jsonschema.Draft7Validator(schema).validate(values)


def test_app_version_is_pyprojects_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2" and chart["name"] == "gitopsbot"
    assert chart["appVersion"] == project["version"]


# -- the Deployment ------------------------------------------------------------------------------


def test_the_deployment_runs_locked_down(helm: Helm) -> None:
    out = helm.render(with_values())
    pod = out.deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,  # the Containerfile's user
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "useradd --create-home --uid 10001" in (ROOT / "Containerfile").read_text()
    c = out.container()
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"] == "bot-gitopsbot"
    assert out.deployment()["spec"]["replicas"] == 2
    assert helm.render(with_values(replicas=3)).deployment()["spec"]["replicas"] == 3


def test_writable_space_is_two_empty_dirs(helm: Helm) -> None:
    out = helm.render(with_values())
    pod = out.deployment()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in out.container()["volumeMounts"]}
    env = out.env()
    assert mounts[env["GITOPSBOT_CACHE"]] == "cache"
    assert "medium" not in volumes["cache"]["emptyDir"]
    assert env["TMPDIR"] == "/tmp" and mounts["/tmp"] == "tmp"
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"
    assert sorted(volumes) == ["cache", "tmp"]  # nothing else without Secrets configured


def test_probes_and_ports(helm: Helm) -> None:
    c = helm.render(with_values()).container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"webhooks": 8080, "metrics": 9090}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_the_pod_knows_its_name_and_namespace(helm: Helm) -> None:
    env = helm.render(with_values()).env()
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_the_arguments_of_gitopsbot_run(helm: Helm) -> None:
    values = with_values(logFormat="json", extraArgs=["--workers", "8"])
    values["fleet"]["branch"] = "release"
    c = helm.render(values, namespace="bots").container()
    assert c["command"] == ["gitopsbot"]
    assert c["args"] == [
        "run",
        "--fleet-url", FLEET_URL,
        "--branch", "release",
        "--webhook-listen", "0.0.0.0:8080",
        "--metrics-listen", "0.0.0.0:9090",
        "--log-format", "json",
        "--leases-namespace", "bots",
        "--workers", "8",
    ]  # fmt: skip


def test_image_by_tag_or_digest(helm: Helm) -> None:
    digest = "sha256:" + "ab" * 32
    assert helm.render(with_values()).container()["image"] == "gitopsbot:0.1.0"
    tagged = with_values(image={"repository": "registry.example/gitopsbot", "tag": "0.2.0"})
    assert helm.render(tagged).container()["image"] == "registry.example/gitopsbot:0.2.0"
    pinned = with_values(image={"repository": "r.example/g", "tag": "0.2.0", "digest": digest})
    assert helm.render(pinned).container()["image"] == f"r.example/g@{digest}"


def test_replicas_prefer_different_nodes(helm: Helm) -> None:
    pod = helm.render(with_values()).deployment()["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti  # soft only
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "bot"
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}  # fmt: skip
    replaced = helm.render(with_values(affinity=own)).deployment()["spec"]["template"]["spec"]
    assert replaced["affinity"] == own


# -- Secrets: referenced by name, never carried ---------------------------------------------------

CANARY_NAMES = {
    "forgeToken": "canary-forge-7f3a",
    "webhookSecret": "canary-hook-7f3a",
    "gitToken": "canary-git-7f3a",
    "gitSshKey": "canary-ssh-7f3a",
    "githubAppKey": "canary-app-7f3a",
    "extraEnv": "canary-chat-7f3a",
}


def _all_secrets() -> dict[str, Any]:
    return with_values(
        secrets={
            "forgeToken": {"secretName": CANARY_NAMES["forgeToken"], "key": "tok"},
            "webhookSecret": {"secretName": CANARY_NAMES["webhookSecret"], "key": "hook"},
            "gitToken": {"secretName": CANARY_NAMES["gitToken"], "key": "git"},
            "gitSshKey": {
                "secretName": CANARY_NAMES["gitSshKey"],
                "privateKeyKey": "ssh-privatekey",
                "publicKeyKey": "ssh-publickey",
                "knownHostsKey": "known_hosts",
            },
            "githubAppKey": {"secretName": CANARY_NAMES["githubAppKey"], "key": "pem"},
        },
        remoteClusters=[{"name": "east", "secretName": "canary-kc-7f3a", "key": "config"}],
        extraEnv=[{"name": "GITOPSBOT_SLACK_WEBHOOK",
                   "valueFrom": {"secretKeyRef": {"name": CANARY_NAMES["extraEnv"],
                                                  "key": "slack"}}}],
    )  # fmt: skip


def test_secrets_reach_the_pod_by_reference(helm: Helm) -> None:
    out = helm.render(_all_secrets())
    env = out.env()
    assert env["GITOPSBOT_FORGE_TOKEN"] == {
        "secretKeyRef": {"name": CANARY_NAMES["forgeToken"], "key": "tok"}
    }
    assert env["GITOPSBOT_WEBHOOK_SECRET"] == {
        "secretKeyRef": {"name": CANARY_NAMES["webhookSecret"], "key": "hook"}
    }
    assert env["GITOPSBOT_GIT_TOKEN"] == {
        "secretKeyRef": {"name": CANARY_NAMES["gitToken"], "key": "git"}
    }
    # The SSH key is a file (libgit2 reads it), 0400, with <file>.pub next to it and the
    # host keys in ~/.ssh/known_hosts (the image's HOME).
    key_path = env["GITOPSBOT_GIT_SSH_KEY"]
    volume = next(
        v for v in out.deployment()["spec"]["template"]["spec"]["volumes"] if v["name"] == "git-ssh"
    )
    assert volume["secret"]["secretName"] == CANARY_NAMES["gitSshKey"]
    assert volume["secret"]["defaultMode"] == 0o400
    items = {i["key"]: i["path"] for i in volume["secret"]["items"]}
    mounts = [m for m in out.container()["volumeMounts"] if m["name"] == "git-ssh"]
    directory = next(m["mountPath"] for m in mounts if "subPath" not in m)
    assert key_path == f"{directory}/{items['ssh-privatekey']}"
    assert f"{directory}/{items['ssh-publickey']}" == key_path + ".pub"
    hosts = next(m for m in mounts if "subPath" in m)
    assert hosts["mountPath"] == "/home/gitopsbot/.ssh/known_hosts"
    assert hosts["subPath"] == items["known_hosts"]
    assert all(m["readOnly"] for m in mounts)
    assert "ENV HOME=/home/gitopsbot" in (ROOT / "Containerfile").read_text()


def test_a_github_apps_key_reaches_the_pod_by_reference(helm: Helm) -> None:
    """docs/forges.md, GitHub App: the key from a Secret into the env variable gitopsbot.yaml
    names; the App ID and API root (plain values) for the first fetch as the app."""
    values = with_values(
        secrets={"githubAppKey": {"secretName": "fleet-bot-app", "key": "private-key"}},
        githubApp={"appId": 123456, "apiUrl": "https://ghe.example.com/api/v3"},
    )
    env = helm.render(values).env()
    assert env["GITOPSBOT_GITHUB_APP_KEY"] == {
        "secretKeyRef": {"name": "fleet-bot-app", "key": "private-key"}
    }
    assert env["GITOPSBOT_GITHUB_APP_ID"] == "123456"
    assert env["GITOPSBOT_GITHUB_API_URL"] == "https://ghe.example.com/api/v3"
    plain = helm.render(with_values()).env()
    assert not {"GITOPSBOT_GITHUB_APP_KEY", "GITOPSBOT_GITHUB_APP_ID"} & set(plain)
    from gitopsbot.app import forge_access

    assert forge_access.APP_KEY_ENV == "GITOPSBOT_GITHUB_APP_KEY"
    assert forge_access.APP_ID_ENV == "GITOPSBOT_GITHUB_APP_ID"
    assert forge_access.API_URL_ENV == "GITOPSBOT_GITHUB_API_URL"
    assert "env: GITOPSBOT_GITHUB_APP_KEY" in (ROOT / "docs" / "forges.md").read_text()


def test_chart_keyrings_are_mounted_where_gitopsbot_yaml_names_them(helm: Helm) -> None:
    """docs/fleet-repo.md, "Signed charts": each public keyring, one key of a ConfigMap or a
    Secret, is the read-only file /etc/gitopsbot/keyrings/<name>.gpg; none: no volume."""
    keyrings = [
        {"name": "tensor-fusion", "configMap": "tensor-fusion-keyring", "key": "pubring.gpg"},
        {"name": "vendor", "secret": "vendor-keyring", "key": "keyring.gpg"},
    ]
    out = helm.render(with_values(chartKeyrings=keyrings))
    pod = out.deployment()["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "chart-keyrings"]
    assert volume["projected"] == {
        "defaultMode": 0o444,
        "sources": [
            {"configMap": {"name": "tensor-fusion-keyring",
                           "items": [{"key": "pubring.gpg", "path": "tensor-fusion.gpg"}]}},
            {"secret": {"name": "vendor-keyring",
                        "items": [{"key": "keyring.gpg", "path": "vendor.gpg"}]}},
        ],
    }  # fmt: skip
    (mount,) = [m for m in out.container()["volumeMounts"] if m["name"] == "chart-keyrings"]
    assert mount == {
        "name": "chart-keyrings",
        "mountPath": "/etc/gitopsbot/keyrings",
        "readOnly": True,
    }
    # The path the docs' gitopsbot.yaml example names is the one the chart mounts.
    assert (
        "keyring: /etc/gitopsbot/keyrings/tensor-fusion.gpg"
        in (ROOT / "docs" / "fleet-repo.md").read_text()
    )
    plain = helm.render(with_values()).deployment()["spec"]["template"]["spec"]
    assert "chart-keyrings" not in {v["name"] for v in plain["volumes"]}
    # Two entries with one name would be one file: refused, naming it.
    twice = [keyrings[0], {**keyrings[1], "name": "tensor-fusion"}]
    done = helm.template(with_values(chartKeyrings=twice))
    assert done.returncode != 0
    assert 'chartKeyrings: the name "tensor-fusion" is given twice' in done.stderr


def test_extra_env_is_added_after_the_charts_own(helm: Helm) -> None:
    """Chat webhook URLs (docs/notifications.md) reach the bot from a Secret by extraEnv."""
    slack = {"secretKeyRef": {"name": "chat-webhooks", "key": "slack"}}
    extra = [
        {"name": "GITOPSBOT_SLACK_WEBHOOK", "valueFrom": slack},
        {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"},
    ]
    out = helm.render(with_values(extraEnv=extra))
    env = out.container()["env"]
    assert env[-2:] == extra  # as given, in order, after the chart's own
    assert out.env()["GITOPSBOT_SLACK_WEBHOOK"] == slack
    assert [e["name"] for e in helm.render(with_values()).container()["env"]] == [
        e["name"] for e in env[:-2]
    ]


def test_the_env_names_are_the_ones_the_docs_and_code_read() -> None:
    from gitopsbot import app

    assert app.TOKEN_ENV == "GITOPSBOT_GIT_TOKEN" and app.SSH_KEY_ENV == "GITOPSBOT_GIT_SSH_KEY"
    assert "env: GITOPSBOT_FORGE_TOKEN" in (ROOT / "docs" / "forges.md").read_text()
    assert "env: GITOPSBOT_FORGE_TOKEN" in (ROOT / "docs" / "fleet-repo.md").read_text()


def test_only_secret_names_appear_in_the_manifests(helm: Helm) -> None:
    out = helm.render(_all_secrets())
    assert out.of_kind("Secret") == []  # the chart makes none
    assert not re.search(r"^\s*(data|stringData):", out.text, re.M)
    for name in [*CANARY_NAMES.values(), "canary-kc-7f3a"]:
        places = _places(out.objects, name)
        assert places, name
        # Only where a Secret is named: a secretKeyRef, a secret volume, an RBAC resourceName.
        allowed = re.compile(
            r"(\.secretKeyRef\.name|\.secret\.secretName|\.rules\[\d+\]\.resourceNames\[\d+\])$"
        )
        assert all(allowed.search(p) for p in places), places
    # No Secret means no value: with none configured, no Secret is referenced at all.
    plain = helm.render(with_values())
    assert "secretKeyRef" not in plain.text and "secretName" not in plain.text


def _places(node: Any, needle: str, where: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _places(v, needle, f"{where}.{k}")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _places(v, needle, f"{where}[{i}]")]
    return [where] if isinstance(node, str) and needle in node else []


# -- RBAC ------------------------------------------------------------------------------------------


def test_the_charts_rules_file_is_rules_yaml() -> None:
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), (
        "deploy/chart/files/tensorfusion-rules.yaml drifted from deploy/rbac/rules.yaml: "
        "cp deploy/rbac/rules.yaml deploy/chart/files/tensorfusion-rules.yaml"
    )


def _bound(out: Rendered, kind: str, name: str) -> list[dict[str, Any]]:
    """The subjects of the binding of ``kind`` (Role or ClusterRole) ``name``."""
    binding_kind = f"{kind}Binding"
    bindings = [b for b in out.of_kind(binding_kind) if b["roleRef"]["name"] == name]
    assert len(bindings) == 1, (kind, name)
    assert bindings[0]["roleRef"]["kind"] == kind
    subjects: list[dict[str, Any]] = bindings[0]["subjects"]
    return subjects


def test_same_cluster_binds_exactly_the_tensorfusion_rules(helm: Helm) -> None:
    namespaces = ["tensor-fusion-sys", "tf-b"]
    values = with_values(tensorFusion={"sameCluster": True, "releaseNamespaces": namespaces})
    out = helm.render(values)
    wanted = rules_yaml()
    cluster_role = out.one("ClusterRole", f"{NS}-bot-gitopsbot-tensorfusion")
    assert cluster_role["rules"] == wanted["ClusterRole"]
    assert _bound(out, "ClusterRole", cluster_role["metadata"]["name"]) == [SA]
    roles = [
        r for r in out.of_kind("Role") if r["metadata"]["name"] == "bot-gitopsbot-tensorfusion"
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["tensor-fusion-sys", "tf-b"]
    for role in roles:
        assert role["rules"] == wanted["Role"]
    bindings = [
        b
        for b in out.of_kind("RoleBinding")
        if b["roleRef"]["name"] == "bot-gitopsbot-tensorfusion"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["tensor-fusion-sys", "tf-b"]
    assert all(b["subjects"] == [SA] for b in bindings)
    # Events on the TensorFusionCluster and GPUPools (cluster-scoped: in `default`).
    events = out.one("Role", f"{NS}-bot-gitopsbot-events")
    assert events["metadata"]["namespace"] == "default"
    assert rule_rows(events["rules"]) == {
        ("events.k8s.io", "events", "", "create"),
        ("events.k8s.io", "events", "", "patch"),
    }
    assert _bound(out, "Role", events["metadata"]["name"]) == [SA]
    assert len(out.of_kind("ClusterRole")) == 1 and len(out.of_kind("ClusterRoleBinding")) == 1


def test_a_changed_rules_file_changes_the_render(helm: Helm, tmp_path: Any) -> None:
    """The chart reads its rules from the file (a copy in a template would not follow)."""
    import shutil

    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    rules = copy / "files" / "tensorfusion-rules.yaml"
    # One more rule at the end of the ClusterRole (the first document), whatever its last is.
    added = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    text = rules.read_text()
    changed = text.replace("\n---\n", '\n  - apiGroups: [""]\n    resources: [nodes]\n'
                           "    verbs: [get]\n---\n", 1)  # fmt: skip
    assert changed != text, "no document separator in the rules file"
    rules.write_text(changed)
    values = helm.values_file(with_values())
    text = helm.ok("template", "bot", str(copy), "-n", NS, "-f", str(values))
    objects = [d for d in yaml.safe_load_all(text) if d]
    role = next(o for o in objects if o["metadata"]["name"] == f"{NS}-bot-gitopsbot-tensorfusion")
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [*rules_yaml()["ClusterRole"], added]


def _own_role(out: Rendered) -> dict[str, Any]:
    role = out.one("Role", "bot-gitopsbot")
    assert role["metadata"]["namespace"] == NS
    assert _bound(out, "Role", "bot-gitopsbot") == [SA]
    return role


# What gitopsbot/adapters/leases.py sends: GET one, GET a list by label, POST, PUT.
OWN = {("coordination.k8s.io", "leases", "", v) for v in ("get", "list", "create", "update")}


def test_management_cluster_has_no_tensorfusion_rules(helm: Helm) -> None:
    values = with_values(
        tensorFusion={"sameCluster": False, "releaseNamespaces": ["tensor-fusion-sys"]},
        remoteClusters=[
            {"name": "east", "secretName": "east-kubeconfig", "key": "kubeconfig"},
            {"name": "west", "secretName": "west-kubeconfig", "key": "config"},
        ],
    )
    out = helm.render(values)
    assert out.of_kind("ClusterRole") == [] and out.of_kind("ClusterRoleBinding") == []
    assert [r["metadata"]["name"] for r in out.of_kind("Role")] == ["bot-gitopsbot"]
    assert {o["metadata"].get("namespace") for o in out.objects} == {NS}
    assert rule_rows(_own_role(out)["rules"]) == OWN | {
        ("", "secrets", "east-kubeconfig", "get"),
        ("", "secrets", "west-kubeconfig", "get"),
    }


def test_without_remote_clusters_no_secret_is_readable(helm: Helm) -> None:
    """An empty resourceNames would grant every Secret: the rule is left out instead."""
    out = helm.render(with_values())
    role = _own_role(out)
    assert rule_rows(role["rules"]) == OWN
    assert all("secrets" not in r["resources"] for r in role["rules"])


def test_no_wildcards_and_no_escalation(helm: Helm) -> None:
    out = helm.render(_all_secrets())
    for role in out.of_kind("Role") + out.of_kind("ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"]


# -- Services, ServiceMonitor, PodDisruptionBudget -----------------------------------------------


def test_webhooks_and_metrics_have_their_own_services(helm: Helm) -> None:
    out = helm.render(with_values())
    selector = out.deployment()["spec"]["selector"]["matchLabels"]
    hooks = out.one("Service", "bot-gitopsbot-webhooks")
    metrics = out.one("Service", "bot-gitopsbot-metrics")
    assert hooks["spec"]["ports"] == [
        {"name": "webhooks", "port": 8080, "targetPort": "webhooks", "protocol": "TCP"}
    ]
    assert metrics["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    for service in (hooks, metrics):
        assert service["spec"]["selector"] == selector
        assert service["spec"]["type"] == "ClusterIP"


def test_the_service_monitor_only_when_enabled(helm: Helm) -> None:
    assert helm.render(with_values()).of_kind("ServiceMonitor") == []
    enabled = with_values(
        metrics={
            "service": {"type": "ClusterIP", "port": 9090},
            "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"team": "gpu"}},
        }
    )
    out = helm.render(enabled)
    monitor = out.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["team"] == "gpu"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    # It selects the metrics Service, and not the webhooks one.
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s["metadata"]["name"]
        for s in out.of_kind("Service")
        if selector.items() <= s["metadata"]["labels"].items()
    ]
    assert selected == ["bot-gitopsbot-metrics"]


def test_the_disruption_budget_is_optional(helm: Helm) -> None:
    assert helm.render(with_values()).of_kind("PodDisruptionBudget") == []
    on = helm.render(with_values(podDisruptionBudget={"enabled": True}))
    pdb = on.one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"] == on.deployment()["spec"]["selector"]["matchLabels"]
    )
    both = with_values(podDisruptionBudget={"enabled": True, "minAvailable": 1,
                                            "maxUnavailable": 1})  # fmt: skip
    done = helm.template(both)
    assert done.returncode != 0 and "not both" in done.stderr


# -- docs/deploy.md keeps up with the chart --------------------------------------------------------

DOC = ROOT / "docs" / "deploy.md"
# Values documented as one row although they hold a mapping (Kubernetes types, probe settings).
WHOLE = {"resources", "probes.liveness", "probes.readiness"}


def _value_paths(node: Any, prefix: str = "") -> set[str]:
    if prefix in WHOLE or not isinstance(node, dict) or (not node and prefix):
        return {prefix}
    return {p for k, v in node.items() for p in _value_paths(v, f"{prefix}.{k}".lstrip("."))}


def _doc_table(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading``, as cells without backticks."""
    text = DOC.read_text().split(f"## {heading}\n", 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            if not set(cells[0]) <= {"-"}:
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def test_the_values_table_lists_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    paths = _value_paths(values) | {"fleet.url"}  # required: commented out in values.yaml
    documented = {row[0] for row in _doc_table("Values")}
    assert sorted(paths - documented) == [], "in values.yaml, not in docs/deploy.md"
    assert sorted(documented - paths) == [], "in docs/deploy.md, not in values.yaml"


def test_the_rbac_table_lists_exactly_the_charts_own_rules(helm4: Helm) -> None:
    remote = [{"name": "east", "secretName": "east-kubeconfig", "key": "kubeconfig"}]
    out = helm4.render(with_values(remoteClusters=remote))
    rendered = {("Role", *row[:2], row[3]) for row in rule_rows(_own_role(out)["rules"])}
    events = out.one("Role", f"{NS}-bot-gitopsbot-events")
    rendered |= {("Role in default", *row[:2], row[3]) for row in rule_rows(events["rules"])}
    documented = set()
    for cells in _doc_table("RBAC, rule by rule"):
        group = "" if cells[1] == "core" else cells[1]
        for resource in re.split(r"[,\s]+", cells[2]):
            for verb in re.split(r"[,\s]+", cells[3]):
                documented.add((cells[0], group, resource, verb))
    assert sorted(rendered - documented) == [], "granted, not explained in docs/deploy.md"
    assert sorted(documented - rendered) == [], "explained in docs/deploy.md, not granted"


def test_the_docs_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", DOC.read_text())
    assert links
    missing = [link for link in links if not (DOC.parent / link).exists()]
    assert missing == []


def test_the_docs_values_examples_render(helm: Helm) -> None:
    examples = doc_values()
    assert len(examples) == 2
    for values in examples:
        helm.render(values)
