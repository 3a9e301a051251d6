"""Which failures of a Kubernetes client binary (helm, kubectl) are worth another attempt.

Both print the API server's Status message (not the HTTP code) or Go's transport error on
stderr. ``is_transient`` says the server or the network was busy or briefly away (a 409 on a
stale read, 429, 5xx, a dropped connection), not that the request is wrong; a request the
server refused on its merits (invalid, forbidden, a server-side-apply field conflict) or a
tool's own deadline is never transient, even when a transient phrase is also in the text
(helm 3 lists several errors at once).
"""

from __future__ import annotations

import re

_TRANSIENT = re.compile(
    "|".join(
        (
            # 409 on a stale read (not a server-side-apply field conflict: see _PERMANENT)
            r"the object has been modified",
            r"Operation cannot be fulfilled",
            # 429
            r"too many requests",
            r"rate limit",
            # 5xx
            r"Internal error occurred",
            r"\bInternalError\b",
            r"an error on the server",
            r"the server is currently unable to handle the request",
            r"Service ?Unavailable",
            r"\b50[0234] (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway)",
            r"\((?:500|502|503|504)\)",
            r"etcdserver: (?:request timed out|leader changed)",
            # transport
            r"connection reset by peer",
            r"connection refused",
            r"broken pipe",
            r"unexpected EOF",
            r"[:\s]EOF\b",
            r"i/o timeout",
            r"TLS handshake timeout",
            r"http2: client connection lost",
        )
    ),
    re.IGNORECASE,
)
_PERMANENT = re.compile(
    r"is invalid|forbidden|unauthorized|conflict with \"|another operation|yaml: |"
    r"template: |parse error|post-render|plugin \"|"
    # helm's own --timeout ran out (HelmTimeout): another attempt would take as long again
    r"context deadline exceeded|timed out waiting",
    re.IGNORECASE,
)


def is_transient(stderr: str) -> bool:
    """True when ``stderr`` reports a failure another attempt may not meet."""
    return bool(_TRANSIENT.search(stderr)) and not _PERMANENT.search(stderr)
