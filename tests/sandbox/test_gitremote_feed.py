"""The sandbox Git remote's feed of a request body into ``git http-backend``: a client that
goes away mid-body (a push interrupted by Ctrl-C: the connection reset) ends the backend's
input quietly; no traceback from the feeding thread (tests/test_interrupts.py asserts a
clean stderr after one SIGINT, and this was its intermittent failure)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

from gitopsbot.sandbox.gitremote import _feed


class Stdin(io.BytesIO):
    def close(self) -> None:
        self.closed_with = self.getvalue()
        super().close()


def test_a_client_gone_mid_body_ends_the_backends_input_quietly() -> None:
    def body() -> Iterator[bytes]:
        yield b"0032want "
        raise ConnectionResetError(104, "Connection reset by peer")

    stdin = Stdin()
    errors: list[BaseException] = []
    before = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        errors.append(args.exc_value or RuntimeError("no exception"))

    threading.excepthook = hook
    try:
        thread = threading.Thread(target=_feed, args=(stdin, body()))
        thread.start()
        thread.join(10)
    finally:
        threading.excepthook = before
    assert errors == [] and stdin.closed and stdin.closed_with == b"0032want "
