"""What is exchanged with a forge (GitHub, GitLab, Gitea): requests, comments and statuses
(``forge_types``), webhook deliveries (``webhook_events``), and the comment commands on an
operation's pull request (``pr_commands``).
"""
