"""Drift: where a cluster differs from what the bot would deploy (``report``), what it is
compared with (``baseline``), its pull request (``proposal``), its record on the state branch
(``record``) and when each cluster is checked (``schedule``).

May import: the packages below it, operations and notices included
(the layers contract in pyproject.toml).
"""
