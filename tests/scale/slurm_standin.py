"""Stand-ins for Slurm's commands on a machine without Slurm: the one seam the Slurm tests fake.

``install(bin_dir, state_dir)`` writes ``sbatch``, ``squeue``, ``sacct``, ``scontrol``, ``scancel``
and ``srun`` executables that keep each job in ``state_dir/<id>/`` and run its batch script for real
with bash, in its own session, as slurmd would: ``SLURM_JOB_ID`` set, output appended to the
``--output`` file (``%j`` expanded) in the submit directory. They print what the real commands print
for the flags ``computewise.scale.slurm`` uses (``sbatch --parsable``: the id; ``squeue --format=%T``:
the state; ``sacct --parsable2 --format=State -X``: COMPLETED, FAILED, CANCELLED; ``scontrol show
job``: a line with ``StdOut=``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_TOOL = """#!{python}
import os, re, signal, subprocess, sys
from pathlib import Path
STATE = Path({state!r})
tool, args = Path(sys.argv[0]).name, sys.argv[1:]

def job_dir(job_id):
    return STATE / job_id

def alive(job_id):
    pid_file = job_dir(job_id) / "pid"
    if not pid_file.exists() or (job_dir(job_id) / "exit").exists():
        return False
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return False
    return True

def job_ids(args):
    for arg in args:
        if arg.startswith("--jobs="):
            return arg.split("=", 1)[1]
    return args[args.index("--jobs") + 1]

if tool == "sbatch":
    script = sys.stdin.read()
    STATE.mkdir(parents=True, exist_ok=True)
    job_id = str(1000 + len(list(STATE.iterdir())))
    job_dir(job_id).mkdir()
    (job_dir(job_id) / "script").write_text(script)
    output = re.search(r"^#SBATCH --output=(\\S+)", script, re.M).group(1).replace("%j", job_id)
    output_path = Path.cwd() / output
    (job_dir(job_id) / "stdout").write_text(str(output_path))
    runner = (
        "import subprocess, sys, os; "
        "code = subprocess.call(['bash', sys.argv[1]], stdout=open(sys.argv[2], 'a'), stderr=subprocess.STDOUT); "
        "open(sys.argv[3], 'w').write(str(code))"
    )
    env = dict(os.environ, SLURM_JOB_ID=job_id)
    child = subprocess.Popen(
        [sys.executable, "-c", runner, str(job_dir(job_id) / "script"), str(output_path),
         str(job_dir(job_id) / "exit")],
        env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    (job_dir(job_id) / "pid").write_text(str(child.pid))
    print(job_id)
elif tool == "squeue":
    job_id = job_ids(args)
    if not job_dir(job_id).exists():
        print(f"slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        sys.exit(1)
    if alive(job_id):
        print("RUNNING")
elif tool == "sacct":
    job_id = job_ids(args)
    exit_file = job_dir(job_id) / "exit"
    if (job_dir(job_id) / "cancelled").exists():
        print("CANCELLED by 0")
    elif exit_file.exists():
        print("COMPLETED" if exit_file.read_text().strip() == "0" else "FAILED")
elif tool == "scontrol" and args[:2] == ["show", "job"]:
    job_id = args[2]
    print(f"JobId={{job_id}} JobName=x\\n   StdOut={{(job_dir(job_id) / 'stdout').read_text()}}")
elif tool == "scontrol" and args[:1] == ["requeue"]:
    pass
elif tool == "scancel":
    job_id = args[0]
    (job_dir(job_id) / "cancelled").touch()
    try:
        os.killpg(int((job_dir(job_id) / "pid").read_text()), signal.SIGTERM)
    except ProcessLookupError:
        pass
elif tool == "srun":
    os.execvp(args[0], args)
else:
    print(f"{{tool}}: unsupported arguments {{args}}", file=sys.stderr)
    sys.exit(2)
"""


def install(bin_dir: Path, state_dir: Path) -> None:
    """Write the stand-in commands into ``bin_dir`` (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    text = _TOOL.format(python=sys.executable, state=str(state_dir))
    for tool in ("sbatch", "squeue", "sacct", "scontrol", "scancel", "srun"):
        path = bin_dir / tool
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
