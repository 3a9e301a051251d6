"""helm's child processes: each in its own process group, told to die with the bot, kept in
a process-wide registry, and recorded on disk while it runs so that a later process can find
one that a dead bot left behind (docs/helm.md, "helm children").

- ``spawn`` starts one: its own session/process group (a terminal's Ctrl-C does not reach
  it; stopping the group stops what helm started, the post-renderer); on Linux SIGTERM as
  its parent-death signal (``PR_SET_PDEATHSIG``, see ``DEATH_SHIM``); stdin, stdout and
  stderr in memory files, not pipes (see ``spawn``); registered in ``_CHILDREN``; recorded
  in ``<run_dir>/helm-<pid>.json``. ``wait`` collects it, ``finish`` forgets it.
- ``terminate_all``: SIGTERM to every registered group, SIGKILL after a grace (the bot's
  signal handler and atexit). ``stop``: the same for the child the calling thread waits for.
- ``stop_orphans``: at start-up, a recorded helm whose owner is dead and which is provably
  still that helm (same pid *and* start time, command line ending with the recorded argv) is
  stopped; every record of a dead owner is removed. ``running`` answers "is a helm carrying
  this description running?" from the registry and the records.

Only atomic dict operations touch the registry (no lock), so a signal handler may read it
while a thread changes it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitopsbot.adapters.pids import pid_exists

log = logging.getLogger(__name__)

# Why an exec shim and not ``preexec_fn``: the bot runs passes in threads, and preexec_fn
# runs Python in the forked child before exec, where a lock another thread held at fork time
# (the import lock, a logging handler, a C library's) can deadlock it; CPython documents
# preexec_fn as unsafe with threads (and it disables vfork). ``setpriv --pdeathsig`` is not on
# every image and leaves a window: the parent can die between fork and prctl. So each helm
# starts as this shim in a fresh interpreter (only CPython's own C runs between fork and
# exec): it sets PR_SET_PDEATHSIG (1) to SIGTERM (15), exits if its parent is already gone
# (the window), then execs helm in place: same pid, same start time, helm's command line.
# It costs about 15 ms a call. The death signal follows the *thread* that started the child;
# that thread waits for the child until it ends, so in practice it fires when the bot dies.


DEATH_SHIM = (
    "import os,signal,sys\n"
    "try:\n import ctypes;ctypes.CDLL(None,use_errno=True).prctl(1,15,0,0,0)\n"
    "except Exception:pass\n"  # no ctypes: helm runs without a death signal
    "if os.getppid()!=int(sys.argv[1]):os._exit(125)\n"
    # what Python ignores for itself, helm gets back as usual (as Popen does)
    "signal.signal(signal.SIGPIPE,signal.SIG_DFL);signal.signal(signal.SIGXFSZ,signal.SIG_DFL)\n"
    "try:os.execvp(sys.argv[2],sys.argv[2:])\n"
    "except OSError as e:sys.stderr.write(f'cannot run {sys.argv[2]}: {e.strerror}\\n');"
    "os._exit(127)\n"
)


def death_shim(death_signal: int = 15) -> str:
    """The shim's source, sending ``death_signal`` (SIGTERM unless told) when the parent dies."""
    return DEATH_SHIM.replace("prctl(1,15,", f"prctl(1,{int(death_signal)},")


DEATH_SIGNAL = sys.platform.startswith("linux") and bool(sys.executable)
TERM_GRACE_SECONDS = 10.0
"""How long a helm being stopped has between SIGTERM and SIGKILL (time to record a cancelled
upgrade as failed)."""


@dataclass(slots=True)
class Child:
    """One running helm. ``argv`` is helm's command line (binary first); ``stopped`` is set
    when this process stopped it (shutdown). ``outputs``: the memory files holding its
    stdout and stderr; None without memfd, where pipes are used and ``stdin`` is the input
    ``communicate`` sends."""

    process: subprocess.Popen[bytes]
    start_time: int | None
    description: str
    what: str
    argv: list[str]
    outputs: tuple[int, int] | None
    stdin: bytes | None = None
    record: Path | None = None
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid


# Every helm child of this process that has not been reaped yet, by pid.
_CHILDREN: dict[int, Child] = {}


# -- /proc --------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22): with
    the pid, it names one process for good. None if there is no such process (or a zombie).
    Without /proc (not Linux): 0 for any live process."""
    if not _has_proc():
        return 0 if pid_exists(pid) else None
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, started: Any) -> bool:
    """Process ``pid`` runs and is the one that started at ``started``."""
    return isinstance(started, int) and pid > 0 and start_time(pid) == started


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0")[:-1]]


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    if not _has_proc():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group, SIGKILL what is left after ``grace`` s; for a group whose leader
    someone else reaps. True if SIGKILL was needed."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return False
        time.sleep(0.05)
    if not group_alive(pgid):
        return False
    _signal_group(pgid, signal.SIGKILL)
    return True


SELF_START = start_time(os.getpid()) or 0


def process_tag() -> str:
    """``<pid>-<start time>`` of this process: names its work directories."""
    return f"{os.getpid()}-{SELF_START}"


def left_by_dead_process(name: str) -> bool:
    """Whether a name made with ``process_tag`` (``helm-<pid>-<start>-...``) belongs to a
    process that is gone. A name without a tag counts as gone (older versions' leftovers)."""
    match = re.match(r"helm-(\d+)-(\d+)-", name)
    return not (match and alive(int(match.group(1)), int(match.group(2))))


# -- spawning and stopping ----------------------------------------------------------------------


def spawn(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: str | None,
    what: str,
    description: str,
    run_dir: Path,
) -> Child:
    """Start ``command`` (helm) as described above, with ``stdin`` as its standard input
    (/dev/null when None). OSError if it cannot be started. Collect it with ``wait``."""
    argv = list(command)
    if DEATH_SIGNAL:
        argv = [sys.executable, "-I", "-S", "-c", DEATH_SHIM, str(os.getpid()), *argv]
    data = None if stdin is None else stdin.encode("utf-8")
    # Standard input, output and error are memory files (memfd: RAM, no path, gone with the
    # last descriptor), not pipes. A pipe breaks when the bot dies, and helm (Go) dies of
    # SIGPIPE at its next write to stdout or stderr: a helm cancelling an upgrade on SIGTERM
    # writes "Release ... has been cancelled." first and would die before recording the
    # release ``failed``, leaving it pending-upgrade. Without memfd (not Linux): pipes.
    outputs: tuple[int, int] | None = None
    source: int | None = None
    if hasattr(os, "memfd_create"):
        outputs = (os.memfd_create("helm-stdout"), os.memfd_create("helm-stderr"))
        if data is not None:
            source = os.memfd_create("helm-stdin")
            _write_all(source, data)
            os.lseek(source, 0, os.SEEK_SET)
    standard_input: int = subprocess.DEVNULL
    if data is not None:
        standard_input = subprocess.PIPE if source is None else source
    try:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=standard_input,
            stdout=subprocess.PIPE if outputs is None else outputs[0],
            stderr=subprocess.PIPE if outputs is None else outputs[1],
            start_new_session=True,
        )
    except OSError:
        for fd in outputs or ():
            os.close(fd)
        raise
    finally:
        if source is not None:
            os.close(source)
    child = Child(
        process,
        start_time(process.pid),
        description,
        what,
        list(command),
        outputs,
        stdin=data if outputs is None else None,
    )
    _CHILDREN[process.pid] = child
    child.record = _write_record(child, run_dir)
    return child


def wait(child: Child, timeout: float) -> tuple[str, str]:
    """Wait for the child to end; its stdout and stderr. subprocess.TimeoutExpired after
    ``timeout`` s (then ``stop`` it)."""
    if child.outputs is None:
        stdout, stderr = child.process.communicate(child.stdin, timeout=timeout)
        return _text(stdout), _text(stderr)
    exited(child.process, timeout)
    child.process.wait()
    return _read_all(child.outputs[0]), _read_all(child.outputs[1])


def exited(process: subprocess.Popen[bytes], timeout: float | None) -> None:
    """Block until ``process`` has exited (not reaped); subprocess.TimeoutExpired after
    ``timeout`` s. ``Popen.wait(timeout=...)`` polls with sleeps growing to 50 ms, so it
    notices an exit up to 50 ms late (25 ms on average, on every helm call, #13); a pidfd
    becomes readable the moment the process exits. Without pidfd (not Linux, or a kernel
    before 5.3): that polling wait."""
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd here, or already reaped
        process.wait(timeout=timeout)
        return
    try:
        # poll, not select: select() refuses a descriptor past 1,024, and a bot watching
        # 1,000 clusters' releases holds more sockets than that (#29: every helm step of a
        # 1,000-cluster fleet failed on the pidfd's number).
        waiter = select.poll()
        waiter.register(fd, select.POLLIN)
        ready = waiter.poll(None if timeout is None else max(0.0, timeout) * 1000)
    finally:
        os.close(fd)
    if not ready:
        raise subprocess.TimeoutExpired(process.args, timeout or 0.0)


def finish(child: Child) -> None:
    """The child was reaped (or never will be by us): out of the registry, record removed,
    memory files closed."""
    _CHILDREN.pop(child.pid, None)
    if child.record is not None:
        child.record.unlink(missing_ok=True)
    for fd in child.outputs or ():
        try:
            os.close(fd)
        except OSError:
            pass
    child.outputs = None


def stop(child: Child, grace: float) -> None:
    """Stop the child the calling thread waits for: SIGTERM its group, wait ``grace`` s,
    SIGKILL the group; reaps it."""
    _signal_group(child.pid, signal.SIGTERM)
    try:
        _reap(child, grace)
    except subprocess.TimeoutExpired:
        _signal_group(child.pid, signal.SIGKILL)
        _reap(child, None)
    if group_alive(child.pid):  # what helm started, if it outlived helm
        _signal_group(child.pid, signal.SIGKILL)


def _reap(child: Child, timeout: float | None) -> None:
    if child.outputs is None:
        try:
            child.process.communicate(timeout=timeout)  # drains the pipes
            return
        except ValueError:  # an interrupted communicate closed them
            pass
    child.process.wait(timeout=timeout)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return _text(b"".join(chunks))


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def terminate_all(grace: float) -> int:
    """SIGTERM every registered child's group, SIGKILL those left after ``grace`` s; the
    threads waiting for them reap them. Returns how many there were."""
    children = list(_CHILDREN.values())
    for child in children:
        child.stopped = True
        log.warning("stopping %s (helm pid %d): gitopsbot is shutting down", child.what, child.pid)
        _signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    waiting = [child.pid for child in children]
    while waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        waiting = [pid for pid in waiting if group_alive(pid)]
    for pid in waiting:
        log.warning("helm pid %d still running %gs after SIGTERM: killed", pid, grace)
        _signal_group(pid, signal.SIGKILL)
    return len(children)


def terminate_under(run_dir: Path, grace: float) -> int:
    """SIGTERM the groups of this process's helm children recorded in ``run_dir`` (one
    cluster's helm home: a replica that lost the cluster's Lease stops its helm, which cancels
    and records the revision ``failed``), SIGKILL those left after ``grace`` s, from a timer:
    the caller does not wait. The threads waiting for them reap them. Returns how many."""
    children = [
        c for c in list(_CHILDREN.values()) if c.record is not None and c.record.parent == run_dir
    ]
    for child in children:
        child.stopped = True
        log.warning("stopping %s (helm pid %d): this replica lost the lease", child.what, child.pid)
        _signal_group(child.pid, signal.SIGTERM)

    def escalate() -> None:
        for child in children:
            if group_alive(child.pid):
                log.warning("helm pid %d still running %gs after SIGTERM: killed", child.pid, grace)
                _signal_group(child.pid, signal.SIGKILL)

    if children:
        timer = threading.Timer(grace, escalate)
        timer.daemon = True
        timer.start()
    return len(children)


def _terminate_at_exit() -> None:
    if _CHILDREN:
        terminate_all(TERM_GRACE_SECONDS)


atexit.register(_terminate_at_exit)


# -- records ------------------------------------------------------------------------------------


def _write_record(child: Child, run_dir: Path) -> Path | None:
    """``<run_dir>/helm-<pid>.json``: enough for a later process to prove that a pid is still
    this helm (start time, command line) and whether its owner still runs. No secret: argv
    never holds one (values go to stdin)."""
    path = run_dir / f"helm-{child.pid}.json"
    record = {
        "pid": child.pid,
        "start_time": child.start_time,
        "description": child.description,
        "argv": child.argv,
        "owner_pid": os.getpid(),
        "owner_start_time": SELF_START,
    }
    temporary = run_dir / f".helm-{child.pid}.json.tmp"
    try:
        temporary.write_text(json.dumps(record), encoding="utf-8")
        temporary.replace(path)
    except OSError as e:
        log.warning("%s: cannot record helm pid %d: %s", child.what, child.pid, e)
        return None
    return path


def _records(run_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(run_dir.glob("helm-*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            yield path, record


def _proven(record: Mapping[str, Any]) -> bool:
    """The recorded pid is still the recorded helm: same start time, and its command line
    ends with the recorded argv (which carries an upgrade's ``--description``)."""
    try:
        pid = int(record["pid"])
        argv = [str(a) for a in record["argv"]]
    except (KeyError, TypeError, ValueError):
        return False
    if not argv or not alive(pid, record.get("start_time")):
        return False
    cmdline = _cmdline(pid)
    return cmdline is not None and cmdline[-len(argv) :] == argv


def stop_orphans(run_dir: Path, grace: float) -> int:
    """Records of dead owners: a helm still running for a dead bot is stopped (SIGTERM to
    its group, SIGKILL after ``grace`` s) and logged; each such record is removed (also when
    its pid is gone or now names another process). Records of live owners stay. Returns how
    many helms were stopped."""
    stopped = 0
    for path, record in _records(run_dir):
        if alive(_int(record.get("owner_pid")), record.get("owner_start_time")):
            continue  # a live process's helm (another HelmCli on the same home)
        if _proven(record):
            pid = int(record["pid"])
            argv = [str(a) for a in record.get("argv", [])]
            log.warning(
                "stopping helm pid %d (%s), left running by gitopsbot process %s, which is gone",
                pid, record.get("description") or " ".join(argv[1:3]), record.get("owner_pid"),
            )  # fmt: skip
            if _stop_group(pid, grace):
                log.warning("helm pid %d still running %gs after SIGTERM: killed", pid, grace)
            stopped += 1
        path.unlink(missing_ok=True)
    return stopped


def running(description: str, run_dir: Path) -> bool:
    """A helm carrying ``description`` runs: a child of this process, or a recorded one that
    is provably still that helm."""
    if not description:
        return False
    if any(child.description == description for child in list(_CHILDREN.values())):
        return True
    return any(
        record.get("description") == description and _proven(record)
        for _, record in _records(run_dir)
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
