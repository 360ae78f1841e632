"""``computewise grafana-dashboard``: the Grafana dashboard JSON over the Prometheus series of run and serve."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from computewise.dashboard.grafana import DEFAULT_JOB_RUN, DEFAULT_JOB_SERVE


def grafana_dashboard(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the JSON to FILE (replaced atomically) instead of stdout.")
    ] = None,
    datasource_uid: Annotated[
        str | None,
        typer.Option("--datasource-uid", help="Uid of the Grafana Prometheus data source to preselect."),
    ] = None,
    job_run: Annotated[
        str, typer.Option("--job-run", help="Prometheus job_name that scrapes `run --prometheus-port`.")
    ] = DEFAULT_JOB_RUN,
    job_serve: Annotated[
        str, typer.Option("--job-serve", help="Prometheus job_name that scrapes `serve` /metrics.")
    ] = DEFAULT_JOB_SERVE,
) -> None:
    """Print a Grafana dashboard (cost rate, GPUs, idle time, requests, latency, 429s, batches) to import."""
    from computewise.dashboard.grafana import grafana_dashboard as build

    text = json.dumps(build(job_run, job_serve, datasource_uid), indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    from computewise.report.html import write_html

    write_html(out, text, example="dashboard.json")  # any text: a temporary file in the same directory, then os.replace
    Console(stderr=True).print(
        f"wrote {out}: import it in Grafana (Dashboards > New > Import) and pick your Prometheus data source",
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )
