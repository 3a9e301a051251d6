from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.notifications.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()
