"""What is exchanged with a forge (GitHub, GitLab, Gitea): requests, comments and statuses
(``forge_types``), webhook deliveries (``webhook_events``), and the comment commands on an
operation's pull request (``pr_commands``).

May import: the packages below it, operations included
(the layers contract in pyproject.toml).
"""
