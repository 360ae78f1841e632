"""Every kind of run ends with the same ledger status and exit code for the same ending.

The five kinds (``computewise run``, ``track()``, ``tune``, ``serve``, a job supervised on the local
engine) each run for real in a child process against a real SQLite ledger, and each ends five ways:
the job returns, raises, gets Ctrl-C, exits 75 (preempted after a checkpoint), or the monitor is
killed with SIGKILL. The job is one function (``recorded_work.work``) called from inside the
recorded part of each kind: the command's child, the tracked block, tune's progress callback, the
supervised job. A server is the exception to "the job ends itself": it stops when told (SIGTERM
is its success), a model error fails only its request, so its run ends in error only when the
server itself fails (here: it cannot write its ready file), and exit 75 is raised by a SIGUSR1
handler in its main thread. Ctrl-C is SIGINT to the monitor's process, as a terminal sends it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from computewise.ledger import Ledger, RunRow
from computewise.monitor.pricing import DetectedHardware
from computewise.monitor.recorded import Ending, RecordedRun, exit_code_of, new_run, run_status
from computewise.system.user import current_user
from prices import given_price

WORK = '''
"""The job of every kind of run: it ends as the test says, from inside the recorded run."""
import os
import signal
import time
from pathlib import Path


def work(ending, ready, signal_self=False):
    Path(ready).write_text(str(os.getpid()))
    if ending == "exception":
        raise RuntimeError("the job failed")
    if ending == "exit-75":
        raise SystemExit(75)
    if ending in ("ctrl-c", "sigkill"):
        if signal_self:  # the job runs in the monitor's process: the signal reaches the monitor as from outside
            os.kill(os.getpid(), signal.SIGINT if ending == "ctrl-c" else signal.SIGKILL)
        time.sleep(120)  # else the test signals the monitor meanwhile


def setup(config):
    """tune's entry point: the smallest model that trains."""
    import torch
    from computewise.train.setup import TrainingSetup

    def loss(model, batch):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(model(inputs), targets)

    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    return TrainingSetup(torch.nn.Linear(4, 1), loss, data, 4, lambda params, fused: torch.optim.SGD(params, lr=0.1))
'''

JOB = "import sys; from recorded_work import work; work(*sys.argv[1:])"
# Ctrl-C as a terminal's foreground job gets it: a shell script that starts this suite with `&` leaves
# SIGINT ignored, children inherit that, and Python then never raises KeyboardInterrupt.
CTRL_C_AS_IN_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

TRACK = (
    CTRL_C_AS_IN_A_TERMINAL
    + """
import os, sys
from computewise.monitor.track import track
from recorded_work import work
ending, ready = sys.argv[1:]
with track(db=os.environ["COMPUTEWISE_DB"], flush_every_s=0.2):
    work(ending, ready)
"""
)

TUNE = (
    CTRL_C_AS_IN_A_TERMINAL
    + """
import sys
from computewise.tune.search import LocalTrials, TuneOptions, run_tune
from recorded_work import work
*endings, ready = sys.argv[1:]
space = "precision=fp32;micro=4;checkpointing=off;compile=off;workers=0;fused=off"
options = TuneOptions(space=space, steps=1, min_steps=1, warmup_steps=1, threads=1)
for ending in endings:  # one interpreter for every ending: torch is imported once

    def trials(settings, ending=ending):  # where the trials start, inside the recorded run
        work(ending, ready, signal_self=True)
        return LocalTrials(settings)

    try:
        run_tune("recorded_work:setup", options, trials=trials)
    except BaseException as error:
        print(f"{ending}: {error!r}", flush=True)
"""
)

SERVE = (
    CTRL_C_AS_IN_A_TERMINAL
    + """
import os, signal, sys
from pathlib import Path
from computewise.serve.server import serve
from recorded_work import work
ending, ready = sys.argv[1:]
signal.signal(signal.SIGUSR1, lambda signum, frame: work(ending, os.devnull))
ready_file = Path(ready)
if ending == "exception":  # a directory holds the name the ready file is staged under: serving fails once ready
    (ready_file.parent / f".{ready_file.name}.tmp-{os.getpid()}").mkdir()
sys.exit(serve("echo", port=0, ready_file=ready_file))
"""
)

SUPERVISE = (
    CTRL_C_AS_IN_A_TERMINAL
    + """
import os, sys
from pathlib import Path
from computewise.ledger import Ledger, PriceSnapshot
from computewise.scale.engine import JobSpec
from computewise.scale.local import LocalEngine
from computewise.scale.supervise import supervise
ending, ready = sys.argv[1:]
db = os.environ["COMPUTEWISE_DB"]
spec = JobSpec(name="recorded", command=(sys.executable, "-c", JOB, ending, ready), max_restarts=0)
price = PriceSnapshot(3.0, "test", "$3.00/h as given", False, carbon_g_per_kwh=400.0, carbon_source="test", pue=1.0)
with Ledger.open(db) as ledger:
    supervise(LocalEngine(Path(ready).parent / "jobs"), spec, ledger, db, price, max_preemptions=0, poll_s=0.05)
""".replace("JOB", repr(JOB))
)

ENDINGS = ("success", "exception", "ctrl-c", "exit-75", "sigkill")
# One rule for every kind (computewise.monitor.recorded): status and exit code as a shell would see them.
EXPECTED: dict[str, tuple[str, int | None]] = {
    "success": ("succeeded", 0),
    "exception": ("failed", 1),
    "ctrl-c": ("interrupted", 128 + signal.SIGINT),
    "exit-75": ("interrupted", 75),
    "sigkill": ("crashed", None),
}
EXIT_S = 90.0  # generous: two busy cores, and tune imports torch


@dataclass(frozen=True)
class Kind:
    name: str  # the ledger's kind
    argv: tuple[str, ...]  # the monitor's process; the ending and the job's ready file are appended
    signals: dict[str, signal.Signals]  # the ending's signal to the monitor once the job is under way


MONITOR_SIGNALS = {"ctrl-c": signal.SIGINT, "sigkill": signal.SIGKILL}
KINDS = {
    "command": Kind(
        "command",
        (sys.executable, "-m", "computewise.cli.app", "run", "--interval", "0.2s", "--", sys.executable, "-c", JOB),
        MONITOR_SIGNALS,
    ),
    "track": Kind("track", (sys.executable, "-c", TRACK), MONITOR_SIGNALS),
    "serve": Kind(
        "serve",
        (sys.executable, "-c", SERVE),
        {"success": signal.SIGTERM, "exit-75": signal.SIGUSR1, **MONITOR_SIGNALS},
    ),
    "supervised": Kind("command", (sys.executable, "-c", SUPERVISE), MONITOR_SIGNALS),
}


def _wait_for_the_job(ready: Path, monitor: subprocess.Popen[bytes], log: Path) -> None:
    deadline_s = time.monotonic() + EXIT_S
    while not (ready.exists() and ready.read_text()):
        if monitor.poll() is not None:
            pytest.fail(f"the monitor exited with {monitor.returncode} before the job started:\n{log.read_text()}")
        if time.monotonic() > deadline_s:
            pytest.fail(f"the job did not start within {EXIT_S} s:\n{log.read_text()}")
        time.sleep(0.05)


def _end_leftovers(monitor: subprocess.Popen[bytes], ready: Path) -> None:
    """Whatever this test started and the ending left behind: the monitor's session (a command's child,
    tune's trial server) and a supervised job, which the local engine starts in a session of its own."""
    if monitor.poll() is None:
        monitor.kill()
        monitor.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(monitor.pid, signal.SIGKILL)
    if ready.exists() and ready.read_text().isdigit():
        with contextlib.suppress(psutil.Error):
            job = psutil.Process(int(ready.read_text()))
            if "recorded_work" in " ".join(job.cmdline()):
                job.kill()


def _start(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen[bytes], str, Path, Path]:
    """The monitor's process, its ledger, the job's ready file and the log of both."""
    (tmp_path / "recorded_work.py").write_text(WORK)
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "COMPUTEWISE_DB": db, "COMPUTEWISE_FAKE_GPU": "", "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("COMPUTEWISE_RUN_ID", None)
    ready, log = tmp_path / "ready", tmp_path / "monitor.log"
    with log.open("wb") as sink:
        monitor = subprocess.Popen(
            [*argv, str(ready)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,  # no terminal: `computewise run` forwards SIGINT to its job, as from a pipe
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return monitor, db, ready, log


def _runs_oldest_first(db: str) -> list[RunRow]:
    with Ledger.open(db) as ledger:
        ledger.mark_crashed(time.time(), socket.gethostname())  # what every verb does when it opens the ledger
        return ledger.runs()[::-1]


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_run_ends_with_the_same_status_for_the_same_ending(
    tmp_path: Path, kind: str, ending: str
) -> None:
    monitor, db, ready, log = _start(tmp_path, [*KINDS[kind].argv, ending])
    try:
        sent = KINDS[kind].signals.get(ending)
        if sent is not None:
            _wait_for_the_job(ready, monitor, log)
            monitor.send_signal(sent)
        monitor.wait(timeout=EXIT_S)
    finally:
        _end_leftovers(monitor, ready)
    runs = _runs_oldest_first(db)
    assert [run.kind for run in runs] == [KINDS[kind].name], log.read_text()
    assert (runs[0].status, runs[0].exit_code) == EXPECTED[ending], log.read_text()


def test_a_tuning_ends_like_every_other_kind_of_run(tmp_path: Path) -> None:
    """Every ending in one process (the expensive part of a tuning is starting it), SIGKILL last."""
    endings = ["exception", "exit-75", "ctrl-c", "success", "sigkill"]
    monitor, db, ready, log = _start(tmp_path, [sys.executable, "-c", TUNE, *endings])
    try:
        monitor.wait(timeout=EXIT_S)
    finally:
        _end_leftovers(monitor, ready)
    runs = _runs_oldest_first(db)
    assert [run.kind for run in runs] == ["tune"] * len(endings), log.read_text()
    assert [(run.status, run.exit_code) for run in runs] == [EXPECTED[ending] for ending in endings], log.read_text()


@pytest.mark.parametrize(
    ("exit_code", "signalled_by", "status"),
    [
        (0, None, "succeeded"),
        (0, signal.SIGTERM, "succeeded"),  # the job caught it and finished cleanly
        (1, None, "failed"),
        (42, signal.SIGTERM, "interrupted"),
        (130, None, "interrupted"),  # killed by SIGINT, sent by someone else
        (143, None, "interrupted"),
        (-signal.SIGTERM, None, "interrupted"),  # the same, as Popen says it
        (137, None, "failed"),  # SIGKILL: the OOM killer, most often
        (-signal.SIGKILL, None, "failed"),
        (1, signal.SIGUSR1, "failed"),
        (75, None, "interrupted"),  # computewise.train saved a checkpoint on a preemption signal
        (None, None, "failed"),  # the engine lost the exit code: nothing says the work finished
        (None, signal.SIGTERM, "interrupted"),  # a cancelled job
    ],
)
def test_run_status(exit_code: int | None, signalled_by: int | None, status: str) -> None:
    assert run_status(exit_code, signalled_by) == status


@pytest.mark.parametrize(
    ("error", "ending"),
    [
        (None, Ending("succeeded", 0)),
        (SystemExit(0), Ending("succeeded", 0)),
        (SystemExit(None), Ending("succeeded", 0)),
        (RuntimeError("out of data"), Ending("failed", 1, "RuntimeError: out of data")),
        (KeyboardInterrupt(), Ending("interrupted", 130, "KeyboardInterrupt")),
        (SystemExit(75), Ending("interrupted", 75, "SystemExit: 75")),
        (SystemExit(3), Ending("failed", 3, "SystemExit: 3")),
        (SystemExit("no data"), Ending("failed", 1, "SystemExit: no data")),
    ],
)
def test_an_exception_ends_a_run_as_the_exit_code_it_gives_the_shell(
    error: BaseException | None, ending: Ending
) -> None:
    assert Ending.of_exception(error) == ending
    assert exit_code_of(error) == ending.exit_code


def test_a_recorded_run_names_its_process_writes_its_row_first_and_its_ending_once(tmp_path: Path) -> None:
    price = given_price(2.0, carbon_g_per_kwh=400.0)
    hardware = DetectedHardware(gpu_count=0, gpu_name=None, gpu_memory_total_bytes=None, logical_cpus=3)
    row = new_run(
        "tune", ("computewise", "tune", "my model:setup"), hardware=hardware, price=price, tags={}, interval_s=5
    )
    assert row.command == "computewise tune 'my model:setup'" and row.argv == tuple(sys.orig_argv)
    assert (row.host, row.pid, row.user, row.cwd) == (socket.gethostname(), os.getpid(), current_user(), os.getcwd())
    assert (row.logical_cpus, row.gpu_count, row.price) == (3, 0, price)
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as ledger:
        with pytest.raises(KeyboardInterrupt), RecordedRun(ledger, row) as record:
            assert ledger.run(record.run_id).status == "running"
            record.declare(Ending.of_exit(0), summary={"steps": 3})
            raise KeyboardInterrupt  # the exception wins over what was declared: the work did not finish
        run = ledger.run(record.run_id)
        assert (run.status, run.exit_code, run.error) == ("interrupted", 130, "KeyboardInterrupt")
        assert run.summary == {"steps": 3}
        assert record.finish(RuntimeError("later")) == Ending("interrupted", 130, "KeyboardInterrupt")
        assert ledger.run(record.run_id).status == "interrupted"  # written once
