"""Exclusive locks on folders: one writer per run folder, one submitter per sweep folder.

A lock is flock(2) on a lock file inside the folder, held by an open file descriptor for
as long as the holder works. Why flock and a descriptor, not a pid file: the kernel drops
the lock when the descriptor closes, however the process ends (SIGKILL, the OOM killer, a
Slurm job killed at its time limit, a lost node's processes gone with it), so no stale lock
is ever left to clean up and nothing has to guess whether a recorded pid is still alive.

Shared file systems: on NFS, Linux implements flock with NFS byte-range locks (the lock
manager, lockd, for NFSv3; the protocol itself for NFSv4), which the server arbitrates
between hosts, so two nodes of a cluster exclude each other. A file system mounted with
`nolock` or `local_lock=flock`, or Lustre without its `flock` mount option, gives locks
that hold on one host only. (On NFS, where flock becomes a POSIX lock, two opens in one
process no longer exclude each other; separate processes always do.)

The descriptor is not inherited by child processes (Python's default for new descriptors),
so a tracker or data worker that outlives its trainer cannot keep the lock. The lock file
holds who holds it (host, pid, start time, command), written once the lock is taken, so
that a process refused names the holder, and emptied when it is released (a killed holder
leaves its record, which the next holder overwrites). The file itself stays: it is only
ever reopened, never removed, since removing a lock file races with its next opener.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from .errors import ModformerError
from .files import naming


class FolderBusy(ModformerError):
    """Another process holds the folder's lock (exit status 2, like every user-facing error)."""


class FolderLock:
    """A lock taken by `take_lock`; `release` (or leaving a `with` block) gives it up."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            # Emptied first: the file names a holder only while one holds it, and a folder a
            # refused process left alone reads as it did before. A disk gone read-only or
            # failing refuses even that: the lock is given up all the same, and whatever
            # stopped the holder is what it reports (the next holder overwrites the record).
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            finally:
                os.close(self._fd)  # closing the descriptor is what releases the flock
                self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def take_lock(path: str | Path, *, wait: bool, busy: str = "{path} is locked by {holder}") -> FolderLock:
    """Take the exclusive lock of the lock file `path` (created if missing, its folder must
    exist). With `wait`, block until the holder releases it; else raise FolderBusy at once
    with `busy` filled in (`{path}`, `{holder}`), having written nothing."""
    path = Path(path)
    try:
        # No O_TRUNC: a refused process must leave the holder's record, and the file, as they are.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise ModformerError(f"cannot open the lock file {path}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise FolderBusy(busy.format(path=path, holder=describe_holder(read_holder(path)))) from None
    except OSError as e:  # e.g. ENOLCK: a file system without locks (NFS mounted with nolock)
        os.close(fd)
        raise ModformerError(f"cannot lock {path}: {e.strerror or e} (does this file system support "
                             f"locks? NFS needs lockd, i.e. no 'nolock' mount option)") from None
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "command": sys.argv}
    try:
        with naming(path):  # a full or failing disk refuses the write: the one line names the folder
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
    except OSError:
        os.close(fd)
        raise
    return FolderLock(path, fd)


def read_holder(path: Path) -> dict | None:
    """Who holds the lock file `path`, as its holder wrote it; None where not yet written
    (the holder took the lock an instant ago) or unreadable."""
    for _ in range(20):  # the holder writes its record right after taking the lock: give it 0.2 s
        try:
            text = Path(path).read_text()
            if text.strip():
                return json.loads(text)
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.01)
    return None


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "another process (which has not yet written who it is)"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started')}"
