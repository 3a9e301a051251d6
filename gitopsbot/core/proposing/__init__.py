"""Upstream version proposals: which chart version to propose to which cluster, one request
per cluster (``proposals``) or per wave (``wave_proposals``).

May import: the packages below it, forge and policy included
(the layers contract in pyproject.toml).
"""
