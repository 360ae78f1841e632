"""The frame of every dashboard page: one HTML document with inline CSS, no script library, no network.

Pages must open on an air-gapped machine and work without JavaScript, so the styles are inline and
the charts are inline SVG from :mod:`computewise.report.svg`; only a live run page adds a few lines
of inline script. Every value put into HTML goes through :func:`esc`.
"""

from __future__ import annotations

from html import escape

from computewise import __version__
from computewise.report.html import document

__all__ = ["NAV", "chart", "error_page", "esc", "page"]

# (data-nav name, href, label): the order of the nav bar.
NAV = (
    ("overview", "/", "Overview"),
    ("runs", "/runs", "Runs"),
    ("costs", "/costs", "Costs"),
    ("budgets", "/budgets", "Budgets"),
    ("plans", "/plans", "Plans"),
)

_CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --bg: #ffffff; --muted: #656d76; --line: #d0d7de;
  --panel: #f6f8fa; --accent: #0969da; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6edf3; --bg: #0d1117; --muted: #8d96a0; --line: #30363d; --panel: #161b22;
    --accent: #4493f8; --ok: #3fb950; --warn: #d29922; --bad: #f85149; }
}
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { display: flex; align-items: center; gap: 1.5rem; padding: 0.6rem 1.5rem;
  border-bottom: 1px solid var(--line); background: var(--panel); }
header .brand { font-weight: 700; }
nav a { margin-right: 1rem; color: var(--fg); text-decoration: none; padding: 0.2rem 0; }
nav a.active { border-bottom: 2px solid var(--accent); font-weight: 600; }
main { max-width: 1200px; margin: 1.2rem auto; padding: 0 1.5rem; }
h1 { font-size: 1.4rem; margin: 0 0 0.6rem; }
h2 { font-size: 1.1rem; margin-top: 1.6rem; border-bottom: 1px solid var(--line); }
a { color: var(--accent); }
.muted, footer { color: var(--muted); }
footer { max-width: 1200px; margin: 2rem auto; padding: 0 1.5rem; font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 1rem; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 0.7rem 1rem; min-width: 12rem;
  background: var(--panel); }
.card .value { font-size: 1.5rem; font-weight: 600; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { padding: 0.25rem 0.6rem; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; }
th a { color: var(--fg); }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ok, .succeeded { color: var(--ok); font-weight: 600; }
.warn, .running { color: var(--warn); font-weight: 600; }
.bad, .failed, .crashed, .killed { color: var(--bad); font-weight: 600; }
.wide { overflow-x: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
figure.chart { margin: 0.5rem 0; }
figure.chart svg { width: 100%; height: auto; display: block; }
.charts figure.chart { flex: 1 1 480px; max-width: 580px; }
section > figure.chart { max-width: 760px; }
form.filters { display: flex; flex-wrap: wrap; gap: 0.6rem; align-items: end; margin: 0.5rem 0 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select, button { font: inherit; padding: 0.2rem 0.4rem; }
.pager { display: flex; gap: 1rem; align-items: center; margin: 0.6rem 0; }
.error { border: 1px solid var(--bad); border-radius: 6px; padding: 0.8rem 1rem; }
.error .hint { margin-top: 0.4rem; }
pre, code { font-family: ui-monospace, monospace; font-size: 13px; }
""".strip()


def esc(value: object) -> str:
    """HTML-escape ``str(value)``, quotes included, so it is safe in text and in attribute values."""
    return escape(str(value), quote=True)


def chart(svg: str, *, series: str, points: int) -> str:
    """Wrap a server-rendered SVG so tests and scripts can find it and count what it draws."""
    return f'<figure class="chart" data-series="{esc(series)}" data-points="{int(points)}">{svg}</figure>'


def _nav(active: str) -> str:
    active_class = ' class="active"'
    links = (
        f'<a data-nav="{name}" href="{href}"{active_class if name == active else ""}>{label}</a>'
        for name, href, label in NAV
    )
    return "<nav>" + "".join(links) + "</nav>"


def page(title: str, body_html: str, *, active: str) -> str:
    """A whole HTML document: the nav bar, ``active`` highlighted, and ``body_html`` in ``<main id="page-{active}">``.

    ``active`` is also the page's name in its ``<main>`` id, which the browser tests look for."""
    body = [
        f'<header><span class="brand">computewise</span>{_nav(active)}</header>',
        f'<main id="page-{esc(active)}">',
        body_html,
        "</main>",
    ]
    return document(f"{title} · computewise", _CSS, body, f"computewise {__version__} · read-only view of the ledger")


def error_page(status: int, message: str, hint: str | None, *, element_id: str, note: str = "") -> str:
    """A page saying what went wrong and how to fix it, in the words of the CLI's ``error:`` / ``To fix:`` lines."""
    hint_html = f'<div class="hint"><strong>To fix:</strong> {esc(hint)}</div>' if hint else ""
    note_html = f'<p class="muted">{esc(note)}</p>' if note else ""
    body = (
        f"<h1>{status}</h1>"
        f'<div class="error" id="{esc(element_id)}"><div><strong>error:</strong> {esc(message)}</div>{hint_html}</div>'
        f"{note_html}"
    )
    return page(f"error {status}", body, active="error")
