"""What Slurm says about a sweep's jobs: each job's state as sacct or squeue reported it.

A job counts as ended only on a state that one of them reported. Accounting (sacct, which
asks slurmdbd) may be unreachable while the controller still answers squeue, or both may
be down; a job neither reports is UNKNOWN, which counts as live: it is never recorded as
ended, never submitted again and never trained locally, since it may still be queued or
training. Only where both answered and neither lists a job `lost_after_s` seconds after its
submission is it LOST (another cluster's job, or a cluster whose state was reset).

squeue is asked too, and its live state wins: sacct reports a cancelled or timed-out job
as CANCELLED or TIMEOUT at once, while squeue shows it COMPLETING until its processes have
saved their checkpoint and exited; a run resubmitted before then would find its folder
still locked by the old job's training.

Each sweep keeps `slurm/accounting.json`: the last state each job was reported in, and since
when accounting has been unreachable (or null). A job that neither reports now keeps a
reported ended state (an ended job stays ended); the outage's start is what `--status`
shows, and a change of reachability is reported once, by whichever process sees it first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from ..files import atomic_write_text

# Slurm states of a job that may still run (submitit's list, which it reads from sacct).
LIVE = {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED", "CONFIGURING",
        "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED"}

# How long a job that neither sacct nor squeue lists (both answering) counts as not yet
# listed (accounting may lag a submission) before it is LOST: sweep.slurm.lost_after_s.
LOST_AFTER_S = 300.0

# A sacct or squeue that has not answered in this long is taken as unreachable, not waited on.
ASK_TIMEOUT_S = 120.0


def _run(cmd: list[str]) -> tuple[str | None, str]:
    """(stdout, "") of a Slurm command that succeeded, else (None, its last error line)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=ASK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{cmd[0]}: {e}"
    if done.returncode != 0:
        # The last line: sacct says "Problem talking to the database" after two lines of detail.
        return None, (done.stderr.strip().splitlines() or [f"{cmd[0]} exited with status {done.returncode}"])[-1]
    return done.stdout, ""


def ask_sacct(job_ids: set[str]) -> tuple[dict[str, str] | None, str]:
    """job id -> state for the jobs sacct lists (array ranges expanded), or None and why not."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    text, error = _run(["sacct", "-X", "-n", "-o", "JobID,State", "--parsable2", "-j", ",".join(arrays)])
    return (None, error) if text is None else (_listed(text, job_ids), "")


def _listed(text: str, job_ids: set[str]) -> dict[str, str]:
    """job id -> state, of `job_ids`, from lines `JOBID|STATE` (sacct's "CANCELLED by 0": CANCELLED)."""
    listed = {}
    for line in text.splitlines():
        job, _, state = line.partition("|")
        if state.strip():
            listed.update(dict.fromkeys(expand_array(job.strip()), state.split()[0].upper()))
    return {j: listed[j] for j in job_ids if j in listed}


def expand_array(job_id: str) -> list[str]:
    """The job ids an id of sacct or squeue stands for: "52_[2-3%2]" (a throttled array's
    pending tasks) -> ["52_2", "52_3"]; "52_[0,4]" -> ["52_0", "52_4"]; "52_1" -> ["52_1"]."""
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    base, ids = match.group(1), []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        ids += [f"{base}_{i}" for i in range(int(first), int(last or first) + 1)]
    return ids


def ask_squeue(job_ids: set[str]) -> tuple[dict[str, str] | None, str]:
    """job id -> state for the jobs squeue lists, or None and why not. Asked for this user's
    jobs, not by id: squeue refuses a list whose ids have all left the queue."""
    text, error = _run(["squeue", "-h", "-r", "-u", str(os.getuid()), "-o", "%i|%T"])
    return (None, error) if text is None else (_listed(text, job_ids), "")


def accounting_path(out: Path) -> Path:
    return Path(out) / "slurm" / "accounting.json"


def read_accounting(out: Path) -> dict[str, Any]:
    """The sweep's `slurm/accounting.json`: {"states": {job id: state}, "unreachable_since": str | None, ...}."""
    try:
        return json.loads(accounting_path(out).read_text())
    except (OSError, json.JSONDecodeError):
        return {"states": {}, "unreachable_since": None}


def query_states(out: Path, jobs: dict[str, dict[str, Any]], *, lost_after_s: float = LOST_AFTER_S,
                 echo: Callable[[str], None] | None = None) -> dict[str, str]:
    """run id -> the state of its latest job (`jobs`: run id -> its line of slurm/jobs.jsonl)."""
    if not jobs:
        return {}
    ids = {j["job_id"] for j in jobs.values()}
    sacct, sacct_error = ask_sacct(ids)
    squeue, squeue_error = ask_squeue(ids)
    saved = read_accounting(out)
    known = dict(saved.get("states", {}))
    states = {}
    for run_id, job in jobs.items():
        jid = job["job_id"]
        queued = (squeue or {}).get(jid)
        state = queued if queued in LIVE else (sacct or {}).get(jid) or queued
        if state is None:
            if known.get(jid) and known[jid] not in LIVE:
                state = known[jid]  # reported ended before: an ended job stays ended
            elif sacct is not None and squeue is not None and time.time() - job.get("submitted_s", 0) > lost_after_s:
                state = "LOST"  # both answered, neither lists it: not waited on
            else:
                state = "UNKNOWN"  # not listed yet, or not askable now: counts as live
        else:
            known[jid] = state
        states[run_id] = state
    _record(out, saved, known, sacct_error, squeue_error if sacct is None else "", echo)
    return states


def _record(out: Path, saved: dict[str, Any], known: dict[str, str], sacct_error: str, squeue_error: str,
            echo: Callable[[str], None] | None) -> None:
    """Keep the reported states and the outage's start; say once that accounting went away or came back."""
    since = saved.get("unreachable_since")
    if sacct_error and since is None:
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if echo:
            echo(f"Slurm accounting unreachable ({sacct_error}"
                 + (f"; squeue too: {squeue_error}" if squeue_error else "; squeue answers") +
                 "): a job neither lists is unknown, never taken for ended, until accounting answers")
    elif not sacct_error and since is not None:
        if echo:
            echo(f"Slurm accounting answers again (unreachable since {since})")
        since = None
    record = {"states": known, "unreachable_since": since, "error": sacct_error or None}
    if record != saved and accounting_path(out).parent.is_dir():
        atomic_write_text(accounting_path(out), json.dumps(record, indent=1) + "\n")
