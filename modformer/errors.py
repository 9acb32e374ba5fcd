"""User-facing errors.

Anything raised as a `ModformerError` is a problem with what the user gave us (a config,
a path, a checkpoint), not a bug: the CLI prints its message on one line and exits with
status 2, without a traceback.
"""


import errno
import os
import re
from pathlib import Path


class ModformerError(Exception):
    """Bad input: a message that names the problem and what to do about it."""


class ConfigError(ModformerError):
    """A config key that does not exist, a value of the wrong type, or inconsistent sizes."""


class CheckpointError(ModformerError):
    """A checkpoint that is missing, corrupt, foreign or does not fit the model."""


class TrainingDiverged(ModformerError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class Interrupted(ModformerError):
    """Stopped by Ctrl-C or SIGTERM after saving a checkpoint (exit status 130)."""


# The storage faults a command reports in one line (exit 2) rather than as a traceback: the
# disk is full or over quota, read-only (often remounted so after an error), or failing.
STORAGE_FAULTS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "over the disk quota",
                  errno.EROFS: "the file system is read-only", errno.EIO: "input/output error (a failing disk?)"}


def storage_fault(error: BaseException) -> str | None:
    """One line naming the folder and the cause of a write that failed for lack of space or
    a read-only or failing disk, or None for any other error. Reads an OSError, and the
    error text of safetensors' writer (`... (os error 28)`, `Os { code: 28 ... }`), which is not one."""
    code = getattr(error, "errno", None)
    if code is None:
        found = re.search(r"\b(?:code: |os error )(\d+)", str(error))
        code = int(found.group(1)) if found else None
    if code not in STORAGE_FAULTS:
        return None
    name = getattr(error, "filename", None)
    where = f"cannot write to {Path(name).parent}" if name else "cannot write"
    return (f"{where}: {STORAGE_FAULTS[code]} ({os.strerror(code)}). Nothing acknowledged is lost: free space "
            f"or repair the disk, then run the same command again (a training resumes with --resume)")


class StorageFault(ModformerError):
    """A write refused by the disk (full, read-only, failing): see `storage_fault`."""
