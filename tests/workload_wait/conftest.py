"""The end-to-end world and bot (tests/e2e/conftest.py) for the workload-awareness story in
the sandbox (test_workload_story.py); the other tests here do not use them."""

from tests.e2e.conftest import make_bot, make_world

__all__ = ["make_bot", "make_world"]
