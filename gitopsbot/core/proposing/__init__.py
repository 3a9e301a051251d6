"""Upstream version proposals: which chart version to propose to which clusters, one request
per cluster or per wave (``proposals``), and each request's edits and text
(``request_texts``).

May import: the packages below it, forge and policy included
(the layers contract in pyproject.toml).
"""
