"""What a YAML scalar means: YAML 1.2 core rules, exactly as ruamel.yaml's round trip resolved
them before ``core.fleet.located_yaml`` took over reading (``on``/``yes`` are strings, ``0755`` is
the integer 755, ``0o755`` is 493, ``1e3`` is a float, ``2001-12-14`` a date). Pure."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Tagged:
    """A scalar or collection with a tag the bot does not interpret (``!duration 7d``)."""

    tag: str
    value: Any


_PLAIN = "?"  # our resolver's tag for a plain (unquoted, untagged) scalar
_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"

_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_INT = re.compile(r"[-+]?(?:0b[0-1_]+|0o?[0-7_]+|[0-9_]+|0x[0-9a-fA-F_]+)")
_FLOAT = re.compile(
    r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
    r"|[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN)"
)
_TIMESTAMP = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{1,2})-(?P<day>[0-9]{1,2})"
    r"(?:(?:[Tt]|[ \t]+)(?P<hour>[0-9]{1,2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]*))?"
    r"(?:[ \t]*(?P<tz>Z|(?P<tz_sign>[-+])(?P<tz_hour>[0-9]{1,2})(?::(?P<tz_minute>[0-9]{2}))?))?)?"
)
_DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_NUMBER_START = frozenset("-+0123456789.")


def _int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits[:1] == "-" else 1
    if digits[:1] in "+-":
        digits = digits[1:]
    if digits.startswith("0b"):
        return sign * int(digits[2:], 2)
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    if digits.startswith("0o"):
        return sign * int(digits[2:], 8)
    return sign * int(digits)  # "0755" is 755: YAML 1.2 has no C-style octal


def _float(text: str) -> float:
    low = text.lower()
    if low.endswith(".inf"):
        return float("-inf") if low.startswith("-") else float("inf")
    if low == ".nan":
        return float("nan")
    return float(text.replace("_", ""))


def _timestamp(m: re.Match[str]) -> dt.date | dt.datetime:
    year, month, day = int(m["year"]), int(m["month"]), int(m["day"])
    if m["hour"] is None:
        return dt.date(year, month, day)
    fraction = int((m["fraction"] or "0")[:6].ljust(6, "0"))
    tz: dt.tzinfo | None = None
    if m["tz"] == "Z":
        tz = dt.UTC
    elif m["tz"]:
        delta = dt.timedelta(hours=int(m["tz_hour"]), minutes=int(m["tz_minute"] or 0))
        tz = dt.timezone(-delta if m["tz_sign"] == "-" else delta)
    return dt.datetime(
        year, month, day, int(m["hour"]), int(m["minute"]), int(m["second"]), fraction, tz
    )


def resolve_plain(text: str) -> Any:
    """A plain scalar's value by YAML 1.2 core rules, as ruamel's round trip resolved it."""
    first = text[:1]
    if first in "tTfF" and text in _BOOL:
        return _BOOL[text]
    if text in _NULL:
        return None
    if first in _NUMBER_START:
        try:
            if first != "." and _INT.fullmatch(text):
                return _int(text)
            if _FLOAT.fullmatch(text):
                return _float(text)
        except ValueError:  # "+_", "0o_", "._": number-shaped, no digits (ruamel crashed)
            return text
        if first.isdigit():
            m = _TIMESTAMP.fullmatch(text)
            if m is not None and (m["hour"] is not None or _DATE_ONLY.fullmatch(text)):
                try:
                    return _timestamp(m)
                except ValueError:
                    return text
    if text == "=":
        return Tagged("tag:yaml.org,2002:value", text)
    if text == "<<":
        return Tagged("tag:yaml.org,2002:merge", text)
    return text


def resolve_tagged(tag: str, text: str) -> Any:
    """A scalar with an explicit standard tag (``!!int "3"``); anything else stays Tagged."""
    try:
        if tag == "tag:yaml.org,2002:int" and _INT.fullmatch(text):
            return _int(text)
        if tag == "tag:yaml.org,2002:float" and (_FLOAT.fullmatch(text) or _INT.fullmatch(text)):
            return _float(text)
        if tag == "tag:yaml.org,2002:bool" and text in _BOOL:
            return _BOOL[text]
        if tag == "tag:yaml.org,2002:null" and text in _NULL:
            return None
    except ValueError:
        pass
    return Tagged(tag, text)
