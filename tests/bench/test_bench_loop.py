"""Back-to-back timing, launch latency and the int8 product bench runs: real torch on the CPU, the graph on a GPU.

No test here asserts a speed on the shared CPU: they check what is called how often between which
synchronisations, the operands' layout, the figures' plumbing into the JSON, the table and the
calibration. The ``gpu`` tests check what only a GPU has: the CUDA-graph replay and the int8 kernel.
"""

from __future__ import annotations

import io
import json
import time

import pytest
from rich.console import Console

from computewise.bench import BenchResult, Device, Measured
from computewise.bench.launch import measure_launch
from computewise.bench.matmul import int8_operands, int8_shape_problem, matmul_sizes, measure_matmul
from computewise.bench.result import LaunchFigure
from computewise.bench.timing import calls_to_fill, time_back_to_back
from computewise.catalog.calibration import Calibration
from computewise.report.bench import print_bench

torch = pytest.importorskip("torch")


def test_back_to_back_times_count_calls_per_repeat_and_reports_seconds_per_call() -> None:
    calls: list[float] = []

    def work() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.002)

    per_call = time_back_to_back(work, count=5, warmup=1, repeats=3, device="cpu")
    assert len(calls) == (1 + 3) * 5  # the warm-up is one whole loop too
    assert len(per_call) == 3
    assert all(0.002 <= t < 0.05 for t in per_call), per_call  # one call's time, not the loop's


def test_back_to_back_refuses_an_empty_loop() -> None:
    with pytest.raises(ValueError, match="count >= 1"):
        time_back_to_back(lambda: None, count=0, warmup=0, repeats=1, device="cpu")


def test_calls_to_fill_sizes_the_loop_to_the_span() -> None:
    def work() -> None:
        time.sleep(0.001)

    count = calls_to_fill(work, 0.02, device="cpu")
    assert 2 <= count <= 20, count  # sleep(1 ms) lasts at least 1 ms: never more than 20 calls in 20 ms
    assert calls_to_fill(lambda: None, 1e-9, device="cpu") == 1


def test_the_int8_operands_are_in_the_tn_layout_and_multiply_exactly() -> None:
    """The first H100 run passed two row-major operands, which cuBLASLt runs on CUDA cores (7 % of the sheet)."""
    size = 64
    a, b = int8_operands("cpu", size)
    assert a.is_contiguous() and a.stride() == (size, 1)
    assert b.stride() == (1, size) and b.t().is_contiguous()  # column-major: cuBLAS's "TN" with a
    assert int(a.min()) < -64 and int(a.max()) > 64  # the whole int8 range, not a constant
    product = torch._int_mm(a, b)
    assert product.dtype == torch.int32
    assert torch.equal(product.long(), a.long() @ b.long())


def test_int8_sizes_follow_the_shapes_int_mm_runs_on_tensor_cores() -> None:
    assert int8_shape_problem(17, 8, 8) is None
    assert "more than 16 rows" in (int8_shape_problem(16, 64, 64) or "")
    assert "multiples of 8" in (int8_shape_problem(64, 60, 64) or "")
    assert "multiples of 8" in (int8_shape_problem(64, 64, 4) or "")
    for device in ("cpu", "cuda:0"):
        for quick in (True, False):
            assert all(int8_shape_problem(n, n, n) is None for n in matmul_sizes(device, quick=quick))
    with pytest.raises(ValueError, match="would not run on tensor cores"):
        int8_operands("cpu", 12)


def test_an_int8_sweep_on_the_cpu_measures_every_size() -> None:
    figure = measure_matmul("cpu", "int8", [32, 64], quick=True)
    assert [p.size for p in figure.points] == [32, 64]
    assert all(p.tflops.median > 0 and p.tflops.repeats == 5 for p in figure.points)


def test_launch_latency_is_measured_back_to_back_and_synchronised() -> None:
    figure = measure_launch("cpu")
    assert figure.device == "cpu"
    assert figure.back_to_back_s.repeats == 10 and figure.synchronised_s.repeats == 200
    for measured in (figure.back_to_back_s, figure.synchronised_s):
        assert 0 < measured.low <= measured.median <= measured.high < 0.01  # a one-element add: microseconds
    assert figure.matmul_back_to_back_s is None  # a CPU matmul times its arithmetic, not the host's issue rate


def _result(launch: tuple[LaunchFigure, ...]) -> BenchResult:
    return BenchResult(
        host="h", date="2026-11-27T06:00:00+00:00", cpu="Intel Xeon", threads=2, quick=True,
        devices=(Device("cpu", "Intel Xeon", None),), matmul=(), bandwidth=(), collectives=(), storage=(),
        reference=(), comparisons=(), skipped=(), notes=(), launch=launch,
    )  # fmt: skip


LAUNCH = LaunchFigure("cpu", Measured(2e-6, 1.9e-6, 2.2e-6, 5), Measured(3e-6, 2.5e-6, 4e-6, 100))


def test_launch_latency_round_trips_and_a_result_written_before_it_still_reads() -> None:
    data = json.loads(json.dumps(_result((LAUNCH,)).to_dict()))
    assert data["launch"] == [
        {
            "device": "cpu",
            "back_to_back_s": {"median": 2e-6, "low": 1.9e-6, "high": 2.2e-6, "repeats": 5},
            "synchronised_s": {"median": 3e-6, "low": 2.5e-6, "high": 4e-6, "repeats": 100},
        }
    ]
    assert BenchResult.from_dict(data).launch == (LAUNCH,)
    del data["launch"]
    assert BenchResult.from_dict(data).launch == ()
    on_gpu = LaunchFigure("cuda:0", LAUNCH.back_to_back_s, LAUNCH.synchronised_s, Measured(9e-6, 8.7e-6, 9.4e-6, 10))
    written = json.loads(json.dumps(_result((on_gpu,)).to_dict()))
    assert written["launch"][0]["matmul_back_to_back_s"]["median"] == 9e-6
    assert BenchResult.from_dict(written).launch == (on_gpu,)


def test_a_busy_launch_figure_is_named_as_the_calibration_saves_it() -> None:
    noisy = LaunchFigure("cpu", Measured(2e-6, 1e-6, 9e-6, 5), Measured(3e-6, 2.5e-6, 4e-6, 100))
    assert _result((LAUNCH,)).busy_figures() == ()
    assert _result((noisy,)).busy_figures() == ("launch latency: 1e-06-9e-06 s (9.0x)",)


def test_the_table_prints_launch_latency_in_microseconds() -> None:
    stream = io.StringIO()
    print_bench(_result((LAUNCH,)), Console(file=stream, width=120))
    text = stream.getvalue()
    assert "launch latency (one-element kernel)" in text
    assert "2 (1.9-2.2)" in text and "3 (2.5-4)" in text
    assert "128^3 mm back to back (us)" in text  # n/a on a CPU: its matmul would time the arithmetic


def test_the_calibration_carries_the_main_devices_back_to_back_launch() -> None:
    from computewise.bench.result import MatmulFigure, MatmulPoint

    point = MatmulPoint(256, "fp32", Measured(0.1, 0.1, 0.1, 5))
    result = _result((LAUNCH,))
    data = {**result.to_dict(), "matmul": [MatmulFigure("cpu", "fp32", (point,), 0.1, None).to_dict()]}
    calibration = Calibration.from_bench_dict(data)
    assert calibration.launch_s == 2e-6
    saved = json.loads(json.dumps(calibration.to_dict()))
    assert Calibration.from_dict(saved) == calibration
    del saved["launch_s"]  # a calibration saved before launch latency was measured
    assert Calibration.from_dict(saved).launch_s is None
    assert Calibration.from_bench_dict({**data, "launch": []}).launch_s is None


@pytest.mark.gpu
def test_a_cuda_graph_replays_count_calls_per_repeat() -> None:
    counter = torch.zeros(1, device="cuda:0")

    def work() -> None:
        counter.add_(1)

    per_call = time_back_to_back(work, count=5, warmup=1, repeats=3, device="cuda:0", graph=True)
    torch.cuda.synchronize()
    assert len(per_call) == 3
    # 3 eager warm-up calls before the capture (the capture itself runs nothing), then 4 replays of 5
    assert int(counter.item()) == 3 + (1 + 3) * 5


@pytest.mark.gpu
def test_gpu_int8_runs_on_tensor_cores_not_cuda_cores() -> None:
    """Row-major operands read 132 TOPS against bf16's 730 (0.18x) on an H100: CUDA cores. IMMA is >= 1x."""
    int8 = measure_matmul("cuda:0", "int8", [4096], quick=True).peak_tflops
    bf16 = measure_matmul("cuda:0", "bf16", [4096], quick=True).peak_tflops
    assert int8 >= 0.5 * bf16, (int8, bf16)


@pytest.mark.gpu
def test_gpu_launch_back_to_back_is_below_the_synchronised_round_trip() -> None:
    figure = measure_launch("cuda:0")
    assert 0 < figure.back_to_back_s.median < figure.synchronised_s.median < 1e-3
    assert figure.matmul_back_to_back_s is not None and 0 < figure.matmul_back_to_back_s.median < 1e-3
