"""The built-in policy rules; installed as the package ``gitopsbot._builtin_policies`` (setup.py)."""
