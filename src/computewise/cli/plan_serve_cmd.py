"""``computewise plan serve``: replicas, $ per 1000 requests and autoscaler configs for a measured model.

Reads the files (a loadtest result, a traffic CSV), resolves the price of a replica from the flags or
the catalog, hands plain numbers to :func:`computewise.plan.serve.plan_serving` and writes what the
user asked for: JSON or tables, a Kubernetes HPA manifest, a Ray Serve autoscaling config.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from computewise.cli.common import CatalogOption, JsonOption, choice
from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.plan.serve import HpaMetric, LoadtestCapacity, TrafficProfile
    from computewise.specs import Pricing

_SERVE_PRICINGS: tuple[Pricing, ...] = ("on-demand", "spot", "reserved-1y", "reserved-3y")
_HPA_METRICS: tuple[HpaMetric, ...] = ("rps", "cpu")


def plan_serve(
    capacity_rps: Annotated[
        float | None,
        typer.Option("--capacity-rps", help="Requests/s one replica sustains within the latency SLO."),
    ] = None,
    loadtest: Annotated[
        Path | None,
        typer.Option(
            "--loadtest",
            help="Capacity from a JSON written by `computewise loadtest --json` (its throughput_rps) or "
            "`--find-max --json` (its max_rate_rps).",
        ),
    ] = None,
    latency_ms: Annotated[
        float | None,
        typer.Option(
            "--latency-ms",
            help="Median latency of a request at that load (default: p50 of --loadtest); "
            "sets Ray's target_ongoing_requests by Little's law.",
        ),
    ] = None,
    peak_rps: Annotated[float | None, typer.Option("--peak-rps", help="Peak requests/s of the service.")] = None,
    mean_rps: Annotated[
        float | None, typer.Option("--mean-rps", help="Mean requests/s over the month (default: the peak).")
    ] = None,
    traffic: Annotated[
        Path | None,
        typer.Option("--traffic", help="CSV with the header hour,rps and one row per consecutive hour (a day: 24)."),
    ] = None,
    hourly_usd: Annotated[
        float | None, typer.Option("--hourly-usd", help="Price of one replica per hour, in USD.")
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option("--accelerator", "-g", help="Price a replica as this accelerator at its cheapest catalog price."),
    ] = None,
    gpus_per_replica: Annotated[
        int, typer.Option("--gpus-per-replica", help="Accelerators per replica (with --accelerator).")
    ] = 1,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Price a replica as one catalog instance of this type.")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="Catalog prices on this cloud only.")] = None,
    region: Annotated[str | None, typer.Option(help="Catalog prices in this region only.")] = None,
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")] = "on-demand",
    target_utilization: Annotated[
        float, typer.Option("--target-utilization", help="Share of a replica's capacity planned for, in (0, 1].")
    ] = 0.65,
    min_replicas: Annotated[
        int, typer.Option("--min-replicas", help="Fewest replicas the autoscaled mode keeps up.")
    ] = 1,
    cold_start_s: Annotated[
        float, typer.Option("--cold-start-s", help="Seconds a new replica takes to serve (scale-to-zero).")
    ] = 30.0,
    name: Annotated[str, typer.Option(help="Deployment name in the HPA manifest and the Ray config.")] = "model",
    hpa: Annotated[
        Path | None, typer.Option("--hpa", help="Write a Kubernetes autoscaling/v2 HorizontalPodAutoscaler (YAML).")
    ] = None,
    hpa_metric: Annotated[
        str, typer.Option("--hpa-metric", help="rps (requests/s per pod, a custom metric) or cpu (utilization).")
    ] = "rps",
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace of the HPA.")] = None,
    ray_config: Annotated[
        Path | None, typer.Option("--ray-config", help="Write a Ray Serve deployment autoscaling_config (JSON).")
    ] = None,
    catalog_paths: CatalogOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replicas at peak and mean, $/1000 requests and monthly cost of always-on, autoscaled and scale-to-zero."""
    from computewise.plan.serve import plan_serving

    measured = _capacity(capacity_rps, loadtest)
    if latency_ms is not None and not (latency_ms > 0 and math.isfinite(latency_ms)):
        raise InputError(f"--latency-ms must be positive, got {latency_ms:g}", "e.g. --latency-ms 40")
    latency_s = latency_ms / 1000.0 if latency_ms is not None else measured.latency_s
    profile, traffic_notes = _traffic(peak_rps, mean_rps, traffic)
    usd_per_h, price_source = _price(
        hourly_usd, accelerator, gpus_per_replica, instance, cloud, region, pricing, catalog_paths
    )
    if min_replicas < 0:
        raise InputError(f"--min-replicas must be >= 0, got {min_replicas}", "e.g. --min-replicas 1")
    plan = plan_serving(
        measured.capacity_rps,
        profile,
        usd_per_h,
        target_utilization=target_utilization,
        min_replicas=min_replicas,
        scale_to_zero_cold_start_s=cold_start_s,
        latency_s=latency_s,
    )
    # Render both files before writing either, so a bad --name leaves nothing half written.
    outputs: list[tuple[Path, str]] = []
    if hpa is not None:
        metric = choice(hpa_metric, _HPA_METRICS, "--hpa-metric")
        outputs.append((hpa, plan.hpa_manifest(name, metric=metric, namespace=namespace)))
    if ray_config is not None:
        if not name.strip():
            raise InputError("--name must not be empty", "e.g. --name minilm")
        outputs.append((ray_config, json.dumps(plan.ray_serve_config(name), indent=2) + "\n"))
    data = plan.to_dict()
    data["capacity"]["source"] = measured.description
    data["price"]["source"] = price_source
    data["notes"] = [*measured.notes, *traffic_notes, *data["notes"]]
    data["written"] = {"hpa": str(hpa) if hpa else None, "ray_config": str(ray_config) if ray_config else None}
    if outputs:
        from computewise.report import write_html  # atomic text write: temporary file, then rename

        for path, text in outputs:
            write_html(path, text)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _print_plan(data, Console())
        for path, _ in outputs:
            Console(stderr=True).print(f"wrote {path}", highlight=False)


def _capacity(capacity_rps: float | None, loadtest: Path | None) -> LoadtestCapacity:
    from computewise.plan.serve import LoadtestCapacity, capacity_from_loadtest

    if (capacity_rps is None) == (loadtest is None):
        raise InputError(
            "give the capacity of one replica with exactly one of --capacity-rps or --loadtest",
            "e.g. --capacity-rps 50, or --loadtest result.json from `computewise loadtest --find-max --json`",
        )
    if capacity_rps is not None:
        if not (capacity_rps > 0 and math.isfinite(capacity_rps)):
            raise InputError(f"--capacity-rps must be positive, got {capacity_rps:g}", "e.g. --capacity-rps 50")
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
    return capacity_from_loadtest(data, str(loadtest))


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
    if not (peak_rps > 0 and math.isfinite(peak_rps)):
        raise InputError(f"--peak-rps must be positive, got {peak_rps:g}", "e.g. --peak-rps 200")
    if mean_rps is None:
        return TrafficProfile(peak_rps, peak_rps), ("--mean-rps not given: the mean is taken as the peak",)
    if not (0 < mean_rps <= peak_rps):
        raise InputError(
            f"--mean-rps must be in (0, --peak-rps = {peak_rps:g}], got {mean_rps:g}",
            "e.g. --peak-rps 200 --mean-rps 60",
        )
    return TrafficProfile(peak_rps, mean_rps), ()


def _price(
    hourly_usd: float | None,
    accelerator: str | None,
    gpus_per_replica: int,
    instance: str | None,
    cloud: str | None,
    region: str | None,
    pricing: str,
    catalog_paths: list[Path] | None,
) -> tuple[float, str]:
    """USD per replica-hour and where it came from: the flag, or a catalog row (with its source and date)."""
    from computewise.units import format_usd

    given = [
        flag
        for flag, value in (("--hourly-usd", hourly_usd), ("--accelerator", accelerator), ("--instance", instance))
        if value is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give the price of one replica with exactly one of --hourly-usd, --accelerator or --instance"
            + (f" (got {', '.join(given)})" if given else ""),
            "e.g. --hourly-usd 1.2, --accelerator l4, or --instance g6.xlarge",
        )
    if gpus_per_replica < 1:
        raise InputError(f"--gpus-per-replica must be at least 1, got {gpus_per_replica}", "e.g. --gpus-per-replica 1")
    if gpus_per_replica != 1 and accelerator is None:
        raise InputError("--gpus-per-replica only applies to --accelerator", "drop it, or price with --accelerator")
    if hourly_usd is not None:
        if not (hourly_usd >= 0 and math.isfinite(hourly_usd)):
            raise InputError(f"--hourly-usd must be >= 0, got {hourly_usd:g}", "e.g. --hourly-usd 1.2")
        return hourly_usd, f"{format_usd(hourly_usd)}/h per replica as given by --hourly-usd"
    from computewise.catalog import load_catalog

    catalog = load_catalog(tuple(catalog_paths or ()))
    kind = choice(pricing, _SERVE_PRICINGS, "--pricing")
    if accelerator is not None:
        return _accelerator_price(catalog, accelerator, gpus_per_replica, kind, cloud, region)
    if instance is None:  # for mypy: exactly one source was given
        raise InputError("--instance is missing", "give --instance NAME")
    return _instance_price(catalog, instance, kind, cloud, region)


def _accelerator_price(
    catalog: Catalog, name: str, gpus: int, pricing: Pricing, cloud: str | None, region: str | None
) -> tuple[float, str]:
    """Replicas pack into instances, so a replica pays its accelerators' share of the cheapest instance."""
    from computewise.catalog import usd_per_accelerator_h
    from computewise.units import format_usd

    slug = catalog.accelerator(name).slug
    offering = catalog.cheapest_offering(slug, pricing, cloud, region)
    per_gpu = None if offering is None else usd_per_accelerator_h(offering, pricing)
    if offering is None or per_gpu is None:
        where = " ".join(x for x in (cloud, region) if x)
        raise InputError(
            f"the catalog sells no {slug} at {pricing} pricing{' in ' + where if where else ''}",
            "give --hourly-usd, or another --pricing, --cloud or --region (`computewise catalog list offerings`)",
        )
    return per_gpu * gpus, (
        f"{gpus} x {slug} at {format_usd(per_gpu)}/GPU-h, the cheapest {pricing} price in the catalog "
        f"({offering.cloud} {offering.instance_type}, {offering.region}; {offering.source}, "
        f"retrieved {offering.retrieved})"
    )


def _instance_price(
    catalog: Catalog, instance: str, pricing: Pricing, cloud: str | None, region: str | None
) -> tuple[float, str]:
    from computewise.units import format_usd

    hourly, offering = catalog.instance_price(instance, pricing, cloud, region)
    return hourly, (
        f"one {offering.cloud} {offering.instance_type} per replica, {pricing} in {offering.region}: "
        f"{format_usd(hourly)}/h ({offering.source}, retrieved {offering.retrieved})"
    )


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{flag} {path}: no such file", "check the path") from None
    except UnicodeDecodeError:
        raise InputError(f"{flag} {path}: not UTF-8 text", "pass a text file (CSV or JSON)") from None
    except OSError as error:
        raise InputError(f"{flag} {path}: {error.strerror or error}", "check the path and its permissions") from None


def _print_plan(d: dict[str, Any], console: Console) -> None:
    """The answer first (replicas, the three bills), then the schedule, then what was assumed."""
    from rich.table import Table

    from computewise.units import format_usd

    cap, traffic, price, replicas = d["capacity"], d["traffic"], d["price"], d["replicas"]
    summary = Table(show_header=False, box=None, title="plan serve", title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        "capacity",
        f"{cap['rps_per_replica']:g} requests/s per replica, planned at {cap['target_utilization']:.0%} "
        f"= {cap['rps_per_replica_at_target']:.3g} requests/s ({cap['source']})",
    )
    summary.add_row("traffic", f"peak {traffic['peak_rps']:g}, mean {traffic['mean_rps']:.3g} requests/s")
    summary.add_row("price", f"{format_usd(price['usd_per_hour_per_replica'])}/h per replica ({price['source']})")
    summary.add_row("replicas", f"{replicas['at_peak']} at peak, {replicas['at_mean']} at mean (min {replicas['min']})")
    console.print(summary)

    modes = Table(title="monthly cost (730 h)", title_justify="left")
    for column in ("mode", "avg replicas", "$/month", "$/1000 requests", "cold starts/month"):
        modes.add_column(column, justify="left" if column == "mode" else "right")
    for mode in d["modes"].values():
        starts = mode["cold_starts_per_month"]
        modes.add_row(
            mode["mode"],
            f"{mode['average_replicas']:.2f}",
            format_usd(mode["monthly_usd"]),
            format_usd(mode["usd_per_1000_requests"]),
            "-" if starts is None else f"{starts:.0f}",
        )
    console.print(modes)
    if d["schedule"]:
        schedule = Table(title="hourly schedule", title_justify="left")
        for column in ("hour", "requests/s", "autoscaled", "scale-to-zero", "utilization"):
            schedule.add_column(column, justify="right")
        for hour in d["schedule"]:
            schedule.add_row(
                str(hour["hour"]),
                f"{hour['rps']:g}",
                str(hour["autoscaled_replicas"]),
                str(hour["scale_to_zero_replicas"]),
                f"{hour['utilization']:.0%}",
            )
        console.print(schedule)
    for note in d["notes"]:
        console.print(f"* {note}", style="dim", highlight=False)
