"""The executor tests' world (fake cluster, helm, forge, real Git) for the pause tests."""

from tests.executor.conftest import env

__all__ = ["env"]
