"""One run's page (``/runs/{id}``), its JSON (``/api/runs/{id}``) and its live stream (``/api/runs/{id}/events``).

The page is ``computewise runs show ID`` in a browser: status, cost, the price charged and why (the
ledger's price snapshot), the diagnosis, steps and MFU from ``track()``, the attempts of a resubmitted
run, and charts of CPU, memory, power, cost and each GPU over time, at most ``views.MAX_POINTS``
points each.

A running run updates in place: a few lines of inline script open an ``EventSource`` on the events
URL, which sends ``update`` whenever new samples or a new status land (polled from the ledger every
``POLL_S``) and ``end`` once the run is over; on each the script fetches the page again and swaps
the ``<main>`` element, so the page never reloads and without JavaScript it is simply static. The
stream ends when the run ends, when its monitor falls silent (``views.RunProgress``), or when the
client goes away (Starlette cancels the generator on disconnect).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from computewise.account.interruptions import InterruptionCost
from computewise.account.periods import iso_utc
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import chart, esc, page
from computewise.dashboard.responses import error_response
from computewise.dashboard.views import RunProgress, RunView, run_progress, run_view
from computewise.errors import InputError
from computewise.report.attempts import interruption_line
from computewise.report.svg import PALETTE, Axis, Series, xy_chart
from computewise.units import format_bytes, format_duration, format_usd

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = ["POLL_S", "routes", "run_html"]

POLL_S = 1.0  # the sampler flushes about once a second: polling faster finds nothing new
KEEPALIVE_S = 15.0


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/runs/{run_id:int}", _page),
        Route("/api/runs/{run_id:int}", _api),
        Route("/api/runs/{run_id:int}/events", _events),
    ]


async def _load(request: Request) -> RunView | Response:
    from starlette.concurrency import run_in_threadpool

    context: DashboardContext = request.app.state.context
    run_id: int = request.path_params["run_id"]
    try:
        return await run_in_threadpool(run_view, context.ledger, context.catalog(), run_id, context.clock())
    except InputError as exc:  # the one InputError here: no such run
        return error_response(request, 404, exc.message, exc.hint, "not-found")


async def _api(request: Request) -> Response:
    from starlette.responses import JSONResponse, Response

    view = await _load(request)
    return view if isinstance(view, Response) else JSONResponse(view.to_dict())


async def _page(request: Request) -> Response:
    from starlette.responses import HTMLResponse, Response

    view = await _load(request)
    if isinstance(view, Response):
        return view
    return HTMLResponse(page(f"run {view.run.id}", run_html(view), active="runs"))


async def _events(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import StreamingResponse

    context: DashboardContext = request.app.state.context
    run_id: int = request.path_params["run_id"]
    try:
        first = await run_in_threadpool(run_progress, context.ledger, run_id, context.clock())
    except InputError as exc:
        return error_response(request, 404, exc.message, exc.hint, "not-found")

    async def stream() -> AsyncIterator[str]:
        progress: RunProgress = first
        yield _event("update", progress.to_dict())
        quiet_s = 0.0
        while not progress.over:
            await asyncio.sleep(POLL_S)
            latest = await run_in_threadpool(run_progress, context.ledger, run_id, context.clock())
            quiet_s += POLL_S
            if latest != progress:
                progress, quiet_s = latest, 0.0
                if not progress.over:
                    yield _event("update", progress.to_dict())
            elif quiet_s >= KEEPALIVE_S:
                quiet_s = 0.0
                yield ": still running\n\n"  # a comment: keeps proxies from closing an idle stream
        yield _event("end", progress.to_dict())

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


# -- HTML ---------------------------------------------------------------------------------------

_LIVE_SCRIPT = """<script>
(function () {
  var source = new EventSource(%s);
  function refresh() {
    fetch(location.pathname + location.search, {credentials: "same-origin"})
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) { main.innerHTML = fresh.innerHTML; }
      });
  }
  source.addEventListener("update", refresh);
  source.addEventListener("end", function () { source.close(); refresh(); });
})();
</script>"""


def _seconds_axis() -> Axis:
    return Axis("time since start", format_duration)


def _line_chart(title: str, name: str, points: tuple[tuple[float, float], ...], y: Axis, color: str) -> str:
    svg = xy_chart(
        title, [Series("", points, color, line=True, radius=0 if len(points) > 1 else 3.5)], _seconds_axis(), y
    )
    return chart(svg, series=name, points=len(points)) if svg else ""


def _charts(view: RunView) -> str:
    percent = Axis("percent", lambda v: f"{v:.0f} %")
    series = view.series
    parts = [
        _line_chart("CPU (100 % = one core)", "cpu", series.get("cpu", ()), percent, PALETTE[1]),
        _line_chart(
            "memory (process tree RSS, peak)",
            "memory",
            series.get("memory", ()),
            Axis("bytes", format_bytes),
            PALETTE[2],
        ),
        _line_chart(
            "power (energy / time)", "power", series.get("power", ()), Axis("watts", lambda v: f"{v:.3g} W"), PALETTE[4]
        ),
        _line_chart("cost so far", "cost", series.get("cost", ()), Axis("USD", format_usd), PALETTE[3]),
    ]
    gpus = sorted({int(name[3:].split("-")[0]) for name in series if name.startswith("gpu")})
    for gpu in gpus:
        util, memory = series.get(f"gpu{gpu}-util", ()), series.get(f"gpu{gpu}-memory", ())
        parts.append(_line_chart(f"GPU {gpu} utilization", f"gpu{gpu}-util", util, percent, PALETTE[0]))
        parts.append(
            _line_chart(f"GPU {gpu} memory used", f"gpu{gpu}-memory", memory, Axis("bytes", format_bytes), PALETTE[5])
        )
    drawn = "".join(part for part in parts if part)
    if not drawn:
        return '<h2>Over time</h2><p class="muted" id="no-samples">No samples recorded yet.</p>'
    note = f'<p class="muted">each point averages {esc(format_duration(view.bucket_s))} of samples</p>'
    return f'<h2>Over time</h2>{note}<div class="charts">{drawn}</div>'


def _pairs(rows: list[tuple[str, str]], table_id: str = "") -> str:
    ident = f' id="{table_id}"' if table_id else ""
    body = "".join(f"<tr><th>{esc(label)}</th><td>{esc(value)}</td></tr>" for label, value in rows if value != "")
    return f"<table{ident}><tbody>{body}</tbody></table>"


def _price(d: dict[str, Any]) -> str:
    price = d["price"]
    where = " ".join(str(price[k]) for k in ("cloud", "instance_type", "pricing", "region") if price.get(k))
    rows = [
        ("price", f"{format_usd(price['hourly_usd'])} per hour"),
        ("why", price["explanation"]),
        ("offering", where),
        ("source", price["source"] + (f" (retrieved {price['retrieved']})" if price.get("retrieved") else "")),
        ("assumed", "yes: no exact match in the catalog, so this is an assumption" if price["assumed"] else ""),
        ("carbon", f"{price['carbon_g_per_kwh']:.0f} gCO2/kWh ({price['carbon_source']}); PUE {price['pue']:.2f}"),
    ]
    return f'<section id="price"><h2>Price charged</h2>{_pairs(rows)}</section>'


def _diagnosis(d: dict[str, Any]) -> str:
    findings = "".join(
        f"<li><strong>{esc(f['verdict'])}</strong>: {esc(f['evidence'])}<br>"
        f'<span class="muted">→ {esc(f["advice"])}</span></li>'
        for f in d["diagnosis"]
    )
    idle = f"<p>{esc(d['idle_text'])}</p>" if d["idle_text"] else ""
    body = f"<ul>{findings}</ul>{idle}" if findings or idle else '<p class="muted">Nothing to report yet.</p>'
    return f'<section id="diagnosis"><h2>Diagnosis</h2>{body}</section>'


def _steps(d: dict[str, Any], track: dict[str, Any] | None) -> str:
    steps = d["steps"]
    if not steps and not track:
        body = (
            '<p class="muted">No steps recorded. Wrap the training loop with <code>computewise.track()</code> to see '
            "data wait against compute per step, throughput and MFU.</p>"
        )
        return f'<section id="steps"><h2>Steps</h2>{body}</section>'
    rows: list[tuple[str, str]] = []
    if steps:
        share = steps["data_wait_share"]
        rows += [
            ("steps", f"{steps['steps']:,}"),
            ("data wait", f"{format_duration(steps['data_wait_s'])}" + ("" if share is None else f" ({share:.0%})")),
            ("compute", format_duration(steps["compute_s"])),
            ("samples/s", "" if steps["samples_per_s"] is None else f"{steps['samples_per_s']:,.1f}"),
            ("tokens/s", "" if steps["tokens_per_s"] is None else f"{steps['tokens_per_s']:,.0f}"),
        ]
    if track:
        mfu = track.get("mfu")
        rows += [
            ("MFU", "n/a" if mfu is None else f"{mfu:.1%}"),
            ("MFU basis", str(track.get("mfu_note") or "")),
            ("step time p50 / p95", _p50_p95(track)),
            ("track() says", str(track.get("diagnosis") or "")),
        ]
    return f'<section id="steps"><h2>Steps</h2>{_pairs(rows)}</section>'


def _p50_p95(track: dict[str, Any]) -> str:
    p50, p95 = track.get("step_time_p50_s"), track.get("step_time_p95_s")
    return "" if p50 is None or p95 is None else f"{format_duration(p50)} / {format_duration(p95)}"


def _attempts(d: dict[str, Any]) -> str:
    attempts = d["attempts"]
    if not attempts:
        return '<section id="attempts"><h2>Attempts</h2><p class="muted">One attempt: never resubmitted.</p></section>'
    rows = "".join(
        f"<tr><td>{a['number']}</td><td>{esc(a['backend'])}</td><td><code>{esc(a['job_id'])}</code></td>"
        f"<td>{esc(iso_utc(a['started_at_s']))}</td>"
        f"<td>{esc('' if a['ended_at_s'] is None else format_duration(a['ended_at_s'] - a['started_at_s']))}</td>"
        f"<td>{esc(a['outcome'])}</td><td>{esc('' if a['exit_code'] is None else a['exit_code'])}</td></tr>"
        for a in attempts
    )
    extra = d.get("interruption")
    note = f"<p>Interruptions: {esc(interruption_line(InterruptionCost(**extra)))}</p>" if extra else ""
    return (
        '<section id="attempts"><h2>Attempts</h2><table><thead><tr><th>#</th><th>backend</th><th>job</th>'
        "<th>started (UTC)</th><th>lasted</th><th>outcome</th><th>exit</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>{note}</section>"
    )


def _card(label: str, value: str, note: str, element_id: str) -> str:
    ident = f' id="{element_id}"' if element_id else ""
    foot = f'<div class="muted">{esc(note)}</div>' if note else ""
    value_html = f'<div class="value"{ident}>{esc(value)}</div>'
    return f'<div class="card"><div class="muted">{esc(label)}</div>{value_html}{foot}</div>'


def run_html(view: RunView) -> str:
    d = view.to_dict()
    run = d["run"]
    tags = " ".join(f"{k}={v}" for k, v in sorted(run["tags"].items()))
    exit_text = "" if run["exit_code"] is None else f" (exit {run['exit_code']})"
    gpu = f"{run['gpu_count']} x {run['gpu_name'] or run['accelerator'] or 'GPU'}" if run["gpu_count"] else "no GPU"
    head = (
        f'<h1>Run {run["id"]}: <span id="run-status" class="{esc(run["status"])}">{esc(run["status"])}</span>'
        f"{esc(exit_text)}</h1>"
        f"<p><code>{esc(run['command'])}</code></p>"
        f'<p class="muted">{esc(run["kind"])} on {esc(run["host"])} · {esc(gpu)} · started '
        f"{esc(iso_utc(run['started_at_s']))}{' · ' + esc(tags) if tags else ''}</p>"
    )
    if run["error"]:
        head += f'<p class="bad">{esc(run["error"])}</p>'
    live = view.live
    if live:
        head += '<p class="running" id="live-note">live: this page updates as samples arrive</p>'
    cards = (
        '<div class="cards">'
        + "".join(
            [
                _card("duration", format_duration(d["duration_s"]), "", ""),
                _card("cost", format_usd(d["cost_usd"]), "", "run-cost"),
                _card("GPU-hours", f"{d['gpu_hours']:,.2f}", "", ""),
                _card("energy", f"{d['energy_kwh']:.3f} kWh", d["energy_basis"], ""),
                _card("samples", str(view.sample_count), "", "sample-count"),
            ]
        )
        + "</div>"
    )
    body = head + cards + _price(d) + _diagnosis(d) + _charts(view) + _steps(d, view.track) + _attempts(d)
    if live:
        body += _LIVE_SCRIPT % json.dumps(f"/api/runs/{run['id']}/events")
    return body
