"""Several replicas of the bot: who holds a Lease (``lease``), which replica works on which
cluster (``sharding``), and the answers of ``/healthz`` and ``/readyz`` (``health``).

May import: nothing else of core
(the layers contract in pyproject.toml).
"""
