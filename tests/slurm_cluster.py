"""The single-node Slurm of the Slurm tests (scripts/slurm_local.sh), as a session fixture
that conftest.py registers once for every test file that asks for `slurm_cluster`."""

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm_local.sh"


@pytest.fixture(scope="session")
def slurm_cluster():
    """SLURM_CONF of a running single-node Slurm with accounting; skips where none can start."""
    pytest.importorskip("submitit", reason="the slurm launcher needs submitit (pip install 'modformer[slurm]')")
    if not SCRIPT.exists() or sys.platform != "linux":
        pytest.skip("a local Slurm starts on Linux only (scripts/slurm_local.sh)")
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True)
    was_running = status.returncode == 0 and " -" not in status.stdout
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    if started.returncode == 77:
        pytest.skip(f"no local Slurm: {started.stderr.strip().splitlines()[-1]}")
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm_local.sh start failed:\n{started.stderr[-2000:]}")
    conf = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True).stdout.split("=", 1)[1].strip()
    # Each test process using the cluster leaves its pid here while it does: parallel workers
    # (pytest -n) may each have started it, and only the last one out stops it.
    users = Path(conf).parent.parent / "users"
    users.mkdir(exist_ok=True)
    me = users / str(os.getpid())
    me.touch()
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield conf
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
    me.unlink(missing_ok=True)
    if not was_running and not any(_alive(int(p.name)) for p in users.iterdir() if p.name.isdigit()):
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def cluster_report(conf: str) -> str:
    """The daemons' states and the controller's last log lines: what a failing Slurm test
    shows, so that a failure in CI says whether the controller died or only stalled."""
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True).stdout
    logs = Path(conf).parent.parent / "log"
    tails = "".join(f"\n--- {name} (last 30 lines) ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:])
                    for name in ("slurmctld.log", "slurmctld.out", "slurmd.log") if (path := logs / name).exists())
    return f"daemons:\n{status}{tails}"


def slurm_command(conf: str, *args: str, patience_s: float = 60.0) -> str:
    """Run a Slurm client command against the test cluster and return its output.

    A controller kept busy by a loaded 2-core machine can refuse a client for a while
    ("Unable to contact slurm controller"); the command is retried for `patience_s`. If it
    still fails, the assertion carries `cluster_report`."""
    end = time.monotonic() + patience_s
    while True:
        done = subprocess.run(list(args), capture_output=True, text=True, env={**os.environ, "SLURM_CONF": conf})
        if done.returncode == 0:
            return done.stdout
        if "Unable to contact slurm controller" not in done.stderr or time.monotonic() > end:
            break
        time.sleep(1.0)
    raise AssertionError(f"{' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}\n"
                         f"{cluster_report(conf)}")


def wait_until(conf: str, ready: Callable[[], bool], patience_s: float, what: Callable[[], str]) -> None:
    """Poll `ready` until it holds; after `patience_s` fail with `what()` and `cluster_report`.

    The patience is generous (minutes): on a loaded 2-core machine a cancelled job can stay
    COMPLETING, or the controller unanswering, for a minute or more, and a test that waits
    less fails on load, not on modformer."""
    end = time.monotonic() + patience_s
    while not ready():
        if time.monotonic() > end:
            raise AssertionError(f"{what()} within {patience_s:.0f} s\n{cluster_report(conf)}")
        time.sleep(0.5)
