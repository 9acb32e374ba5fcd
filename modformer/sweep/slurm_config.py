"""The `sweep.slurm` section: what each run of a sweep asks Slurm for.

    sweep:
      launcher: slurm            # or pass --launcher slurm
      slurm: {partition: gpu, time: "4:00:00", gpus_per_run: 1, cpus_per_run: 8, array_parallelism: 16}

Each run is one task of one Slurm job array (modformer/sweep/slurm.py); `modformer sweep`'s
--partition, --time, ... options override these keys.
"""

from __future__ import annotations

from typing import Literal, get_args
import math
import re
from dataclasses import dataclass

from ..configtools import option
from ..errors import ConfigError

Launcher = Literal["local", "slurm"]
LAUNCHERS = get_args(Launcher)

# Slurm's --time forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$")


@dataclass
class SlurmConfig:
    partition: str | None = option(None, "Slurm partition (null: the cluster's default)")
    time: str | int = option("4:00:00", "time limit of each run, in Slurm's forms (minutes, HH:MM:SS, D-HH:MM:SS); "
                                        "a run that reaches it keeps its last checkpoint and continues when resubmitted")
    gpus_per_run: int = option(0, "GPUs of each run (--gpus-per-node of its job)")
    cpus_per_run: int = option(1, "CPU cores of each run; also its torch threads unless train.threads sets them")
    mem: str | None = option(None, "memory of each run, e.g. 16G (null: the cluster's default)")
    array_parallelism: int = option(64, "runs of the job array running at once, at most")
    account: str | None = option(None, "Slurm account to charge")
    qos: str | None = option(None, "Slurm quality of service")
    constraint: str | None = option(None, "Slurm node features the runs need (--constraint)")
    setup: list[str] = option(default_factory=list, help="shell lines each job runs first (e.g. 'module load cuda')")
    sbatch: dict[str, str] = option(default_factory=dict, help="further sbatch options by name, e.g. {exclude: node7}")
    resubmit: int = option(3, "with --wait, how many times a run whose job ran out of time or lost its node "
                              "(TIMEOUT, NODE_FAIL, BOOT_FAIL) is submitted again, to "
                              "continue from its last checkpoint; 0: never (a failed or cancelled job never is)")
    poll_seconds: float = option(10.0, "seconds between two looks at the jobs' states (sacct) while following")
    lost_after_s: float = option(300.0, "seconds after its submission that a job neither sacct nor squeue lists, "
                                        "both answering, counts as LOST (not waited on); while either cannot be "
                                        "asked, a job is never taken for ended")

    def __post_init__(self) -> None:
        if isinstance(self.time, int):
            # YAML 1.1 reads 4:00:00 unquoted as the sexagesimal number 14400.
            raise ConfigError(f"sweep.slurm.time: write it in quotes (time: \"4:00:00\"); unquoted, YAML reads "
                              f"it as the number {self.time}")
        if not _TIME.match(self.time):
            raise ConfigError(f"sweep.slurm.time must be Slurm time such as 4:00:00 or 1-12:00:00, got '{self.time}'")
        if self.resubmit < 0:
            raise ConfigError(f"sweep.slurm.resubmit must not be negative, got {self.resubmit}")
        for key in ("cpus_per_run", "array_parallelism"):
            if getattr(self, key) < 1:
                raise ConfigError(f"sweep.slurm.{key} must be positive, got {getattr(self, key)}")
        if self.gpus_per_run < 0:
            raise ConfigError(f"sweep.slurm.gpus_per_run must not be negative, got {self.gpus_per_run}")
        if self.poll_seconds <= 0:
            raise ConfigError(f"sweep.slurm.poll_seconds must be positive, got {self.poll_seconds}")
        if self.lost_after_s < 0:
            raise ConfigError(f"sweep.slurm.lost_after_s must not be negative, got {self.lost_after_s}")

    def minutes(self) -> int:
        """The time limit in whole minutes (seconds rounded up), as submitit takes it: its
        handler of Slurm's warning signal computes with it, and a string there crashes it."""
        return time_minutes(self.time)


def time_minutes(text: str) -> int:
    """Slurm's --time forms in whole minutes: "90" -> 90, "1:30" (MM:SS) -> 2,
    "4:00:00" -> 240, "1-12" (D-HH) -> 2160, "1-00:30" (D-HH:MM) -> 1470, "1-0:0:30" -> 1441."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS: the clock starts with hours
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 1:  # MM
        hours, minutes, seconds = 0, parts[0], 0
    else:  # MM:SS, HH:MM:SS: the clock ends with seconds
        hours, minutes, seconds = ([0] + parts)[-3:]
    return int(days or 0) * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)
