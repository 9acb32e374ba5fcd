"""Writing files so that a reader never sees half of one: atomic files and folders, output
folders, the cache folder, and the temporary files a killed writer leaves behind.

The ground floor: every layer writes through these, and this module imports nothing of
modformer's but its errors.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

from .errors import ModformerError

# `.NAME.tmp-PID` (atomic_write) and `.NAME.partial-PID` (atomic_write_folders)
_OURS = re.compile(r"^\..+\.(?:tmp|partial)-(\d+)$")
# safetensors' own temporary file (Rust's tempfile crate: `.tmp` and 6 random characters)
_SAFETENSORS = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (a crash after this keeps it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a platform without directory handles
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync folders; the file itself is synced
    finally:
        os.close(fd)


@contextmanager
def naming(path: Path):
    """Name `path` in an OSError raised inside that names no file: a write or fsync refused by
    a full or failing disk names none (only a refused open does), and the one line that
    reports the fault (errors.storage_fault) says which folder it is."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise


def fsync_file(path: Path) -> None:
    """Make what was written to the file at `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with naming(path):
            os.fsync(fd)
    finally:
        os.close(fd)


def durable_append(path: Path, text: str) -> None:
    """Append `text` in a single O_APPEND write, then fsync: the lines stay whole beside
    another process's, and once this returns they survive a crash or a failing disk (a crash
    before it leaves the file as it was, or with a torn last line, which readers skip). After a
    torn or damaged last line (no newline at its end) the text starts a line of its own, so
    that it is not read as part of that line and lost with it."""
    path = Path(path)
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        with naming(path):
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                text = "\n" + text
            os.write(fd, text.encode())
            os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_folder(path.parent)


_FALLOC_FL_KEEP_SIZE = 1  # linux/falloc.h


def reserve(path: Path, size: int) -> None:
    """Set aside `size` bytes of disk past the end of the file at `path` (made if missing),
    its size unchanged: appends of up to that much still land once the disk is full, so a
    run's log keeps the line that says why the run stopped. Nothing where the system cannot
    (not Linux, a file system without fallocate)."""
    try:
        import ctypes

        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fallocate(fd, _FALLOC_FL_KEEP_SIZE, os.fstat(fd).st_size, size)  # refused: the file is as it was
    finally:
        os.close(fd)


def atomic_write(path: Path, write) -> None:
    """Call `write(tmp_path)`, then move the result over `path` in one rename, durably: a
    crash leaves the old content or the new, never an empty or partial file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with naming(path):
            write(tmp)
        fsync_file(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # some writers create private temp files
        os.replace(tmp, path)
        fsync_folder(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def output_folder(path: str | Path) -> Path:
    """`path` as a folder a command can write its outputs to, made if missing; a path that
    cannot be one (a file there, no permission) is one clear error."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModformerError(f"cannot write to {path}: {e.strerror or e}") from None
    return path


def atomic_write_folder(path: Path, write) -> None:
    """Call `write(tmp_folder)` on a new, empty sibling folder, then put it in place of
    `path` (a folder already there is removed first). Whatever fails, the sibling is
    removed: no half-written folder is ever left at `path` or beside it."""
    atomic_write_folders([path], lambda tmps: write(tmps[0]))


def atomic_write_folders(paths: list[Path], write) -> None:
    """`atomic_write_folder` for several folders that one call `write(tmp_folders)` fills
    (e.g. from one pass over data). Each folder is put in place on its own once `write` has
    returned, so each is whole or absent; if some cannot be (another process's folder got
    there first), the others still are, and an OSError names those that were not."""
    paths = [Path(p) for p in paths]
    tmps = [p.with_name(f".{p.name}.partial-{os.getpid()}") for p in paths]
    try:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        write(tmps)
        failed = []
        for path, tmp in zip(paths, tmps):
            shutil.rmtree(path, ignore_errors=True)
            try:
                tmp.rename(path)
            except OSError:
                failed.append(path)
        if failed:
            raise OSError(f"cannot put in place: {', '.join(map(str, failed))}")
    finally:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)


def cache_root() -> Path:
    """Where prepared data, tokenizers and teacher states are cached: $MODFORMER_CACHE, or
    ~/.cache/modformer."""
    return Path(os.environ.get("MODFORMER_CACHE", Path.home() / ".cache" / "modformer"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temporaries(folder: Path, *, safetensors: bool = False) -> list[Path]:
    """Remove what writers killed mid-write left in `folder` (not its subfolders): our
    temporary files and folders whose writing process is gone, and, with `safetensors`, the
    library's own `.tmpXXXXXX` files (they name no process, so pass it only for a folder that
    no other process writes now, e.g. a run's checkpoints when the run resumes). Returns
    what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for path in folder.iterdir():
        ours = _OURS.match(path.name)
        if (ours and int(ours.group(1)) != os.getpid() and not _alive(int(ours.group(1)))) or \
                (safetensors and _SAFETENSORS.match(path.name) and path.is_file()):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return sorted(removed)
