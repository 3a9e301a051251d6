"""Which cluster, operation and step a log line belongs to: context variables set for a pass.

``pass_of(cluster)`` wraps one reconcile pass: inside it every log record, from any logger
(the bot's, helm's adapter, a library's), carries ``cluster`` and the pass's ``operation`` and
``step`` once they are known (``note``, called where the reconciler picks the operation and
where a step is executed). ``RecordFields`` is the ``logging.Filter`` that copies them onto
each record; the formatters (``adapters.logs``) print them as ``cluster op=… step=…`` or as
JSON fields.

Why context variables: passes of several clusters run side by side on the scheduler's thread
pool, and a record must name the cluster of the pass that emitted it. A context variable is
per thread (each worker thread has its own context), but a pool thread runs one pass after
another in the *same* context: so ``pass_of`` resets every variable it or ``note`` set when the
pass ends, whether it returned or raised, and a value never leaks into the next pass.

Standard library only, no I/O: the bot sets the values, the composition root installs the
filter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_cluster: ContextVar[str] = ContextVar("gitopsbot_cluster", default="")
_operation: ContextVar[str] = ContextVar("gitopsbot_operation", default="")
_step: ContextVar[str] = ContextVar("gitopsbot_step", default="")

FIELDS = ("cluster", "operation", "step")


@contextmanager
def pass_of(cluster: str) -> Iterator[None]:
    """Records inside carry ``cluster`` (operation and step empty until ``note``d); on exit
    all three are what they were before, also after an exception."""
    tokens = (_cluster.set(cluster), _operation.set(""), _step.set(""))
    try:
        yield
    finally:
        _step.reset(tokens[2])
        _operation.reset(tokens[1])
        _cluster.reset(tokens[0])


def note(*, operation: str | None = None, step: str | None = None) -> None:
    """Set the operation and/or the step for the rest of the enclosing pass (``pass_of``
    resets them when the pass ends). Outside a pass: does nothing, so nothing is left set
    on a thread that no pass will reset."""
    if not _cluster.get():
        return
    if operation is not None:
        _operation.set(operation)
    if step is not None:
        _step.set(step)


def current() -> dict[str, str]:
    """``{"cluster": …, "operation": …, "step": …}`` inside a pass; ``{}`` outside one."""
    cluster = _cluster.get()
    if not cluster:
        return {}
    return {"cluster": cluster, "operation": _operation.get(), "step": _step.get()}


class RecordFields(logging.Filter):
    """Copies the pass's cluster, operation and step onto every record it sees (set on a
    handler: records of every logger pass through it). A field the caller already gave
    (``extra={"step": …}``: a happening names its own step) is kept. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True
