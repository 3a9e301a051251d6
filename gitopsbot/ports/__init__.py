"""Small Protocols the bot needs from the outside world, one module per role.

Signatures use core types and builtins only. Adapters implement them; fakes in
``gitopsbot.testing`` implement them too and are checked by the same contract tests.
"""
