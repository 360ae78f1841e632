"""Render estimate and plan dicts: compact Rich tables for the terminal, self-contained HTML with SVG plots.

The report layer reads only the JSON-ready dicts (``to_dict()``), never the estimators' objects, so
``--json`` output saved today renders the same tomorrow and the layers below stay free to change.

Import from the submodules (``report.html``, ``report.terminal``, ...): this package imports nothing,
so a page of the dashboard that needs one table does not load every renderer at start-up.
"""
