"""The end-to-end world and bot (tests/e2e/conftest.py) for the admission stories in the
sandbox: the availability budget and window-fit."""

from tests.e2e.conftest import make_bot, make_world

__all__ = ["make_bot", "make_world"]
