"""``computewise plan serve``: replicas, $ per 1000 requests and autoscaler configs for a measured model.

Reads the files (a loadtest result, a traffic CSV; with ``--pipeline`` the YAML and its stages' loadtest
files, relative to it), resolves the price of a replica from the flags or the catalog, hands a typed
request to :func:`computewise.plan.serve_request.plan_serve_request` (or the pipeline to
:func:`computewise.plan.pipeline.plan_pipeline`) and writes what the user asked for: JSON or tables, a
Kubernetes HPA manifest, a Ray Serve autoscaling config, an HTML report.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from computewise.cli.common import (
    CatalogOption,
    HtmlOption,
    JsonOption,
    bounded_float,
    bounded_int,
    choice,
    load,
    print_document,
)
from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.estimate.quote import Quote
    from computewise.plan.pipeline import Measured, PipelineSpec
    from computewise.plan.serve import HpaMetric, LoadtestCapacity, ServePlan, TrafficProfile
    from computewise.plan.serve_request import PlannedServing, WrittenFiles

_HPA_METRICS: tuple[HpaMetric, ...] = ("rps", "cpu")

# The flags, one type each, so the verb's signature reads in a screen.
_CapacityRps = Annotated[
    float | None,
    typer.Option(
        "--capacity-rps",
        parser=bounded_float("--capacity-rps"),
        help="Requests/s one replica sustains within the latency SLO.",
    ),
]
_Loadtest = Annotated[
    Path | None,
    typer.Option(
        "--loadtest",
        help="Capacity from a JSON written by `computewise loadtest URL --json` (its throughput_rps) or "
        "`--find-max --json` (its max_rate_rps).",
    ),
]
_LatencyMs = Annotated[
    float | None,
    typer.Option(
        "--latency-ms",
        parser=bounded_float("--latency-ms"),
        help="Median latency of a request at that load (default: p50 of --loadtest); "
        "sets Ray's target_ongoing_requests by Little's law.",
    ),
]
_PeakRps = Annotated[
    float | None,
    typer.Option("--peak-rps", parser=bounded_float("--peak-rps"), help="Peak requests/s of the service."),
]
_MeanRps = Annotated[
    float | None,
    typer.Option(
        "--mean-rps", parser=bounded_float("--mean-rps"), help="Mean requests/s over the month (default: the peak)."
    ),
]
_Traffic = Annotated[
    Path | None,
    typer.Option("--traffic", help="CSV with the header hour,rps and one row per consecutive hour (a day: 24)."),
]
_HourlyUsd = Annotated[
    float | None,
    typer.Option("--hourly-usd", parser=bounded_float("--hourly-usd"), help="Price of one replica per hour, in USD."),
]
_Accelerator = Annotated[
    str | None,
    typer.Option(
        "--gpu", "-g", "--accelerator", help="Price a replica as this accelerator at its cheapest catalog price."
    ),
]
_GpusPerReplica = Annotated[
    int,
    typer.Option(
        "--gpus-per-replica",
        parser=bounded_int("--gpus-per-replica"),
        help="Accelerators per replica (with --gpu).",
    ),
]
_Instance = Annotated[
    str | None, typer.Option("--instance", help="Price a replica as one catalog instance of this type.")
]
_Cloud = Annotated[str | None, typer.Option(help="Catalog prices on this cloud only.")]
_Region = Annotated[str | None, typer.Option(help="Catalog prices in this region only.")]
_Pricing = Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")]
_TargetUtilization = Annotated[
    float | None,
    typer.Option(
        "--target-utilization",
        parser=bounded_float("--target-utilization"),
        help="Share of a replica's capacity planned for, in (0, 1] "
        "(default: the catalog's serving_target_utilization).",
    ),
]
_MinReplicas = Annotated[
    int,
    typer.Option(
        "--min-replicas", parser=bounded_int("--min-replicas"), help="Fewest replicas the autoscaled mode keeps up."
    ),
]
_ColdStartS = Annotated[
    float | None,
    typer.Option(
        "--cold-start-s",
        parser=bounded_float("--cold-start-s"),
        help="Seconds a new replica takes to serve (scale-to-zero; default: the catalog's serving_cold_start_s).",
    ),
]
_MaxUsdPerHour = Annotated[
    float | None,
    typer.Option(
        "--max-usd-per-hour",
        parser=bounded_float("--max-usd-per-hour"),
        help="Spend cap: never more replicas than this buys; shows the 429s and latency it costs in a surge.",
    ),
]
_MonthlyUsd = Annotated[
    float | None,
    typer.Option(
        "--monthly-usd",
        parser=bounded_float("--monthly-usd"),
        help="With --max-usd-per-hour: the deployment's monthly budget; prints the `budget set` that warns "
        "--alert-lead before it runs out at the cap.",
    ),
]
_AlertLead = Annotated[
    str, typer.Option("--alert-lead", help="How long before the budget runs out at the cap to alert: 1d, 12h.")
]
_Name = Annotated[str, typer.Option(help="Deployment name in the HPA manifest and the Ray config.")]
_Hpa = Annotated[
    Path | None, typer.Option("--hpa", help="Write a Kubernetes autoscaling/v2 HorizontalPodAutoscaler (YAML).")
]
_HpaMetric = Annotated[
    str, typer.Option("--hpa-metric", help="rps (requests/s per pod, a custom metric) or cpu (utilization).")
]
_Namespace = Annotated[str | None, typer.Option(help="Kubernetes namespace of the HPA.")]
_RayConfig = Annotated[
    Path | None, typer.Option("--ray-config", help="Write a Ray Serve deployment autoscaling_config (JSON).")
]
_Pipeline = Annotated[
    Path | None,
    typer.Option(
        "--pipeline",
        help="Plan a multi-stage pipeline from a YAML file (stages: model or measured latency, accelerator, "
        "batch, fan_out) at --peak-rps pipeline requests/s.",
    ),
]
_CacheHitRatio = Annotated[
    float | None,
    typer.Option(
        "--cache-hit-ratio",
        parser=bounded_float("--cache-hit-ratio"),
        help="Share of requests a prediction cache answers (serve --cache-size): shows the replicas and $ it saves.",
    ),
]


def plan_serve(
    capacity_rps: _CapacityRps = None,
    loadtest: _Loadtest = None,
    latency_ms: _LatencyMs = None,
    peak_rps: _PeakRps = None,
    mean_rps: _MeanRps = None,
    traffic: _Traffic = None,
    hourly_usd: _HourlyUsd = None,
    accelerator: _Accelerator = None,
    gpus_per_replica: _GpusPerReplica = 1,
    instance: _Instance = None,
    cloud: _Cloud = None,
    region: _Region = None,
    pricing: _Pricing = "on-demand",
    target_utilization: _TargetUtilization = None,
    min_replicas: _MinReplicas = 1,
    cold_start_s: _ColdStartS = None,
    max_usd_per_hour: _MaxUsdPerHour = None,
    monthly_usd: _MonthlyUsd = None,
    alert_lead: _AlertLead = "1d",
    name: _Name = "model",
    hpa: _Hpa = None,
    hpa_metric: _HpaMetric = "rps",
    namespace: _Namespace = None,
    ray_config: _RayConfig = None,
    pipeline: _Pipeline = None,
    catalog_paths: CatalogOption = None,
    cache_hit_ratio: _CacheHitRatio = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Replicas at peak and mean, $/1000 requests and monthly cost of always-on, autoscaled and scale-to-zero."""
    from computewise.plan.serve_request import ServeRequest, plan_serve_request
    from computewise.report.serve import print_serve_plan
    from computewise.units import parse_duration_s

    if pipeline is not None:
        single = {
            "--capacity-rps": capacity_rps, "--loadtest": loadtest, "--latency-ms": latency_ms, "--mean-rps": mean_rps,
            "--traffic": traffic, "--hourly-usd": hourly_usd, "--gpu": accelerator, "--instance": instance,
            "--max-usd-per-hour": max_usd_per_hour, "--hpa": hpa, "--ray-config": ray_config, "--html": html,
            "--cache-hit-ratio": cache_hit_ratio,
        }  # fmt: skip
        _plan_pipeline(pipeline, single, peak_rps, target_utilization, pricing, cloud, region, catalog_paths, as_json)
        return
    measured = _capacity(capacity_rps, loadtest)
    profile, traffic_notes = _traffic(peak_rps, mean_rps, traffic)
    catalog, assumptions = load(catalog_paths)
    price = _replica_quote(catalog, hourly_usd, accelerator, gpus_per_replica, instance, cloud, region, pricing)
    latency_s = None if latency_ms is None else latency_ms / 1000.0
    alert_lead_s = parse_duration_s(alert_lead, "--alert-lead")
    request = ServeRequest(measured, profile, price, traffic_notes, instance is not None, target_utilization,
                           min_replicas, cold_start_s, latency_s, max_usd_per_hour, cache_hit_ratio, monthly_usd,
                           alert_lead_s, name)  # fmt: skip
    planned = plan_serve_request(request, assumptions)
    files = _Files(name, hpa, hpa_metric, namespace, ray_config, html)
    configs = files.configs(planned.plan)  # every file rendered before any is written: a bad --name writes none
    written = files.write(configs, planned)
    document = dataclasses.replace(planned, written=files.names()).to_dict()
    print_document(document, as_json, lambda _, console: print_serve_plan(planned, console), written)


@dataclass(frozen=True)
class _Files:
    """The files ``plan serve`` writes beside its answer: the HPA manifest, the Ray Serve config, the HTML report."""

    name: str
    hpa: Path | None
    hpa_metric: str
    namespace: str | None
    ray_config: Path | None
    html: Path | None

    def configs(self, plan: ServePlan) -> list[tuple[Path, str, str]]:
        """The autoscaler configs asked for: path, text, a file name to suggest for a directory."""
        outputs: list[tuple[Path, str, str]] = []
        if self.hpa is not None:
            metric = choice(self.hpa_metric, _HPA_METRICS, "--hpa-metric")
            manifest = plan.hpa_manifest(self.name, metric=metric, namespace=self.namespace)
            outputs.append((self.hpa, manifest, "hpa.yaml"))
        if self.ray_config is not None:
            if not self.name.strip():
                raise InputError("--name must not be empty", "e.g. --name minilm")
            outputs.append((self.ray_config, json.dumps(plan.ray_serve_config(self.name), indent=2) + "\n", "ray.json"))
        return outputs

    def names(self) -> WrittenFiles:
        """The ``written`` object of ``--json``: each file asked for, or None."""
        from computewise.plan.serve_request import WrittenFiles

        return WrittenFiles(_name(self.hpa), _name(self.ray_config), _name(self.html))

    def write(self, configs: list[tuple[Path, str, str]], planned: PlannedServing) -> list[Path]:
        """Write the configs and the HTML report of ``planned`` (each atomically); the paths written."""
        from computewise.report.html import write_html

        outputs = list(configs)
        if self.html is not None:
            from computewise.report.serve import serve_plan_html

            outputs.append((self.html, serve_plan_html(planned), "report.html"))
        for path, text, example in outputs:
            write_html(path, text, example)
        return [path for path, _, _ in outputs]


def _name(path: Path | None) -> str | None:
    return str(path) if path else None


def _capacity(capacity_rps: float | None, loadtest: Path | None) -> LoadtestCapacity:
    from computewise.plan.serve import LoadtestCapacity, capacity_from_loadtest
    from computewise.specs.loadtest import read_loadtest

    if (capacity_rps is None) == (loadtest is None):
        raise InputError(
            "give the capacity of one replica with exactly one of --capacity-rps or --loadtest",
            "e.g. --capacity-rps 50, or --loadtest result.json from "
            "`computewise loadtest URL --find-max --slo-p99-ms 100 --json`",
        )
    if capacity_rps is not None:
        return LoadtestCapacity(capacity_rps, None, f"--capacity-rps {capacity_rps:g}")
    if loadtest is None:  # for mypy: excluded above
        raise InputError("--loadtest is missing", "give --loadtest FILE")
    text = _read(loadtest, "--loadtest")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"{loadtest}:{error.lineno}: not JSON ({error.msg})",
            "pass the output of `computewise loadtest URL --json > result.json`",
        ) from None
    return capacity_from_loadtest(read_loadtest(data, str(loadtest)), str(loadtest))


def _traffic(
    peak_rps: float | None, mean_rps: float | None, traffic: Path | None
) -> tuple[TrafficProfile, tuple[str, ...]]:
    from computewise.plan.serve import TrafficProfile, parse_traffic_csv

    if traffic is not None:
        if peak_rps is not None or mean_rps is not None:
            raise InputError(
                "--traffic gives the peak and mean itself; --peak-rps and --mean-rps cannot be added",
                "drop --peak-rps/--mean-rps, or drop --traffic",
            )
        return parse_traffic_csv(_read(traffic, "--traffic"), str(traffic)), ()
    if peak_rps is None:
        raise InputError(
            "no traffic given", "give --peak-rps (and --mean-rps), or --traffic FILE.csv with columns hour,rps"
        )
    if mean_rps is None:
        return TrafficProfile(peak_rps, peak_rps), ("--mean-rps not given: the mean is taken as the peak",)
    if not (0 < mean_rps <= peak_rps):
        raise InputError(
            f"--mean-rps must be in (0, --peak-rps = {peak_rps:g}], got {mean_rps:g}",
            "e.g. --peak-rps 200 --mean-rps 60",
        )
    return TrafficProfile(peak_rps, mean_rps), ()


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{flag} {path}: no such file", "check the path") from None
    except UnicodeDecodeError:
        raise InputError(f"{flag} {path}: not UTF-8 text", "pass a text file (CSV or JSON)") from None
    except OSError as error:
        raise InputError(f"{flag} {path}: {error.strerror or error}", "check the path and its permissions") from None


def _replica_quote(
    catalog: Catalog,
    hourly_usd: float | None,
    accelerator: str | None,
    gpus_per_replica: int,
    instance: str | None,
    cloud: str | None,
    region: str | None,
    pricing: str,
) -> Quote:
    """One replica's hourly price, quoted by ``estimate.quote`` as a bill, from exactly one of the three
    price flags: --hourly-usd, --gpu (its GPUs at the cheapest offering, a share of an instance
    where the replica leaves GPUs over) or --instance (one whole instance per replica)."""
    from computewise.estimate.quote import Ask, PriceRequest, quote
    from computewise.plan import CLOUD_PRICINGS

    given = [
        flag
        for flag, value in (("--hourly-usd", hourly_usd), ("--gpu", accelerator), ("--instance", instance))
        if value is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give the price of one replica with exactly one of --hourly-usd, --gpu or --instance"
            + (f" (got {', '.join(given)})" if given else ""),
            "e.g. --hourly-usd 1.2, --gpu l4, or --instance g6.xlarge",
        )
    if gpus_per_replica != 1 and accelerator is None:
        raise InputError("--gpus-per-replica only applies to --gpu", "drop it, or price with --gpu")
    flags = PriceRequest(hourly_usd, instance, cloud, region, choice(pricing, CLOUD_PRICINGS, "--pricing"))
    ask = Ask(catalog.accelerator(accelerator), gpus_per_replica) if accelerator is not None else Ask()
    return quote(catalog, ask, flags)


def _plan_pipeline(
    path: Path,
    single: Mapping[str, object],
    peak_rps: float | None,
    target_utilization: float | None,
    pricing: str,
    cloud: str | None,
    region: str | None,
    catalog_paths: list[Path] | None,
    as_json: bool,
) -> None:
    """Plan the pipeline in ``path`` at ``peak_rps`` and print it (tables or JSON); ``single``: the flags of a
    one-model plan, none of which may be given with it."""
    import yaml

    from computewise.models import resolve_model
    from computewise.plan import CLOUD_PRICINGS
    from computewise.plan.pipeline import parse_pipeline, plan_pipeline
    from computewise.report.pipeline import print_pipeline

    clashing = [flag for flag, value in single.items() if value is not None]
    if clashing:
        raise InputError(
            f"--pipeline plans each stage from its file; {', '.join(clashing)} cannot be added",
            "put capacities, latencies and accelerators in the pipeline's stages, or drop --pipeline",
        )
    if peak_rps is None:
        raise InputError("--pipeline needs a traffic level", "give --peak-rps, the pipeline requests per second")
    text = _read_stage_file(path)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InputError(
            f"{where}: not YAML ({getattr(error, 'problem', None) or error})", "check the indentation"
        ) from None
    catalog, assumptions = load(catalog_paths)
    spec = parse_pipeline(document, str(path), catalog, resolve_model)
    plan = plan_pipeline(
        spec,
        peak_rps,
        catalog,
        assumptions,
        target_utilization=assumptions.serving_target_utilization if target_utilization is None else target_utilization,
        measured=_measured(spec, path.parent),
        pricing=choice(pricing, CLOUD_PRICINGS, "--pricing"),
        cloud=None if cloud is None else catalog.cloud(cloud),
        region=None if region is None else catalog.region(region),
    )
    print_document(plan.to_dict(), as_json, lambda _, console: print_pipeline(plan, console))


def _measured(spec: PipelineSpec, base: Path) -> dict[str, Measured]:
    """Each loadtest stage's capacity and median latency, from its ``loadtest --json`` file."""
    from computewise.plan.pipeline import Measured
    from computewise.plan.serve import capacity_from_loadtest
    from computewise.specs.loadtest import read_loadtest

    measured: dict[str, Measured] = {}
    for stage in spec.stages:
        if stage.loadtest is None:
            continue
        where = f"{spec.source}: stage {stage.name!r}: key 'loadtest'"
        file = base / stage.loadtest
        try:
            data = json.loads(_read_stage_file(file))
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: {file}:{error.lineno}: not JSON", "pass a `loadtest --json` result") from None
        capacity = capacity_from_loadtest(read_loadtest(data, str(file)), str(file))
        if capacity.latency_s is None:
            raise InputError(f"{where}: {file} has no median latency", "rerun the loadtest with --json")
        measured[stage.name] = Measured(capacity.capacity_rps, capacity.latency_s)
    return measured


def _read_stage_file(path: Path) -> str:
    """A pipeline's YAML or a stage's loadtest file; a missing one is said relative to the pipeline."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path}: no such file", "check the path (loadtest files are relative to the pipeline)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error})", "pass a UTF-8 text file") from None
