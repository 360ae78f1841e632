"""benchmarks/validate_run_gpu.py: its nvidia-smi parsing and window maths, its comparison of a replayed GPU run,
its line recorder on a real child process, and the CPU smoke run end to end.

No NVIDIA GPU here: the GPU comparison is fed a run made of the same underlying signal seen three
ways (computewise's 1 s samples in a real SQLite ledger, summarised by the real ``summarize``;
nvidia-smi lines every 200 ms; NVML counter readings every 100 ms), as the lent GPU would produce.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from computewise.ledger import GpuSampleRow, Ledger, NewRun, SampleRow
from computewise.monitor.summary import summarize
from prices import given_price

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_run_gpu.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_run_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


vr = _load()


def _stamp(t_s: float) -> str:
    """An epoch time as nvidia-smi -lms prints it: local time, milliseconds."""
    return datetime.fromtimestamp(t_s).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


# ------------------------------------------------------------------------------------------ parsing


def test_parses_nvidia_smi_lines_including_missing_fields() -> None:
    t_s = datetime(2025, 3, 14, 9, 26, 53, 217000).timestamp()
    busy = vr.parse_smi_line("2025/03/14 09:26:53.217, 0, 100, 698.12, 40321", t_s + 0.004)
    assert busy == vr.SmiSample(t_s, t_s + 0.004, 0, 100.0, 698.12, 40321.0)
    no_power = vr.parse_smi_line("2025/03/14 09:26:53.417, 0, 0, [N/A], 40321\r", t_s + 0.2)
    assert no_power is not None and no_power.power_w is None and no_power.utilization_pct == 0.0
    assert no_power.t_s == pytest.approx(t_s + 0.2)
    mig = vr.parse_smi_line("2025/03/14 09:26:53.417, 1, [Not Supported], 71.50, 0", t_s)
    assert mig is not None and mig.index == 1 and mig.utilization_pct is None and mig.power_w == 71.5
    with_units = vr.parse_smi_line("2025/03/14 09:26:53.617, 0, 97 %, 612.40 W, 40321 MiB", t_s)
    assert with_units is not None and (with_units.utilization_pct, with_units.power_w) == (97.0, 612.4)
    whole_second = vr.parse_smi_line("2025/03/14 09:26:53, 0, 3, 75.20, 512", 1234.5)
    assert whole_second is not None and whole_second.t_s == 1234.5  # no milliseconds: its arrival time
    for junk in (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "Failed to initialize NVML: Driver/library version mismatch",
        "",
        "2025/03/14 09:26:53.217, GPU-0, 100, 698.12, 40321",
    ):
        assert vr.parse_smi_line(junk, 0.0) is None


@pytest.mark.parametrize("zone_gap_s", [0.0, 7200.0, -19800.0])  # same zone, UTC+2 vs UTC, UTC-5:30 vs UTC
def test_timestamps_go_onto_our_clock_across_time_zones(zone_gap_s: float) -> None:
    start_s = time.time()
    lines = [
        (start_s + zone_gap_s + 0.2 * i + 0.003, f"{_stamp(start_s + 0.2 * i)}, 0, 50, 300.00, 1000") for i in range(20)
    ]
    lines.insert(5, (start_s + 1.0, "Unable to determine the device handle for GPU 0000:1B:00.0: Unknown Error"))
    samples, other, offset_s = vr.parse_smi_output(lines)
    assert offset_s == zone_gap_s
    assert len(samples) == 20 and len(other) == 1
    assert [s.t_s for s in samples] == pytest.approx([start_s + zone_gap_s + 0.2 * i for i in range(20)], abs=1e-3)


# --------------------------------------------------------------------------------------- window maths


def test_trapezoid_integral_over_a_window_is_exact_for_piecewise_linear_power() -> None:
    constant = [(0.2 * i, 100.0) for i in range(51)]  # 100 W from 0 to 10 s
    assert vr.integrate(constant, 2.1, 7.3) == pytest.approx((520.0, 5.2))
    ramp = [(0.2 * i, 10.0 * 0.2 * i) for i in range(51)]  # P = 10 t
    energy_j, spanned_s = vr.integrate(ramp, 1.05, 3.95)  # window edges between readings: interpolated
    assert energy_j == pytest.approx(5.0 * (3.95**2 - 1.05**2)) and spanned_s == pytest.approx(2.9)
    assert vr.integrate(constant, -5.0, 3.0) == pytest.approx((300.0, 3.0))  # only the part the readings span
    assert vr.integrate(constant, 11.0, 12.0) == (0.0, 0.0)
    assert vr.integrate([], 0.0, 1.0) == (0.0, 0.0)


def test_counter_delta_interpolates_the_cumulative_counter() -> None:
    counter = vr.points([(100.0 + 0.1 * i, 5e5 + 650.0 * 0.1 * i) for i in range(101)])  # 650 W for 10 s
    assert vr.counter_delta(counter, 101.05, 108.55) == pytest.approx(650.0 * 7.5)
    assert vr.counter_delta(counter, 99.0, 105.0) is None


def test_idle_seconds_and_mean_utilization_hold_each_reading_over_the_time_before_it() -> None:
    # nvidia-smi every 200 ms: busy until 4 s, idle until 6 s, busy until 10 s.
    util = [(0.2 * i, 0.0 if 4.0 < 0.2 * i <= 6.0 + 1e-9 else 100.0) for i in range(51)]
    segments = vr.held_segments([util], 1.0, 9.0)
    assert vr.covered_s(segments) == pytest.approx(8.0)
    assert vr.seconds_below(segments, 5.0) == pytest.approx(2.0)
    assert vr.held_mean(segments) == pytest.approx(75.0)
    assert vr.held_mean(vr.held_segments([util], 20.0, 30.0)) is None  # nothing covered
    # Two GPUs taking turns: their mean never drops below 5 %, so no second of the window is idle.
    other = [(t, 100.0 - value) for t, value in util]
    both = vr.held_segments([util, other], 1.0, 9.0)
    assert vr.seconds_below(both, 5.0) == 0.0 and vr.held_mean(both) == pytest.approx(50.0)


def test_phase_plan_and_summary_parsing() -> None:
    assert vr.phase_plan(90) == pytest.approx((20.0, 10.0, 60.0))
    assert vr.phase_plan(4) == pytest.approx((0.75, 1.0, 2.25))
    with pytest.raises(ValueError, match="at least 3"):
        vr.phase_plan(2)
    summary = {"run": {"id": 7}, "energy_kwh": 0.01, "idle_s": 3.0}
    stdout = "step 1 {'loss': 2.3}\n{not json\n" + json.dumps(summary, indent=2) + "\n"
    assert vr.parse_summary(stdout) == summary
    assert vr.parse_summary("no summary at all\n") is None


# ------------------------------------------------------------------------------- a replayed GPU run


def _util(t: float) -> float:
    """The job: starting up for 3 s, busy 10 s, asleep 5 s, busy 20 s, exiting."""
    return 100.0 if 3.0 <= t < 13.0 or 18.0 <= t < 38.0 else 0.0


def _power_w(t: float) -> float:
    return 610.0 if _util(t) else 92.0


def _energy_j(t: float) -> float:
    """Exact integral of _power_w from 0 to t (it is piecewise constant)."""
    edges = [-100.0, 3.0, 13.0, 18.0, 38.0, 1000.0]
    return sum(
        _power_w((a + b) / 2) * (min(t, b) - max(0.0, a))
        for a, b in itertools.pairwise(edges)
        if min(t, b) > max(0.0, a)
    )


Evaluated = tuple[dict[str, Any], list[Any]]  # the --json document and the checks
RunMaker = Callable[..., Evaluated]


@pytest.fixture
def replayed_run(tmp_path: Path) -> RunMaker:
    """A 40 s run of the job above as computewise, nvidia-smi and the NVML counter would record it."""

    def make(energy_scale: float = 1.0, smi_works: bool = True) -> Evaluated:
        t0 = float(int(time.time()))
        end_s = t0 + 40.05
        price = given_price(3.0, explanation="$3/h", pue=1.2)
        ledger = Ledger.open(str(tmp_path / f"ledger-{energy_scale}-{smi_works}.sqlite"))
        run_id = ledger.start_run(
            NewRun(
                kind="command",
                command="python workload.py",
                argv=("python", "workload.py"),
                tags={},
                host="gpu-host",
                pid=os.getpid(),
                user="test",
                cwd=str(tmp_path),
                started_at_s=t0,
                interval_s=1.0,
                price=price,
                logical_cpus=16,
                gpu_count=1,
                gpu_name="NVIDIA H100 80GB HBM3",
                accelerator="h100-sxm",
            )
        )
        ticks = [0.02, *(0.02 + k for k in range(1, 41)), 40.03]  # baseline, 1 s ticks, the final sample
        rows, gpu_rows = [], []
        for before, at in itertools.pairwise(ticks):
            util, power = _util(at), _power_w(at)  # NVML reads utilization and power at the tick
            rows.append(
                SampleRow(run_id, t0 + at, at - before, 99.0, 2 << 30, 0, 0, 0, 0, 12.0, 8 << 30, 1, util,
                          40 << 30, power, (_energy_j(at) - _energy_j(before)) * energy_scale, True, util < 5.0)
            )  # fmt: skip
            gpu_rows.append(
                GpuSampleRow(run_id, t0 + at, 0, util, 1980.0, 40 << 30, power, 7e5 + _energy_j(at), None, None, None)
            )
        ledger.add_samples(rows, gpu_rows)
        ledger.finish_run(run_id, "succeeded", end_s, exit_code=0)
        summary = json.loads(json.dumps(summarize(ledger, run_id, end_s).to_dict()))  # as `run --json` prints it
        run, samples, gpu_samples = ledger.run(run_id), ledger.samples(run_id), ledger.gpu_samples(run_id)
        ledger.close()
        if smi_works:
            smi_lines = [
                (t0 + t + 0.004, f"{_stamp(t0 + t)}, 0, {_util(t - 0.1):.0f}, {_power_w(t):.2f}, 40960")
                for t in (-1.0 + 0.2 * i for i in range(211))
            ]
        else:
            smi_lines = [(t0, "Failed to initialize NVML: Driver/library version mismatch")]
        counters = {0: [(t0 + t, 5e5 + _energy_j(t)) for t in (-1.0 + 0.1 * i for i in range(421))]}
        measured = vr.Measured(
            summary=summary,
            run=run,
            samples=samples,
            gpu_rows=gpu_samples,
            workload={"torch": "2.5.1+cu124", "phases": []},
            smi_lines=smi_lines,
            smi_stderr="",
            counters=counters,
            counter_missing=None,
        )
        probe = vr.DriverProbe(
            True, "NVIDIA driver 550.54.15", "550.54.15", (vr.GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559.0, 700.0),)
        )
        return vr.evaluate(measured, probe, cuda=True)

    return make


def test_a_faithful_run_passes_every_check(replayed_run: RunMaker) -> None:
    result, checks = replayed_run()
    assert result["verdict"] == "PASS", vr.format_table(checks)
    by_name = {c.name: c for c in checks}
    true_j = _energy_j(40.05)
    assert result["references"]["nvml_counter"]["energy_j"] == pytest.approx(true_j, rel=1e-6)
    assert result["references"]["nvidia_smi"]["energy_j"] == pytest.approx(true_j, rel=0.01)
    assert result["references"]["nvidia_smi"]["clock_offset_s"] == 0.0
    assert result["computewise"]["pue"] == 1.2  # energy_kwh carries the PUE; the comparison takes it out
    energy = by_name["energy vs NVML energy counter"]
    assert abs(energy.error) < 0.005 and energy.status == "PASS"
    assert result["computewise"]["energy_j"] == pytest.approx(result["computewise"]["ledger_energy_j"])
    idle = by_name["idle seconds vs nvidia-smi (util < 5 %)"]
    assert idle.reference == pytest.approx(3.0 + 5.0 + 2.05, abs=0.25) and abs(idle.error) < 1.0
    for name in ("mean GPU utilization vs nvidia-smi", "time-weighted mean GPU utilization vs nvidia-smi"):
        assert by_name[name].reference == pytest.approx(75.0, abs=1.0) and abs(by_name[name].error) < 2.0
    # A sample reads utilization at its tick; the 4 samples that straddle a phase change disagree with
    # nvidia-smi's mean over their interval, the other 36 agree.
    assert result["per_sample"]["idle_flag_agreement"] == pytest.approx(36 / 40)
    assert result["per_sample"]["samples_compared"] == 40
    table = vr.format_table(checks)
    assert table.count("PASS") == 5 and "verdict" not in table
    markdown = vr.format_markdown({**result, "settings": {"interval": "1s", "phases_s": [10, 5, 20]}}, checks)
    assert "NVIDIA H100 80GB HBM3 (driver 550.54.15)" in markdown and "**PASS**" in markdown
    assert markdown.count("\n|") == len(checks) + 2 and "\\|error\\|" in markdown


def test_energy_off_by_ten_percent_fails(replayed_run: RunMaker) -> None:
    result, checks = replayed_run(energy_scale=1.1)
    assert result["verdict"] == "FAIL"
    failed = {c.name for c in checks if c.status == "FAIL"}
    assert failed == {"energy vs nvidia-smi power.draw (trapezoid)", "energy vs NVML energy counter"}


def test_a_missing_reference_on_a_gpu_is_a_fail_that_says_why(replayed_run: RunMaker) -> None:
    result, checks = replayed_run(smi_works=False)
    assert result["verdict"] == "FAIL"
    missing = [c for c in checks if c.status.startswith("n/a: nvidia-smi printed no sample")]
    assert len(missing) == 6 and "version mismatch" in missing[0].status  # all but the counter's own check
    assert next(c for c in checks if c.name == "energy vs NVML energy counter").status == "PASS"


# ------------------------------------------------------------------------------ the line recorder

FAKE_SMI = """
import sys, time
from datetime import datetime
i = 0
while True:
    now = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    print(f"{now}, 0, {i % 101}, {60 + i:.2f}, 1024", flush=FLUSH)
    i += 1
    time.sleep(0.02)
"""


@pytest.mark.parametrize("use_pty", [True, False])
def test_line_recorder_keeps_every_line_of_a_command_it_ends_by_pid(tmp_path: Path, use_pty: bool) -> None:
    # On a pty, Python's print flushes at each newline like nvidia-smi's stdio does; a pipe needs the flush.
    script = FAKE_SMI.replace("FLUSH", "False" if use_pty else "True")
    recorder = vr.LineRecorder([sys.executable, "-c", script], tmp_path / "err.txt", use_pty=use_pty).start()
    try:
        deadline = time.monotonic() + 20.0
        while len(recorder.lines) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(recorder.lines) >= 10  # lines arrive while the command runs, not when it ends
    finally:
        lines = recorder.stop()
    assert recorder._process.poll() is not None
    samples, other, offset_s = vr.parse_smi_output(lines)
    assert other == [] and offset_s == 0.0 and len(samples) == len(lines) >= 10
    assert [s.power_w for s in samples] == [60.0 + i for i in range(len(samples))]  # none lost, none torn
    assert all(abs(s.received_s - s.t_s) < 2.0 for s in samples)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the message shown without a driver")
def test_without_a_gpu_it_says_how_to_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert vr.main([]) == 2
    assert "no NVIDIA GPU to validate against: nvidia-smi is not on PATH" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- smoke run


@pytest.mark.torch
def test_cpu_quick_run_exercises_computewise_run_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out, markdown = tmp_path / "run.json", tmp_path / "run.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--json", str(out), "--markdown", str(markdown)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COMPUTEWISE_CATALOG_DIR": str(tmp_path)},  # the bundled catalog only
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hardware:" in done.stdout and "verdict: n/a" in done.stdout
    data = json.loads(out.read_text())
    figures = data["computewise"]
    assert figures["status"] == "succeeded" and figures["gpu_count"] == 0
    assert figures["samples"] >= 3 and figures["duration_s"] >= 4.0
    assert figures["energy_j"] > 0 and figures["energy_j"] == pytest.approx(figures["ledger_energy_j"])
    assert figures["idle_s"] >= 0 and figures["gpu_util_pct_mean"] is None
    assert data["window"]["seconds"] == pytest.approx(figures["duration_s"])
    phases = data["workload"]["phases"]
    assert [p["phase"] for p in phases] == ["busy 1", "sleep", "busy 2"]
    assert phases[0]["steps"] > 0 and phases[2]["steps_per_s"] > 0
    assert math.isclose(phases[1]["end_s"] - phases[1]["start_s"], 1.0, abs_tol=0.2)
    if shutil.which("nvidia-smi") is None:
        assert data["references"]["nvidia_smi"] == "n/a: no NVIDIA driver"
        assert data["references"]["nvml_counter"] == "n/a: no NVIDIA driver"
    assert data["verdict"] == "n/a" and all(c["status"].startswith("n/a") for c in data["checks"])
    assert markdown.read_text().count("\n|") == len(data["checks"]) + 2
