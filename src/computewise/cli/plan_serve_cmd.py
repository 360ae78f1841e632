"""``computewise plan serve``: replicas, $ per 1000 requests and autoscaler configs for a measured model.

Reads the files (a loadtest result, a traffic CSV), resolves the price of a replica from the flags or
the catalog, hands plain numbers to :func:`computewise.plan.serve.plan_serving` and writes what the
user asked for: JSON or tables, a Kubernetes HPA manifest, a Ray Serve autoscaling config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from computewise.cli.common import CatalogOption, HtmlOption, JsonOption, bounded_float, bounded_int, choice, load
from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.catalog import Catalog
    from computewise.estimate.quote import Quote
    from computewise.plan.serve import HpaMetric, LoadtestCapacity, TrafficProfile

_HPA_METRICS: tuple[HpaMetric, ...] = ("rps", "cpu")


def plan_serve(
    capacity_rps: Annotated[
        float | None,
        typer.Option(
            "--capacity-rps",
            parser=bounded_float("--capacity-rps"),
            help="Requests/s one replica sustains within the latency SLO.",
        ),
    ] = None,
    loadtest: Annotated[
        Path | None,
        typer.Option(
            "--loadtest",
            help="Capacity from a JSON written by `computewise loadtest URL --json` (its throughput_rps) or "
            "`--find-max --json` (its max_rate_rps).",
        ),
    ] = None,
    latency_ms: Annotated[
        float | None,
        typer.Option(
            "--latency-ms",
            parser=bounded_float("--latency-ms"),
            help="Median latency of a request at that load (default: p50 of --loadtest); "
            "sets Ray's target_ongoing_requests by Little's law.",
        ),
    ] = None,
    peak_rps: Annotated[
        float | None,
        typer.Option("--peak-rps", parser=bounded_float("--peak-rps"), help="Peak requests/s of the service."),
    ] = None,
    mean_rps: Annotated[
        float | None,
        typer.Option(
            "--mean-rps", parser=bounded_float("--mean-rps"), help="Mean requests/s over the month (default: the peak)."
        ),
    ] = None,
    traffic: Annotated[
        Path | None,
        typer.Option("--traffic", help="CSV with the header hour,rps and one row per consecutive hour (a day: 24)."),
    ] = None,
    hourly_usd: Annotated[
        float | None,
        typer.Option(
            "--hourly-usd", parser=bounded_float("--hourly-usd"), help="Price of one replica per hour, in USD."
        ),
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(
            "--gpu", "-g", "--accelerator", help="Price a replica as this accelerator at its cheapest catalog price."
        ),
    ] = None,
    gpus_per_replica: Annotated[
        int,
        typer.Option(
            "--gpus-per-replica",
            parser=bounded_int("--gpus-per-replica"),
            help="Accelerators per replica (with --gpu).",
        ),
    ] = 1,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Price a replica as one catalog instance of this type.")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="Catalog prices on this cloud only.")] = None,
    region: Annotated[str | None, typer.Option(help="Catalog prices in this region only.")] = None,
    pricing: Annotated[str, typer.Option(help="on-demand, spot, reserved-1y or reserved-3y.")] = "on-demand",
    target_utilization: Annotated[
        float | None,
        typer.Option(
            "--target-utilization",
            parser=bounded_float("--target-utilization"),
            help="Share of a replica's capacity planned for, in (0, 1] "
            "(default: the catalog's serving_target_utilization).",
        ),
    ] = None,
    min_replicas: Annotated[
        int,
        typer.Option(
            "--min-replicas", parser=bounded_int("--min-replicas"), help="Fewest replicas the autoscaled mode keeps up."
        ),
    ] = 1,
    cold_start_s: Annotated[
        float | None,
        typer.Option(
            "--cold-start-s",
            parser=bounded_float("--cold-start-s"),
            help="Seconds a new replica takes to serve (scale-to-zero; default: the catalog's serving_cold_start_s).",
        ),
    ] = None,
    max_usd_per_hour: Annotated[
        float | None,
        typer.Option(
            "--max-usd-per-hour",
            parser=bounded_float("--max-usd-per-hour"),
            help="Spend cap: never more replicas than this buys; shows the 429s and latency it costs in a surge.",
        ),
    ] = None,
    monthly_usd: Annotated[
        float | None,
        typer.Option(
            "--monthly-usd",
            parser=bounded_float("--monthly-usd"),
            help="With --max-usd-per-hour: the deployment's monthly budget; prints the `budget set` that warns "
            "--alert-lead before it runs out at the cap.",
        ),
    ] = None,
    alert_lead: Annotated[
        str, typer.Option("--alert-lead", help="How long before the budget runs out at the cap to alert: 1d, 12h.")
    ] = "1d",
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
    pipeline: Annotated[
        Path | None,
        typer.Option(
            "--pipeline",
            help="Plan a multi-stage pipeline from a YAML file (stages: model or measured latency, accelerator, "
            "batch, fan_out) at --peak-rps pipeline requests/s.",
        ),
    ] = None,
    catalog_paths: CatalogOption = None,
    cache_hit_ratio: Annotated[
        float | None,
        typer.Option(
            "--cache-hit-ratio",
            parser=bounded_float("--cache-hit-ratio"),
            help="Share of requests a prediction cache answers (serve --cache-size): shows the replicas and "
            "$ it saves.",
        ),
    ] = None,
    as_json: JsonOption = False,
    html: HtmlOption = None,
) -> None:
    """Replicas at peak and mean, $/1000 requests and monthly cost of always-on, autoscaled and scale-to-zero."""
    from computewise.plan.serve import plan_serving

    if pipeline is not None:
        from computewise.cli.plan_pipeline_cmd import run_pipeline_plan

        single = {
            "--capacity-rps": capacity_rps, "--loadtest": loadtest, "--latency-ms": latency_ms, "--mean-rps": mean_rps,
            "--traffic": traffic, "--hourly-usd": hourly_usd, "--gpu": accelerator, "--instance": instance,
            "--max-usd-per-hour": max_usd_per_hour, "--hpa": hpa, "--ray-config": ray_config, "--html": html,
            "--cache-hit-ratio": cache_hit_ratio,
        }  # fmt: skip
        clashing = [flag for flag, value in single.items() if value is not None]
        if clashing:
            raise InputError(
                f"--pipeline plans each stage from its file; {', '.join(clashing)} cannot be added",
                "put capacities, latencies and accelerators in the pipeline's stages, or drop --pipeline",
            )
        run_pipeline_plan(pipeline, peak_rps, target_utilization, pricing, cloud, region, catalog_paths, as_json)
        return

    measured = _capacity(capacity_rps, loadtest)
    latency_s = latency_ms / 1000.0 if latency_ms is not None else measured.latency_s
    profile, traffic_notes = _traffic(peak_rps, mean_rps, traffic)
    catalog, assumptions = load(catalog_paths)
    price = _replica_quote(catalog, hourly_usd, accelerator, gpus_per_replica, instance, cloud, region, pricing)
    plan = plan_serving(
        measured.capacity_rps,
        profile,
        price.hourly_usd,
        target_utilization=assumptions.serving_target_utilization if target_utilization is None else target_utilization,
        min_replicas=min_replicas,
        scale_to_zero_cold_start_s=assumptions.serving_cold_start_s if cold_start_s is None else cold_start_s,
        latency_s=latency_s,
        max_usd_per_hour=max_usd_per_hour,
    )
    # Render both files before writing either, so a bad --name leaves nothing half written.
    outputs: list[tuple[Path, str, str]] = []  # path, text, a file name to suggest for a directory
    if hpa is not None:
        metric = choice(hpa_metric, _HPA_METRICS, "--hpa-metric")
        outputs.append((hpa, plan.hpa_manifest(name, metric=metric, namespace=namespace), "hpa.yaml"))
    if ray_config is not None:
        if not name.strip():
            raise InputError("--name must not be empty", "e.g. --name minilm")
        outputs.append((ray_config, json.dumps(plan.ray_serve_config(name), indent=2) + "\n", "ray.json"))
    data = plan.to_dict()
    data["capacity"]["source"] = measured.description
    data["price"]["source"] = (
        ("one instance per replica: " if instance is not None else "")
        + price.explanation
        + (f" ({price.source}, retrieved {price.retrieved})" if price.offering is not None else "")
    )
    data["notes"] = [*measured.notes, *traffic_notes, *data["notes"]]
    if cache_hit_ratio is not None:
        from computewise.plan.serve_cache import cache_saving, miss_traffic

        cached = plan_serving(
            measured.capacity_rps,
            miss_traffic(profile, cache_hit_ratio),
            price.hourly_usd,
            target_utilization=plan.target_utilization,
            min_replicas=min_replicas,
            scale_to_zero_cold_start_s=plan.cold_start_s,
            latency_s=latency_s,
            max_usd_per_hour=max_usd_per_hour,
        )
        data["cache"] = cache_saving(plan, cached, cache_hit_ratio).to_dict()
        data["notes"].append(
            f"cache: replicas sized for the {1 - cache_hit_ratio:.0%} of requests that miss; a hit still costs the "
            "HTTP layer (the configs written above are for all requests)"
        )
    if monthly_usd is not None:
        if data["spend_cap"] is None:
            raise InputError("--monthly-usd needs --max-usd-per-hour", "add --max-usd-per-hour, or drop --monthly-usd")
        # The capped replicas' price, not the cap itself: spend can never grow faster than what they cost.
        most_usd_per_hour = data["spend_cap"]["max_spend_usd_per_hour"]
        data["spend_cap"]["budget"] = _cap_budget(monthly_usd, most_usd_per_hour, alert_lead, name)
    data["written"] = {"hpa": str(hpa) if hpa else None, "ray_config": str(ray_config) if ray_config else None}
    if html is not None:
        from computewise.report.serve import serve_plan_html

        data["written"]["html"] = str(html)
        outputs.append((html, serve_plan_html(data), "report.html"))
    if outputs:
        from computewise.report.html import write_html  # atomic text write: temporary file, then rename

        for path, text, example in outputs:
            write_html(path, text, example)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from computewise.report.serve import print_serve_plan

        print_serve_plan(data, Console())
        for path, _, _ in outputs:
            Console(stderr=True).print(f"wrote {path}", highlight=False, markup=False, emoji=False)


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


def _cap_budget(monthly_usd: float, max_usd_per_hour: float, alert_lead: str, name: str) -> dict[str, object]:
    """The budget alert that a spend cap makes reliable (``account.budgets.cap_alert``) and the command to set it."""
    from computewise.account.budgets import cap_alert
    from computewise.units import parse_duration_s

    alert = cap_alert(monthly_usd, max_usd_per_hour, parse_duration_s(alert_lead, "--alert-lead"))
    data: dict[str, object] = alert.to_dict()
    scope = f"deployment={name}"
    thresholds = "100" if alert.threshold_pct is None else f"{alert.threshold_pct:g},100"
    data["scope"] = scope
    data["command"] = f"computewise budget set --scope {scope} --monthly-usd {monthly_usd:g} --alert-at {thresholds}"
    data["serve_tag"] = f"--tag {scope}"
    return data


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
