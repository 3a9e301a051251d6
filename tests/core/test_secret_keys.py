"""``is_secret_key`` is memoised (it runs once per values key on every plan) and stays exact."""

from __future__ import annotations

import pytest

from gitopsbot.core.secrets import is_secret_key


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
