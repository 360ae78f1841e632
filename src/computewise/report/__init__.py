"""Render estimate and plan dicts: compact Rich tables for the terminal, self-contained HTML with SVG plots.

The report layer reads only the JSON-ready dicts (``to_dict()``), never the estimators' objects, so
``--json`` output saved today renders the same tomorrow and the layers below stay free to change.
"""

from computewise.report.html import break_even_html, estimate_html, plan_html, write_html
from computewise.report.terminal import print_break_even, print_estimate, print_plan

__all__ = [
    "break_even_html",
    "estimate_html",
    "plan_html",
    "print_break_even",
    "print_estimate",
    "print_plan",
    "write_html",
]
