"""Promotion through waves: may a chart version reach this cluster yet (``promotion``), the gate
as a policy verdict (``promotion_gate``), the evidence kept small, failed-version and GPU
canary marks.

May import: the packages below it, planning included
(the layers contract in pyproject.toml).
"""
