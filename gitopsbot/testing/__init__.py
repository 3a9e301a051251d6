"""In-memory fakes of the ports, for tests and the bot's own unit tests.

One module per fake, named for the port it fakes; every fake is importable from here
(``from gitopsbot.testing import FakeCluster``). Each fake obeys the same contract tests as
the real adapters (tests/forge for the forge). Production modules never import this package
(tests/test_layering.py checks).
"""

from gitopsbot.testing.cluster import BEFORE_FIRST_APPLY, FakeCluster
from gitopsbot.testing.events import FakeEvents
from gitopsbot.testing.forge import FakeForge
from gitopsbot.testing.helm import FakeHelm
from gitopsbot.testing.leases import FakeLeases
from gitopsbot.testing.release_watch import FakeReleaseWatch

__all__ = [
    "BEFORE_FIRST_APPLY",
    "FakeCluster",
    "FakeEvents",
    "FakeForge",
    "FakeHelm",
    "FakeLeases",
    "FakeReleaseWatch",
]
