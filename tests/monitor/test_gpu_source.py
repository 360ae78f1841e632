"""GPU sources: NVML degrades to "not available" here, replayed traces play back like a GPU would."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from computewise.catalog import Catalog
from computewise.errors import InputError, UnknownNameError
from computewise.monitor.gpu import (
    NvmlGpuSource,
    ReplayGpuSource,
    bundled_traces,
    open_gpu_source,
    visible_devices,
)

DATA = Path(__file__).resolve().parents[2] / "src" / "computewise" / "monitor" / "data"


def _nvml_works() -> bool:
    return NvmlGpuSource().status().available


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_traces", Path(__file__).with_name("gpu_traces.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(_nvml_works(), reason="checks the message shown without an NVIDIA driver")
def test_nvml_without_a_driver_says_why_and_never_raises() -> None:
    source = NvmlGpuSource()
    status = source.status()
    assert not status.available
    assert status.reason.startswith("not available: ")
    assert "driver" in status.reason or "nvidia-ml-py" in status.reason
    assert status.devices == ()
    assert source.read([1, 2, 3]) == []
    source.close()
    assert source.read([]) == []


def test_nvml_without_nvidia_ml_py_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what an environment without the extra looks like
    status = NvmlGpuSource().status()
    assert not status.available
    assert status.reason == "not available: nvidia-ml-py is not installed (pip install 'computewise[gpu]')"


@pytest.mark.gpu
def test_nvml_reads_every_visible_device() -> None:
    source = NvmlGpuSource()
    status = source.status()
    assert status.available and status.devices, status.reason  # a GPU machine whose NVML is broken is a failure
    readings = source.read([])
    assert [r.index for r in readings] == [d.index for d in status.devices]
    for reading in readings:
        assert reading.utilization_pct is None or 0 <= reading.utilization_pct <= 100
        assert reading.memory_used_bytes is None or reading.memory_used_bytes > 0
    source.close()


def test_cuda_visible_devices_parsing() -> None:
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 2"}) == ("0", "2")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == ()


def test_bundled_traces_are_what_the_generator_writes() -> None:
    generator = _generator()
    assert set(bundled_traces()) == set(generator.TRACES)
    for name, make in generator.TRACES.items():
        assert (DATA / f"{name}.csv").read_text() == make(), f"regenerate with python {generator.__file__}"


@pytest.mark.parametrize(("name", "length"), [("a100-training", 120), ("2xh100-ddp", 60)])
def test_bundled_traces_are_physically_consistent(name: str, length: int, catalog: Catalog) -> None:
    source = open_gpu_source({"COMPUTEWISE_FAKE_GPU": name})
    assert isinstance(source, ReplayGpuSource)
    devices = source.status().devices
    ticks = [source.read([]) for _ in range(length)]
    for device in devices:
        accelerator = catalog.match_device(device.name, device.memory_total_bytes)
        assert accelerator is not None and accelerator.tdp_w == device.power_limit_w
        assert device.memory_total_bytes is not None
        rows = [r for tick in ticks for r in tick if r.index == device.index]
        assert all(r.utilization_pct is not None and 0 <= r.utilization_pct <= 100 for r in rows)
        assert all(r.power_w is not None and 60 < r.power_w <= accelerator.tdp_w for r in rows)
        assert all(r.memory_used_bytes is not None and r.memory_used_bytes < device.memory_total_bytes for r in rows)
        for before, after in itertools.pairwise(rows):
            assert before.energy_counter_j is not None and after.energy_counter_j is not None
            assert before.power_w is not None and after.power_w is not None
            # the counter integrates the power over each 1 s tick (trapezoid)
            delta_j = after.energy_counter_j - before.energy_counter_j
            assert delta_j == pytest.approx((before.power_w + after.power_w) / 2, abs=2e-3)


def test_a100_trace_has_data_loader_stalls_about_every_20_s() -> None:
    source = ReplayGpuSource(DATA / "a100-training.csv")
    utils = [source.read([])[0].utilization_pct or 0.0 for _ in range(120)]
    stall_starts = [k for k in range(1, 120) if utils[k] < 15 <= utils[k - 1]]
    assert len(stall_starts) == 5
    assert all(15 <= b - a <= 25 for a, b in itertools.pairwise(stall_starts))
    assert sum(u < 5 for u in utils) >= 8  # idle seconds for the idle rule to find


def test_replay_loops_with_a_counter_that_keeps_rising() -> None:
    source = ReplayGpuSource(DATA / "2xh100-ddp.csv")
    status = source.status()
    assert status.available and "not this machine's GPUs" in status.reason
    assert [d.name for d in status.devices] == ["NVIDIA H100 80GB HBM3"] * 2
    first = source.read([])
    ticks = [first] + [source.read([]) for _ in range(59)]
    wrapped = source.read([])
    assert [r.utilization_pct for r in wrapped] == [r.utilization_pct for r in first]
    for index in (0, 1):
        last_j = ticks[-1][index].energy_counter_j
        last_w = ticks[-1][index].power_w
        assert last_j is not None and last_w is not None and wrapped[index].energy_counter_j is not None
        assert wrapped[index].energy_counter_j == pytest.approx(last_j + last_w, abs=1e-6)


def test_open_gpu_source_takes_a_path_and_rejects_unknown_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text((DATA / "a100-training.csv").read_text())
    assert isinstance(open_gpu_source({"COMPUTEWISE_FAKE_GPU": str(path)}), ReplayGpuSource)
    assert isinstance(open_gpu_source({}), NvmlGpuSource)
    with pytest.raises(UnknownNameError, match="did you mean 'a100-training'"):
        open_gpu_source({"COMPUTEWISE_FAKE_GPU": "a100-trainin"})


def test_a_trace_with_unsupported_metrics_reads_none(tmp_path: Path) -> None:
    header = (DATA / "a100-training.csv").read_text().splitlines()[7]
    assert header.startswith("tick,")
    row = "0,0,Tesla T4,GPU-x,16106127360,70,35,1590,1073741824,,,,,"
    path = tmp_path / "t4.csv"
    path.write_text(f"{header}\n{row}\n")
    reading = ReplayGpuSource(path).read([])[0]
    assert reading.utilization_pct == 35 and reading.memory_used_bytes == 1073741824
    assert reading.power_w is None and reading.energy_counter_j is None and reading.process_memory_bytes is None


def test_malformed_traces_are_input_errors(tmp_path: Path) -> None:
    header = (DATA / "a100-training.csv").read_text().splitlines()[7]
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{header}\n0,0,X,u,1,1,abc,1,1,1,1,1,1,1\n")
    with pytest.raises(InputError, match="data row 2"):
        ReplayGpuSource(bad)
    bad.write_text("tick,gpu_index\n0,0\n")
    with pytest.raises(InputError, match="lacks the columns"):
        ReplayGpuSource(bad)
    with pytest.raises(InputError, match="cannot read the GPU trace"):
        ReplayGpuSource(tmp_path / "missing.csv")
