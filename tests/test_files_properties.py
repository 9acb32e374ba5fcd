"""The ground floor's writing contract, property by property (tests/test_disk_faults.py and
tests/test_kill_while_writing.py drive it through whole runs): a file is replaced whole and
its data synced before the rename that publishes it; an append lands on a line of its own and
is synced; a failed writer leaves the old content and no temporary; a folder is put in place
whole or not at all; only a dead writer's temporaries are cleaned up."""

import errno
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modformer import files
from modformer.errors import ModformerError
from modformer.files import (atomic_write, atomic_write_folder, atomic_write_folders, atomic_write_text, cache_root,
                             durable_append, fsync_folder, naming, output_folder, remove_stale_temporaries, reserve)


@pytest.fixture
def synced(monkeypatch):
    """Every fsync and rename, in order: ("fsync", what the descriptor is) or ("replace", dst)."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_a_file_is_synced_before_the_rename_that_publishes_it_and_its_folder_after(tmp_path, synced):
    path = tmp_path / "summary.json"
    atomic_write_text(path, "{}\n")
    tmp = str(tmp_path / f".summary.json.tmp-{os.getpid()}")
    assert synced == [("fsync", tmp), ("replace", str(path)), ("fsync", str(tmp_path))]
    assert path.read_text() == "{}\n" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_replaced_file_has_the_umasks_permissions_even_from_a_private_writer(tmp_path):
    path = tmp_path / "a.txt"

    def private(tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x")
        os.close(fd)

    umask = os.umask(0o022)
    try:
        atomic_write(path, private)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_text() == "x"


def test_a_failed_writer_leaves_the_old_content_and_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")

    def fails(tmp):
        Path(tmp).write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")  # as a full disk's write: no file named

    with pytest.raises(OSError) as refused:
        atomic_write(path, fails)
    assert refused.value.filename == str(path)  # the one line reporting it can name the file
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_refused_fsync_names_its_file(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("x")

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError) as refused:
        files.fsync_file(path)
    assert refused.value.filename == str(path)


def test_new_logs_have_the_umasks_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        durable_append(tmp_path / "a.jsonl", "x\n")
        reserve(tmp_path / "b.log", 4096)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "a.jsonl").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.log").stat().st_mode) == 0o644


def test_naming_fills_in_only_a_missing_file_name():
    with pytest.raises(OSError) as named:
        with naming(Path("/x/y")):
            raise OSError(errno.EIO, "I/O error")
    assert named.value.filename == "/x/y"
    with pytest.raises(OSError) as kept:
        with naming(Path("/x/y")):
            raise OSError(errno.EACCES, "denied", "/other")
    assert kept.value.filename == "/other"
    with pytest.raises(ValueError):
        with naming(Path("/x/y")):
            raise ValueError("not a file's error")


def test_an_append_is_synced_and_starts_a_line_of_its_own_after_a_torn_one(tmp_path, synced):
    path = tmp_path / "metrics.jsonl"
    durable_append(path, '{"step": 1}\n')
    assert path.read_text() == '{"step": 1}\n'
    assert synced == [("fsync", str(path)), ("fsync", str(tmp_path))]  # a new file: its folder synced too
    synced.clear()
    durable_append(path, '{"step": 2}\n')
    assert synced == [("fsync", str(path))]  # an existing file: the folder already names it
    with open(path, "a") as f:
        f.write('{"step": 3, "to')  # a writer killed mid-line
    durable_append(path, '{"step": 4}\n')
    assert path.read_text().splitlines() == ['{"step": 1}', '{"step": 2}', '{"step": 3, "to', '{"step": 4}']
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    durable_append(empty, "a\n")
    assert empty.read_text() == "a\n"  # an empty file gets no blank first line


def test_a_reserve_sets_disk_aside_without_changing_the_file(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text("line\n")
    before = path.stat().st_blocks
    reserve(path, 1 << 20)
    after = path.stat()
    assert after.st_size == 5 and path.read_text() == "line\n"
    assert after.st_blocks * 512 >= (1 << 20) > before * 512
    reserve(tmp_path / "new.txt", 4096)
    assert (tmp_path / "new.txt").stat().st_size == 0  # made if missing, still empty


def test_an_output_folder_is_made_or_refused_in_words(tmp_path):
    assert output_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    assert output_folder(str(tmp_path / "a")) == tmp_path / "a"  # already there
    (tmp_path / "file").write_text("")
    with pytest.raises(ModformerError, match=rf"^cannot write to {tmp_path / 'file'}: File exists$"):
        output_folder(tmp_path / "file")


def test_a_folder_is_put_in_place_under_folders_not_yet_made(tmp_path):
    target = tmp_path / "cache" / "data" / "store"
    atomic_write_folder(target, lambda tmp: (tmp / "x").write_text("x"))
    assert (target / "x").read_text() == "x"


def test_a_folder_is_put_in_place_whole_or_not_at_all(tmp_path):
    target = tmp_path / "store"
    target.mkdir()
    (target / "old").write_text("old")
    atomic_write_folder(target, lambda tmp: (tmp / "new").write_text("new"))
    assert sorted(p.name for p in target.iterdir()) == ["new"]  # the old folder replaced, not merged

    def fails(tmp):
        (tmp / "half").write_text("")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write_folder(target, fails)
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no partial sibling left


def test_folders_filled_by_one_writer_are_each_put_in_place_and_a_failure_is_named(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    stale = tmp_path / f".a.partial-{os.getpid()}"
    stale.mkdir()
    (stale / "left").write_text("")  # an earlier attempt of this process: emptied before use
    atomic_write_folders([a, b], lambda tmps: [(t / "x").write_text(t.name) for t in tmps])
    assert [p.name for p in a.iterdir()] == ["x"] and (b / "x").exists()

    c = tmp_path / "c"
    real = Path.rename

    def blocked(self, target):
        if Path(target) in (a, c):
            raise OSError(errno.ENOTEMPTY, "Directory not empty")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", blocked)
    with pytest.raises(OSError, match=rf"^cannot put in place: {a}, {c}$"):
        atomic_write_folders([a, b, c], lambda tmps: [(t / "y").write_text("") for t in tmps])
    assert [p.name for p in b.iterdir()] == ["y"]  # the other is still put in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # a was removed, no temporary left


def test_the_cache_root_is_the_environments_or_the_users(monkeypatch, tmp_path):
    monkeypatch.setenv("MODFORMER_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("MODFORMER_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "modformer"


def test_only_a_dead_writers_temporaries_are_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now
    dead, me = gone.pid, os.getpid()
    names = {f".ckpt.safetensors.tmp-{dead}": "file", f".tokenizer.partial-{dead}": "folder",
             f".summary.json.tmp-{me}": "file", ".summary.json.tmp-1": "file",  # ours; a live process's
             ".tmpAb3dE9": "file", ".tmpAb3dE0": "folder", ".tmpshort": "file", "step_1.safetensors": "file",
             f"summary.json.tmp-{dead}": "file"}  # no leading dot: not a name we write
    for name, kind in names.items():
        (tmp_path / name).mkdir() if kind == "folder" else (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f".x.tmp-{dead}").write_text("")  # subfolders are not looked into
    assert remove_stale_temporaries(tmp_path) == sorted([tmp_path / f".ckpt.safetensors.tmp-{dead}",
                                                         tmp_path / f".tokenizer.partial-{dead}"])
    assert remove_stale_temporaries(tmp_path, safetensors=True) == [tmp_path / ".tmpAb3dE9"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(set(names) - {f".ckpt.safetensors.tmp-{dead}", f".tokenizer.partial-{dead}",
                                        ".tmpAb3dE9"} | {"sub"})
    assert (tmp_path / "sub" / f".x.tmp-{dead}").exists()
    assert remove_stale_temporaries(tmp_path / "missing") == []


def test_a_temporary_another_cleaner_removed_first_is_no_error(tmp_path, monkeypatch):
    """Two processes cleaning one folder (two resumes, say): each temporary may be gone by the
    time this one removes it."""
    names = [".a.tmp-999999", ".b.partial-999999"]
    (tmp_path / names[0]).write_text("")
    (tmp_path / names[1]).mkdir()
    (tmp_path / names[1] / "f").write_text("")

    def dead_and_already_removed(pid):
        for name in names:
            path = tmp_path / name
            if path.is_dir():
                (path / "f").unlink(missing_ok=True)
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        return False

    monkeypatch.setattr(files, "_alive", dead_and_already_removed)
    assert remove_stale_temporaries(tmp_path) == sorted(tmp_path / n for n in names)  # gone, as it reports
    assert list(tmp_path.iterdir()) == []


def test_asking_whether_a_process_lives_sends_it_nothing():
    # SIGHUP's default action in the child (a parent that ignores it, as a test runner may, would pass that on)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                                                    "print(flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # its handler is set
        assert files._alive(child.pid)
        time.sleep(0.2)
        assert child.poll() is None  # signal 0 only: a real signal (SIGHUP) would have ended it
    finally:
        child.kill()
        child.wait()


def test_another_users_live_process_counts_as_alive(monkeypatch):
    def not_mine(pid, signal):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_mine)
    assert files._alive(12345)


def test_a_folder_sync_that_cannot_be_done_is_no_error(tmp_path, monkeypatch):
    fsync_folder(tmp_path / "missing")  # no handle: nothing to sync

    def refused(fd):
        raise OSError(errno.EINVAL, "Invalid argument")

    count = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fsync", refused)
    fsync_folder(tmp_path)  # a file system that does not sync folders
    assert len(os.listdir("/proc/self/fd")) == count  # its handle closed all the same
