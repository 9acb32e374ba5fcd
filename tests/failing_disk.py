"""Disks that fill up or fail, for the storage-fault tests, as fixtures that conftest.py
registers: `small_disk`, a size-limited tmpfs the test fills or remounts read-only; and
`ext4_disk`, an ext4 file system on a loop device, mounted with errors=remount-ro, that the
test makes fail mid-run (the kernel's own error path, /sys/fs/ext4/<device>/trigger_fs_error:
the journal aborts, the file system turns read-only, and what was not yet committed is gone
once it is repaired), then repairs (e2fsck -fy) and mounts again. Root only; where loop
devices or mounting are not allowed, the tests using them skip, saying why."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest


def fill(disk: Path) -> None:
    """Fill the file system of `disk` to the last byte (a file `ballast` there)."""
    with open(disk / "ballast", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 1 MiB at tmp_path/disk, remountable by the test (`remount(options)`)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", f"modformer-test-{uuid.uuid4().hex[:8]}",
                           str(disk)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here ({made.stderr.strip() or 'mount failed'})")

    def remount(options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(disk)], check=True)

    yield disk, remount
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


class Ext4Disk:
    """The mounted file system at `path`, on the loop device `device` over the image `image`."""

    def __init__(self, image: Path, device: str, path: Path):
        self.image, self.device, self.path = image, device, path

    def mount(self) -> None:
        subprocess.run(["mount", "-o", "errors=remount-ro", self.device, str(self.path)], check=True,
                       capture_output=True, text=True)

    def fail(self) -> None:
        """An ext4 error, as a failing disk raises one: the file system turns read-only at once."""
        Path(f"/sys/fs/ext4/{Path(self.device).name}/trigger_fs_error").write_text("1\n")
        probe = self.path / f".probe-{os.getpid()}"  # (statvfs still says rw: ext4 marks it emergency_ro)
        for _ in range(100):
            try:
                probe.mkdir()
            except OSError as e:
                if e.errno == errno.EROFS:
                    return
                raise
            probe.rmdir()
            time.sleep(0.05)
        raise AssertionError(f"{self.path} did not turn read-only after trigger_fs_error")

    def repair(self) -> None:
        """Unmount, repair with e2fsck -fy (what was not committed before the error is lost), mount."""
        subprocess.run(["umount", str(self.path)], check=True, capture_output=True)
        checked = subprocess.run(["e2fsck", "-fy", self.device], capture_output=True, text=True)
        assert checked.returncode in (0, 1), f"e2fsck -fy failed ({checked.returncode}):\n{checked.stdout}"
        self.mount()

    def remove(self) -> None:
        subprocess.run(["umount", str(self.path)], capture_output=True)
        subprocess.run(["losetup", "-d", self.device], capture_output=True)


def _skip_unless(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        pytest.skip(f"cannot {what} here ({done.stderr.strip() or f'exit status {done.returncode}'})")


@pytest.fixture
def ext4_disk(tmp_path):
    """An Ext4Disk of 64 MiB mounted at tmp_path/disk, removed after the test."""
    missing = [tool for tool in ("losetup", "mkfs.ext4", "e2fsck", "mount") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"a loop-mounted ext4 needs root and {', '.join(missing) or 'losetup, mkfs.ext4, e2fsck'}")
    image, path = tmp_path / "disk.img", tmp_path / "disk"
    path.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
    _skip_unless(made, "make an ext4 file system")
    attached = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
    _skip_unless(attached, "attach a loop device")
    disk = Ext4Disk(image, attached.stdout.strip(), path)
    try:
        try:
            disk.mount()
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot mount a loop device here ({e.stderr.strip()})")
        if not Path(f"/sys/fs/ext4/{Path(disk.device).name}/trigger_fs_error").exists():
            pytest.skip("this kernel has no /sys/fs/ext4/<device>/trigger_fs_error to make ext4 fail")
        yield disk
    finally:
        disk.remove()
