"""API errors as the real server reports them: a ``Status`` object with code and reason."""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """An error the HTTP layer turns into a ``Status`` body with ``code`` and ``reason``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        group: str = "",
        causes: list[tuple[str, str, str]] | None = None,  # (reason, field, message)
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.kind = kind
        self.name = name
        self.group = group
        self.causes = causes or []
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [{"reason": r, "field": f, "message": m} for r, f, m in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:
            body["reason"] = self.reason
        if details:
            body["details"] = details
        return body


class NotFound(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(404, "NotFound", message, **kw)


class AlreadyExists(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(409, "AlreadyExists", message, **kw)


class Conflict(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(409, "Conflict", message, **kw)


class Invalid(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(422, "Invalid", message, **kw)


class Gone(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(410, "Expired", message, **kw)


class BadRequest(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(400, "BadRequest", message, **kw)


class UnsupportedMediaType(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(415, "UnsupportedMediaType", message, **kw)


class MethodNotAllowed(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(405, "MethodNotAllowed", message, **kw)


def error_from_answer(status: int, body: Any) -> ApiError:
    """The error a failed answer stands for: its status code, with the reason and message of
    its ``Status`` body (adapters/kube_store.py raises the emulator's errors for a real
    server's answers)."""
    reason, message = "", ""
    try:
        data = json.loads(body) if body else {}
        if isinstance(data, dict) and data.get("kind") == "Status":
            reason, message = str(data.get("reason") or ""), str(data.get("message") or "")
    except (ValueError, TypeError, UnicodeDecodeError):
        pass
    message = message or f"HTTP {status}"
    if status == 404:
        return NotFound(message)
    if status == 409:
        return AlreadyExists(message) if reason == "AlreadyExists" else Conflict(message)
    if status == 422:
        return Invalid(message)
    if status == 410:
        return Gone(message)
    if status == 400:
        return BadRequest(message)
    if status == 405:
        return MethodNotAllowed(message)
    if status == 415:
        return UnsupportedMediaType(message)
    return ApiError(status, reason or "InternalError", message)
