"""Masking secrets (tokens, passwords, secret values) in free text before it reaches a log line
or an exception.

A secret of at least ``MIN_SUBSTRING_LENGTH`` characters is masked wherever it occurs. A
shorter one cannot be masked as a substring without mangling ordinary text (token ``x`` turned
``example-org`` into ``e***ample-org``) and hides nothing: it is masked only where it stands as a
whole token. Short credentials only ever travel in request headers, never in message text.

``helm_secrets`` says what helm's errors mask: the secrets a caller names and the values at
secret paths; never the other values, so an error stays readable.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from gitopsbot.core.fleet.secrets import secret_strings

MASK = "***"
MIN_SUBSTRING_LENGTH = 6
# Characters that can be part of a token; a short secret is masked only between other chars.
_TOKEN_CHAR = r"[A-Za-z0-9._~+/=\-]"


def redact_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every non-empty secret replaced by ``***`` (short ones as whole tokens)."""
    # Longest first, so a secret that contains another is masked whole.
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) >= MIN_SUBSTRING_LENGTH:
            text = text.replace(secret, MASK)
        else:
            text = re.sub(rf"(?<!{_TOKEN_CHAR}){re.escape(secret)}(?!{_TOKEN_CHAR})", MASK, text)
    return text


def helm_secrets(values: Mapping[str, Any], secret_values: Iterable[str] = ()) -> list[str]:
    """What an upgrade's errors mask, longest first: ``secret_values`` (the secrets the caller
    merged in, masked wherever they appear, also where a value at a path that is not secret
    equals one) and the values at secret paths of ``values`` (``core.fleet.secrets.secret_strings``:
    secret-looking keys, built-in paths, token shapes). No other value is masked."""
    found = {s for s in secret_values if s} | set(secret_strings(values))
    return sorted(found, key=len, reverse=True)


class KnownSecrets:
    """The secret values this process has resolved (``adapters.secrets.SecretResolver`` adds
    each one), so the log formatters (``adapters.logs``) can mask them in any line, wherever
    they came from: an exception message, a step's detail, a library's own log record. The
    adapters still redact their own messages; this is the last net before a line is written.
    Thread-safe: passes of several clusters resolve secrets side by side."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._ordered: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        if not value or value in self._values:
            return
        with self._lock:
            self._values.add(value)
            self._ordered = tuple(sorted(self._values, key=len, reverse=True))

    def redact(self, text: str) -> str:
        """``text`` with every known secret masked (``redact_secrets``)."""
        ordered = self._ordered
        return redact_secrets(text, ordered) if ordered and text else text

    def __len__(self) -> int:
        return len(self._ordered)


# Process-wide: a secret resolved for any cluster is masked in every log line.
KNOWN = KnownSecrets()
