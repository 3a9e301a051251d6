"""Forge providers over httpx: GitHub, GitLab, Gitea/Forgejo. See ``make_forge``."""
