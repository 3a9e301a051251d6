"""How log lines are written: readable text or one JSON object per line (docs/logging.md).

The code logs through the standard library (``logging.getLogger(__name__)``) and nothing else;
this module only formats and writes what it logs, to standard error.

- ``text`` (the default), for a person at a terminal::

    2026-12-03T15:04:05Z INFO lab op=upgrade-3f2a9c step=helm-upgrade progress: upgrade ...

  time in UTC to the second, level, then ``CLUSTER op=OPERATION step=STEP`` when the line was
  emitted during a pass of that cluster (each part only when known), the logger without its
  ``gitopsbot.`` prefix, and the message; a traceback follows on its own lines.
- ``json``, for a log pipeline (Loki, Elasticsearch, Cloud Logging): one object per line with
  ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``message``; ``cluster``,
  ``operation`` and ``step`` on every line emitted during a pass (``null`` when the pass has
  no operation or step yet, absent outside a pass); an exception as one ``exc`` string (the
  traceback, newlines escaped); fields a caller passes with ``extra=`` as they are.

The JSON formatter is python-json-logger's ``JsonFormatter``. Why that library: it is a plain
``logging.Formatter``, so the standard library stays the one logging API of the code (and of
the libraries the bot uses, whose records come out as JSON too), with no second pipeline to
configure; it is small, typed, maintained, and does what would otherwise be hand-written:
serialising ``extra`` fields of any type, exceptions and stack info, renaming fields.
structlog was the other candidate: its processors and context binding are more than needed
here, and its context variables would put a vendor library into ``gitopsbot.bot`` (the pass
context is ``bot.log_context``, standard ``contextvars``).

Secrets: every line, text or JSON (each string field, the traceback included), is passed
through ``redaction.KNOWN``, the secret values this process resolved, before it is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

from gitopsbot.adapters.redaction import KNOWN, KnownSecrets

FORMATS = ("text", "json")
CONTEXT_FIELDS = ("cluster", "operation", "step")
# JSON keys in this order first; extras follow.
_FIRST = ("time", "level", "logger", "message", *CONTEXT_FIELDS)


def rfc3339(created: float, *, timespec: str = "milliseconds") -> str:
    """``2026-12-03T15:04:05.123Z``: a record's time in UTC."""
    stamp = datetime.fromtimestamp(created, UTC).isoformat(timespec=timespec)
    return stamp.replace("+00:00", "Z")


class JsonFormatter(_LibraryJsonFormatter):
    """One JSON object per record: time, level, logger, message, the pass's cluster,
    operation and step, ``exc``; every string masked by ``known``."""

    def __init__(self, known: KnownSecrets = KNOWN) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={
                "levelname": "level",
                "name": "logger",
                "exc_info": "exc",
                "stack_info": "stack",
            },
            json_ensure_ascii=False,
        )
        self._known = known

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = rfc3339(record.created)
        super().add_fields(log_data, record, message_dict)
        if "cluster" in log_data:  # during a pass: all three, null when not known
            for name in CONTEXT_FIELDS:
                log_data[name] = log_data.get(name) or None

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        ordered = {key: log_data[key] for key in _FIRST if key in log_data}
        ordered.update(log_data)
        return {key: self._mask(value) for key, value in ordered.items()}

    def _mask(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._known.redact(value)
        if isinstance(value, list | tuple):
            return [self._mask(v) for v in value]
        if isinstance(value, dict):
            return {k: self._mask(v) for k, v in value.items()}
        if isinstance(value, int | float | bool) or value is None:
            return value
        return self._known.redact(str(value))  # serialised as text anyway: masked first


class TextFormatter(logging.Formatter):
    """``TIME LEVEL [CLUSTER op=… step=…] LOGGER: message``, a traceback on the lines after;
    the whole line masked by ``known``."""

    def __init__(self, known: KnownSecrets = KNOWN) -> None:
        super().__init__()
        self._known = known

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        parts = [rfc3339(record.created, timespec="seconds"), record.levelname]
        cluster = getattr(record, "cluster", "")
        if cluster:
            parts.append(str(cluster))
        for field, label in (("operation", "op"), ("step", "step")):
            value = getattr(record, field, "")
            if value:
                parts.append(f"{label}={value}")
        parts.append(f"{record.name.removeprefix('gitopsbot.')}:")
        line = f"{' '.join(parts)} {record.message}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return self._known.redact(line)


def formatter(fmt: str, known: KnownSecrets = KNOWN) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter(known)
    if fmt == "text":
        return TextFormatter(known)
    raise ValueError(f"log format {fmt!r}: give one of {', '.join(FORMATS)}")


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not the stream of the
    moment it was built), so a replaced stderr is followed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # under the handler's lock (Handler.handle)
        super().emit(record)


def handler(
    fmt: str,
    *,
    stream: TextIO | None = None,
    filters: Sequence[logging.Filter] = (),
    known: KnownSecrets = KNOWN,
) -> logging.Handler:
    """A handler writing ``fmt`` lines to ``stream`` (default: standard error), with
    ``filters`` (the pass context: ``bot.log_context.RecordFields``)."""
    out: logging.Handler = StderrHandler() if stream is None else logging.StreamHandler(stream)
    out.setFormatter(formatter(fmt, known))
    for f in filters:
        out.addFilter(f)
    return out


_MARK = "_gitopsbot_handler"


def configure(
    fmt: str,
    *,
    root_level: int,
    levels: Mapping[str, int] | None = None,
    filters: Sequence[logging.Filter] = (),
) -> Callable[[], None] | None:
    """Log ``fmt`` lines to standard error at ``root_level`` (``levels``: loggers set apart,
    ``{"gitopsbot": INFO}``). Like ``logging.basicConfig``, it leaves logging alone when the
    embedding program (or pytest) installed handlers of its own: returns None then. Else it
    replaces the handler a previous call installed and returns how to undo the call."""
    root = logging.getLogger()
    if any(not getattr(h, _MARK, False) for h in root.handlers):
        return None
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    new = handler(fmt, filters=filters)
    setattr(new, _MARK, True)
    before = {name: logging.getLogger(name).level for name in levels or {}}
    before_root = root.level
    root.addHandler(new)
    root.setLevel(root_level)
    for name, level in (levels or {}).items():
        logging.getLogger(name).setLevel(level)

    def undo() -> None:
        root.removeHandler(new)
        root.setLevel(before_root)
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)

    return undo
