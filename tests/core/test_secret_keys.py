"""``is_secret_key`` is memoised (it runs once per values key on every plan) and stays exact;
``secret_strings`` (what helm's errors mask) is the secret material and nothing else."""

from __future__ import annotations

import pytest

from gitopsbot.adapters.redaction import helm_secrets
from gitopsbot.core.fleet.secrets import is_secret_key, secret_strings


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("enrollToken", True),
        ("secretKey", True),
        ("sk", True),
        ("secretName", False),
        ("tokenFile", False),
        ("existingSecretRef", False),
        ("image", False),
    ],
)
def test_classification_is_unchanged_by_the_cache(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret
    assert is_secret_key(key) is secret  # the cached answer is the same answer


def test_repeated_keys_hit_the_cache() -> None:
    # Memoised for plan speed (benchmarks/plan_bench.py): a second call is a cache hit.
    is_secret_key("someUniqueKeyForCacheTest")
    before = is_secret_key.cache_info().hits
    is_secret_key("someUniqueKeyForCacheTest")
    assert is_secret_key.cache_info().hits == before + 1


def test_secret_strings_are_the_secrets_only() -> None:
    token = "ghp_" + "a1" * 18
    values = {
        "cluster": {"name": "gpu-cluster-eu", "pool": {"name": "shared"}},
        "agent": {"enrollToken": "canary-enroll-1", "agentId": "org:staging"},
        "greptime": {"password": 12345678},
        "extra": {"apiToken": "changeme", "secretName": "tf-secret", "note": token},
        "team": {"webhook": "canary-declared-2", "flag": True},
    }
    found = secret_strings(values, ["team.webhook"])
    # Secret keys, built-in and declared paths (numbers there too), token shapes anywhere;
    # never a placeholder, a name of where a secret is, or an ordinary value.
    assert set(found) == {"canary-enroll-1", "12345678", token, "canary-declared-2"}
    assert [len(s) for s in found] == sorted(map(len, found), reverse=True)  # longest first
    masked = helm_secrets(values, ["copied-secret-3", ""])
    assert set(masked) == {"canary-enroll-1", "12345678", token, "copied-secret-3"}
