"""User-facing errors.

Anything raised as a `ModformerError` is a problem with what the user gave us (a config,
a path, a checkpoint), not a bug: the CLI prints its message on one line and exits with
status 2, without a traceback.
"""


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
