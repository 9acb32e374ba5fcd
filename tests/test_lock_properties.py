"""The folder lock's contract, property by property, in one process (tests/test_run_lock.py
has the holder in another): who holds it is written once it is taken and emptied when it is
given up; a refusal writes nothing, names the holder in the caller's words and leaks no
descriptor; a waiter gets the lock when its holder gives it up; a file system without locks
or a disk that refuses the record each get one clear message, with nothing left held."""

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import threading
import time

import pytest

from modformer.errors import ModformerError
from modformer.lock import FolderBusy, FolderLock, describe_holder, read_holder, take_lock


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_holder_is_recorded_while_held_and_emptied_when_released(tmp_path):
    path = tmp_path / "run.lock"
    before = time.strftime("%Y-%m-%dT%H:%M")
    lock = take_lock(path, wait=False)
    assert isinstance(lock, FolderLock) and lock.held and lock.path == path
    record = json.loads(path.read_text())
    assert record == {"host": socket.gethostname(), "pid": os.getpid(), "started": record["started"],
                      "command": sys.argv}
    assert record["started"].startswith(before[:13])  # the hour it was taken, with its zone after the seconds
    assert time.strptime(record["started"], "%Y-%m-%dT%H:%M:%S%z")
    assert read_holder(path) == record
    with lock:
        pass
    assert not lock.held and path.read_text() == ""
    lock.release()  # a second release is harmless
    assert path.exists()  # the file stays: removing it would race with its next opener


def test_a_new_lock_file_is_readable_by_the_group_and_others_as_the_umask_allows(tmp_path):
    umask = os.umask(0o022)
    try:
        take_lock(tmp_path / "a.lock", wait=False).release()
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a.lock").stat().st_mode) == 0o644


def test_a_refusal_names_the_holder_in_the_callers_words_writes_nothing_and_leaks_no_descriptor(tmp_path):
    path = tmp_path / "run.lock"
    with take_lock(path, wait=False):
        record = path.read_text()
        count = open_descriptors()
        for _ in range(3):
            with pytest.raises(FolderBusy) as refused:
                take_lock(path, wait=False, busy="{path} is being trained by {holder}")
            assert open_descriptors() == count
        holder = json.loads(record)
        assert str(refused.value) == (f"{path} is being trained by pid {os.getpid()} on {holder['host']} "
                                      f"since {holder['started']}")
        with pytest.raises(FolderBusy, match=rf"^{path} is locked by pid {os.getpid()} on "):
            take_lock(path, wait=False)  # the default words
        assert path.read_text() == record  # the holder's record is left as it was
    assert isinstance(FolderBusy("x"), ModformerError)


def test_a_waiter_gets_the_lock_once_its_holder_gives_it_up(tmp_path):
    path = tmp_path / "run.lock"
    holder = take_lock(path, wait=False)
    got: list[float] = []

    def wait_for_it():
        with take_lock(path, wait=True):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.3)
    assert not got  # still blocked while held
    released = time.monotonic()
    holder.release()
    waiter.join(timeout=10)
    assert len(got) == 1 and got[0] >= released
    take_lock(path, wait=False).release()  # and the waiter released it in turn


def test_a_missing_folder_is_one_message(tmp_path):
    path = tmp_path / "no" / "run.lock"
    with pytest.raises(ModformerError, match=rf"^cannot open the lock file {path}: No such file or directory$"):
        take_lock(path, wait=False)


def test_a_file_system_without_locks_is_named_and_nothing_stays_open(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    count = open_descriptors()
    with pytest.raises(ModformerError, match=r"cannot lock .*run\.lock: No locks available \(does this file system "
                                             r"support locks\? NFS needs lockd"):
        take_lock(tmp_path / "run.lock", wait=True)
    assert open_descriptors() == count


def test_a_disk_that_refuses_the_holders_record_leaves_the_lock_free(tmp_path, monkeypatch):
    path = tmp_path / "run.lock"

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    count = open_descriptors()
    with pytest.raises(Exception, match=str(tmp_path)):  # the one line names the folder
        take_lock(path, wait=False)
    assert open_descriptors() == count
    monkeypatch.undo()
    take_lock(path, wait=False).release()  # the refused holder kept nothing


def test_a_release_on_a_disk_gone_read_only_still_gives_the_lock_up(tmp_path, monkeypatch):
    path = tmp_path / "run.lock"
    lock = take_lock(path, wait=False)

    def read_only(fd, length):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "ftruncate", read_only)
    lock.release()
    assert not lock.held
    monkeypatch.undo()
    take_lock(path, wait=False).release()


def test_the_holders_record_is_read_as_written_or_not_at_all(tmp_path):
    path = tmp_path / "run.lock"
    assert read_holder(tmp_path / "missing.lock") is None
    path.write_text("")
    started = time.monotonic()
    assert read_holder(path) is None
    assert time.monotonic() - started >= 0.15  # it gave a holder that just took the lock time to write
    path.write_text("{not json")
    assert read_holder(path) is None
    path.write_text(json.dumps({"pid": 7, "host": "h", "started": "s"}) + "\n")
    assert read_holder(path) == {"pid": 7, "host": "h", "started": "s"}

    path.write_text("")
    late = threading.Timer(0.05, lambda: path.write_text('{"pid": 8}\n'))
    late.start()
    assert read_holder(path) == {"pid": 8}  # written while it waited
    late.join()


def test_a_holder_is_described_in_words():
    assert describe_holder(None) == "another process (which has not yet written who it is)"
    assert describe_holder({}) == "another process (which has not yet written who it is)"
    assert describe_holder({"pid": 12, "host": "node3", "started": "2026-12-07T10:00:00+0000"}) == \
        "pid 12 on node3 since 2026-12-07T10:00:00+0000"
    assert describe_holder({"pid": 12}) == "pid 12 on None since None"
