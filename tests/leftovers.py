"""Nothing the suite starts may outlive it: each test process becomes a child subreaper (Linux), so a process a test
started and orphaned (a server whose shell was killed, not the server) is re-parented to it instead of to init;
when the process's tests are done (session fixtures torn down), any such child still alive is killed and named, and
the session fails."""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
# Children a test process keeps by design until it exits: multiprocessing's resource tracker and forkserver.
KEPT = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def become_subreaper() -> bool:
    """Orphans of this process's descendants come to it; False where the kernel has no such thing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stat(pid: str) -> tuple[int, str] | None:
    """(parent pid, state) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def living_children() -> list[tuple[int, str]]:
    """This process's children still running (zombies reaped), but for the ones it keeps by design."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(entry.name)
        if stat is None or stat[0] != me:
            continue
        command = _cmdline(entry.name)
        if stat[1] in "ZX" or not command:  # exited, or exiting (its command line is gone once it lets go of it)
            try:
                os.waitpid(int(entry.name), os.WNOHANG)
            except ChildProcessError:
                pass
            continue
        if not any(kept in command for kept in KEPT):
            found.append((int(entry.name), command))
    return found


def kill_leftovers() -> list[str]:
    """Kill every child still running and say what each was."""
    said = []
    for pid, command in living_children():
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        said.append(f"pid {pid}: {command[:300]}")
    return said
