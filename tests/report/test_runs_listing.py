"""The empty ``runs`` list tells an empty ledger from filters that match none of its runs."""

from __future__ import annotations

from rich.console import Console

from computewise.report.runs import print_runs


def _printed(unmatched: tuple[str, ...]) -> str:
    console = Console(record=True, width=60)
    print_runs([], console, unmatched)
    return console.export_text()


def test_no_filters_and_no_runs_reads_as_an_empty_ledger() -> None:
    assert _printed(()).startswith("no runs recorded yet: start one with")


def test_unmatched_filters_are_named_whole_on_one_line() -> None:
    """Named as typed and never folded, so they can be copied back to a command line."""
    text = _printed(("--tag team=zzz", "--since [bold]x"))
    assert (
        text
        == "no runs match --tag team=zzz --since [bold]x: `computewise runs` without them lists every recorded run\n"
    )
    assert "recorded yet" not in text
