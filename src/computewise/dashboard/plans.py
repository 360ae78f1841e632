"""The Plans page: saved ``computewise plan train --json`` files, one plan's frontier and scaling, two side by side.

Plans are read from ``--plans-dir`` by plain file name only: a name with a slash, a leading dot, or
one that resolves (through a symlink) outside that folder is refused, so a URL can never read
another file on the machine. Each file goes through ``plan.result.Plan.from_dict``, the reader
``submit --plan`` uses, so a file that is not a plan, or was written by a newer computewise, shows
that reader's error and its fix rather than a server error. A plan on the user's own disk is opened
with a file input: a few lines of inline script POST it to ``/api/plans/render``, which answers with
the same view; everything else on the page works without JavaScript.

The charts are the plan report's (``report.html.frontier_svg``, ``scaling_svgs``), so the dashboard
and ``plan train --html`` draw a plan the same way.
"""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import quote, unquote

from computewise.account.periods import iso_utc
from computewise.dashboard.context import DashboardContext
from computewise.dashboard.layout import chart, esc, page
from computewise.errors import InputError
from computewise.report.html import frontier_svg, grid_table, pairs_table, scaling_svgs
from computewise.report.rows import option_grid, recommendation, scaling_grid
from computewise.specs.codec import Document, Jsonable, json_field, json_property
from computewise.specs.document import SCHEMA_VERSION
from computewise.units import format_duration, format_usd

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from computewise.plan.result import Plan

__all__ = [
    "MAX_PLAN_BYTES",
    "PlanFile",
    "PlanSummary",
    "PlansView",
    "list_plans",
    "plan_path",
    "read_plan",
    "read_plan_text",
    "routes",
]

MAX_PLAN_BYTES = 32 * 1024 * 1024  # `plan train --top 0` over the whole catalog writes a few MB; 32 MB is not a plan
MAX_LISTED = 500  # files listed from one folder
_WRITE_HINT = "write it with `computewise plan train ... --json > plan.json`"


@dataclass(frozen=True)
class PlanSummary(Jsonable):
    """What the list shows of a plan: its recommended option, and how many options it weighed."""

    recommended: str
    accelerator: str
    gpus: int = field(metadata=json_field(minimum=0))
    time_s: float
    cost_usd: float
    considered: int = field(metadata=json_field(minimum=0))
    feasible: int = field(metadata=json_field(minimum=0))
    pareto: int = field(metadata=json_field(minimum=0))

    @classmethod
    def of(cls, plan: Plan) -> PlanSummary:
        option = plan.recommended
        return cls(
            recommended=option.label,
            accelerator=option.accelerator,
            gpus=option.gpus,
            time_s=option.time_s,
            cost_usd=option.cost_usd,
            considered=plan.considered,
            feasible=len(plan.candidates),
            pareto=len(plan.pareto),
        )


@dataclass(frozen=True)
class PlanFile(Jsonable):
    """One ``*.json`` file of the plans folder: the plan's summary, or why it could not be read and how to fix that.

    ``modified`` is the file's modification time (UTC, whole seconds); ``summary`` is absent when ``ok`` is not.
    """

    json_constraints: ClassVar[Mapping[str, object]] = {
        "if": {"properties": {"ok": {"const": True}}},
        "then": {"required": ["summary"]},
    }
    name: str
    size_bytes: int = field(metadata=json_field(minimum=0))
    modified: str
    error: str | None = None
    hint: str | None = None
    summary: PlanSummary | None = field(default=None, metadata=json_field(omit_empty=True))

    @json_property(after="modified")
    def ok(self) -> bool:
        return self.summary is not None


@dataclass(frozen=True)
class PlansView(Jsonable):
    """The plans folder (None: the dashboard was started without one) and its files, by name."""

    json_document: ClassVar[Document] = Document(
        "dashboard-plans",
        "dashboard: GET /api/plans",
        "The `plan train --json` files in --plans-dir (dashboard.plans.PlansView, each a PlanFile): each read with "
        "plan.result.Plan.from_dict, or the reader's error and its fix. /api/plans/view?file=NAME answers "
        "{schema_version, name, plan} with the plan-train document.",
    )
    plans_dir: str | None
    plans: tuple[PlanFile, ...]


def read_plan_text(text: str | bytes, source: str) -> Plan:
    """A plan from the text of a ``plan train --json`` file; anything else is an ``InputError`` with its fix."""
    # Imported here: ``computewise.plan`` brings the estimators, a fifth of a second the server's start need not pay.
    from computewise.plan.result import Plan

    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{source} is not JSON ({exc})", _WRITE_HINT) from None
    return Plan.from_dict(data, source)


def plan_path(plans_dir: Path | None, name: str) -> Path:
    """``plans_dir / name`` for a plain file name whose real path stays inside ``plans_dir``; else an ``InputError``."""
    if plans_dir is None:
        raise InputError("no plans folder was given", "start the dashboard with --plans-dir DIR")
    cleaned = name.strip()
    if (
        not cleaned
        or cleaned in {".", ".."}
        or cleaned.startswith(".")
        or any(ch in cleaned for ch in "/\\\0")
        or Path(cleaned).is_absolute()
    ):
        raise InputError(
            f"{name!r} is not a plain file name in the plans folder",
            "pick a plan from the list at /plans (names only, no folders)",
        )
    root = plans_dir.resolve()
    path = root / cleaned
    if path.resolve().parent != root:
        raise InputError(
            f"{cleaned} points outside the plans folder", "copy the plan into the plans folder instead of linking it"
        )
    if not path.is_file():
        raise InputError(f"no plan named {cleaned} in {plans_dir}", "pick a plan from the list at /plans")
    return path


def read_plan(plans_dir: Path | None, name: str) -> Plan:
    path = plan_path(plans_dir, name)
    size = path.stat().st_size
    if size > MAX_PLAN_BYTES:
        raise InputError(f"{path.name} is {size / 1e6:.0f} MB, too big for a plan", _WRITE_HINT)
    return read_plan_text(path.read_bytes(), path.name)


def list_plans(plans_dir: Path) -> tuple[PlanFile, ...]:
    """Every ``*.json`` regular file in ``plans_dir`` (not below it), by name, each read or with its error."""
    root = plans_dir.resolve()
    out: list[PlanFile] = []
    for path in sorted(root.glob("*.json"))[:MAX_LISTED]:
        if path.name.startswith("."):
            continue
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                continue
            plan = read_plan(plans_dir, path.name)
        except InputError as exc:
            out.append(PlanFile(path.name, _size(path), iso_utc(_mtime(path)), exc.message, exc.hint))
        except OSError as exc:
            out.append(PlanFile(path.name, 0, iso_utc(0.0), f"cannot read {path.name}: {exc.strerror}"))
        else:
            out.append(PlanFile(path.name, info.st_size, iso_utc(info.st_mtime), summary=PlanSummary.of(plan)))
    return tuple(out)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# -- HTML -------------------------------------------------------------------------------------


def _frontier(plan: Plan) -> str:
    points = len(plan.candidates) + (len(plan.pareto) if len(plan.pareto) > 1 else 0) + 1
    return chart(frontier_svg(plan), series="plan-frontier", points=points)


def _scaling(plan: Plan) -> str:
    if not plan.scaling:
        return '<p class="muted">No scaling curve in this plan: it found one GPU count for the recommended type.</p>'
    time_svg, efficiency_svg = scaling_svgs(plan.scaling)
    finite = sum(1 for p in plan.scaling if math.isfinite(p.time_s))
    return (
        '<div class="charts">'
        + chart(time_svg, series="plan-scaling", points=finite)
        + chart(efficiency_svg, series="plan-efficiency", points=finite)
        + "</div>"
        + grid_table(scaling_grid(plan.scaling))
    )


def _plan_section(name: str, plan: Plan) -> str:
    """One plan: the recommendation, its frontier, its scaling curve, the frontier's options."""
    return "\n".join(
        [
            f'<section class="plan" data-plan="{esc(name)}">',
            f"<h2>{esc(name)}</h2>",
            f'<p class="muted">{plan.considered} configurations considered, {len(plan.candidates)} feasible '
            f"written, {len(plan.pareto)} on the frontier.</p>",
            '<h3 id="plan-recommended">Recommended</h3>',
            pairs_table(recommendation(plan.recommended), frozenset()),
            "<h3>Cost vs time</h3>",
            _frontier(plan),
            "<h3>Scaling of the recommended instance type</h3>",
            _scaling(plan),
            "<h3>Frontier (fastest first)</h3>",
            grid_table(option_grid(plan.pareto)),
            "</section>",
        ]
    )


_OPEN_SCRIPT = """
<script>
(function () {
  var input = document.getElementById("plan-file");
  var out = document.getElementById("plan-rendered");
  input.addEventListener("change", function () {
    var file = input.files[0];
    if (!file) { return; }
    file.text().then(function (body) {
      return fetch("/api/plans/render", {method: "POST", credentials: "same-origin", body: body,
        headers: {"Content-Type": "application/json", "X-Plan-Name": encodeURIComponent(file.name)}});
    }).then(function (response) { return response.json(); }).then(function (data) {
      out.textContent = "";
      if (data.html) { out.innerHTML = data.html; return; }
      var box = document.createElement("div");
      box.className = "error"; box.id = "plan-error";
      box.textContent = "error: " + data.error + (data.hint ? "  To fix: " + data.hint : "");
      out.appendChild(box);
    });
  });
})();
</script>
""".strip()


def _list_html(context: DashboardContext, files: Sequence[PlanFile]) -> str:
    if context.plans_dir is None:
        listing = (
            '<div id="plans-list"><p>No plans folder. Save plans with '
            "<code>computewise plan train ... --json &gt; plans/NAME.json</code> and start the dashboard with "
            "<code>--plans-dir plans</code>; or open one file below.</p></div>"
        )
    elif not files:
        listing = (
            f'<div id="plans-list"><p>No <code>*.json</code> files in {esc(context.plans_dir)} yet: '
            f"<code>computewise plan train ... --json &gt; {esc(context.plans_dir)}/NAME.json</code></p></div>"
        )
    else:
        rows = []
        for f in files:
            link = quote(f.name)
            s = f.summary
            if s is not None:
                rows.append(
                    f'<tr data-plan="{esc(f.name)}"><td><a href="/plans/view?file={esc(link)}">{esc(f.name)}</a></td>'
                    f"<td>{esc(s.recommended)}</td><td class=num>{s.gpus}</td>"
                    f"<td class=num>{esc(format_duration(s.time_s))}</td>"
                    f"<td class=num>{esc(format_usd(s.cost_usd))}</td><td class=num>{s.pareto}</td></tr>"
                )
            else:
                hint = f"<br><strong>To fix:</strong> {esc(f.hint)}" if f.hint else ""
                rows.append(
                    f'<tr data-plan="{esc(f.name)}" data-error="1"><td>{esc(f.name)}</td>'
                    f'<td colspan="5" class="plan-error" style="color:var(--bad)"><strong>error:</strong> '
                    f"{esc(f.error)}{hint}</td></tr>"
                )
        readable = [f.name for f in files if f.ok]

        def options(selected: int) -> str:
            return "".join(
                f'<option value="{esc(name)}"{" selected" if i == selected else ""}>{esc(name)}</option>'
                for i, name in enumerate(readable)
            )

        listing = (
            f'<p class="muted">Plans in {esc(context.plans_dir)}.</p>'
            '<div class="wide"><table id="plans-list"><thead><tr><th>file</th><th>recommended</th>'
            "<th class=num>GPUs</th><th class=num>time</th><th class=num>cost</th><th class=num>frontier</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            '<form id="plan-compare-form" class="filters" method="get" action="/plans/compare">'
            f'<label>plan A<select name="a">{options(0)}</select></label>'
            f'<label>plan B<select name="b">{options(1)}</select></label>'
            "<button type=submit>Compare side by side</button></form>"
        )
    return "\n".join(
        [
            "<h1>Plans</h1>",
            listing,
            "<h2>Open a plan from your disk</h2>",
            '<form id="plan-open" onsubmit="return false"><label>A <code>plan train --json</code> file '
            '<input type="file" id="plan-file" accept=".json,application/json"></label></form>',
            "<noscript><p>Opening a file from your disk needs JavaScript; plans in the plans folder open "
            "without it.</p></noscript>",
            '<div id="plan-rendered"></div>',
            _OPEN_SCRIPT,
        ]
    )


_COMPARED = (
    ("hardware", lambda p: p.recommended.label, None),
    ("GPUs", lambda p: p.recommended.gpus, None),
    ("time", lambda p: p.recommended.time_s, format_duration),
    ("cost", lambda p: p.recommended.cost_usd, format_usd),
    ("USD per hour", lambda p: p.recommended.usd_per_h, format_usd),
    ("energy (kWh)", lambda p: p.recommended.energy_kwh, lambda v: "not available" if v is None else f"{v:,.1f}"),
    ("CO2 (kg)", lambda p: p.recommended.co2_kg, lambda v: "not available" if v is None else f"{v:,.1f}"),
    ("MFU", lambda p: p.recommended.mfu, lambda v: f"{v:.0%}"),
    ("configurations considered", lambda p: p.considered, None),
    ("on the frontier", lambda p: len(p.pareto), None),
)


# Two equal columns that never wrap under each other; wide tables scroll inside their column.
_SIDE_BY_SIDE = '<div class="side-by-side" style="display:grid;grid-template-columns:1fr 1fr;gap:1.5rem">'


def _compare_html(a_name: str, a: Plan, b_name: str, b: Plan) -> str:
    rows = []
    for label, value, fmt in _COMPARED:
        va, vb = value(a), value(b)
        ratio = f"{vb / va:.2f}x" if isinstance(va, int | float) and isinstance(vb, int | float) and va else ""
        shown_a, shown_b = (fmt(va), fmt(vb)) if fmt else (str(va), str(vb))
        rows.append(
            f"<tr><th>{esc(label)}</th><td>{esc(shown_a)}</td><td>{esc(shown_b)}</td><td class=num>{ratio}</td></tr>"
        )
    table = (
        f'<table id="plan-compare-table"><thead><tr><th>recommended</th><th>{esc(a_name)}</th><th>{esc(b_name)}</th>'
        f"<th class=num>B / A</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return (
        '<div id="plan-compare"><h1>Compare plans</h1>'
        + table
        + _SIDE_BY_SIDE
        + f'<div style="min-width:0">{_plan_section(a_name, a)}</div>'
        + f'<div style="min-width:0">{_plan_section(b_name, b)}</div>'
        + "</div></div>"
    )


# -- handlers ---------------------------------------------------------------------------------


def _context(request: Request) -> DashboardContext:
    context: DashboardContext = request.app.state.context
    return context


def _files(context: DashboardContext) -> tuple[PlanFile, ...]:
    return () if context.plans_dir is None else list_plans(context.plans_dir)


def _param(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None or not value.strip():
        raise InputError(f"no {name}= given", f"name a plan file from /plans, e.g. /plans/view?{name}=plan.json")
    return value


async def _list_page(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    context = _context(request)
    files = await run_in_threadpool(_files, context)
    return HTMLResponse(page("Plans", _list_html(context, files), active="plans"))


async def _list_api(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    context = _context(request)
    files = await run_in_threadpool(_files, context)
    plans_dir = None if context.plans_dir is None else str(context.plans_dir)
    return JSONResponse(PlansView(plans_dir, files).to_dict())


async def _view_page(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    name = _param(request, "file")
    plan = await run_in_threadpool(read_plan, _context(request).plans_dir, name)
    body = f'<p><a href="/plans">All plans</a></p>{_plan_section(name, plan)}'
    return HTMLResponse(page(f"Plan {name}", body, active="plans"))


async def _view_api(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    name = _param(request, "file")
    plan = await run_in_threadpool(read_plan, _context(request).plans_dir, name)
    return JSONResponse({"schema_version": SCHEMA_VERSION, "name": name, "plan": plan.to_dict()})


async def _compare_page(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    a_name, b_name = _param(request, "a"), _param(request, "b")
    plans_dir = _context(request).plans_dir
    a = await run_in_threadpool(read_plan, plans_dir, a_name)
    b = await run_in_threadpool(read_plan, plans_dir, b_name)
    return HTMLResponse(page("Compare plans", _compare_html(a_name, a, b_name, b), active="plans"))


async def _compare_api(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    a_name, b_name = _param(request, "a"), _param(request, "b")
    plans_dir = _context(request).plans_dir
    a = await run_in_threadpool(read_plan, plans_dir, a_name)
    b = await run_in_threadpool(read_plan, plans_dir, b_name)
    return JSONResponse(
        {
            "schema_version": SCHEMA_VERSION,
            "a": {"name": a_name, "plan": a.to_dict()},
            "b": {"name": b_name, "plan": b.to_dict()},
        }
    )


async def _render_api(request: Request) -> Response:
    """A plan the user opened from their disk: the body is the file, the answer the same view as a saved plan."""
    from starlette.responses import JSONResponse

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_PLAN_BYTES:
        raise InputError(f"the plan is {int(declared) / 1e6:.0f} MB, too big for a plan", _WRITE_HINT)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > MAX_PLAN_BYTES:
            raise InputError(f"the plan is over {MAX_PLAN_BYTES // 2**20} MiB, too big for a plan", _WRITE_HINT)
        chunks.append(chunk)
    name = unquote(request.headers.get("x-plan-name", "")).strip()[:255] or "the uploaded plan"
    plan = read_plan_text(b"".join(chunks), name)
    return JSONResponse(
        {
            "schema_version": SCHEMA_VERSION,
            "name": name,
            "summary": PlanSummary.of(plan).to_dict(),
            "html": _plan_section(name, plan),
        }
    )


def routes() -> list[BaseRoute]:
    """``/plans``, ``/plans/view``, ``/plans/compare`` and their ``/api`` documents; ``POST /api/plans/render``."""
    from starlette.routing import Route

    return [
        Route("/plans", _list_page, methods=["GET"]),
        Route("/api/plans", _list_api, methods=["GET"]),
        Route("/plans/view", _view_page, methods=["GET"]),
        Route("/api/plans/view", _view_api, methods=["GET"]),
        Route("/plans/compare", _compare_page, methods=["GET"]),
        Route("/api/plans/compare", _compare_api, methods=["GET"]),
        Route("/api/plans/render", _render_api, methods=["POST"]),
    ]
