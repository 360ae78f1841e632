"""``computewise plan serve`` through its Typer function: flags in, JSON and autoscaler files out.

Until the command is registered on the real CLI, a small Typer app built here runs the function
(``typer.testing.CliRunner``); there a user error surfaces as the ``InputError`` that
``computewise.cli.app.main`` turns into exit code 2. The last tests run the real CLI in a child
process and check that exit code and the ``To fix`` line; they skip while ``plan serve`` is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from computewise.catalog import Catalog, usd_per_accelerator_h

# The brief for this test: drive the command function itself until it is registered on the real CLI.
from computewise.cli.plan_serve_cmd import plan_serve  # noqa: TID251
from computewise.errors import InputError, UnknownNameError
from computewise.specs.loadtest import LoadResult

ROOT = Path(__file__).resolve().parents[2]
HOURS = 730.0

app = typer.Typer()
app.command()(plan_serve)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def ok_json(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def user_error(*args: str) -> InputError:
    result = invoke(*args)
    assert isinstance(result.exception, InputError), (result.output, result.exception)
    assert result.exception.hint, "every user error says how to fix it"
    assert "To fix:" in str(result.exception)
    return result.exception


def day_csv(path: Path) -> Path:
    # Idle from midnight to 6, then 10 rps more each hour: 60 ... 230.
    path.write_text("hour,rps\n" + "".join(f"{h},{0 if h < 6 else h * 10}\n" for h in range(24)))
    return path


def test_json_plan_for_peak_and_mean() -> None:
    data = ok_json("--capacity-rps", "50", "--peak-rps", "200", "--mean-rps", "60", "--hourly-usd", "2")
    assert data["replicas"] == {"at_peak": 7, "at_mean": 2, "min": 1}
    modes = data["modes"]
    assert modes["always-on"]["monthly_usd"] == pytest.approx(7 * 2 * HOURS)
    assert modes["always-on"]["usd_per_1000_requests"] == pytest.approx(7 * 2 / (60 * 3600) * 1000)
    assert modes["autoscaled"]["monthly_usd"] == pytest.approx(2 * 2 * HOURS)
    assert data["capacity"]["source"] == "--capacity-rps 50"
    assert "--hourly-usd" in data["price"]["source"]
    assert data["schedule"] is None
    assert data["written"] == {"hpa": None, "ray_config": None}


def test_traffic_csv_writes_schedule_hpa_and_ray_config(tmp_path: Path) -> None:
    hpa, ray = tmp_path / "hpa.yaml", tmp_path / "ray.json"
    data = ok_json(
        "--capacity-rps", "50", "--traffic", str(day_csv(tmp_path / "day.csv")), "--hourly-usd", "1.5",
        "--latency-ms", "40", "--name", "minilm", "--hpa", str(hpa), "--ray-config", str(ray),
    )  # fmt: skip
    schedule = data["schedule"]
    assert isinstance(schedule, list) and len(schedule) == 24
    assert [h["scale_to_zero_replicas"] for h in schedule[:7]] == [0, 0, 0, 0, 0, 0, 2]  # 60 rps / 32.5 -> 2
    assert schedule[23]["autoscaled_replicas"] == 8  # ceil(230 / 32.5)
    assert data["replicas"] == {"at_peak": 8, "at_mean": 4, "min": 1}  # mean 2610 / 24 = 108.75 rps
    assert data["modes"]["scale-to-zero"]["cold_starts_per_month"] == pytest.approx(HOURS / 24)
    assert data["written"] == {"hpa": str(hpa), "ray_config": str(ray)}
    text = hpa.read_text()
    assert "maxReplicas: 8" in text and 'averageValue: "32500m"' in text and "name: minilm" in text
    config = json.loads(ray.read_text())
    assert config["autoscaling_config"]["max_replicas"] == 8
    assert config["autoscaling_config"]["target_ongoing_requests"] == pytest.approx(1.3)  # 32.5 rps x 0.04 s
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_human_output_shows_the_bills_and_the_schedule(tmp_path: Path) -> None:
    result = invoke("--capacity-rps", "50", "--traffic", str(day_csv(tmp_path / "d.csv")), "--hourly-usd", "1")
    assert result.exit_code == 0, result.output
    for text in ("always-on", "autoscaled", "scale-to-zero", "hourly schedule", "8 at peak"):
        assert text in result.stdout


def test_capacity_and_latency_from_a_find_max_loadtest(tmp_path: Path) -> None:
    def probe(rate: float, p50_ms: float) -> LoadResult:
        return LoadResult(rate, 10.0, 1000, 1000, 0, 0, rate, p50_ms, p50_ms, p50_ms * 2, p50_ms * 3, 0.0, 0.0)

    probes = [probe(40.0, 10.0), probe(80.0, 20.0), probe(160.0, 300.0)]
    result_file = tmp_path / "max.json"
    result_file.write_text(
        json.dumps(
            {
                "url": "http://127.0.0.1:8000/v1/models/m/infer",
                "slo_p99_ms": 100.0,
                "max_rate_rps": 80.0,
                "best": probes[1].to_dict(),
                "probes": [p.to_dict() | {"meets_slo": p.rate_rps <= 80} for p in probes],
            }
        )
    )
    ray = tmp_path / "ray.json"
    data = ok_json("--loadtest", str(result_file), "--peak-rps", "100", "--hourly-usd", "1", "--ray-config", str(ray))
    assert data["capacity"]["rps_per_replica"] == 80.0
    assert data["capacity"]["latency_s"] == pytest.approx(0.020)
    assert data["replicas"]["at_peak"] == 2  # ceil(100 / 52)
    assert json.loads(ray.read_text())["autoscaling_config"]["target_ongoing_requests"] == pytest.approx(1.04)
    assert any("mean is taken as the peak" in note for note in data["notes"])


def test_accelerator_price_is_the_cheapest_catalog_price_per_gpu(catalog: Catalog) -> None:
    slug = catalog.accelerator("l4").slug
    cheapest = min(p for o in catalog.offerings_for(slug) if (p := usd_per_accelerator_h(o)) is not None)
    data = ok_json("--capacity-rps", "50", "--peak-rps", "100", "--accelerator", "L4", "--gpus-per-replica", "2")
    assert data["price"]["usd_per_hour_per_replica"] == pytest.approx(2 * cheapest)
    assert "retrieved" in data["price"]["source"]


def test_instance_price_is_the_catalog_price(catalog: Catalog) -> None:
    offering = catalog.offerings[0]
    price = min(o.on_demand_usd_per_h for o in catalog.instance_offerings(offering.instance_type))
    data = ok_json("--capacity-rps", "50", "--peak-rps", "100", "--instance", offering.instance_type)
    assert data["price"]["usd_per_hour_per_replica"] == pytest.approx(price)


def test_bad_inputs_raise_user_errors(tmp_path: Path) -> None:
    base = ("--peak-rps", "100", "--hourly-usd", "1")
    assert "exactly one of --capacity-rps or --loadtest" in user_error(*base).message
    lt = tmp_path / "lt.json"
    lt.write_text("{}")
    assert "exactly one" in user_error("--capacity-rps", "5", "--loadtest", str(lt), *base).message
    assert "not a loadtest result" in user_error("--loadtest", str(lt), *base).message
    lt.write_text("{\n  oops")
    assert f"{lt}:2: not JSON" in user_error("--loadtest", str(lt), *base).message
    assert "no such file" in user_error("--loadtest", str(tmp_path / "missing.json"), *base).message
    cap = ("--capacity-rps", "50")
    utilization = user_error(*cap, *base, "--target-utilization", "1.5").message
    assert "--target-utilization must be between 0.01 and 1" in utilization
    assert "no traffic given" in user_error(*cap, "--hourly-usd", "1").message
    assert "--mean-rps must be in" in user_error(*cap, *base, "--mean-rps", "150").message
    assert "exactly one of --hourly-usd" in user_error(*cap, "--peak-rps", "100").message
    assert "exactly one of --hourly-usd" in user_error(*cap, *base, "--accelerator", "l4").message
    assert "--gpus-per-replica only applies" in user_error(*cap, *base, "--gpus-per-replica", "2").message
    bad_csv = tmp_path / "t.csv"
    bad_csv.write_text("hour,rps\n0,1\n1,x\n")
    assert (
        f"{bad_csv}:3: rps must be a number" in user_error(*cap, "--traffic", str(bad_csv), "--hourly-usd", "1").message
    )
    assert "cannot be added" in user_error(*cap, "--traffic", str(bad_csv), *base).message
    assert (
        "not a valid Kubernetes name"
        in user_error(*cap, *base, "--hpa", str(tmp_path / "h.yaml"), "--name", "My_Model").message
    )
    assert not (tmp_path / "h.yaml").exists()
    assert (
        "--hpa-metric must be one of"
        in user_error(*cap, *base, "--hpa", str(tmp_path / "h.yaml"), "--hpa-metric", "gpu").message
    )
    unknown = user_error(*cap, "--peak-rps", "100", "--accelerator", "h1000")
    assert isinstance(unknown, UnknownNameError)
    on_prem = user_error(*cap, "--peak-rps", "100", "--accelerator", "l4", "--pricing", "on-prem")
    assert "--pricing must be one of" in on_prem.message


# -- the real CLI, once `plan serve` is registered ------------------------------------------------


def computewise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},  # Rich wraps stderr at 80 columns, and tmp paths are long
    )


def test_real_cli_prints_json_and_exits_2_with_a_fix(tmp_path: Path) -> None:
    good = computewise("plan", "serve", "--capacity-rps", "50", "--peak-rps", "200", "--hourly-usd", "2", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["replicas"]["at_peak"] == 7
    bad_csv = tmp_path / "t.csv"
    bad_csv.write_text("hour,rps\n0,-1\n")
    bad = computewise("plan", "serve", "--capacity-rps", "50", "--traffic", str(bad_csv), "--hourly-usd", "2")
    assert bad.returncode == 2
    assert "t.csv:2" in bad.stderr and "To fix" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("rps", ["1e30", "2e7"])
def test_real_cli_refuses_a_csv_rate_past_the_peak_rps_limit(tmp_path: Path, rps: str) -> None:
    """A file is no way around --peak-rps's range: 1e30 rps once printed -9223372036854775808 replicas, exit 0."""
    csv = tmp_path / "t.csv"
    csv.write_text(f"hour,rps\n0,{rps}\n")
    result = computewise("plan", "serve", "--traffic", str(csv), "--capacity-rps", "10", "--hourly-usd", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{csv}:2: hour 0 has rps {rps}, above the 1e7 requests/s" in result.stderr
    assert "To fix:" in result.stderr and "Traceback" not in result.stderr and result.stdout == ""
