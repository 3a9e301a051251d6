"""Forge providers over httpx: GitHub, GitLab, Gitea/Forgejo. Build one with ``connect``."""
