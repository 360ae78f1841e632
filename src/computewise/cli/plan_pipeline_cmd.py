"""``computewise plan serve --pipeline FILE``: a multi-stage pipeline sized, priced and timed for a traffic level.

Reads the YAML file and each stage's loadtest file (relative to the YAML file), resolves models and
accelerators through the catalog, and hands typed values to :func:`computewise.plan.pipeline.plan_pipeline`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from computewise.errors import InputError

if TYPE_CHECKING:
    from computewise.plan.pipeline import Measured, PipelineSpec


def run_pipeline_plan(
    path: Path,
    peak_rps: float | None,
    target_utilization: float | None,
    pricing: str,
    cloud: str | None,
    region: str | None,
    catalog_paths: list[Path] | None,
    as_json: bool,
) -> None:
    """Plan the pipeline in ``path`` at ``peak_rps`` and print it (tables or JSON)."""
    import yaml

    from computewise.cli.common import choice, load
    from computewise.models import resolve_model
    from computewise.plan import CLOUD_PRICINGS
    from computewise.plan.pipeline import parse_pipeline, plan_pipeline

    if peak_rps is None:
        raise InputError("--pipeline needs a traffic level", "give --peak-rps, the pipeline requests per second")
    text = _read(path)
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
    data = plan.to_dict()
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from computewise.report.pipeline import print_pipeline

        print_pipeline(data, Console())


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
            data = json.loads(_read(file))
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: {file}:{error.lineno}: not JSON", "pass a `loadtest --json` result") from None
        capacity = capacity_from_loadtest(read_loadtest(data, str(file)), str(file))
        if capacity.latency_s is None:
            raise InputError(f"{where}: {file} has no median latency", "rerun the loadtest with --json")
        measured[stage.name] = Measured(capacity.capacity_rps, capacity.latency_s)
    return measured


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path}: no such file", "check the path (loadtest files are relative to the pipeline)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read it ({error})", "pass a UTF-8 text file") from None
