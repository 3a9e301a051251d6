"""The exception tree. Adapters turn vendor errors into these; nothing else leaks out.

Each concrete class has a *family* (where the error came from, with its context) and one
*disposition* (what the executor does with it)::

    GitOpsBotError
    ├── ConfigError        Failed, never retried: bad fleet files, settings, policy input
    │     └── FleetError   one or more located problems (file, line, column, field)
    ├── TransientError     Errored: retry with backoff; ``retry_after`` seconds when known
    ├── PermanentError     Failed until the spec or the world changes
    │
    ├── ChartError         family: chart repository, index, archive
    ├── GitError           family: NonFastForward (transient), GitAuthError, PushRefused
    │                      (permanent), GitInterrupted (transient: Ctrl-C stopped a transfer),
    │                      ...
    ├── ForgeError         family: ForgeRateLimited, ForgeServerError, ForgeConflict (transient);
    │                      ForgeNotFound, ForgeUnauthorized (permanent)
    ├── KubeError          family: KubeConflict, KubeServerError, KubeTooManyRequests
    │                      (transient); KubeInvalid, KubeNotFound, KubeForbidden (permanent)
    └── HelmError          family: HelmTimeout (transient), HelmFailed (permanent),
                           HelmReleaseLocked (permanent: a release stuck in pending-*),
                           HelmStopped (transient: the bot stopped its helm on shutdown),
                           HelmChartUnusable (permanent: the chart could not be fetched or
                           loaded; nothing changed in the cluster)
    └── NotificationFailed  transient: a chat webhook did not take a notification

Messages never carry secret material or tokens: adapters build them from redacted text.
"""

from __future__ import annotations

from dataclasses import dataclass


class GitOpsBotError(Exception):
    """Base of every error gitopsbot raises on purpose."""


class ConfigError(GitOpsBotError):
    """Input is wrong; retrying will not help."""


class TransientError(GitOpsBotError):
    """The outside world failed for now; retry later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(GitOpsBotError):
    """The outside world said no; retrying the same thing will not help."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One located problem in a user's file. Line and column are 1-based (0 = unknown)."""

    file: str
    line: int
    column: int
    field: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        text = (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )
        return f"{text} ({self.hint})" if self.hint else text


class FleetError(ConfigError):
    """One or more problems in the fleet repository; nothing is applied."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class SymlinkRefused(FleetError):
    """A file tree was asked for a symbolic link: never followed (it may point at
    ``/etc/shadow`` or out of the repository), refused by name."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            [Problem(path, 0, 0, "", "a symlink is not allowed here", "commit the file itself")]
        )


class ChartError(GitOpsBotError):
    """Family: chart repository, index or archive."""


class ChartNotFound(ChartError, PermanentError):
    """The chart or version is not in the repository."""


class ChartUnavailable(ChartError, TransientError):
    """The chart repository could not be reached or answered 5xx."""


class ChartUnauthorized(ChartError, PermanentError):
    """The chart registry refused the bot's login (401/403): the bot's settings or secret
    need fixing, not the change; a pass fails with it until they are (nothing applied)."""


class ChartInvalid(ChartError, PermanentError):
    """The index or chart archive is malformed, unsafe or too large."""


class GitError(GitOpsBotError):
    """Family: Git repository or remote."""


class NonFastForward(GitError, TransientError):
    """The remote moved; fetch, replay and push again."""


class GitAuthError(GitError, PermanentError):
    """The remote refused the credentials."""


class GitUnavailable(GitError, TransientError):
    """The remote could not be reached."""


class PushRefused(GitError, PermanentError):
    """The remote refused a push by policy (a pre-receive or update hook, a protected
    branch); pushing again will not help. The message carries the remote's reason.
    ``refused_sha``: the local commit the remote refused (it stays in the local object store,
    while the local branch goes back to the remote's head)."""

    def __init__(self, message: str, *, refused_sha: str = "") -> None:
        super().__init__(message)
        self.refused_sha = refused_sha


class GitFailed(GitError, PermanentError):
    """Any other Git failure."""


class GitInterrupted(GitError, TransientError):
    """A fetch or push stopped at its next callback because the command is being
    interrupted (Ctrl-C), in a thread other than the main one (which gets KeyboardInterrupt):
    nothing is wrong with the remote; the next pass, if any, does it again."""


class ForgeError(GitOpsBotError):
    """Family: GitHub, GitLab or Gitea API. Context never includes the token."""


class ForgeRateLimited(ForgeError, TransientError):
    """Primary or secondary rate limit; ``retry_after`` says when to come back."""


class ForgeServerError(ForgeError, TransientError):
    """5xx or a transport failure."""


class ForgeConflict(ForgeError, TransientError):
    """409 / 422 races: re-read and try again."""


class ForgeNotFound(ForgeError, PermanentError):
    """404."""


class ForgeUnauthorized(ForgeError, PermanentError):
    """401 / 403 that is not a rate limit."""


class ForgeFailed(ForgeError, PermanentError):
    """Any other refusal."""


class KubeError(GitOpsBotError):
    """Family: Kubernetes API."""


class KubeConflict(KubeError, TransientError):
    """409: stale resourceVersion or field-manager conflict."""


class KubeServerError(KubeError, TransientError):
    """5xx or a transport failure."""


class KubeTooManyRequests(KubeError, TransientError):
    """429 with Retry-After."""


class KubeInvalid(KubeError, PermanentError):
    """422: the object does not satisfy the schema."""


class KubeNotFound(KubeError, PermanentError):
    """404: the caller decides whether that is an error."""


class KubeForbidden(KubeError, PermanentError):
    """401 / 403."""


class KubeFailed(KubeError, PermanentError):
    """Any other refusal."""


class HelmError(GitOpsBotError):
    """Family: the helm binary. Carries argv (secret-free) and a bounded stderr tail."""


class HelmTimeout(HelmError, TransientError):
    """helm did not finish in time."""


class HelmFailed(HelmError, PermanentError):
    """helm exited non-zero (after retrying transient API failures inside the call)."""


class HelmReleaseLocked(HelmError, PermanentError):
    """The release is stuck in pending-install/upgrade/rollback; reported, never forced."""


class HelmStopped(HelmError, TransientError):
    """The bot stopped its own helm because it is shutting down: not a failure of the
    upgrade (helm records the cancelled revision failed); the next pass runs the step
    again."""


class HelmChartUnusable(HelmError, PermanentError):
    """The chart could not be fetched (a version the repository does not have, a repository
    still unreachable after retries) or helm refused it (an unsafe or broken archive). helm
    stops before it reads or writes the release: nothing was changed in the cluster. The
    message names the chart and version."""


class SecretUnavailable(PermanentError):
    """A secret reference could not be resolved. The message names the ref, never a value."""


class BinaryUnavailable(PermanentError):
    """helm or kubectl could not be found or fetched."""


class NotificationFailed(TransientError):
    """A chat or JSON webhook did not take a notification (after bounded retries). The message
    names the target (``gitopsbot.yaml:12: notifications[0] (slack)``), never its URL."""
