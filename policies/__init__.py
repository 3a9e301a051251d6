"""The built-in policy rules, installed as the package ``gitopsbot._builtin_policies``
(setup.py maps this directory onto it; the YAML files here are the source of truth)."""
