"""Local stand-ins for GitHub, GitLab and Gitea, written from their public REST documentation.

They serve the demo's "local forge" and the forge contract tests: in-memory state, real HTTP
on loopback, the documented status codes, bodies and headers (ETag/304, rate-limit headers,
Link pagination, 409/422 on a duplicate request, 403 secondary limits with Retry-After).
"""
