"""Small Protocols the bot needs from the outside world, one module per role.

Signatures use core types and builtins only. Adapters implement them; fakes in
``gitopsbot.testing`` implement them too and are checked by the same contract tests. Each
implementation subclasses its port explicitly, so mypy checks its signatures against it; the
port's docstrings are the contract, and an implementation's docstring says only what it does
differently. What every implementation would write the same way is written once in the port
(``Cluster.deployment_ready``, ``charts.fetched_again``).
"""
