"""The /metrics endpoint over real HTTP, parsed with prometheus-client's own parser."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from computewise.catalog import Catalog
from computewise.errors import InputError
from computewise.monitor.energy import EnergyModel
from computewise.monitor.gpu import ReplayGpuSource
from computewise.monitor.process import ProcessTreeSampler
from computewise.monitor.prometheus import CONTENT_TYPE, MetricsServer
from computewise.monitor.sampler import Sampler

Spawn = Callable[..., subprocess.Popen[bytes]]
DATA = Path(__file__).resolve().parents[2] / "src" / "computewise" / "monitor" / "data"
HOURLY_USD = 98.32  # an 8-GPU instance, say


def _scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        content_type = response.headers["Content-Type"]
        text = response.read().decode()
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return content_type, values


def test_scrape_shows_the_latest_sample_and_running_totals(run_id: int, catalog: Catalog, spawn_python: Spawn) -> None:
    gpu = ReplayGpuSource(DATA / "2xh100-ddp.csv")
    tree = ProcessTreeSampler(spawn_python("import time\ntime.sleep(60)").pid)
    with MetricsServer(run_id, HOURLY_USD, port=0) as server:
        assert server.port > 0 and server.url.startswith("http://127.0.0.1:")
        energy = EnergyModel.from_catalog(catalog, gpu.status().devices)
        sampler = Sampler(run_id, tree, gpu, energy, 3600.0, [server])
        rows = [sampler.sample_once() for _ in range(3)]
        content_type, values = _scrape(server.url)

    assert content_type == CONTENT_TYPE
    run = (("run_id", str(run_id)),)
    last = rows[-1]
    assert last is not None and all(row is not None for row in rows)
    assert values["computewise_samples_total", run] == 3
    assert values["computewise_process_cpu_percent", run] == pytest.approx(last.cpu_percent)
    assert values["computewise_process_rss_bytes", run] == last.rss_bytes
    assert values["computewise_gpu_count", run] == 2
    assert values["computewise_energy_joules_total", run] == pytest.approx(sum(r.energy_j for r in rows if r))
    sampled_s = sum(r.interval_s for r in rows if r)
    assert values["computewise_cost_usd_total", run] == pytest.approx(HOURLY_USD * sampled_s / 3600)
    assert values["computewise_energy_measured", run] == 1
    assert values["computewise_idle", run] == 0
    for index in (0, 1):
        labels = tuple(sorted({"run_id": str(run_id), "gpu": str(index)}.items()))
        gpu_row = sampler.latest_gpu[index]
        assert values["computewise_gpu_utilization_percent", labels] == gpu_row.utilization_pct
        assert values["computewise_gpu_power_watts", labels] == pytest.approx(gpu_row.power_w)
        assert values["computewise_gpu_memory_used_bytes", labels] == gpu_row.memory_used_bytes
        assert gpu_row.sm_clock_mhz is not None
        assert values["computewise_gpu_sm_clock_hertz", labels] == gpu_row.sm_clock_mhz * 1e6


def test_before_the_first_sample_only_the_totals_are_served(run_id: int) -> None:
    with MetricsServer(run_id, 2.0) as server:
        _, values = _scrape(server.url)
    names = {name for name, _ in values}
    assert "computewise_samples_total" in names and "computewise_process_cpu_percent" not in names


def test_other_paths_are_not_found() -> None:
    with MetricsServer(1, 1.0) as server, pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10)
    assert caught.value.code == 404


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError, match="already in use") as caught:
            MetricsServer(1, 1.0, port=port).start()
    assert caught.value.hint is not None and "--prometheus-port" in caught.value.hint
    with pytest.raises(InputError, match="not a TCP port"):
        MetricsServer(1, 1.0, port=70000)


def test_close_frees_the_port() -> None:
    server = MetricsServer(1, 1.0).start()
    port = server.port
    server.close()
    with MetricsServer(1, 1.0, port=port) as again:
        assert again.port == port
