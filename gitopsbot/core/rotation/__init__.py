"""Credential rotation (R17–R20): which credentials a change rotates and what rotating each
takes (``credentials``), and the rotation's part of the plan (``plan``).

May import: core.fleet, core.charts, core.records, core.policy
(the layers contract in pyproject.toml).
"""
