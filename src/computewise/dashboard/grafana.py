"""A Grafana dashboard over the Prometheus series of ``computewise run`` and ``computewise serve``.

The panels are data (``Panel``: a title, a unit and PromQL queries) and ``grafana_dashboard``
lays them out as Grafana's dashboard JSON model, so the list of expressions that a test evaluates
against a real Prometheus is the list a user imports: there is no second copy to drift.

Series come from two exporters, told apart by Prometheus' ``job`` label, which the scrape config
sets (``job_name``) and the dashboard matches: ``run --prometheus-port`` (``monitor.prometheus``:
cost, idle seconds, GPU gauges, one ``run_id`` label per run) and ``serve``'s ``/metrics``
(``serve.metrics``: requests by status, latency, batch size and queue histograms). Counters are
read through ``rate()`` over Grafana's ``$__rate_interval`` (at least four scrape intervals, so a
rate always has samples to work with) and 1 s gauges through ``avg_over_time``/``max_over_time``
over the same window, so a wide time range neither drops spikes nor aliases them.

Every panel reads from the dashboard's ``datasource`` variable (type Prometheus), so the JSON
imports into any Grafana whatever its data source is called; ``datasource_uid`` preselects one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from computewise.errors import InputError

__all__ = [
    "DEFAULT_JOB_RUN",
    "DEFAULT_JOB_SERVE",
    "SCHEMA_VERSION",
    "Panel",
    "Query",
    "Section",
    "dashboard_sections",
    "grafana_dashboard",
]

DEFAULT_JOB_RUN = "computewise-run"
DEFAULT_JOB_SERVE = "computewise-serve"
SCHEMA_VERSION = 39
"""Grafana's dashboard model version: 39 is Grafana 10.4 and 11.x; newer Grafanas migrate it on import."""

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_GRID_WIDTH = 24  # Grafana's grid is 24 columns wide
_PANEL_HEIGHT = 8  # grid rows of 30 px: one height for all, so no panel floats up into a gap
_UID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,40}")  # Grafana's rule for a uid
_RATE = "$__rate_interval"

PanelKind = Literal["timeseries", "stat"]


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a panel and the legend of its series (``{{label}}`` placeholders)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """A chart (``timeseries``) or a single number (``stat``) in Grafana's ``unit`` (``s``, ``watt``, ...)."""

    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: PanelKind = "timeseries"
    width: int = 12
    max_value: float | None = None


@dataclass(frozen=True)
class Section:
    """A row of the dashboard: one exporter's panels under a heading."""

    title: str
    panels: tuple[Panel, ...]


def dashboard_sections(job_run: str = DEFAULT_JOB_RUN, job_serve: str = DEFAULT_JOB_SERVE) -> tuple[Section, ...]:
    """The panels, with ``job`` matchers for the scrape jobs of ``run`` and of ``serve``."""
    return (_run_section(_job(job_run, "--job-run")), _serve_section(_job(job_serve, "--job-serve")))


def grafana_dashboard(
    job_run: str = DEFAULT_JOB_RUN, job_serve: str = DEFAULT_JOB_SERVE, datasource_uid: str | None = None
) -> dict[str, Any]:
    """Grafana's dashboard JSON model of ``dashboard_sections``, ready for Dashboards > Import."""
    if datasource_uid is not None and not _UID_PATTERN.fullmatch(datasource_uid):
        raise InputError(
            f"--datasource-uid {datasource_uid!r} is not a Grafana uid",
            "use up to 40 letters, digits, '-' or '_' (Connections > Data sources > your Prometheus: the uid "
            "is the last part of its URL), or leave it out and pick the data source after import",
        )
    panels: list[dict[str, Any]] = []
    y = 0
    for section in dashboard_sections(job_run, job_serve):
        panels.append(_row(len(panels) + 1, section.title, y))
        y += 1
        x = 0
        for panel in section.panels:
            if x + panel.width > _GRID_WIDTH:  # next line of the grid
                x, y = 0, y + _PANEL_HEIGHT
            grid = {"h": _PANEL_HEIGHT, "w": panel.width, "x": x, "y": y}
            panels.append(_panel(len(panels) + 1, panel, grid))
            x += panel.width
        y += _PANEL_HEIGHT
    return {
        "id": None,
        "uid": "computewise",
        "title": "computewise: cost, GPUs and serving",
        "description": "Series of `computewise run --prometheus-port PORT -- CMD` and `computewise serve` /metrics.",
        "tags": ["computewise", "gpu", "cost"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [_datasource_variable(datasource_uid)]},
        "panels": panels,
    }


# -- the panels ---------------------------------------------------------------------------------


def _run_section(job: str) -> Section:
    def sel(metric: str) -> str:
        return f"{metric}{{{job}}}"

    per_run = "run {{run_id}}"
    per_gpu = "run {{run_id}} GPU {{gpu}}"
    idle_share = f"rate({sel('computewise_idle_seconds_total')}[{_RATE}])"
    return Section(
        "Jobs watched by computewise run",
        (
            Panel(
                "Cost rate ($/h)",
                "What each run costs per hour at its snapshot price (rate of the cost counter x 3600), and the "
                "part of it spent while the job was idle (idle share x hourly price).",
                "currencyUSD",
                (
                    Query(f"sum by (run_id) (rate({sel('computewise_cost_usd_total')}[{_RATE}])) * 3600", per_run),
                    Query(
                        f"sum by (run_id) ({idle_share} * on (job, instance, run_id) "
                        f"{sel('computewise_hourly_price_usd')})",
                        "run {{run_id}} while idle",
                    ),
                ),
            ),
            Panel(
                "Spend so far",
                "Cost of each run since it started, at its hourly price.",
                "currencyUSD",
                (Query(f"sum by (run_id) ({sel('computewise_cost_usd_total')})", per_run),),
                kind="stat",
                width=6,
            ),
            Panel(
                "Idle so far",
                "Seconds of samples judged idle (GPU, or without one the job, doing nothing).",
                "s",
                (Query(f"sum by (run_id) ({sel('computewise_idle_seconds_total')})", per_run),),
                kind="stat",
                width=6,
            ),
            Panel(
                "GPU utilization",
                "Share of each sample period in which a kernel ran (NVML): busy, not necessarily useful.",
                "percent",
                (Query(f"avg_over_time({sel('computewise_gpu_utilization_percent')}[{_RATE}])", per_gpu),),
                max_value=100.0,
            ),
            Panel(
                "GPU power",
                "Board power of each GPU, and the job's whole draw from its energy counter (GPU, or a CPU "
                "estimate without one).",
                "watt",
                (
                    Query(f"avg_over_time({sel('computewise_gpu_power_watts')}[{_RATE}])", per_gpu),
                    Query(
                        f"sum by (run_id) (rate({sel('computewise_energy_joules_total')}[{_RATE}]))",
                        "run {{run_id}} total",
                    ),
                ),
            ),
            Panel(
                "Idle time",
                "Share of the time each run was idle: the waste behind the idle part of the cost rate.",
                "percentunit",
                (Query(f"sum by (run_id) ({idle_share})", per_run),),
                max_value=1.0,
            ),
            Panel(
                "GPU memory",
                "Memory in use on each GPU, and the part held by the job's processes.",
                "bytes",
                (
                    Query(f"max_over_time({sel('computewise_gpu_memory_used_bytes')}[{_RATE}])", per_gpu),
                    Query(
                        f"max_over_time({sel('computewise_gpu_process_memory_bytes')}[{_RATE}])",
                        "run {{run_id}} GPU {{gpu}} (job)",
                    ),
                ),
            ),
        ),
    )


def _serve_section(job: str) -> Section:
    def sel(metric: str, *labels: str) -> str:
        return f"{metric}{{{','.join((job, *labels))}}}"

    def per_s(metric: str, *labels: str) -> str:
        return f"rate({sel(metric, *labels)}[{_RATE}])"

    def quantile(q: float, histogram: str, *labels: str, legend: str | None = None) -> Query:
        expr = f"histogram_quantile({q}, sum by (le) ({per_s(f'{histogram}_bucket', *labels)}))"
        return Query(expr, legend if legend is not None else f"p{q * 100:g}")

    latency = "computewise_serve_request_duration_seconds"
    return Section(
        "Model servers (computewise serve)",
        (
            Panel(
                "Request rate",
                "Inference requests answered per second by HTTP status, and the inputs answered with an output.",
                "reqps",
                (
                    Query(f"sum by (code) ({per_s('computewise_serve_requests_total')})", "{{code}}"),
                    Query(f"sum({per_s('computewise_serve_inferences_total')})", "inferences"),
                ),
            ),
            Panel(
                "Latency percentiles (answered 200)",
                "Arrival to answer of the requests served, all servers together; refusals are answered at once "
                "and left out so they do not flatter the percentiles.",
                "s",
                tuple(quantile(q, latency, 'code="200"') for q in (0.5, 0.9, 0.99)),
            ),
            Panel(
                "Refused (429) and failed (5xx)",
                "Requests refused because the queue was full (back-pressure) or the SLO could not be met, and "
                "requests that failed (model error, timeout).",
                "reqps",
                (
                    Query(f"sum({per_s('computewise_serve_rejections_total')})", "429"),
                    Query(f"sum({per_s('computewise_serve_errors_total')})", "5xx"),
                ),
            ),
            Panel(
                "Share refused (429)",
                "Refused requests over all answered inference requests, over the rate window.",
                "percentunit",
                (
                    Query(
                        f"sum({per_s('computewise_serve_rejections_total')}) / "
                        f"sum({per_s('computewise_serve_requests_total')})",
                        "refused",
                    ),
                ),
                kind="stat",
                width=12,
            ),
            Panel(
                "Batch size",
                "Inputs per model call: the mean, and the 90th percentile of the batch-size histogram.",
                "short",
                (
                    Query(
                        f"sum({per_s('computewise_serve_batch_size_sum')}) / "
                        f"sum({per_s('computewise_serve_batch_size_count')})",
                        "mean",
                    ),
                    quantile(0.9, "computewise_serve_batch_size"),
                ),
            ),
            Panel(
                "Queue depth",
                "Most inputs waiting for a worker in each server over the window (sampled at each scrape).",
                "short",
                (
                    Query(
                        f"max by (instance) (max_over_time({sel('computewise_serve_queue_depth')}[{_RATE}]))",
                        "{{instance}}",
                    ),
                ),
            ),
            Panel(
                "Where the time goes (p99)",
                "Waiting in the queue for a batch vs the model call itself, 99th percentiles.",
                "s",
                (
                    quantile(0.99, "computewise_serve_queue_wait_seconds", legend="queue wait"),
                    quantile(0.99, "computewise_serve_compute_seconds", legend="model call"),
                ),
            ),
        ),
    )


# -- Grafana's model --------------------------------------------------------------------------


def _job(name: str, flag: str) -> str:
    """The PromQL matcher ``job="name"``, with the string escaped as PromQL (Go) string literals are."""
    if not name.strip():
        raise InputError(
            f"{flag} must name a Prometheus job", f"e.g. {flag} computewise (the job_name it is scraped as)"
        )
    escaped = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'job="{escaped}"'


def _datasource_variable(uid: str | None) -> dict[str, Any]:
    current = {} if uid is None else {"selected": True, "text": uid, "value": uid}
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": current,
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def _row(panel_id: int, title: str, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": _GRID_WIDTH, "x": 0, "y": y},
        "panels": [],
    }


def _panel(panel_id: int, panel: Panel, grid: dict[str, int]) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.max_value is not None:
        defaults.update(min=0, max=panel.max_value)
    options: dict[str, Any]
    if panel.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    else:
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": _DATASOURCE,
                "editorMode": "code",
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
            }
            for index, query in enumerate(panel.queries)
        ],
    }
