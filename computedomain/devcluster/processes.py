"""Child processes of the harness: started in their own session, dying with their parent
unless detached, recognised by PID and name later, stopped with SIGTERM then SIGKILL.

Serves the control plane (etcd, kube-apiserver, ...) and the demo (controller, simulator).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM when the parent (thread) exits, e.g. a
    # killed pytest or an interrupted demo.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def pid_runs(pid: int, binary_name: str) -> bool:
    """True if ``pid`` is alive and still the process we started (guards against PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    argv0 = cmdline.split(b"\0", 1)[0].decode(errors="replace")
    return Path(argv0).name == binary_name


def rss_mb(pid: int | str = "self") -> float:
    """A process's resident set size (``VmRSS``), in MiB; 0 when it has none (gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class ChildProcess:
    """A child we started (``popen`` set) or one re-found by PID from a state file."""

    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_runs(self.pid, self.name)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode if self.popen is not None else None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGTERM, SIGKILL after ``grace``; the exit code when it is our child."""
        if not self.alive():
            if self.popen is not None:
                self.popen.wait()
            return self.returncode
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.alive() and time.monotonic() < deadline:
            if self.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(timeout=0.1)
            else:
                time.sleep(0.1)
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            if self.popen is not None:
                self.popen.wait()
        return self.returncode


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    *,
    detach: bool = False,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    executable: str | None = None,
) -> ChildProcess:
    """Start ``argv`` with stdout and stderr in ``log``, in a session of its own. Unless
    ``detach``, it dies with the thread that started it (so start it from a long-lived one)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv),
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
            preexec_fn=None if detach else _die_with_parent,
        )
    return ChildProcess(name, popen.pid, log, popen)
