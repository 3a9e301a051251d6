"""The end-to-end world and bot (tests/e2e/conftest.py) for the gate stories in the sandbox
(test_gates_story.py); the other gate tests use neither."""

from tests.e2e.conftest import make_bot, make_world

__all__ = ["make_bot", "make_world"]
