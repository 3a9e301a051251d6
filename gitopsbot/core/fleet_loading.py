"""Names ``commands/plan.py`` still imports from before the split into ``core.fleet``.

Kept only while that module (owned by other work in flight) imports ``suggest`` from here; new
code imports ``gitopsbot.core.fleet.*``. Remove once nothing imports it.
"""

from gitopsbot.core.fleet.fields import suggest

__all__ = ["suggest"]
