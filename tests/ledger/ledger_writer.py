"""A real ``computewise run``-like writer process for the ledger tests (run as a script, not collected).

python ledger_writer.py write URL BATCHES SIZE   start a run, print "ready RUN_ID", wait for a line
                                                 on stdin, add BATCHES batches of SIZE samples, finish
python ledger_writer.py hang URL                 start a run with this pid, record one sample, print
                                                 "ready RUN_ID", then sleep until killed (at most 60 s)
"""

from __future__ import annotations

import os
import socket
import sys
import time

from computewise.ledger import GpuSampleRow, Ledger, NewRun, PriceSnapshot, SampleRow
from computewise.system.user import current_user

PRICE = PriceSnapshot(
    hourly_usd=2.21,
    source="test",
    explanation="1x A100 80GB on-demand",
    assumed=False,
    carbon_g_per_kwh=475.0,
    carbon_source="test",
    pue=1.0,
)


def _run(started_at_s: float) -> NewRun:
    return NewRun(
        kind="command",
        command=f"python train.py --worker {os.getpid()}",
        argv=("python", "train.py", "--worker", str(os.getpid())),
        tags={"team": "nlp", "worker": str(os.getpid())},
        host=socket.gethostname(),
        pid=os.getpid(),
        user=current_user(),
        cwd=os.getcwd(),
        started_at_s=started_at_s,
        interval_s=1.0,
        price=PRICE,
        gpu_count=1,
    )


def _sample(run_id: int, t_s: float) -> SampleRow:
    return SampleRow(
        run_id, t_s, 1.0, 98.0, 9_000_000_000, 0, 0, 0, 0, 50.0, 60_000_000_000, 1, 91.0, 70_000_000_000,
        390.0, 410.0, True, False,
    )  # fmt: skip


def _gpu_sample(run_id: int, t_s: float) -> GpuSampleRow:
    return GpuSampleRow(run_id, t_s, 0, 91.0, 1410.0, 70_000_000_000, 390.0, 1e6 + t_s, 2e9, 1e9, 69_000_000_000)


def main(argv: list[str]) -> None:
    mode, url = argv[0], argv[1]
    ledger = Ledger.open(url)
    start_s = time.time()
    run_id = ledger.start_run(_run(start_s))
    if mode == "hang":
        ledger.add_samples([_sample(run_id, start_s + 1.0)])
        print(f"ready {run_id}", flush=True)
        time.sleep(60)
        return
    batches, size = int(argv[2]), int(argv[3])
    print(f"ready {run_id}", flush=True)
    sys.stdin.readline()
    for batch in range(batches):
        t_s = start_s + batch * size
        ledger.add_samples(
            [_sample(run_id, t_s + i) for i in range(size)], [_gpu_sample(run_id, t_s + i) for i in range(size)]
        )
        ledger.heartbeat(run_id, t_s + size)
    ledger.finish_run(run_id, "succeeded", time.time(), exit_code=0)
    ledger.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
