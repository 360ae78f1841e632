"""A ``JobSpec`` as an ``sbatch`` script that requeues itself when preempted, and an engine around sbatch.

Slurm sends SIGUSR1 to the batch shell 90 s before the time limit (``--signal=B:USR1@90``); the
script forwards it (and SIGTERM, sent on preemption) to the job step, where computewise.train
finishes the step, saves and exits 75. On exit 75 the script runs ``scontrol requeue``: the same
job id is queued again, the script reruns, and training resumes from ``checkpoint_uri``. The
output file is opened in append mode so every attempt's log stays in one file.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess

from computewise.errors import JobEngineError
from computewise.scale.accelerators import slurm_gres
from computewise.scale.engine import PREEMPTED_EXIT_CODE, JobHandle, JobSpec, JobStatus
from computewise.units import MIB

__all__ = ["SIGNAL_LEAD_S", "SlurmEngine", "render_sbatch"]

SIGNAL_LEAD_S = 90
_COMMAND_TIMEOUT_S = 30

# squeue/sacct states -> ours. PREEMPTED and REQUEUED are "pending": the job comes back.
_STATES: dict[str, JobStatus] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "PREEMPTED": "pending",
    "RESV_DEL_HOLD": "pending",
    "SUSPENDED": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "RESIZING": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "COMPLETED": "succeeded",
    "CANCELLED": "stopped",
    "REVOKED": "stopped",
}


def _output_path(spec: JobSpec) -> str:
    return f"{spec.name}-%j.log"


def render_sbatch(spec: JobSpec) -> str:
    """The batch script as text, for ``sbatch FILE`` or review (``computewise submit --dry-run``)."""
    resources = spec.resources
    lines = ["#!/bin/bash", f"#SBATCH --job-name={spec.name}"]
    if resources.gpus:
        if resources.gpus != int(resources.gpus):
            raise JobEngineError(
                f"Slurm cannot give a job {resources.gpus} of a GPU through --gres=gpu",
                "ask for whole GPUs (--gpus 1), or use the sharding/MPS GRES of your site by editing the script",
            )
        gres_type = f"{slurm_gres(resources.accelerator)}:" if resources.accelerator else ""
        lines.append(f"#SBATCH --gres=gpu:{gres_type}{int(resources.gpus)}")
    lines.append(f"#SBATCH --cpus-per-task={math.ceil(resources.cpus)}")
    if resources.memory_bytes is not None:
        lines.append(f"#SBATCH --mem={math.ceil(resources.memory_bytes / MIB)}M")
    lines += [
        f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={_output_path(spec)}",
    ]
    if spec.tags:
        # #SBATCH lines are not shell: keep the comment free of spaces and quotes.
        comment = ",".join(f"{key}={value}" for key, value in sorted(spec.tags.items()))
        lines.append(f"#SBATCH --comment={re.sub(r'[^A-Za-z0-9_.,=/:@+-]', '_', comment)}")
    env = {"COMPUTEWISE_RUN_NAME": spec.name}
    if spec.checkpoint_uri is not None:
        env["COMPUTEWISE_CHECKPOINT_URI"] = spec.checkpoint_uri
    env.update(spec.env)
    lines.append("")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    if spec.resume_command is not None and spec.resume_command != spec.command:
        step = [
            'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
            f"  srun {shlex.join(spec.launch(spec.resume_command))} &",
            "else",
            f"  srun {shlex.join(spec.launch())} &",
            "fi",
        ]
    else:
        step = [f"srun {shlex.join(spec.launch())} &"]
    lines += [
        "",
        "# Forward the warning (USR1) and preemption (TERM) signals to the step: it saves and exits 75.",
        'forward() { signalled=1; kill -s "$1" "$step_pid" 2>/dev/null || true; }',
        "trap 'forward USR1' USR1",
        "trap 'forward TERM' TERM",
        *step,
        "step_pid=$!",
        "# A trapped signal interrupts wait (status > 128) while the step still runs: wait again.",
        "while :; do",
        "  signalled=0",
        '  wait "$step_pid"',
        "  code=$?",
        '  if [ "$code" -le 128 ] || [ "$signalled" = 0 ]; then break; fi',
        "done",
        f'if [ "$code" -eq {PREEMPTED_EXIT_CODE} ] && [ "${{SLURM_RESTART_COUNT:-0}}" -lt {spec.max_restarts} ]; then',
        f'  echo "computewise: step exited {PREEMPTED_EXIT_CODE} (checkpoint saved): requeueing job $SLURM_JOB_ID" >&2',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as error:
        raise JobEngineError(f"{argv[0]} did not answer in {_COMMAND_TIMEOUT_S} s", "check slurmctld is up") from error
    if done.returncode != 0:
        raise JobEngineError(f"{shlex.join(argv)} failed: {done.stderr.strip()}", "check the Slurm message above")
    return done.stdout


class SlurmEngine:
    """Submits with ``sbatch`` on this machine (a login node); status via squeue/sacct, cancel via scancel."""

    name = "slurm"

    def __init__(self) -> None:
        if shutil.which("sbatch") is None:
            raise JobEngineError(
                "sbatch not found on PATH: this machine is not a Slurm login node",
                "run on a login node of the cluster, or use --dry-run and copy the script there",
            )

    def submit(self, spec: JobSpec) -> JobHandle:
        out = subprocess.run(
            ["sbatch", "--parsable"], input=render_sbatch(spec), capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise JobEngineError(f"sbatch refused the job: {out.stderr.strip()}", "check the Slurm message above")
        match = re.match(r"\s*(\d+)", out.stdout)
        if match is None:
            raise JobEngineError(f"cannot read a job id from sbatch's answer {out.stdout!r}", "check sbatch --parsable")
        return JobHandle(self.name, match.group(1), spec.name)

    def status(self, handle: JobHandle) -> JobStatus:
        state = _run(["squeue", "--noheader", "--format=%T", f"--jobs={handle.job_id}"]).strip()
        if not state:  # gone from the queue: ask the accounting database
            out = _run(["sacct", "--noheader", "--parsable2", "--format=State", "--jobs", handle.job_id, "-X"])
            state = out.strip().split()[0] if out.strip() else "PENDING"
        return _STATES.get(state.split()[0], "failed")

    def logs(self, handle: JobHandle) -> str:
        out = _run(["scontrol", "show", "job", handle.job_id])
        match = re.search(r"StdOut=(\S+)", out)
        if match is None:
            raise JobEngineError(f"Slurm does not say where job {handle.job_id} writes", "look for its output file")
        try:
            with open(match.group(1), encoding="utf-8", errors="replace") as log:
                return log.read()
        except OSError as error:
            raise JobEngineError(f"cannot read {match.group(1)}: {error}", "run on a node that mounts it") from error

    def cancel(self, handle: JobHandle) -> None:
        _run(["scancel", handle.job_id])
