"""The ``computewise`` command: wires the verbs together and turns user errors into exit code 2."""

from __future__ import annotations

import sys

import typer

from computewise.cli import (
    bench_cmd,
    budget_cmd,
    catalog_cmd,
    cost_cmd,
    dashboard_cmd,
    data_cmd,
    deploy_cmd,
    distill_cmd,
    estimate_cmd,
    grafana_cmd,
    loadtest_cmd,
    optimize_cmd,
    plan_cmd,
    plan_federated_cmd,
    plan_serve_cmd,
    run_cmd,
    runs_cmd,
    scaletest_cmd,
    serve_cmd,
    storage_cmd,
    submit_cmd,
    tune_cmd,
)
from computewise.cli.common import print_error
from computewise.errors import ComputewiseError

app = typer.Typer(
    name="computewise",
    help="Plan, measure and cut the compute cost of ML training and inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(estimate_cmd.app, name="estimate")
plan_cmd.app.command("serve")(plan_serve_cmd.plan_serve)
plan_cmd.app.command("federated")(plan_federated_cmd.plan_federated)
app.add_typer(plan_cmd.app, name="plan")
app.add_typer(catalog_cmd.app, name="catalog")
app.command(
    "run",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)(run_cmd.run)
app.add_typer(runs_cmd.app, name="runs")
app.add_typer(cost_cmd.app, name="cost")
app.add_typer(budget_cmd.app, name="budget")
app.add_typer(storage_cmd.app, name="storage")
app.command("optimize", no_args_is_help=True)(optimize_cmd.optimize)
app.command("distill", no_args_is_help=True)(distill_cmd.distill)
app.command("serve", no_args_is_help=True)(serve_cmd.serve)
app.command("deploy", no_args_is_help=True)(deploy_cmd.deploy)
app.command("loadtest", no_args_is_help=True)(loadtest_cmd.loadtest)
app.command("scaletest", no_args_is_help=True)(scaletest_cmd.scaletest)
app.command("tune", no_args_is_help=True)(tune_cmd.tune)
app.command("bench")(bench_cmd.bench)
app.command("dashboard")(dashboard_cmd.dashboard)
app.add_typer(data_cmd.app, name="data")
app.command("grafana-dashboard")(grafana_cmd.grafana_dashboard)
app.command(
    "submit",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    no_args_is_help=True,
)(submit_cmd.submit)

EXIT_USER_ERROR = 2


def main() -> None:
    """Entry point of the console script: a ComputewiseError is the user's to fix, not a crash.

    Only that tree is caught: a ``ControlFlow`` signal (``computewise.errors``) that gets this far is
    a bug in computewise and keeps its traceback.
    """
    try:
        app(standalone_mode=True)
    except ComputewiseError as error:
        print_error(error)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
