"""`modformer sweep --status DIR`: where each run of a sweep stands, local or on Slurm.

It reads the sweep folder's files and, for runs submitted to Slurm, their jobs' states (one
sacct and one squeue call, modformer/sweep/slurm_states.py); the only thing it writes is
that module's record of reported states and of an accounting outage's start. Recording the
runs that Slurm killed is left to the launcher (--wait, or the next submission).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..errors import ModformerError
from .runner import read_results
from .slurm import LIVE, job_states, submitted_jobs
from .slurm_states import read_accounting
from .kinds import read_summary, run_kind
from .spec import load_sweep

STATUSES = ("done", "running", "queued", "unknown", "failed", "cancelled", "started", "not started")


def run_statuses(out: Path) -> list[tuple[str, str, str]]:
    """(run id, status, detail) for every run of the sweep in `out`, in the sweep's order.
    A status is one of STATUSES; `started` is a run with checkpoints and no job or process
    known to be training it (a stopped local sweep, or a local sweep running now); `unknown`
    a run whose job neither sacct nor squeue reports now (accounting unreachable, or a job
    submitted an instant ago): it may be queued or training, and counts as such."""
    out = Path(out)
    if not (out / "sweep.yaml").exists():
        raise ModformerError(f"{out} is not a sweep directory (no sweep.yaml)")
    sweep = load_sweep(out / "sweep.yaml")
    runs, kind = sweep.runs(), run_kind(sweep.spec.experiment)
    results, jobs = read_results(out), submitted_jobs(out)
    states = job_states(out, {r.run_id: jobs[r.run_id] for r in runs
                              if r.run_id in jobs and results.get(r.run_id, {}).get("status") != "done"},
                        lost_after_s=sweep.spec.slurm.lost_after_s)
    accounting = read_accounting(out)
    rows = []
    for run in runs:
        record, job, state = results.get(run.run_id, {}), jobs.get(run.run_id), states.get(run.run_id)
        run_dir = out / "runs" / run.run_id
        summary = record.get("summary") if record.get("status") == "done" else None
        summary = summary or read_summary(run_dir)  # a run finished but not gathered yet: its own summary
        if summary is not None:
            rows.append((run.run_id, "done", kind.describe(summary)))
        elif state == "UNKNOWN":
            since = accounting.get("unreachable_since")
            last = accounting.get("states", {}).get(job["job_id"])
            why = f"accounting unreachable since {since}" if since else "not listed by sacct or squeue yet"
            rows.append((run.run_id, "unknown", f"Slurm job {job['job_id']}: unknown ({why}"
                                                + (f"; last reported {last})" if last else ")")))
        elif state in LIVE:
            where = "queued" if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING") else "running"
            rows.append((run.run_id, where, f"Slurm job {job['job_id']} ({state})"))
        elif job is not None and state is not None and record.get("slurm_job") != job["job_id"]:
            # Ended without recording itself: killed (the launcher records it when it gathers).
            rows.append((run.run_id, "cancelled" if state == "CANCELLED" else "failed",
                         f"Slurm job {job['job_id']} ended {state}"))
        elif record.get("status") == "failed":
            cancelled = record.get("slurm_state") == "CANCELLED"
            rows.append((run.run_id, "cancelled" if cancelled else "failed", record.get("error", "")))
        elif started := kind.started(run_dir):
            rows.append((run.run_id, "started", started))
        else:
            rows.append((run.run_id, "not started", ""))
    return rows


def format_status(out: Path) -> str:
    """The table `modformer sweep --status` prints, with a count per status under it."""
    rows = run_statuses(out)
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{'run':<{width}}{'status':<13}detail"]
    lines += [f"{run_id:<{width}}{status:<13}{detail}".rstrip() for run_id, status, detail in rows]
    counts = Counter(status for _, status, _ in rows)
    lines += ["", f"{len(rows)} runs: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])]
    return "\n".join(lines)
