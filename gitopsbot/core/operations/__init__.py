"""One operation's life: its steps and the next one (``operation``), the merge queue, the pass's
one decision (``pass_decision``), pauses, and manual Helm revisions.

May import: the packages below it, waves and planning included
(the layers contract in pyproject.toml).
"""
