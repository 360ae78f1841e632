"""fit() under real torchrun with 2 processes (gloo on 127.0.0.1): DDP and FSDP, preemption of one rank, resume.

Each launch is a child process group bounded by a timeout and killed by its id when it overruns.
The reference is the same training in one process (dropout off, so DDP's two half-batches must
reproduce the single process's full batch up to float rounding).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

from computewise.train.checkpoint import CheckpointStore  # noqa: E402
from computewise.train.fit import fit  # noqa: E402
from computewise.train.preemption import PREEMPTED_EXIT_CODE  # noqa: E402

pytestmark = pytest.mark.torch

REPO_ROOT = Path(__file__).resolve().parents[2]
GPT = {"samples": 64, "global_batch": 8, "n_embd": 32, "block_size": 16, "eval_samples": 8}
LAUNCH_TIMEOUT_S = 150

WORKER = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch
    sys.path.insert(0, {repo!r})
    torch.set_num_threads(1)
    from examples.tiny_gpt import setup
    from computewise.train.fit import fit
    from computewise.train.preemption import Preempted

    checkpoint_dir, out, max_steps, kill_at, strategy, catch = sys.argv[1:7]
    rank = int(os.environ["RANK"])

    def on_step(step, loss):
        if rank == 1 and step == int(kill_at):
            os.kill(os.getpid(), signal.SIGTERM)  # only this rank gets the signal

    def run(tag):
        try:
            result, code = fit(setup({gpt!r}), max_steps=int(max_steps), checkpoint_dir=checkpoint_dir,
                               strategy=strategy, track=False, on_step=on_step), 0
        except Preempted as preempted:
            result, code = preempted.result, preempted.code
            if catch != "catch":
                write(tag, result, code)
                raise  # exit 75, as a real job does
        write(tag, result, code)

    def write(tag, result, code):
        record = {{"rank": rank, "code": code, "start": result.start_step, "final": result.final_step,
                  "losses": result.losses, "stopped": result.stopped, "checkpoint": str(result.checkpoint),
                  "seconds": result.seconds_to_checkpoint_s}}
        with open(os.path.join(out, f"{{tag}}-rank{{rank}}.json"), "w") as stream:
            json.dump(record, stream)

    run("first")
    if catch == "catch":
        run("second")  # the same processes resume in the process group the first call created
    """
)


@pytest.fixture(scope="module")
def reference() -> list[float]:
    """The same 6 steps in this process, no torchrun."""
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from examples.tiny_gpt import setup
    finally:
        sys.path.remove(str(REPO_ROOT))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit(setup(dict(GPT)), max_steps=6, track=False).losses
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(repo=str(REPO_ROOT), gpt=GPT))
    out = tmp_path / "out"
    out.mkdir()

    def run(checkpoint_dir: str, *args: str) -> tuple[int, str, dict[str, dict[str, Any]]]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            str(script),
            checkpoint_dir,
            str(out),
            *args,
        ]
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            output, _ = child.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # torchrun starts each worker in a session of its own: kill them by pid, then torchrun.
            for worker in psutil.Process(child.pid).children(recursive=True):
                worker.kill()
            child.kill()
            output, _ = child.communicate(timeout=30)
            pytest.fail(f"torchrun did not finish within {LAUNCH_TIMEOUT_S} s:\n{output}")
        records = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
        for path in out.glob("*.json"):
            path.unlink()
        return child.returncode, output, records

    yield run


def test_ddp_stops_every_rank_at_the_same_step_saves_once_and_resumes(
    tmp_path: Path, launch: Any, reference: list[float]
) -> None:
    checkpoints = tmp_path / "ckpt"
    code, output, records = launch(str(checkpoints), "6", "3", "ddp", "exit")
    assert {"first-rank0", "first-rank1"} <= set(records), output
    ranks = [records["first-rank0"], records["first-rank1"]]
    # Rank 1 alone got SIGTERM during step 3; the all-reduced flag stopped both after it.
    assert [r["code"] for r in ranks] == [PREEMPTED_EXIT_CODE, PREEMPTED_EXIT_CODE], output
    assert [r["final"] for r in ranks] == [3, 3] and {r["stopped"] for r in ranks} == {"preempted"}
    # torchrun itself exits 1 when a worker fails. (Its report usually shows "exitcode: 75"; not asserted,
    # because gloo's teardown at interpreter exit very rarely aborts one worker after its checkpoint and
    # result are written: seen once in ~50 launches. Each rank's own record is what counts.)
    assert code != 0
    assert "preempted by a signal to another rank" in output  # rank 0 logs it, naming where it came from
    infos = CheckpointStore(checkpoints).checkpoints()
    assert [info.step for info in infos] == [3]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000003.json", "step-00000003.pt"]
    assert ranks[0]["checkpoint"] == ranks[1]["checkpoint"] == str(infos[0].path)
    assert ranks[0]["seconds"] is not None and 0 <= ranks[0]["seconds"] < 30

    code, output, records = launch(str(checkpoints), "6", "-1", "ddp", "exit")  # the same command, restarted
    assert {"first-rank0", "first-rank1"} <= set(records), output
    resumed = [records["first-rank0"], records["first-rank1"]]
    assert [r["code"] for r in resumed] == [0, 0], output
    assert [(r["start"], r["final"], r["stopped"]) for r in resumed] == [(3, 6, "max_steps")] * 2
    assert resumed[0]["losses"] == resumed[1]["losses"]
    losses = ranks[0]["losses"] + resumed[0]["losses"]
    assert losses == pytest.approx(reference, rel=1e-5, abs=1e-6)


def test_fsdp_trains_checkpoints_a_full_state_and_resumes(tmp_path: Path, launch: Any, reference: list[float]) -> None:
    checkpoints = tmp_path / "ckpt"
    _code, output, records = launch(str(checkpoints), "6", "2", "fsdp", "catch")
    assert {"first-rank0", "second-rank0", "first-rank1"} <= set(records), output
    first, second = records["first-rank0"], records["second-rank0"]
    assert (first["code"], first["final"], records["first-rank1"]["final"]) == (PREEMPTED_EXIT_CODE, 2, 2)
    assert (second["start"], second["final"]) == (2, 6)
    assert first["losses"] + second["losses"] == pytest.approx(reference, rel=1e-5, abs=1e-6)
    # The checkpoint holds the full, unsharded weights under the model's own names.
    loaded = CheckpointStore(checkpoints).load_latest()
    assert loaded is not None and loaded.step == 6
    model = loaded.state["engine"]["model"]
    assert model["wte.weight"].shape == (512, 32) and model["blocks.0.attn.c_attn.weight"].shape == (96, 32)
