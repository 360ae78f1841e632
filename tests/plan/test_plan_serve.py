"""``plan serve`` by hand: replicas under utilization headroom, the three monthly bills, the hourly
schedule with its cold starts, the traffic CSV and loadtest readers, and the autoscaler configs."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import replace

import pytest

from computewise.errors import InputError
from computewise.plan.serve import (
    TrafficProfile,
    capacity_from_loadtest,
    parse_traffic_csv,
    plan_serving,
    replicas_needed,
)
from computewise.specs.loadtest import LoadResult, LoadtestRun, MaxRateSearch, Probe, read_loadtest

HOURS = 730.0
# The bundled catalog's serving_target_utilization and serving_cold_start_s, written out so the
# arithmetic below is checked by hand; tests/estimate/test_quote.py reads them from the CSV.
_plan = functools.partial(plan_serving, target_utilization=0.65, scale_to_zero_cold_start_s=30.0)


def load_result(rate_rps: float, throughput_rps: float, p50_ms: float, rejection_rate: float = 0.0) -> LoadResult:
    return LoadResult(
        rate_rps=rate_rps,
        duration_s=10.0,
        sent=1000,
        ok=1000,
        rejected=0,
        errors=0,
        throughput_rps=throughput_rps,
        p50_ms=p50_ms,
        p95_ms=p50_ms * 2,
        p99_ms=p50_ms * 3,
        max_ms=p50_ms * 4,
        error_rate=0.0,
        rejection_rate=rejection_rate,
    )


# -- sizing and cost ------------------------------------------------------------------------------


def test_peak_and_mean_replicas_and_three_bills_by_hand() -> None:
    plan = _plan(50.0, TrafficProfile(peak_rps=200.0, mean_rps=60.0), hourly_usd_per_replica=2.0)
    # 50 rps x 0.65 = 32.5 rps planned per replica: ceil(200 / 32.5) = ceil(6.15) = 7; ceil(60 / 32.5) = 2.
    assert plan.rps_per_replica_at_target == pytest.approx(32.5)
    assert (plan.replicas_at_peak, plan.replicas_at_mean) == (7, 2)
    requests_per_month = 60.0 * 3600 * HOURS
    assert plan.requests_per_month == pytest.approx(requests_per_month)
    assert plan.monthly_usd["always-on"] == pytest.approx(7 * 2.0 * HOURS)  # $10,220
    assert plan.usd_per_1000_requests["always-on"] == pytest.approx(10220.0 / requests_per_month * 1000)
    assert plan.usd_per_1000_requests["always-on"] == pytest.approx(0.0648148, rel=1e-5)
    assert plan.monthly_usd["autoscaled"] == pytest.approx(2 * 2.0 * HOURS)  # the mean's replicas all month
    # No hourly profile, so no idle gap is known: on/off traffic (7 replicas 30% of the time = 2.1) saves
    # nothing over the mean's 2 replicas, and fractional "pay per use" replicas are not on offer.
    assert plan.monthly_usd["scale-to-zero"] == pytest.approx(2 * 2.0 * HOURS)
    assert plan.schedule is None
    assert any("no hourly profile" in note for note in plan.notes)
    assert json.loads(json.dumps(plan.to_dict()))["replicas"] == {"at_peak": 7, "at_mean": 2, "min": 1}


def test_replicas_needed_rounds_up_but_not_on_float_noise() -> None:
    assert replicas_needed(0.3, 0.1) == 3  # 0.3 / 0.1 = 2.9999999999999996
    assert replicas_needed(65.0, 32.5) == 2  # exactly two replicas' worth
    assert replicas_needed(65.01, 32.5) == 3
    assert replicas_needed(1.0, 32.5) == 1
    assert replicas_needed(1.0, 32.5, min_replicas=3) == 3
    assert replicas_needed(0.0, 32.5, min_replicas=0) == 0
    assert replicas_needed(0.0, 32.5, min_replicas=2) == 2


def test_full_utilization_and_min_replicas_floor() -> None:
    plan = _plan(50.0, TrafficProfile(100.0, 10.0), 1.0, target_utilization=1.0, min_replicas=3)
    assert plan.replicas_at_peak == 3  # ceil(100 / 50) = 2, but at least 3
    assert plan.replicas_at_mean == 3
    assert any("utilization 100%" in note for note in plan.notes)


def test_hourly_schedule_cold_starts_and_scale_to_zero_bill() -> None:
    # 32.5 rps per replica at target: 10 rps -> 1 replica, 65 rps -> 2, idle hours -> min 1 or 0.
    traffic = TrafficProfile.from_hourly([0.0, 10.0, 65.0, 0.0])
    assert (traffic.peak_rps, traffic.mean_rps) == (65.0, 18.75)
    plan = _plan(50.0, traffic, hourly_usd_per_replica=3.0, scale_to_zero_cold_start_s=36.0)
    assert plan.schedule is not None
    assert [h.autoscaled_replicas for h in plan.schedule] == [1, 1, 2, 1]
    assert [h.scale_to_zero_replicas for h in plan.schedule] == [0, 1, 2, 0]
    assert [h.hour for h in plan.schedule] == [0, 1, 2, 3]
    assert plan.schedule[2].utilization == pytest.approx(65.0 / 100.0)  # 65 rps on 2 x 50 rps
    assert plan.schedule[0].utilization == 0.0
    repeats = HOURS / 4  # the 4-hour profile repeats 182.5 times a month
    assert plan.autoscaled.average_replicas == pytest.approx(1.25)
    assert plan.monthly_usd["autoscaled"] == pytest.approx(1.25 * 3.0 * HOURS)
    # One cold start per profile (hour 1 follows idle hour 0), starting one replica for 36 s = 0.01 h.
    assert plan.scale_to_zero.cold_starts_per_month == pytest.approx(repeats)
    cold_usd = 1 * 0.01 * 3.0 * repeats
    assert plan.scale_to_zero.start_up_replica_hours_per_month == pytest.approx(0.01 * repeats)
    assert plan.monthly_usd["scale-to-zero"] == pytest.approx(0.75 * 3.0 * HOURS + cold_usd)
    requests = 18.75 * 3600 * HOURS
    assert plan.usd_per_1000_requests["scale-to-zero"] == pytest.approx(
        plan.monthly_usd["scale-to-zero"] / requests * 1000
    )
    assert plan.replicas_at_peak == 2
    assert plan.monthly_usd["always-on"] == pytest.approx(2 * 3.0 * HOURS)


def test_cold_starts_wrap_around_the_profile() -> None:
    # The last hour (busy) precedes the first (busy): only hour 3, after the idle hours 1-2, starts cold.
    plan = _plan(50.0, TrafficProfile.from_hourly([5.0, 0.0, 0.0, 5.0]), 1.0)
    assert plan.scale_to_zero.cold_starts_per_month == pytest.approx(HOURS / 4)


def test_traffic_without_idle_hours_says_scale_to_zero_saves_nothing() -> None:
    plan = _plan(50.0, TrafficProfile.from_hourly([10.0, 20.0, 30.0]), 1.0)
    assert plan.scale_to_zero.cold_starts_per_month == 0
    assert plan.monthly_usd["scale-to-zero"] == pytest.approx(plan.monthly_usd["autoscaled"])
    assert any("saves nothing" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"target_utilization": 0.0}, "(0, 1]"),
        ({"target_utilization": 1.5}, "(0, 1]"),
        ({"capacity_rps_per_replica": 0.0}, "capacity"),
        ({"capacity_rps_per_replica": math.inf}, "capacity"),
        ({"traffic": TrafficProfile(100.0, 150.0)}, "mean traffic"),
        ({"traffic": TrafficProfile(0.0, 0.0)}, "peak traffic"),
        ({"traffic": TrafficProfile(100.0, 50.0, (10.0, 20.0))}, "disagree"),
        ({"min_replicas": -1}, "min replicas"),
        ({"hourly_usd_per_replica": -1.0}, "hourly price"),
        ({"scale_to_zero_cold_start_s": -5.0}, "cold start"),
        ({"latency_s": 0.0}, "latency"),
    ],
)
def test_impossible_inputs_raise_with_a_fix(kwargs: dict[str, object], fragment: str) -> None:
    args: dict[str, object] = {
        "capacity_rps_per_replica": 50.0,
        "traffic": TrafficProfile(100.0, 50.0),
        "hourly_usd_per_replica": 1.0,
    }
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace("]", r"\]")) as error:
        _plan(**{**args, **kwargs})  # type: ignore[arg-type]
    assert error.value.hint


# -- traffic CSV ----------------------------------------------------------------------------------


def test_traffic_csv_reads_a_day_with_bom_blank_lines_and_spaces() -> None:
    rows = "".join(f" {hour} , {0 if hour < 6 else hour * 2.5}\n" for hour in range(24))
    profile = parse_traffic_csv("\ufeffHour,RPS\n" + rows + "\n\n", "day.csv")
    assert profile.hourly_rps is not None and len(profile.hourly_rps) == 24
    assert profile.peak_rps == pytest.approx(57.5)
    assert profile.mean_rps == pytest.approx(sum(h * 2.5 for h in range(6, 24)) / 24)
    assert profile.first_hour == 0
    week = parse_traffic_csv("hour,rps\n" + "".join(f"{h},{h % 24}\n" for h in range(1, 169)), "week.csv")
    assert week.hourly_rps is not None and len(week.hourly_rps) == 168 and week.first_hour == 1


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "t.csv: the file is empty"),
        ("hour,rps\n", "t.csv: no hours"),
        ("time,rps\n0,1\n", "t.csv:1: the header must be 'hour,rps'"),
        ("hour,rps,extra\n0,1,2\n", "t.csv:1: the header"),
        ("hour,rps\n0,1\n1,abc\n", "t.csv:3: rps must be a number"),
        ("hour,rps\n0,1\n1,-4\n", "t.csv:3: rps must be a finite number >= 0"),
        ("hour,rps\n0,nan\n", "t.csv:2: rps must be a finite number"),
        ("hour,rps\n0,1\n1\n", "t.csv:3: expected 2 columns"),
        ("hour,rps\n0,1\n0.5,2\n", "t.csv:3: hour must be a whole number"),
        ("hour,rps\n0,1\n2,2\n", "t.csv:3: hour 2 follows hour 0"),
        ("hour,rps\n0,1\n1,2\n1,3\n", "t.csv:4: hour 1 follows hour 1"),
        ("hour,rps\n0,0\n1,0\n", "every hour has 0"),
        ("hour,rps\n0,1\n1,1e30\n", "t.csv:3: hour 1 has rps 1e30, above the 1e7 requests/s that --peak-rps takes"),
        ("hour,rps\n0,2e7\n", "t.csv:2: hour 0 has rps 2e7, above the 1e7"),
    ],
)
def test_traffic_csv_errors_name_the_line(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as error:
        parse_traffic_csv(text, "t.csv")
    assert fragment in error.value.message
    assert error.value.hint


def test_a_csv_rate_at_the_peak_rps_limit_is_taken() -> None:
    """The file's range is --peak-rps's: 1e7 itself is allowed, as the flag allows it."""
    assert parse_traffic_csv("hour,rps\n0,1e7\n1,0\n", "t.csv").peak_rps == 1e7


@pytest.mark.parametrize(
    ("capacity", "traffic", "fragment"),
    [
        (10.0, TrafficProfile.from_hourly([1e30]), "peak traffic 1e30 requests/s is above 1e7"),
        (10.0, TrafficProfile(peak_rps=2e7, mean_rps=1.0), "peak traffic 2e7 requests/s is above 1e7"),
        (
            1e-300,
            TrafficProfile.from_hourly([100.0, 0.0]),
            "1e-300 requests/s per replica needs 1.54e302 replicas, more than 1e12",
        ),
    ],
)
def test_a_plan_past_any_replica_count_is_refused_not_wrapped(
    capacity: float, traffic: TrafficProfile, fragment: str
) -> None:
    """Through the API too (no CSV, no flag parser): replica counts are int64 in the hourly schedule, and a
    count past it came back as -9223372036854775808 replicas and a negative bill."""
    with pytest.raises(InputError) as error:
        _plan(capacity, traffic, 1.0)
    assert fragment in error.value.message and error.value.hint


# -- loadtest results -----------------------------------------------------------------------------


def test_capacity_from_a_find_max_result_uses_the_best_probe() -> None:
    best = load_result(rate_rps=120.0, throughput_rps=119.0, p50_ms=25.0)
    probes = [load_result(60.0, 60.0, 10.0), best, load_result(240.0, 180.0, 400.0)]
    # The shape `computewise loadtest --find-max --json` writes.
    data = {
        "url": "http://127.0.0.1:8000/v1/models/m/infer",
        "slo_p99_ms": 100.0,
        "max_rate_rps": 120.0,
        "best": best.to_dict(),
        "probes": [p.to_dict() | {"meets_slo": p.rate_rps <= 120} for p in probes],
    }
    measured = capacity_from_loadtest(read_loadtest(json.loads(json.dumps(data)), "max.json"), "max.json")
    assert measured.capacity_rps == 120.0
    assert measured.latency_s == pytest.approx(0.025)
    assert "p99 <= 100 ms" in measured.description and "max.json" in measured.description
    # "best" is the probe at the capacity, found among the probes: a file without it reads the same.
    del data["best"]
    assert capacity_from_loadtest(read_loadtest(data)).latency_s == pytest.approx(0.025)
    # A file written before schema_version existed reads as version 1.
    assert "schema_version" not in data


def test_a_search_that_never_missed_the_slo_gives_a_lower_bound_and_says_so() -> None:
    """`loadtest --find-max` stops at --max-rate when every rate met the SLO (its report says "at least"): the
    capacity is a floor, so a plan from it may rent more replicas than needed, and must say so."""
    probes = (Probe(load_result(20.0, 20.0, 10.0), True), Probe(load_result(40.0, 40.0, 11.0), True))
    measured = capacity_from_loadtest(MaxRateSearch("http://h/", 100.0, 40.0, probes), "max.json")
    assert measured.capacity_rps == 40.0
    assert "at least 40 requests/s" in measured.description
    assert any("upper bound" in note and "--max-rate" in note for note in measured.notes)


def test_a_measured_rate_beyond_any_replica_is_refused() -> None:
    """A loadtest file is input like --capacity-rps, and held to its range (1e7 requests/s)."""
    probes = (Probe(load_result(20.0, 20.0, 10.0), True),)
    with pytest.raises(InputError, match="max_rate_rps is 1e\\+300 requests/s, above the 1e\\+07"):
        capacity_from_loadtest(MaxRateSearch("http://h/", 100.0, 1e300, probes), "max.json")


def test_capacity_from_a_single_run_flags_overload() -> None:
    calm = capacity_from_loadtest(read_loadtest(LoadtestRun("http://h/", load_result(50.0, 49.5, 12.0)).to_dict()))
    assert calm.capacity_rps == 49.5 and calm.latency_s == pytest.approx(0.012)
    assert any("--find-max" in note for note in calm.notes)
    busy = LoadtestRun("http://h/", load_result(300.0, 140.0, 900.0, rejection_rate=0.3))
    overloaded = capacity_from_loadtest(read_loadtest(busy.to_dict()))
    assert any("overloaded" in note for note in overloaded.notes)


def test_loadtest_documents_round_trip() -> None:
    probes = (Probe(load_result(60.0, 60.0, 10.0), True), Probe(load_result(120.0, 90.0, 300.0), False))
    search = MaxRateSearch("http://127.0.0.1:8000/", 100.0, 60.0, probes)
    assert read_loadtest(json.loads(json.dumps(search.to_dict()))) == search
    assert search.best == probes[0].result
    run = LoadtestRun("http://127.0.0.1:8000/", replace(load_result(50.0, 49.5, 12.0), error_kinds={"timeout": 2}))
    assert read_loadtest(json.loads(json.dumps(run.to_dict()))) == run


def test_a_loadtest_document_from_a_newer_computewise_is_refused() -> None:
    newer = LoadtestRun("http://h/", load_result(50.0, 49.5, 12.0)).to_dict() | {"schema_version": 2}
    with pytest.raises(InputError, match="schema_version 2, this computewise reads up to 1") as error:
        read_loadtest(newer, "lt.json")
    assert error.value.hint is not None and "upgrade computewise" in error.value.hint


_RUN = LoadtestRun("http://h/", load_result(50.0, 49.5, 12.0)).to_dict()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([1, 2], "expected a JSON object"),
        ({"p99_ms": 3}, "not a loadtest result"),
        ({"url": "u", "slo_p99_ms": 10, "max_rate_rps": None, "probes": []}, "max_rate_rps must be a positive number"),
        (_RUN | {"throughput_rps": 0.0}, "throughput_rps must be a positive number"),
        (_RUN | {"throughput_rps": "fast"}, "throughput_rps must be a number, got 'fast'"),
        (_RUN | {"sent": 1.5}, "sent must be a whole number"),
        ({k: v for k, v in _RUN.items() if k != "url"}, "url must be a string"),
    ],
)
def test_bad_loadtest_results_are_refused(data: object, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment) as error:
        capacity_from_loadtest(read_loadtest(data, "lt.json"), "lt.json")
    assert error.value.hint


def test_a_loadtest_result_from_an_older_version_reads_with_its_defaults() -> None:
    older = {k: v for k, v in _RUN.items() if k not in ("error_kinds", "repeat_ratio", "schema_version")}
    run = read_loadtest(older | {"wall_s": None}, "old.json")
    assert isinstance(run, LoadtestRun)
    assert (run.result.wall_s, run.result.error_kinds, run.result.repeat_ratio) == (0.0, {}, 0.0)
    with pytest.raises(InputError, match=r"lt\.json: error_kinds\.timeout must be a whole number, got 'x'"):
        read_loadtest(_RUN | {"error_kinds": {"timeout": "x"}}, "lt.json")


# -- autoscaler configs ---------------------------------------------------------------------------


def test_hpa_manifest_carries_the_plan_and_parses_as_yaml() -> None:
    plan = _plan(50.0, TrafficProfile(200.0, 60.0), 2.0)
    text = plan.hpa_manifest("minilm", namespace="ml")
    assert "maxReplicas: 7" in text and "minReplicas: 1" in text and 'averageValue: "32500m"' in text
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(text)
    assert doc["apiVersion"] == "autoscaling/v2" and doc["kind"] == "HorizontalPodAutoscaler"
    assert doc["metadata"] == {"name": "minilm", "namespace": "ml"}
    spec = doc["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "minilm"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 7)
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "32500m"}  # 50 x 0.65 rps
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_hpa_on_cpu_and_scale_to_zero_floor() -> None:
    plan = _plan(50.0, TrafficProfile(200.0, 60.0), 2.0, target_utilization=0.7, min_replicas=0)
    text = plan.hpa_manifest("minilm", metric="cpu")
    assert "averageUtilization: 70" in text
    assert "minReplicas: 1" in text  # an HPA cannot hold 0 replicas without the HPAScaleToZero gate
    yaml = pytest.importorskip("yaml")
    (metric,) = yaml.safe_load(text)["spec"]["metrics"]
    assert metric == {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
    }


@pytest.mark.parametrize("name", ["MiniLM", "-x", "a_b", "", "x" * 254])
def test_hpa_refuses_names_kubernetes_would_reject(name: str) -> None:
    plan = _plan(50.0, TrafficProfile(200.0, 60.0), 2.0)
    with pytest.raises(InputError, match="not a valid Kubernetes name"):
        plan.hpa_manifest(name)


def test_ray_config_uses_littles_law_for_ongoing_requests() -> None:
    # 32.5 rps per replica x 40 ms = 1.3 requests in flight per replica (L = lambda x W).
    plan = _plan(50.0, TrafficProfile(200.0, 60.0), 2.0, min_replicas=0, latency_s=0.040)
    config = plan.ray_serve_config("MiniLM")
    assert config["name"] == "MiniLM"
    assert config["max_ongoing_requests"] == 2  # ceil(1.3 x 1.5)
    auto = config["autoscaling_config"]
    assert auto == {
        "min_replicas": 0,
        "max_replicas": 7,
        "target_ongoing_requests": 1.3,
        "upscale_delay_s": 30.0,
        "downscale_delay_s": 600.0,
    }
    json.dumps(config)
    # Without a latency, Ray's own default target (2) stands.
    default = _plan(50.0, TrafficProfile(200.0, 60.0), 2.0).ray_serve_config("m")
    assert default["autoscaling_config"]["target_ongoing_requests"] == 2.0
    assert default["max_ongoing_requests"] == 3


@pytest.mark.parametrize("capacity_rps", [10.0, 3.0, 0.5])
def test_constant_traffic_gives_scale_to_zero_no_fewer_replicas_than_always_on(capacity_rps: float) -> None:
    """A replica only goes to zero in an idle gap, and constant traffic has none: 5 rps on replicas planned
    at 6.5 rps used to average 0.77 replicas, below the one replica the load needs every hour."""
    plan = _plan(capacity_rps, TrafficProfile(peak_rps=5.0, mean_rps=5.0), hourly_usd_per_replica=1.0)
    needed = replicas_needed(5.0, capacity_rps * 0.65)
    zero = plan.scale_to_zero
    assert zero.average_replicas >= needed
    assert zero.average_replicas == plan.always_on.average_replicas
    assert plan.monthly_usd["scale-to-zero"] == plan.monthly_usd["always-on"]
    assert any("scale-to-zero never scales to zero" in note for note in plan.notes)
    assert not any("wait about" in note for note in plan.notes)  # no cold start without an idle period


def test_constant_hourly_profile_and_flat_flags_agree() -> None:
    """The same constant traffic, as a 24-hour profile or as --peak-rps alone, bills scale-to-zero alike."""
    flat = _plan(10.0, TrafficProfile(peak_rps=5.0, mean_rps=5.0), hourly_usd_per_replica=1.0)
    hourly = _plan(10.0, TrafficProfile.from_hourly([5.0] * 24), hourly_usd_per_replica=1.0)
    assert flat.scale_to_zero.average_replicas == hourly.scale_to_zero.average_replicas == 1.0


def test_a_mean_below_the_peak_without_a_profile_is_read_as_on_off_traffic() -> None:
    """Peak 50, mean 5: 2 replicas (the peak's at 32.5 rps each) for 10 % of the hours beat the mean's 1 all month."""
    plan = _plan(50.0, TrafficProfile(peak_rps=50.0, mean_rps=5.0), hourly_usd_per_replica=1.0)
    assert plan.scale_to_zero.average_replicas == pytest.approx(2 * 0.1)
    assert plan.scale_to_zero.average_replicas < plan.autoscaled.average_replicas
    assert "on/off traffic assumed" in plan.scale_to_zero.basis
