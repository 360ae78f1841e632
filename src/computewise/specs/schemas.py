"""``python -m computewise.specs.schemas``: write ``docs/schemas`` from the document types (``--check`` compares).

The documents whose layout is generated from their type (``specs.codec.Jsonable``), named by
``package.module:Class`` and imported when asked: they live in the layers above ``specs``, which
``specs`` itself never imports. ``tests/specs/test_generated_schemas.py`` holds every committed file to
its generated text, so a changed type without a regenerated schema fails there.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from computewise.specs.codec import Jsonable, schema_text

__all__ = ["GENERATED", "documents", "main"]

GENERATED = (
    "computewise.account.anomalies:AnomalyReport",
    "computewise.account.budgets:BudgetSetResult",
    "computewise.account.budgets:BudgetStatusReport",
    "computewise.account.totals:RunListing",
    "computewise.bench.result:BenchResult",
    "computewise.catalog.calibration:Calibration",
    "computewise.catalog.listing:AcceleratorSheet",
    "computewise.catalog.listing:CatalogListing",
    "computewise.catalog.listing:InstanceSheet",
    "computewise.catalog.validation:CatalogValidation",
    "computewise.dashboard.budgets:BudgetsView",
    "computewise.dashboard.costs:CostsView",
    "computewise.dashboard.plans:PlansView",
    "computewise.dashboard.views:OverviewView",
    "computewise.dashboard.views:RunView",
    "computewise.dashboard.views:RunsView",
    "computewise.data.convert:ConvertResult",
    "computewise.data.result:DataBenchResult",
    "computewise.distill.run:DistillResult",
    "computewise.estimate.comm_report:CommEstimate",
    "computewise.estimate.single:InferEstimate",
    "computewise.estimate.single:TrainEstimate",
    "computewise.monitor.summary:RunSummary",
    "computewise.optimize.manifest:ArtifactManifest",
    "computewise.optimize.summary:OptimizeSummary",
    "computewise.plan.federated_request:PlannedFederation",
    "computewise.plan.infer:InferPlan",
    "computewise.plan.pipeline:PipelinePlan",
    "computewise.plan.result:Plan",
    "computewise.plan.serve_request:PlannedServing",
    "computewise.scale.deployment:DeletedApp",
    "computewise.scale.deployment:DeployedApp",
    "computewise.scale.submitted:SubmitDryRun",
    "computewise.scale.submitted:SubmittedJob",
    "computewise.specs.loadtest:LoadtestRun",
    "computewise.specs.loadtest:MaxRateSearch",
    "computewise.storage.apply:ApplyResult",
    "computewise.storage.audit:StorageAudit",
    "computewise.storage.savings:CostReportWithStorage",
    "computewise.storage.retention:RetentionPlan",
    "computewise.tune.savings:TunedConfigFile",
    "computewise.tune.scaletest:ScaleTestResult",
    "computewise.tune.search:TuneDocument",
)


def documents() -> dict[str, tuple[type[Jsonable], ...]]:
    """Each generated schema's file name (``<file>.schema.json``) and the classes it describes: one, or
    several that share a ``Document`` (one command printing two shapes), in ``GENERATED``'s order."""
    found: dict[str, tuple[type[Jsonable], ...]] = {}
    for name in GENERATED:
        module, _, attribute = name.partition(":")
        kind = getattr(importlib.import_module(module), attribute)
        if not (isinstance(kind, type) and issubclass(kind, Jsonable) and kind.json_document is not None):
            raise TypeError(f"{name} is not a Jsonable document")
        file = f"{kind.json_document.file}.schema.json"
        found[file] = (*found.get(file, ()), kind)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m computewise.specs.schemas", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/schemas"), help="the schemas directory")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for file, kinds in documents().items():
        path = args.out / file
        text = schema_text(*kinds)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'differs' if args.check else 'wrote'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
