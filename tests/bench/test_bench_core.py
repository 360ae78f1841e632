"""bench's own figures checked against measurements made here, independently of its code.

The machine these tests run on is a shared 2-core VM: other processes take a core at times and
slow whichever side of a comparison happens to be running. So no test asserts a speed; the
comparisons take the best of a few tries on each side, interleaved (library, independent,
library, ...) so a burst of load hits both, and stop once the two agree: a best-of-tries is the
figure closest to the machine's real capacity on both sides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import pytest

from computewise.bench import BenchResult, Device, MatmulFigure, MatmulPoint, Measured, Skipped, time_repeats
from computewise.bench.compare import compare_bandwidth, compare_matmul, match_cpu
from computewise.bench.matmul import matmul_dtypes, measure_matmul
from computewise.bench.memory import STREAM_BYTES_PER_ELEMENT, measure_triad
from computewise.bench.result import BandwidthFigure
from computewise.bench.timing import CALL_S
from computewise.catalog import load_catalog
from computewise.errors import InputError

torch = pytest.importorskip("torch")

# Each try takes about 0.2 s; a neighbouring xdist worker can hold a core for seconds at a time (two CI
# runs saw 8 tries, under 2 s, end inside one such stretch), so the tries span several seconds.
_MAX_TRIES = 30


def _independent_mm_tflops(size: int, device: str = "cpu") -> float:
    """A plain ``a @ b`` loop timed with perf_counter: no out=, no bench code, same torch threads.

    Its windows last as long as bench's timed calls (``CALL_S``), five of them as bench's quick repeats:
    the same statistic. Fixed windows of ten products (18 ms at 1.8 ms each) caught fewer of a busy
    machine's quiet gaps than bench's 10 ms calls: 0.12 against 0.16 TFLOP/s beside a running test suite."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    start = time.perf_counter()
    a @ b
    sync()
    loops, best_s = max(1, round(CALL_S / (time.perf_counter() - start))), float("inf")
    for _ in range(5):  # the best of five windows: the quietest moment, as bench's fastest call
        start = time.perf_counter()
        for _ in range(loops):
            a @ b
        sync()
        best_s = min(best_s, time.perf_counter() - start)
    return loops * 2 * size**3 / best_s / 1e12


def _within_10_percent(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= 0.10 * theirs


def _within_factor_2_5(ours: float, theirs: float) -> bool:
    return theirs / 2.5 < ours < theirs * 2.5


def _agreeing_bests(
    ours: Callable[[], float], theirs: Callable[[], float], agree: Callable[[float, float], bool]
) -> tuple[float, float]:
    """The best of each side over interleaved tries, stopping once they agree (at most ``_MAX_TRIES``).

    Another process taking a core for a while slows one side of a try; the best values converge on the
    machine's real figure as quiet moments come, so a disagreement left after every try is a real one.
    """
    best_ours = best_theirs = 0.0
    for _ in range(_MAX_TRIES):
        best_ours, best_theirs = max(best_ours, ours()), max(best_theirs, theirs())
        if agree(best_ours, best_theirs):
            break
    return best_ours, best_theirs


def _fastest_bench_call_tflops(device: str, size: int) -> float:
    """bench's fastest timed call (``high`` is the max below ten repeats): the statistic of the plain loop.

    bench reports a median, which a neighbour holding a core for the whole measurement drags down while
    a best-of-windows catches the gaps; comparing a median with a best failed by 20 % under a parallel
    test suite. Fastest against fastest checks what this test is for: bench's FLOP count and clock.
    """
    (point,) = measure_matmul(device, "fp32", [size], quick=True).points
    return point.tflops.high


def test_fp32_matmul_agrees_within_10_percent_with_a_plain_torch_mm_loop() -> None:
    """On one torch thread: two threads on a 2-core machine beside another busy test process wait on each
    other at every product (a clean CI run once measured the plain loop 3x slower than bench for 30 tries);
    one thread is what both sides share either way, and the FLOP count and clock are what is checked."""
    size = 512
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours, theirs = _agreeing_bests(
            lambda: _fastest_bench_call_tflops("cpu", size),
            lambda: _independent_mm_tflops(size),
            _within_10_percent,
        )
    finally:
        torch.set_num_threads(threads)
    assert _within_10_percent(ours, theirs), (ours, theirs)


def _numpy_add_gb_per_s(elements: int) -> float:
    """STREAM's 'add' (a = b + c) in NumPy: the triad's traffic (3 arrays x 4 bytes) without the scalar.

    NumPy runs it on one thread and torch on all usable CPUs, so the two agree only within a generous
    factor; on a 2-core VM one core already draws most of the memory bandwidth the VM is given.
    """
    b = np.random.rand(elements).astype(np.float32)
    c = np.random.rand(elements).astype(np.float32)
    a = np.empty_like(b)
    np.add(b, c, out=a)
    best_s = min(_timed(lambda: np.add(b, c, out=a)) for _ in range(5))
    return STREAM_BYTES_PER_ELEMENT * elements / best_s / 1e9


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_triad_is_plausible_and_agrees_with_a_numpy_stream_add() -> None:
    elements = 16 * 1024 * 1024  # 64 MiB per array: twice this VM's 32 MiB L3, so memory and not cache
    ours, theirs = _agreeing_bests(
        lambda: measure_triad("cpu", quick=True, elements=elements).gb_per_s.high,  # fastest against fastest
        lambda: _numpy_add_gb_per_s(elements),
        _within_factor_2_5,
    )
    assert 0.5 < ours < 200, ours
    assert _within_factor_2_5(ours, theirs), (ours, theirs)


def test_cpu_dtypes_follow_the_instruction_sets() -> None:
    from computewise.system.cpu import cpu_flags

    dtypes, skipped = matmul_dtypes("cpu")
    assert dtypes[0] == "fp32"
    assert ("bf16" in dtypes) == bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})
    named = {s.figure for s in skipped}
    assert all(f"{d} matmul" not in named for d in dtypes)
    assert all(s.reason for s in skipped)


def test_measured_spread_is_min_max_below_ten_repeats_and_p10_p90_from_ten() -> None:
    few = Measured.of([3.0, 1.0, 2.0])
    assert (few.median, few.low, few.high, few.repeats) == (2.0, 1.0, 3.0, 3)
    many = Measured.of([float(v) for v in range(1, 102)])  # 1..101: p10 = 11, p90 = 91 by linear interpolation
    assert (many.median, many.low, many.high) == (51.0, 11.0, 91.0)
    assert Measured.from_dict(json.loads(json.dumps(many.to_dict()))) == many
    with pytest.raises(InputError, match="low <= median <= high"):
        Measured.from_dict({"median": 1.0, "low": 2.0, "high": 3.0, "repeats": 3})


def test_time_repeats_synchronises_before_the_clock_stops() -> None:
    events: list[str] = []

    def work() -> None:
        events.append("work")

    def sync() -> None:
        time.sleep(0.01)  # queued work finishing: must be inside the timed span
        events.append("sync")

    times_s = time_repeats(work, warmup=2, repeats=3, sync=sync)
    assert events == ["work", "work", "sync"] + ["work", "sync"] * 3
    assert len(times_s) == 3 and min(times_s) >= 0.01


def test_a_cpu_is_matched_by_its_whole_model_name_never_by_its_family() -> None:
    catalog = load_catalog()
    assert match_cpu(catalog, "AMD EPYC") is None
    assert match_cpu(catalog, "AMD EPYC 7B13") is None
    found = match_cpu(catalog, "AMD EPYC 9654 96-Core Processor")
    assert found is not None and found.slug == "epyc-9654"
    intel = match_cpu(catalog, "Intel(R) Xeon(R) Platinum 8480+")
    assert intel is not None and intel.slug == "xeon-8480plus"


def _figure(device: str, peak: float, sheet: float | None) -> MatmulFigure:
    point = MatmulPoint(4096, "bf16", Measured(peak, peak, peak, 1))
    return MatmulFigure(device, "bf16", (point,), peak, sheet)


def test_the_data_sheet_comparison_reads_as_a_share_and_flags_a_slow_gpu() -> None:
    healthy = compare_matmul(_figure("cuda:0", 702.0, 989.0))
    assert healthy is not None and not healthy.low
    assert healthy.text == "bf16 matmul reaches 71 % of the data sheet's 989 TFLOP/s"
    slow = compare_matmul(_figure("cuda:0", 400.0, 989.0))
    assert slow is not None and slow.low and "throttling" in slow.text
    # A VM's vCPUs are a slice of the socket the sheet describes: compared, never flagged.
    cpu = compare_matmul(_figure("cpu", 0.15, 14.7))
    assert cpu is not None and not cpu.low
    assert compare_matmul(_figure("cuda:0", 500.0, None)) is None
    narrow = compare_bandwidth(BandwidthFigure("cuda:0", "h2d-pinned", Measured(3.0, 2.9, 3.1, 5), None))
    assert narrow is not None and narrow.low and "link width" in narrow.text


def test_a_result_round_trips_through_json() -> None:
    figure = _figure("cpu", 0.15, None)
    result = BenchResult(
        host="h",
        date="2026-11-24T10:00:00+00:00",
        cpu="AMD EPYC",
        threads=2,
        quick=True,
        devices=(Device("cpu", "AMD EPYC", None),),
        matmul=(figure,),
        bandwidth=(BandwidthFigure("cpu", "triad", Measured(20.0, 19.0, 21.0, 5), None),),
        collectives=(),
        storage=(),
        reference=(),
        comparisons=(),
        skipped=(Skipped("cpu", "int8 matmul", "no VNNI"),),
        notes=("a note",),
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["matmul"][0]["efficiency"] == [{"size": 4096, "fraction": 1.0}]
    assert BenchResult.from_dict(data) == result
    with pytest.raises(InputError, match="schema_version 2"):
        BenchResult.from_dict({**data, "schema_version": 2})


# Recorded on the 2-core test VM under other engineers' test runs (2026-11-27, bench --quick --device cpu),
# and the fp32 sweep on a busy host (0.016-0.18 TFLOP/s): (size, median, low, high) in TFLOP/s.
BUSY_FP32 = ((128, 0.0366, 0.00015, 0.158), (256, 0.0089, 0.0035, 0.0303), (512, 0.0105, 0.0057, 0.0120),
             (1024, 0.0170, 0.016, 0.18))  # fmt: skip
# A quiet run of the same sweep: every size within a few percent.
QUIET_FP32 = ((128, 0.052, 0.050, 0.053), (256, 0.121, 0.118, 0.124), (512, 0.166, 0.161, 0.169),
              (1024, 0.178, 0.174, 0.181))  # fmt: skip


def _sweep(device: str, recorded: tuple[tuple[int, float, float, float], ...]) -> MatmulFigure:
    points = tuple(MatmulPoint(size, "fp32", Measured(med, low, high, 5)) for size, med, low, high in recorded)
    return MatmulFigure(device, "fp32", points, max(p.tflops.median for p in points), None)


def _result(*figures: MatmulFigure, triad: Measured) -> BenchResult:
    return BenchResult(
        host="h", date="2026-11-27T03:00:00+00:00", cpu="Intel Xeon", threads=2, quick=True,
        devices=(Device("cpu", "Intel Xeon", None),), matmul=figures,
        bandwidth=(BandwidthFigure("cpu", "triad", triad, None),), collectives=(), storage=(), reference=(),
        comparisons=(), skipped=(), notes=(),
    )  # fmt: skip


def test_a_busy_hosts_spread_is_named_and_a_quiet_ones_is_not() -> None:
    quiet_triad = Measured(20.0, 19.5, 20.6, 5)
    assert _result(_sweep("cpu", QUIET_FP32), triad=quiet_triad).busy_figures() == ()
    busy = _result(_sweep("cpu", BUSY_FP32), triad=Measured(2.06, 1.96, 2.92, 5)).busy_figures()
    assert busy == (
        "fp32 matmul 128: 0.00015-0.158 TFLOP/s (1053.3x)",
        "fp32 matmul 256: 0.0035-0.0303 TFLOP/s (8.7x)",
        "fp32 matmul 512: 0.0057-0.012 TFLOP/s (2.1x)",
        "fp32 matmul 1024: 0.016-0.18 TFLOP/s (11.2x)",
    )
    # only the calibration's device is judged: a noisy GPU sweep does not block a CPU calibration, or back
    assert _result(_sweep("cpu", QUIET_FP32), _sweep("cuda:1", BUSY_FP32), triad=quiet_triad).busy_figures() == ()


@pytest.mark.gpu
def test_gpu_fp32_matmul_agrees_with_a_synchronised_plain_loop() -> None:
    size = 4096
    ours, theirs = _agreeing_bests(
        lambda: _fastest_bench_call_tflops("cuda:0", size),
        lambda: _independent_mm_tflops(size, "cuda:0"),
        _within_10_percent,
    )
    assert _within_10_percent(ours, theirs), (ours, theirs)
