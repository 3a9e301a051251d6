"""The embedded default environment: Kubernetes API emulator, TensorFusion controller
simulator, chart repository, Git remote and local forge, all on loopback.

Shipped (not test-only) because ``gitopsbot demo`` and ``gitopsbot sandbox`` use it and teams
rehearse upgrades on it.
"""
