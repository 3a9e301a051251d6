"""Bad input in every file kind: each problem names the file, the right line and the field.

Each case edits one file of the example fleet (in memory) and says where the problem must be
reported: the line is found from a needle in the edited text, so the expectation follows the
text rather than a hand-counted number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gitopsbot.errors import FleetError, Problem
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

CANARY = "CANARY-s3cr3t-7f1c2a"


@dataclass(frozen=True)
class Case:
    id: str
    path: str
    old: str | None  # snippet of the example file to replace; None: replace the whole file
    new: str | None  # None: delete the file
    needle: str | int  # text on the expected line, or the line number itself
    field: str
    message: str
    hint: str = ""
    nth: int = 1  # which occurrence of the needle


S = "clusters/staging/"
CASES = [
    # gitopsbot.yaml
    Case(
        "settings-unknown-key",
        "gitopsbot.yaml",
        "watchedBranch:",
        "watchedBrnch:",
        "watchedBrnch",
        "watchedBrnch",
        "unknown key",
        "did you mean 'watchedBranch'",
    ),
    Case(
        "settings-wrong-type",
        "gitopsbot.yaml",
        "pollInterval: 30s",
        "pollInterval: 30",
        "pollInterval",
        "pollInterval",
        "expected a duration",
        "30s",
    ),
    Case(
        "settings-duplicate",
        "gitopsbot.yaml",
        "pollInterval: 30s",
        "pollInterval: 30s\nstateBranch: other",
        "stateBranch: other",
        "stateBranch",
        "duplicate key",
        "first defined at line 3",
    ),
    Case(
        "settings-malformed",
        "gitopsbot.yaml",
        "  kind: github\n",
        "  kind: github\n url: x\n",
        " url: x",
        "",
        "malformed YAML",
    ),
    Case(
        "settings-bad-duration",
        "gitopsbot.yaml",
        "interval: 1h",
        "interval: 1 hour",
        "1 hour",
        "proposals.interval",
        "not a duration",
    ),
    Case(
        "settings-enum-typo",
        "gitopsbot.yaml",
        "kind: github",
        "kind: githb",
        "githb",
        "forge.kind",
        "not one of",
        "did you mean 'github'",
    ),
    Case(
        "settings-secret-ref-two-sources",
        "gitopsbot.yaml",
        "    env: GITOPSBOT_FORGE_TOKEN",
        "    env: GITOPSBOT_FORGE_TOKEN\n    file: /x",
        "env: GITOPSBOT",
        "forge.token",
        "exactly one source",
    ),
    Case("settings-missing", "gitopsbot.yaml", None, None, 0, "", "missing"),
    # release.yaml
    Case(
        "release-version-not-semver",
        S + "release.yaml",
        "version: 1.8.7",
        "version: 1.8.x",
        "1.8.x",
        "chart.version",
        "not a SemVer version",
        "MAJOR.MINOR.PATCH",
    ),
    Case(
        "release-version-float",
        S + "release.yaml",
        "version: 1.8.7",
        "version: 1.8",
        "version: 1.8",
        "chart.version",
        "expected a string, got number",
        "quote it",
    ),
    Case(
        "release-chart-digest-not-sha256",
        S + "release.yaml",
        "version: 1.8.7",
        "version: 1.8.7\n  digest: md5:0cc175b9c0f1b6a831c399e269772661",
        "digest: md5",
        "chart.digest",
        "not a valid chart archive digest (sha256: and 64 lowercase hex digits",
    ),
    Case(
        "release-chart-digest-short",
        S + "release.yaml",
        "version: 1.8.7",
        "version: 1.8.7\n  digest: sha256:0cc175b9",
        "digest: sha256",
        "chart.digest",
        "not a valid chart archive digest",
    ),
    Case(
        "release-unknown-key",
        S + "release.yaml",
        "kubeContext:",
        "kubeContxt:",
        "kubeContxt",
        "kubeContxt",
        "unknown key",
        "did you mean 'kubeContext'",
    ),
    Case(
        "release-wrong-type",
        S + "release.yaml",
        "release:\n  name: tensor-fusion-sys # the chart's operatorEndpoint assumes this"
        " service name\n  namespace: tensor-fusion-sys\n",
        "release: tensor-fusion-sys\n",
        "release: tensor",
        "release",
        "expected a mapping",
    ),
    Case(
        "release-duplicate",
        S + "release.yaml",
        "environment: staging",
        "environment: staging\nkubeContext: other",
        "kubeContext: other",
        "kubeContext",
        "duplicate key",
    ),
    Case(
        "release-malformed",
        S + "release.yaml",
        "  name: tensor-fusion\n",
        "  name: [tensor-fusion\n",
        "version:",
        "",
        "malformed YAML",
    ),
    Case(
        "release-environment-typo",
        S + "release.yaml",
        "environment: staging",
        "environment: stagng",
        "stagng",
        "environment",
        "not one of",
        "did you mean 'staging'",
    ),
    Case(
        "release-bad-repository",
        S + "release.yaml",
        "repository: https://download",
        "repository: download",
        "repository:",
        "chart.repository",
        "not a valid chart repository",
    ),
    Case(
        "release-missing-key",
        S + "release.yaml",
        "environment: staging\n",
        "",
        "chart:",
        "environment",
        "required key is missing",
    ),
    Case("release-missing-file", S + "release.yaml", None, None, 0, "", "missing"),
    # values.yaml
    Case(
        "values-malformed",
        S + "values.yaml",
        "  replicaCount: 1\n",
        "  replicaCount: 1\n\timage: x\n",
        "\timage",
        "",
        "malformed YAML",
    ),
    Case(
        "values-duplicate",
        S + "values.yaml",
        "  replicaCount: 1\n",
        "  replicaCount: 1\n  replicaCount: 2\n",
        "replicaCount: 2",
        "controller.replicaCount",
        "duplicate key",
    ),
    Case(
        "values-not-a-mapping",
        S + "values.yaml",
        None,
        "- a\n- b\n",
        1,
        "(document)",
        "expected a mapping",
    ),
    Case(
        "values-secret-literal",
        S + "values.yaml",
        'enrollToken: ""',
        f"enrollToken: {CANARY}",
        CANARY,
        "agent.enrollToken",
        "secret-looking literal",
        "credentials.yaml",
    ),
    Case(
        "values-secret-literal-declared",
        S + "values.yaml",
        'agentId: "example-org:staging"',
        'agentId: "example-org:staging"\n  extra:\n    password: ' + CANARY,
        CANARY,
        "agent.extra.password",
        "secret-looking literal",
    ),
    Case(
        "values-token-shape-anywhere",
        S + "values.yaml",
        "metricsTTL: 7d",
        "metricsTTL: 7d\n  note: ghp_" + "a" * 36,
        "note:",
        "dynamicConfig.note",
        "secret-looking literal",
    ),
    Case("values-missing-file", S + "values.yaml", None, None, 0, "", "missing"),
    # rollout.yaml
    Case(
        "rollout-batch-percentage-high",
        S + "rollout.yaml",
        "batchPercentage: 50",
        "batchPercentage: 101",
        "101",
        "pools.inference.batchPercentage",
        "outside 1..100",
    ),
    Case(
        "rollout-batch-percentage-zero",
        S + "rollout.yaml",
        "batchPercentage: 25",
        "batchPercentage: 0",
        "batchPercentage: 0",
        "pools.training.batchPercentage",
        "outside 1..100",
    ),
    Case(
        "rollout-bad-cron",
        S + "rollout.yaml",
        '"0 8 * * 1-5"',
        '"0 25 * * 1-5"',
        "0 25",
        "pools.inference.maintenanceWindow.cron",
        "not a valid cron expression",
    ),
    Case(
        "rollout-cron-six-fields",
        S + "rollout.yaml",
        '"0 9 * * 1-5"',
        '"0 0 9 * * 1-5"',
        "0 0 9",
        "pools.training.maintenanceWindow.cron",
        "not a valid cron expression",
    ),
    Case(
        "rollout-bad-duration",
        S + "rollout.yaml",
        "maxDuration: 2h\n    stallTimeout: 10m",
        "maxDuration: 90 minutes\n    stallTimeout: 10m",
        "90 minutes",
        "pools.inference.maxDuration",
        "not a duration",
        "1h30m",
    ),
    Case(
        "rollout-unknown-key",
        S + "rollout.yaml",
        "batchPercentage: 25",
        "batchPercentge: 25",
        "batchPercentge",
        "pools.training.batchPercentge",
        "unknown key",
        "did you mean 'batchPercentage'",
    ),
    Case(
        "rollout-unknown-timezone",
        S + "rollout.yaml",
        "timeZone: Europe/Berlin\n    maxDuration: 2h\n    stallTimeout: 15m",
        "timeZone: Europe/Berln\n    maxDuration: 2h\n    stallTimeout: 15m",
        "Berln",
        "pools.training.maintenanceWindow.timeZone",
        "unknown time zone",
        "Europe/Berlin",
    ),
    Case(
        "rollout-phase-typo",
        S + "rollout.yaml",
        "phases: [hypervisor, worker]",
        "phases: [hypervisor, wroker]",
        "wroker",
        "pools.inference.phases[1]",
        "unknown phase",
        "did you mean 'worker'",
    ),
    Case(
        "rollout-duplicate-pool",
        S + "rollout.yaml",
        "  training:\n",
        "  inference:\n",
        "  inference:",
        "pools.inference",
        "duplicate key",
        "first defined at line 9",
        nth=2,
    ),
    Case(
        "rollout-order-unknown-pool",
        S + "rollout.yaml",
        "order: [inference, training]",
        "order: [inference, trainin]",
        "order:",
        "order[1]",
        "unknown pool",
        "'training'",
    ),
    Case(
        "rollout-wrong-type",
        S + "rollout.yaml",
        "nodes: 4",
        "nodes: many",
        "many",
        "pools.training.nodes",
        "expected an integer, got string",
    ),
    Case(
        "rollout-bool-type",
        S + "rollout.yaml",
        "autoUpdateWorker: true",
        "autoUpdateWorker: yes",
        "autoUpdateWorker",
        "pools.inference.autoUpdateWorker",
        "expected true or false",
    ),
    Case(
        "rollout-malformed",
        S + "rollout.yaml",
        "maxParallelPools: 1",
        "maxParallelPools: {1",
        "onFailure",
        "",
        "malformed YAML",
    ),
    # credentials.yaml
    Case(
        "credentials-two-sources",
        S + "credentials.yaml",
        "      namespace: gitopsbot",
        "      namespace: gitopsbot\n    env: X",
        "kubernetesSecret:",
        "secrets.agent.enrollToken",
        "exactly one source",
    ),
    Case(
        "credentials-missing-key",
        S + "credentials.yaml",
        "      key: enrollToken\n",
        "",
        "name: tensor-fusion-agent",
        "secrets.agent.enrollToken.kubernetesSecret.key",
        "required key is missing",
    ),
    Case(
        "credentials-unknown-key",
        S + "credentials.yaml",
        "secrets:",
        "secret:",
        "secret:",
        "secret",
        "unknown key",
        "did you mean 'secrets'",
    ),
    Case(
        "credentials-wrong-type",
        S + "credentials.yaml",
        "rotation: 0",
        "rotation: often",
        "often",
        "rotation",
        "expected an integer",
    ),
    Case(
        "credentials-malformed",
        S + "credentials.yaml",
        "rotation: 0",
        "rotation: 0\n\tx: 1",
        "\tx: 1",
        "",
        "malformed YAML",
    ),
    # smoke-test.yaml
    Case(
        "smoke-test-not-a-pod",
        S + "smoke-test.yaml",
        "kind: Pod",
        "kind: Deployment",
        "Deployment",
        "manifest.kind",
        "must be a Pod",
    ),
    Case(
        "smoke-test-bad-duration",
        S + "smoke-test.yaml",
        "timeout: 5m",
        "timeout: 5 min",
        "5 min",
        "timeout",
        "not a duration",
    ),
    Case(
        "smoke-test-unknown-key",
        S + "smoke-test.yaml",
        "timeout: 5m",
        "timout: 5m",
        "timout",
        "timout",
        "unknown key",
        "did you mean 'timeout'",
    ),
    Case(
        "settings-forge-without-repository",
        "gitopsbot.yaml",
        "  repository: example-org/gpu-fleet\n",
        "",
        "kind: github",
        "forge.repository",
        "required when kind is github",
    ),
    Case(
        "rollout-empty-phases",
        S + "rollout.yaml",
        "phases: [hypervisor]",
        "phases: []",
        "phases: []",
        "pools.training.phases",
        "at least one phase",
    ),
    Case(
        "rollout-repeated-phase",
        S + "rollout.yaml",
        "phases: [hypervisor]",
        "phases: [hypervisor, hypervisor]",
        "phases: [hypervisor, hyp",
        "pools.training.phases[1]",
        "listed twice",
    ),
    Case(
        "rollout-ack-without-reason",
        S + "rollout.yaml",
        "onFailure: revert-pr",
        "onFailure: revert-pr\nacknowledgements:\n  R13: ''",
        "R13",
        "acknowledgements.R13",
        "non-empty",
    ),
    Case(
        "rollout-on-failure-typo",
        S + "rollout.yaml",
        "onFailure: revert-pr",
        "onFailure: revert",
        "revert",
        "onFailure",
        "not one of",
        "did you mean 'revert-pr'",
    ),
    Case(
        "credentials-bad-namespace",
        S + "credentials.yaml",
        "namespace: gitopsbot",
        "namespace: GitOpsBot",
        "GitOpsBot",
        "secrets.agent.enrollToken.kubernetesSecret.namespace",
        "not a valid namespace",
    ),
    Case(
        "credentials-bad-declared-path",
        S + "credentials.yaml",
        "rotation: 0",
        "rotation: 0\nsecretPaths: ['a..b']",
        "secretPaths",
        "secretPaths[0]",
        "not a values path",
    ),
    Case(
        "smoke-test-no-manifest",
        S + "smoke-test.yaml",
        None,
        "timeout: 5m\n",
        1,
        "manifest",
        "required key is missing",
    ),
    Case(
        "values-malformed-around-a-secret",
        S + "values.yaml",
        'enrollToken: ""',
        "enrollToken: [" + CANARY + ", {",
        "repository: tensorfusion/tensor-fusion-agent",
        "",
        "malformed YAML",
    ),
    Case(
        "values-duplicate-secret-key",
        S + "values.yaml",
        'enrollToken: ""',
        'enrollToken: ""\n  enrollToken: ' + CANARY,
        CANARY,
        "agent.enrollToken",
        "duplicate key",
    ),
    Case(
        "values-custom-tag",
        S + "values.yaml",
        "metricsTTL: 7d",
        "metricsTTL: !duration 7d",
        "metricsTTL",
        "dynamicConfig.metricsTTL",
        "unsupported YAML value (!duration)",
    ),
    # directory level
    Case(
        "cluster-unknown-file",
        S + "rolout.yaml",
        None,
        "order: []\n",
        0,
        "",
        "unknown file",
        "did you mean 'rollout.yaml'",
    ),
]


def _edit(original: str | None, case: Case) -> str | None:
    if case.new is None or case.old is None:
        return case.new
    assert original is not None and case.old in original, f"{case.id}: snippet not in example"
    return original.replace(case.old, case.new, 1)


def _expected_line(text: str | None, needle: str | int, nth: int = 1) -> int:
    if isinstance(needle, int):
        return needle
    assert text is not None
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle.splitlines()[0] in line:
            seen += 1
            if seen == nth:
                return number
    raise AssertionError(f"needle {needle!r} not in the edited text")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_located(
    case: Case, example_files: dict[str, str], tree_with: Callable[..., MemoryTree]
) -> None:
    text = _edit(example_files.get(case.path), case)
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with({case.path: text}))
    line = _expected_line(text, case.needle, case.nth)
    ours = [p for p in info.value.problems if p.file == case.path]
    assert ours, f"no problem reported for {case.path}: {info.value}"
    match = [
        p
        for p in ours
        if p.line == line
        and case.message in p.message
        and (not case.field or p.field == case.field)
        and case.hint in p.hint
    ]
    assert match, f"expected {case.path}:{line} {case.field}: {case.message}; got:\n{info.value}"
    problem = match[0]
    # the rendered message names file and line (and column, when the line is known)
    assert str(problem).startswith(f"{case.path}:{line}:" if line else case.path)
    assert str(problem) in str(info.value)
    if line:
        assert problem.column >= 1
    assert CANARY not in str(info.value)
    assert "ghp_" + "a" * 36 not in str(info.value)


def test_every_problem_is_reported_not_just_the_first(
    example_files: dict[str, str], tree_with: Callable[..., MemoryTree]
) -> None:
    edits = {
        case.path: _edit(example_files.get(case.path), case)
        for case in CASES
        if case.id
        in {
            "settings-unknown-key",
            "release-version-not-semver",
            "rollout-bad-cron",
            "credentials-unknown-key",
        }
    }
    edits["clusters/production/rollout.yaml"] = example_files[
        "clusters/production/rollout.yaml"
    ].replace("batchPercentage: 10", "batchPercentage: 0")
    edits["clusters/staging/rollout.yaml"] = edits["clusters/staging/rollout.yaml"].replace(
        "nodes: 4", "nodes: -4"
    )
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with(edits))
    files = {p.file for p in info.value.problems}
    assert files == {
        "gitopsbot.yaml",
        "clusters/staging/release.yaml",
        "clusters/staging/rollout.yaml",
        "clusters/staging/credentials.yaml",
        "clusters/production/rollout.yaml",
    }
    staging_rollout = [
        p.field for p in info.value.problems if p.file == "clusters/staging/rollout.yaml"
    ]
    assert "pools.training.nodes" in staging_rollout
    assert "pools.inference.maintenanceWindow.cron" in staging_rollout


def test_undecodable_bytes_are_located(example_files: dict[str, str]) -> None:
    files: dict[str, bytes | str] = dict(example_files)
    files["clusters/staging/values.yaml"] = b"controller:\n  replicaCount: 1\n  name: \xff\xfe\n"
    with pytest.raises(FleetError) as info:
        load_fleet(MemoryTree(files))
    assert (
        Problem("clusters/staging/values.yaml", 3, 9, "", "not UTF-8 text") in info.value.problems
    )


def test_no_clusters_is_an_error(example_files: dict[str, str]) -> None:
    only = {"gitopsbot.yaml": example_files["gitopsbot.yaml"]}
    with pytest.raises(FleetError, match="no clusters"):
        load_fleet(MemoryTree(only))


def test_files_next_to_cluster_directories_are_ignored(
    tree_with: Callable[..., MemoryTree],
) -> None:
    fleet = load_fleet(tree_with({"clusters/README.md": "# clusters\n"}))
    assert sorted(fleet.clusters) == ["production", "staging"]


def test_cluster_directory_name_must_be_a_dns_label(
    example_files: dict[str, str],
) -> None:
    files = dict(example_files)
    for name in ("release.yaml", "values.yaml"):
        files[f"clusters/Bad_Name/{name}"] = example_files[f"clusters/staging/{name}"]
    with pytest.raises(FleetError, match="DNS-1123"):
        load_fleet(MemoryTree(files))
