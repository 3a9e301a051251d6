"""Adapters: the only code that imports pygit2, kubernetes, httpx or runs subprocesses.

Vendor types and exceptions stop here and become ``gitopsbot.errors`` and core types.
"""
