"""Ctrl-C (SIGINT) and SIGTERM, one way for every command (docs/commands.md, "Interrupts").

``install`` is called by the command line before a command runs; a command calls it again
to choose its own way:

- *abort* (the default): the first signal says what happens (when given a message) and
  raises KeyboardInterrupt in the main thread; the command's ``finally`` blocks stop what it
  started and the command line exits 130. Git transfers in flight in any thread stop at
  their next pygit2 callback (``check_transfer``).
- *graceful* (``run``, ``propose``'s loop): the first signal only sets ``requested()`` and
  calls ``on_first``; the command stops at its next step boundary and says so. Transfers go
  on: pushing a step's record is part of reaching the boundary.
- either way a second signal forces: the force message, ``on_force``, then ``os._exit(130)``
  at once. Helm children and sandbox servers die with this process (their shims' parent-death
  signal, adapters/helm_children.py); a step in flight is left as a crash leaves it, and
  ``run`` resumes it. A thread reading the signal wakeup fd counts the signals too: a Python
  handler runs only when the main thread is back in Python, and a main thread blocked in C
  (libgit2 waiting on a silent remote, up to its timeout) must not keep a second Ctrl-C from
  forcing.

Why the handler does not simply raise: it runs in the main thread between two bytecodes,
also inside a cffi callback libgit2 is calling (a fetch's progress, credentials). pygit2
keeps what a callback raises only inside its wrapper's ``try``; a KeyboardInterrupt raised on
the wrapper's first or last line is printed ("Exception ignored from cffi callback") and
dropped: the Ctrl-C is lost, and libgit2 carries on, once with credentials never set (a
segfault seen in the demo). So while any frame of pygit2 is on the main thread's stack the
handler does not raise: the transfer stops at its next callback, which raises through
pygit2's own channel, and a helper thread re-delivers the interrupt every
``REDELIVER_SECONDS`` until the main thread, back outside pygit2, takes it.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pygit2

from gitopsbot.errors import GitInterrupted

EXIT_INTERRUPTED = 130
REDELIVER_SECONDS = 0.05
_PYGIT2 = str(Path(pygit2.__file__).resolve().parent) + os.sep
_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class _State:
    """The process's one interrupt state (signal handlers are process-wide)."""

    def __init__(self) -> None:
        self.generation = 0  # bumped by each install: a stale re-delivery thread ends
        self.command = ""
        self.graceful = False
        self.message = ""
        self.force_message = ""
        self.on_first: Callable[[int], None] | None = None
        self.on_force: Callable[[], None] | None = None
        self.signum = 0
        self.requested = threading.Event()
        self.raised = False  # the main thread got its KeyboardInterrupt
        self.redelivering = False  # the next handler call is our own re-delivery
        self.redeliveries = 0  # wakeup bytes of our own re-deliveries, not signals
        self.stop_watching: Callable[[], None] | None = None
        self.forcing = threading.Lock()  # one forced exit, from the handler or the watcher


_state = _State()


def install(
    command: str,
    *,
    graceful: bool = False,
    message: str = "",
    force_message: str = "",
    on_first: Callable[[int], None] | None = None,
    on_force: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """Handle SIGINT and SIGTERM for ``command`` from now on (also where the parent ignored
    SIGINT: a background job still stops on ``kill -INT``); returns the undo, which puts
    back the previous handlers. ``message``: printed on stderr at the first signal (after
    ``gitopsbot COMMAND: SIGINT: ``); ``force_message``: at the second. A no-op outside the
    main thread (Python allows handlers only there)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    s = _state
    s.generation += 1
    s.command = command
    s.graceful = graceful
    s.message = message
    s.force_message = force_message
    s.on_first = on_first
    s.on_force = on_force
    s.signum = 0
    s.requested.clear()
    s.raised = False
    s.redelivering = False
    s.redeliveries = 0
    previous: dict[int, Handler] = {n: signal.signal(n, _handle) for n in _SIGNALS}
    if s.stop_watching is not None:  # a command choosing its own way: one watcher
        s.stop_watching()
    s.stop_watching = _watch_wakeup_fd()

    def undo() -> None:
        s.generation += 1
        s.requested.clear()
        if s.stop_watching is not None:
            s.stop_watching()
            s.stop_watching = None
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    return undo


def requested() -> bool:
    """A first signal came in: stop at the next safe point."""
    return _state.requested.is_set()


def aborted() -> bool:
    """A first signal came in and the command stops by KeyboardInterrupt (not graceful):
    whatever the command returns or raises now, it was interrupted (130). A Git call in the
    main thread may fail at once with "Interrupted system call" (EINTR) before the handler
    runs: that error is the interrupt too."""
    return _state.requested.is_set() and not _state.graceful


def settle() -> None:
    """The command ends normally on the interrupt (``status --watch``, ``demo --keep``: exit
    0): no longer ``aborted()``."""
    _state.raised = True
    _state.requested.clear()


def signal_name() -> str:
    """``SIGINT`` or ``SIGTERM``: the first signal received ("" before any)."""
    return signal.Signals(_state.signum).name if _state.signum else ""


def check_transfer() -> None:
    """For pygit2's remote callbacks: once an abort is asked for, stop the transfer. pygit2
    keeps what a callback raises and raises it again when libgit2 returns: KeyboardInterrupt
    in the main thread, GitInterrupted in the others (a bot thread's pass ends with it)."""
    s = _state
    if s.graceful or not s.requested.is_set():
        return
    if threading.current_thread() is threading.main_thread():
        s.raised = True  # the re-delivery thread may stop: this one reaches the command
        raise KeyboardInterrupt
    raise GitInterrupted(f"gitopsbot {s.command}: interrupted: transfer stopped")


def _handle(signum: int, frame: FrameType | None) -> None:
    s = _state
    if s.redelivering:  # our own re-delivery of the first signal, not a second one
        s.redelivering = False
        _raise_when_safe(frame, again=True)
        return
    if s.requested.is_set():
        _force(signum)
        return
    s.signum = signum
    s.requested.set()
    if s.message:
        _write(f"\ngitopsbot {s.command}: {signal_name()}: {s.message}\n")
    if s.on_first is not None:
        s.on_first(signum)
    if not s.graceful:
        _raise_when_safe(frame)


def _raise_when_safe(frame: FrameType | None, *, again: bool = False) -> None:
    s = _state
    if s.raised:
        return
    if _in_pygit2(frame):
        if not again:  # else the re-delivery thread runs already
            _redeliver_later()
        return
    s.raised = True
    raise KeyboardInterrupt


def _in_pygit2(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PYGIT2):
            return True
        frame = frame.f_back
    return False


def _redeliver_later() -> None:
    s = _state
    generation = s.generation

    def redeliver() -> None:
        while s.generation == generation and not s.raised:
            time.sleep(REDELIVER_SECONDS)
            if s.generation != generation or s.raised:
                return
            s.redelivering = True
            s.redeliveries += 1  # before: interrupt_main writes the wakeup byte itself
            _thread.interrupt_main(signal.SIGINT)  # the handler runs again, in the main thread

    threading.Thread(target=redeliver, name="interrupt-redelivery", daemon=True).start()


def _watch_wakeup_fd() -> Callable[[], None]:
    """Count SIGINT/SIGTERM from the wakeup fd (written by Python's C-level handler, even
    while the main thread is blocked in C); force at the second. Returns the stop."""
    s = _state
    generation = s.generation
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        received = 0
        try:
            while data := os.read(read_end, 64):  # b"" once the write end is closed
                for signum in data:
                    if signum not in _SIGNALS or s.generation != generation:
                        continue
                    if s.redeliveries > 0:
                        s.redeliveries -= 1
                        continue
                    received += 1
                    if received >= 2:
                        _force(signum)
        finally:
            os.close(read_end)

    threading.Thread(target=watch, name="interrupt-watch", daemon=True).start()

    stopped: list[bool] = []

    def stop() -> None:
        if not stopped:
            stopped.append(True)
            signal.set_wakeup_fd(previous)
            os.close(write_end)

    return stop


def _force(signum: int) -> None:
    s = _state
    if not s.forcing.acquire(blocking=False):
        return  # the other path is exiting already
    name = signal.Signals(signum).name
    text = f": {s.force_message}" if s.force_message else ""
    _write(f"\ngitopsbot {s.command}: {name} again: forced exit{text}\n")
    try:
        if s.on_force is not None:
            s.on_force()
    finally:  # whatever the hook does, the process ends now
        os._exit(EXIT_INTERRUPTED)


def _write(text: str) -> None:
    # os.write, not print: the handler may run while the main thread is inside a print.
    try:
        os.write(2, text.encode(errors="replace"))
    except OSError:
        pass
