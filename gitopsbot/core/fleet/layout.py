"""Where things are in a fleet repository: the settings file, cluster directories and
the files a cluster directory may hold (docs/fleet-repo.md)."""

from __future__ import annotations

SETTINGS_FILE = "gitopsbot.yaml"
CLUSTERS_DIR = "clusters"
POLICIES_DIR = "policies"
RELEASE_FILE = "release.yaml"
VALUES_FILE = "values.yaml"
ROLLOUT_FILE = "rollout.yaml"
CREDENTIALS_FILE = "credentials.yaml"
SMOKE_TEST_FILE = "smoke-test.yaml"
CANARY_SMOKE_FILE = "canary-smoke.yaml"  # the GPU-path canary (core.canary_smoke)
CLUSTER_FILES = (
    RELEASE_FILE,
    VALUES_FILE,
    ROLLOUT_FILE,
    CREDENTIALS_FILE,
    SMOKE_TEST_FILE,
    CANARY_SMOKE_FILE,
)
REQUIRED_CLUSTER_FILES = (RELEASE_FILE, VALUES_FILE)
