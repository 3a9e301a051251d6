"""Upstream version proposals: which chart version to propose to which cluster, one request
per cluster (``proposals``) or per wave (``wave_proposals``).
"""
