"""The journal store's reads: a journal is parsed once per content."""

from __future__ import annotations

from dataclasses import replace

from tests.executor.conftest import Env
from tests.executor.test_pr_mirror import _started


def test_the_journal_store_parses_a_journal_once_per_content(env: Env) -> None:
    # A pass reads the current journal several times; each read of unchanged bytes is the
    # same parsed value, and a new record is parsed anew.
    journal = _started(env)
    store = env.reconciler(name="reader").store
    first = store.current("lab")
    assert first == journal and store.current("lab") is first
    store.save(replace(journal, failure="changed"), "a new record")
    again = store.current("lab")
    assert again is not None and again.failure == "changed" and again is not first
