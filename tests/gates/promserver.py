"""The Prometheus-compatible test server lives in the sandbox (so the sandbox can serve it
too); the gate tests import it from here."""

from gitopsbot.sandbox.prometheus import Answer, PromServer, Request

__all__ = ["Answer", "PromServer", "Request"]
