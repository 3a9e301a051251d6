"""A waitress server on a daemon I/O thread of its own: bound without leaks, stopped from any
thread. The webhook receiver (``adapters.webhooks``, which says why waitress) and the metrics
server (``adapters.metrics_server``) both serve this way."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher


class ClosableServer(TcpWSGIServer):
    """waitress's TCP server that can close every connection, and itself, at once."""

    def channels(self) -> list[HTTPChannel]:
        return list(cast("dict[int, HTTPChannel]", self.active_channels).values())

    def close_everything(self) -> None:
        for channel in self.channels():
            channel.handle_close()
        self.close()


S = TypeVar("S", bound=ClosableServer)
Bind = Callable[[dict[int, Any], ThreadedTaskDispatcher], S]


class _Trigger(Protocol):
    """What the server's trigger is (the stub types it as int)."""

    def pull_trigger(self, thunk: Callable[[], object] | None = None) -> None: ...


class ServedOnThread(Generic[S]):
    """The server a subclass binds in ``start`` (``_serve``), its I/O thread, ``stop`` and
    ``url``; a context manager (``start`` on enter, ``stop`` on exit)."""

    _server: S | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def _serve(self, bind: Bind[S], *, threads: int, name: str) -> None:
        """Bind (an ``OSError`` for a taken port) and serve on a daemon I/O thread."""
        # Our own map and dispatcher: waitress starts its pool and opens its trigger before
        # it binds, so a taken port would otherwise leave threads and a pipe behind.
        socket_map: dict[int, Any] = {}
        dispatcher = ThreadedTaskDispatcher()
        try:
            server = bind(socket_map, dispatcher)
        except BaseException:
            for opened in list(socket_map.values()):
                opened.close()
            raise
        dispatcher.set_thread_count(threads)
        self._server = server
        self._thread = threading.Thread(target=server.run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        if thread is not None and thread.is_alive():
            # Closed on the I/O thread itself: the loop ends once nothing is left open.
            trigger = cast("_Trigger", server.trigger)
            try:
                trigger.pull_trigger(server.close_everything)
            except OSError:  # the trigger's pipe is already gone (seen in CI): close here
                server.close_everything()
            thread.join(5)
        else:
            server.close_everything()
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None and self._server.socket is not None, "not serving"
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"
