"""One study at a time per folder: ``folder_lock(DIR)`` holds ``DIR/.servesim.lock`` while a
sweep, capacity search or comparison writes there.

The lock is an ``flock`` on the file, which the kernel releases when its holder dies however it
dies (kill -9 included), so a lock left by a dead process is simply taken over; the file also
says who holds it (pid, host, start time) for the message a second study gets (exit 2). The
file itself stays (removing it would let two processes lock two different files). Within one
process the lock is re-entrant (a capacity search runs many rounds of probes). Worker
processes close their inherited copy (``executors.worker_init``), so only the study's own
process holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from servesim.errors import InputError, shown_path
from servesim.studies import executors

LOCK_FILE = ".servesim.lock"
_held: dict = {}  # resolved folder -> [fd, depth]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def folder_lock(folder: Path, what: str = "study"):
    """Hold the folder's lock for the block; ``InputError`` naming the holder when another
    process has it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _read(fd)
        os.close(fd)
        who = (f"pid {holder.get('pid')} on {holder.get('host')}, a {holder.get('what', 'study')} started "
               f"{holder.get('started', '?')}") if holder else "another process"
        raise InputError(f"{shown_path(folder)}: another servesim study is writing in this folder ({who}); wait "
                         f"for it to finish or give another --out") from None
    previous = _read(fd)
    if previous.get("pid") and previous.get("host") == socket.gethostname() and not _alive(int(previous["pid"])):
        print(f"servesim: {folder}: took over the lock of pid {previous['pid']} (no longer running)", file=sys.stderr)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n").encode(), 0)
    _held[key] = [fd, 1]
    executors.INHERITED_FDS.add(fd)
    try:
        yield
    finally:
        del _held[key]
        executors.INHERITED_FDS.discard(fd)
        os.ftruncate(fd, 0)
        os.close(fd)  # releases the flock


def holder(folder: Path) -> dict | None:
    """Who holds ``folder``'s lock (what ``folder_lock`` wrote: pid, host, what, started; ``{}``
    when unreadable), or None when no study is writing there. Read without taking the lock, except
    when the file still names a holder (one killed with kill -9 leaves its name): then a shared
    lock tried and at once released tells a live holder from a dead one."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            named = os.pread(fd, 4096, 0).strip()
        except OSError:
            return None
        if not named:  # (emptied when its holder let go)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
