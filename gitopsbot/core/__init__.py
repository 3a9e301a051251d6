"""The pure core: fleet model, diffs, plan, policy, rollout decisions, rendering.

Contract: modules here take snapshots and return values. No I/O, no clock ("now" is an
argument), no environment, no threads, no logging, no subprocesses. ``tests/test_layering.py``
fails when that breaks.
"""
