"""track(): data wait vs compute measured against the truth, steps in a real SQLite ledger, MFU arithmetic.

Loops here are real: generators that sleep inside ``next()`` (data wait), bodies that spin on the
CPU (compute), a real torch model and DataLoader. The only fake is the GPU: ``SimulatedStream``
replays how CUDA events behave (work queues up behind earlier work; an event's time is when the
stream reaches it), so the lazy event path is tested on a machine without one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, UnknownNameError
from computewise.ledger import Ledger
from computewise.monitor.track import INPUT_BOUND_FRACTION, batch_samples, current_tracker, track
from prices import given_price

SPR_FP32_FLOPS = 7.168e12  # xeon-8480plus fp32 peak in the bundled catalog (56 cores x 2 AVX-512 FMA x 2.0 GHz)


def spin(seconds: float) -> None:
    """Burn CPU for ``seconds`` of wall time: compute that a host clock sees as it is."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class TimedBatches:
    """Batches that take ``wait_s`` to arrive, recording how long each ``next()`` really took."""

    def __init__(self, count: int, wait_s: float, batch: Any = None) -> None:
        self.count = count
        self.wait_s = wait_s
        self.batch = batch if batch is not None else [0] * 8
        self.true_waits_s: list[float] = []

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.count):
            started = time.perf_counter()
            time.sleep(self.wait_s)
            self.true_waits_s.append(time.perf_counter() - started)
            yield self.batch


class SimulatedStream:
    """A CUDA stream in miniature, for the event clock's contract (``StepClock``).

    ``launch`` queues work behind what is already queued and returns at once, as a kernel launch
    does; ``mark`` is an event whose time is when the stream reaches it; ``done`` is
    ``Event.query()``; ``wait`` is ``Event.synchronize()`` and is counted, so a test can check the
    loop never waited on the device.
    """

    name = "cuda-events"

    def __init__(self, device_name: str = "NVIDIA H100 80GB HBM3", memory_total_bytes: float = 85_520_809_984) -> None:
        self.device_name: str | None = device_name
        self.memory_total_bytes: float | None = memory_total_bytes
        self.free_at = 0.0
        self.waits = 0

    def launch(self, seconds: float) -> None:
        self.free_at = max(time.perf_counter(), self.free_at) + seconds

    def mark(self) -> float:
        self.free_at = max(time.perf_counter(), self.free_at)
        return self.free_at

    def done(self, mark: Any) -> bool:
        return time.perf_counter() >= float(mark)

    def wait(self, mark: Any) -> None:
        self.waits += 1
        time.sleep(max(0.0, float(mark) - time.perf_counter()))

    def seconds(self, start: Any, end: Any) -> float:
        return float(end) - float(start)


# -- host clock: data wait and compute against the truth ---------------------------------------


def test_data_wait_and_compute_match_what_the_loop_really_did(tmp_path: Path) -> None:
    batches = TimedBatches(count=20, wait_s=0.004)
    true_computes_s: list[float] = []
    with track(db=str(tmp_path / "ledger.sqlite")) as t:
        for _ in t.loader(batches):
            started = time.perf_counter()
            spin(0.012)
            true_computes_s.append(time.perf_counter() - started)
    summary = t.summary()

    true_wait_s, true_compute_s = sum(batches.true_waits_s), sum(true_computes_s)
    true_steps_s = sorted(w + c for w, c in zip(batches.true_waits_s, true_computes_s, strict=True))
    assert summary["steps"] == 20
    assert summary["clock"] == "host"
    assert true_wait_s <= summary["data_wait_s"] <= true_wait_s * 1.05 + 0.002
    assert true_compute_s <= summary["compute_s"] <= true_compute_s * 1.05 + 0.002
    assert summary["data_wait_fraction"] == pytest.approx(true_wait_s / (true_wait_s + true_compute_s), abs=0.02)
    assert true_steps_s[0] <= summary["step_time_p50_s"] <= true_steps_s[-1] + 0.001
    assert summary["samples"] == 20 * 8  # a list of 8 examples per batch
    assert summary["samples_per_s"] == pytest.approx(160 / summary["step_time_s"])
    assert summary["diagnosis"].startswith("input-bound")  # 25 % waiting > 20 %
    assert summary["mfu"] is None


def test_compute_bound_loop_is_diagnosed_as_such() -> None:
    with track(record=False) as t:
        for _ in t.loader([[0] * 8] * 10):  # batches already in memory
            # 50 ms steps: one descheduling of a few ms between batches on a loaded 2-core machine
            # stays under 1 % of the step instead of the 8 % it reached against 5 ms steps.
            spin(0.05)
    summary = t.summary()
    assert summary["data_wait_fraction"] < INPUT_BOUND_FRACTION
    assert summary["diagnosis"].startswith("compute-bound")


def test_manual_steps_count_the_gap_between_steps_as_data_wait() -> None:
    true_gaps_s: list[float] = []
    true_compute_s = 0.0
    with track(record=False) as t:
        for _ in range(5):
            started = time.perf_counter()
            time.sleep(0.003)  # fetching the next batch, outside the step
            true_gaps_s.append(time.perf_counter() - started)
            with t.step(samples=32, tokens=32 * 128):
                started = time.perf_counter()
                spin(0.006)
                true_compute_s += time.perf_counter() - started
    summary = t.summary()
    assert summary["steps"] == 5
    assert summary["samples"] == 160
    assert summary["tokens"] == 160 * 128
    # The first step has no previous end to measure from; the other four waited.
    assert sum(true_gaps_s[1:]) <= summary["data_wait_s"] <= sum(true_gaps_s[1:]) * 1.05 + 0.002
    assert true_compute_s <= summary["compute_s"] <= true_compute_s * 1.05 + 0.002


def test_time_between_epochs_is_not_data_wait() -> None:
    loader_batches = TimedBatches(count=3, wait_s=0.001)
    with track(record=False) as t:
        loader = t.loader(loader_batches)
        for _ in range(2):
            for _ in loader:
                spin(0.002)
            time.sleep(0.05)  # evaluation between epochs
    summary = t.summary()
    assert summary["steps"] == 6
    true_wait_s = sum(loader_batches.true_waits_s)  # two epochs of three batches
    assert true_wait_s <= summary["data_wait_s"] <= true_wait_s * 1.05 + 0.002  # no 50 ms evaluation in it
    assert summary["outside_steps_s"] >= 0.1


def test_breaking_out_of_the_loop_closes_the_open_step_at_exit() -> None:
    with track(record=False) as t:
        for index, _ in enumerate(t.loader(TimedBatches(count=10, wait_s=0.0))):
            spin(0.002)
            if index == 3:
                break
    assert t.summary()["steps"] == 4


# -- the ledger ---------------------------------------------------------------------------------


def test_steps_reach_the_ledger_in_batches_while_training_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    seen_mid_run: list[int] = []
    with track(db=db, tags={"team": "nlp", "exp": "e1"}, flush_every_s=0.05) as t:
        run_id = t.run_id
        assert run_id is not None
        for index, _ in enumerate(t.loader(TimedBatches(count=40, wait_s=0.001), tokens=lambda batch: 100)):
            spin(0.003)
            if index == 35:
                with Ledger.open(db) as reader:  # a second connection sees flushed steps before the end
                    seen_mid_run.append(len(reader.steps(run_id)))
    summary = t.summary()

    with Ledger.open(db) as ledger:
        run = ledger.run(run_id)
        steps = ledger.steps(run_id)
    assert 0 < seen_mid_run[0] < 40
    assert run.kind == "track"
    assert run.status == "succeeded"
    assert run.tags == {"team": "nlp", "exp": "e1"}
    assert run.price.assumed and "vCPU" in run.price.explanation  # priced from the device when it finished
    assert run.ended_at_s is not None and run.started_at_s < run.ended_at_s
    assert run.summary == summary
    assert [s.step for s in steps] == list(range(40))
    assert all(run.started_at_s <= s.t_s <= run.ended_at_s for s in steps)
    assert [s.t_s for s in steps] == sorted(s.t_s for s in steps)
    assert sum(s.data_wait_s for s in steps) == pytest.approx(summary["data_wait_s"])
    assert sum(s.compute_s for s in steps) == pytest.approx(summary["compute_s"])
    assert {s.samples for s in steps} == {8}
    assert {s.tokens for s in steps} == {100}
    assert summary["tokens"] == 4000
    assert summary["unrecorded_steps"] == 0


def test_inline_flushes_write_during_the_loop_too(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    with track(db=db, flush_every_s=0.02, flush_in_background=False) as t:
        for index, _ in enumerate(t.loader(range(30))):
            spin(0.002)
            if index == 25:
                with Ledger.open(db) as reader:
                    assert t.run_id is not None
                    assert len(reader.steps(t.run_id)) > 0
    with Ledger.open(db) as ledger:
        assert t.run_id is not None
        assert len(ledger.steps(t.run_id)) == 30


def test_a_given_price_is_copied_into_the_run(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    price = given_price(3.06, explanation="p3.2xlarge on-demand")
    with track(db=db, price=price) as t:
        pass
    with Ledger.open(db) as ledger:
        assert t.run_id is not None
        assert ledger.run(t.run_id).price == price


def test_decorator_records_one_run_per_call(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")

    @track(db=db, tags={"job": "decorated"})
    def train(batches: int) -> int:
        tracker = current_tracker()
        assert tracker is not None
        for _ in tracker.loader(range(batches)):
            spin(0.001)
        return batches

    assert train(3) == 3
    assert train(5) == 5
    assert current_tracker() is None
    with Ledger.open(db) as ledger:
        runs = ledger.runs(tags={"job": "decorated"})
        assert sorted(len(ledger.steps(run.id)) for run in runs) == [3, 5]
        assert {run.status for run in runs} == {"succeeded"}


def test_an_exception_fails_the_run_and_propagates_unchanged(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    boom = ValueError("loss is NaN")
    with pytest.raises(ValueError) as raised, track(db=db) as t:
        for index, _ in enumerate(t.loader(range(10))):
            if index == 2:
                raise boom
    assert raised.value is boom
    with Ledger.open(db) as ledger:
        assert t.run_id is not None
        run = ledger.run(t.run_id)
        assert run.status == "failed"
        assert run.error == "ValueError: loss is NaN"
        assert len(ledger.steps(t.run_id)) == 3  # the step that raised is closed and kept


def test_ctrl_c_marks_the_run_interrupted(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.sqlite")
    with pytest.raises(KeyboardInterrupt), track(db=db) as t:
        raise KeyboardInterrupt
    with Ledger.open(db) as ledger:
        assert t.run_id is not None
        assert ledger.run(t.run_id).status == "interrupted"


def test_record_false_touches_no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPUTEWISE_DB", str(tmp_path / "never.sqlite"))
    with track(record=False) as t:
        for _ in t.loader(range(3)):
            pass
    assert t.run_id is None
    assert t.summary()["steps"] == 3
    assert not (tmp_path / "never.sqlite").exists()


def test_a_tracker_records_one_run_only() -> None:
    tracker = track(record=False)
    with tracker:
        pass
    with pytest.raises(InputError, match="already recorded"), tracker:
        pass
    with tracker.fresh():
        pass


def test_steps_before_start_are_an_error_and_after_finish_are_ignored() -> None:
    tracker = track(record=False)
    with pytest.raises(InputError, match="not started"):
        for _ in tracker.loader(range(3)):
            pass
    with tracker:
        for _ in tracker.loader(range(3)):
            pass
    for _ in tracker.loader(range(3)):  # after the run: batches pass through, nothing is counted
        pass
    assert tracker.summary()["steps"] == 3


def test_clock_cuda_without_a_cuda_device_fails_at_start() -> None:
    with pytest.raises(InputError, match="CUDA"), track(record=False, clock="cuda"):
        pytest.fail("the body must not run")


def test_a_run_left_open_is_failed_when_the_process_exits(tmp_path: Path) -> None:
    db = str(tmp_path / "l.sqlite")
    script = textwrap.dedent(
        f"""
        from computewise.monitor.track import track
        t = track(db={db!r}).start()  # as a framework callback does; its end hook never comes
        for _ in t.loader(range(4)):
            pass
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    with Ledger.open(db) as ledger:
        (run,) = ledger.runs()
        assert run.status == "failed"
        assert run.error == "RuntimeError: the process exited before the tracked training finished"
        assert len(ledger.steps(run.id)) == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"precision": "fp12"}, "unknown precision"),
        ({"flush_every_s": 0}, "flush_every_s"),
        ({"flops_per_step": -1.0}, "flops_per_step"),
        ({"tags": {"team": 3}}, "pair of strings"),
        ({"model": object()}, "example_inputs"),
        ({"clock": "sundial"}, "unknown clock"),
    ],
)
def test_bad_options_fail_when_track_is_called(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        track(**options)


def test_an_unknown_accelerator_fails_before_training_starts(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="did you mean"), track(db=str(tmp_path / "l.sqlite"), accelerator="h10"):
        pytest.fail("the body must not run")
    assert not (tmp_path / "l.sqlite").exists()  # the name is checked before the ledger is opened


def test_plain_python_loop_never_imports_torch(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from computewise.monitor.track import track
        with track(db={str(tmp_path / "l.sqlite")!r}) as t:
            for batch in t.loader(iter([(1, 2)] * 5)):
                time.sleep(0.001)
        assert "torch" not in sys.modules, "track() imported torch"
        print(t.summary()["steps"])
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "5"


# -- counting samples -----------------------------------------------------------------------------


def test_batch_samples_reads_the_leading_dimension_of_the_first_array() -> None:
    np = pytest.importorskip("numpy")
    images, labels = np.zeros((32, 3, 8, 8)), np.zeros(32)
    assert batch_samples(images) == 32
    assert batch_samples((images, labels)) == 32
    assert batch_samples([labels[:4], images]) == 4  # the first array decides
    assert batch_samples({"input_ids": np.zeros((16, 128)), "labels": np.zeros((16, 128))}) == 16
    assert batch_samples({"meta": "x", "pixels": np.zeros((7, 3))}) == 7
    assert batch_samples(["a sentence", "another"]) == 2  # a list of examples
    assert batch_samples(("text", 3)) == 2
    assert batch_samples(np.float32(1.0)) is None  # a scalar: zero dimensions
    assert batch_samples(42) is None
    assert batch_samples({"meta": "x"}) is None


# -- FLOPs and MFU on CPU with torch ----------------------------------------------------------------


def _mlp_loader(torch: Any, batches: int, batch_size: int) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    data = torch.utils.data.TensorDataset(
        torch.randn(batches * batch_size, 64), torch.randint(0, 10, (batches * batch_size,))
    )
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, loader, optimizer


def _train(torch: Any, tracker: Any, model: Any, loader: Any, optimizer: Any) -> None:
    for inputs, targets in tracker.loader(loader):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()


@pytest.mark.torch
def test_mfu_is_none_on_cpu_unless_the_cpu_is_named(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model, loader, optimizer = _mlp_loader(torch, batches=6, batch_size=16)
    with track(db=str(tmp_path / "l.sqlite"), flops_per_step=2e9) as t:
        _train(torch, t, model, loader, optimizer)
    summary = t.summary()
    assert summary["steps"] == 6
    assert summary["samples"] == 96  # leading dimension of the (inputs, targets) tensors
    assert summary["flops"] == pytest.approx(6 * 2e9)
    assert summary["achieved_flops_per_s"] == pytest.approx(12e9 / summary["step_time_s"])
    assert summary["mfu"] is None
    assert "CPU peak unknown" in summary["mfu_note"]


@pytest.mark.torch
def test_mfu_against_a_named_cpu_is_achieved_over_peak(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model, loader, optimizer = _mlp_loader(torch, batches=6, batch_size=16)
    with track(db=str(tmp_path / "l.sqlite"), flops_per_step=2e9, accelerator="xeon-8480plus", precision="fp32") as t:
        _train(torch, t, model, loader, optimizer)
    summary = t.summary()
    assert summary["peak"]["accelerator"] == "xeon-8480plus"
    assert summary["peak"]["flops_per_s"] == SPR_FP32_FLOPS
    assert summary["mfu"] == pytest.approx(6 * 2e9 / summary["step_time_s"] / SPR_FP32_FLOPS)
    assert "fp32 peak of xeon-8480plus" in summary["mfu_note"]
    with Ledger.open(str(tmp_path / "l.sqlite")) as ledger:
        assert t.run_id is not None
        assert ledger.run(t.run_id).accelerator == "xeon-8480plus"


@pytest.mark.torch
def test_flops_traced_from_the_model_are_three_forwards_per_sample(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model, loader, optimizer = _mlp_loader(torch, batches=4, batch_size=16)
    with track(db=str(tmp_path / "l.sqlite"), model=model, example_inputs=torch.zeros(8, 64)) as t:
        _train(torch, t, model, loader, optimizer)
    # Forward of Linear(64,128) + Linear(128,10): 2 FLOPs per multiply-add, per sample.
    forward_per_sample = 2 * (64 * 128 + 128 * 10)
    with Ledger.open(str(tmp_path / "l.sqlite")) as ledger:
        assert t.run_id is not None
        steps = ledger.steps(t.run_id)
    assert [s.flops for s in steps] == [3 * forward_per_sample * 16] * 4
    assert "traced Sequential" in t.summary()["flops_source"]


# -- CUDA events, replayed by a simulated stream ----------------------------------------------------


def test_gpu_bound_loop_reads_events_lazily_and_sees_no_data_wait() -> None:
    # Each step's kernels (40 ms) leave the host 38 ms of slack beyond loading a batch (2 ms), so a busy CI
    # machine's late wake-ups from sleep cannot surface as data wait (with 8 ms of kernels they did, 5.2 %).
    kernels_s = 0.040
    stream = SimulatedStream()
    batches = TimedBatches(count=15, wait_s=0.002)
    with track(record=False, clock=stream, flops_per_step=1e12) as t:
        for _ in t.loader(batches):
            stream.launch(kernels_s)  # the step's kernels: queued, the host runs on
        assert stream.waits == 0  # the loop never waited on the device
    summary = t.summary()
    assert stream.waits >= 1  # finishing waits for the device to catch up
    assert summary["clock"] == "cuda-events"
    assert summary["steps"] == 15
    # Loading (2 ms) hides behind queued kernels: only the first batch's wait shows.
    assert summary["data_wait_fraction"] < 0.05
    assert summary["step_time_p50_s"] == pytest.approx(kernels_s, abs=0.002)
    assert summary["compute_s"] >= 15 * kernels_s
    # The device name the driver reports picks the peak: H100 SXM at bf16.
    assert summary["peak"]["accelerator"] == "h100-sxm"
    assert summary["peak"]["how"] == "detected from 'NVIDIA H100 80GB HBM3'"
    assert summary["mfu"] == pytest.approx(15e12 / summary["step_time_s"] / 989.5e12)


def test_input_bound_gpu_loop_counts_the_idle_gap_as_data_wait() -> None:
    stream = SimulatedStream()
    with track(record=False, clock=stream) as t:
        for _ in t.loader(TimedBatches(count=10, wait_s=0.005)):
            stream.launch(0.001)
    summary = t.summary()
    # Each step: 1 ms of kernels, then the GPU idles ~4 ms of the 5 ms load.
    assert 0.6 < summary["data_wait_fraction"] < 0.9
    assert summary["diagnosis"].startswith("input-bound")


@pytest.mark.parametrize(
    ("device_name", "memory_total_bytes", "slug"),
    [
        ("NVIDIA A100-SXM4-80GB", 85_899_345_920, "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", 42_949_672_960, "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", 85_899_345_920, "a100-80gb-pcie"),
        ("NVIDIA H100 80GB HBM3", 85_520_809_984, "h100-sxm"),
        ("NVIDIA H100 PCIe", 85_520_809_984, "h100-pcie"),
        ("NVIDIA H100 NVL", 100_485_038_080, "h100-nvl"),
        ("NVIDIA H200", 150_754_820_096, "h200"),
        ("NVIDIA GH200 480GB", 102_005_473_280, "gh200"),
        ("Tesla V100-SXM2-16GB", 17_179_869_184, "v100-16gb"),
        ("Tesla V100-SXM2-32GB", 34_359_738_368, "v100-32gb"),
        ("Tesla T4", 15_843_721_216, "t4"),
        ("NVIDIA A10G", 23_836_557_312, "a10g"),
        ("NVIDIA L4", 23_580_639_232, "l4"),
        ("NVIDIA L40S", 48_305_799_168, "l40s"),
        ("AMD Instinct MI300X", 205_822_885_888, "mi300x"),
    ],
)
def test_the_accelerator_is_found_from_the_driver_device_name(
    catalog: Catalog, device_name: str, memory_total_bytes: float, slug: str
) -> None:
    stream = SimulatedStream(device_name, memory_total_bytes)
    with track(record=False, clock=stream, flops_per_step=1e12) as t:
        for _ in t.loader(range(2)):
            stream.launch(0.001)
    peak = t.summary()["peak"]
    assert peak["accelerator"] == slug
    assert peak["flops_per_s"] == catalog.accelerator(slug).peak_flops_for("bf16")


def test_a_device_missing_from_the_catalog_leaves_mfu_unknown_and_says_why() -> None:
    stream = SimulatedStream("NVIDIA GeForce RTX 3060", 12_884_901_888)
    with track(record=False, clock=stream, flops_per_step=1e12) as t:
        for _ in t.loader(range(2)):
            stream.launch(0.001)
    summary = t.summary()
    assert summary["mfu"] is None
    assert summary["achieved_flops_per_s"] is not None
    assert "'NVIDIA GeForce RTX 3060' is not in the catalog" in summary["mfu_note"]
