"""The one exception tree: user errors under ``ComputewiseError``, control flow apart, all in ``errors.py``.

The CLI turns a ``ComputewiseError`` into ``error:``/``To fix:`` and exit 2; a ``ControlFlow`` signal
that escapes is a bug, so it must keep its traceback instead of reading as the user's mistake. The
entry point runs for real in a child process with one extra command that raises each kind.
"""

from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from pathlib import Path

import pytest

from computewise import errors

SOURCE = Path(errors.__file__).resolve().parent
# A SystemExit on purpose: an uncaught one ends the process quietly with exit code 75.
BESIDE_THEIR_CODE = {"computewise/train/preemption.py": {"Preempted"}}
EXCEPTION_NAMES = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
} | set(errors.__all__)
WARNING_NAMES = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Warning)
}


def _base_names(node: ast.ClassDef) -> set[str]:
    return {
        base.id if isinstance(base, ast.Name) else base.attr
        for base in node.bases
        if isinstance(base, ast.Name | ast.Attribute)
    }


def _exception_classes_outside_errors() -> list[str]:
    """Public classes deriving from a built-in exception or a class of ``errors.py`` (warning categories aside)."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE.parent).as_posix()
        if relative == "computewise/errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = _base_names(node)
            beside = node.name in BESIDE_THEIR_CODE.get(relative, set())
            if bases & EXCEPTION_NAMES and not bases & WARNING_NAMES and not beside:
                found.append(f"{relative}: {node.name}")
    return found


def test_every_public_exception_class_lives_in_errors_py() -> None:
    assert _exception_classes_outside_errors() == []


def test_the_scan_sees_an_exception_class_beside_its_code() -> None:
    """The scan above is only worth something if it finds a class where one is defined."""
    tree = ast.parse("class QueueFull(ControlFlow):\n    pass\nclass Note(UserWarning):\n    pass\n")
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    assert [bool(_base_names(node) & EXCEPTION_NAMES) for node in classes] == [True, True]
    assert [bool(_base_names(node) & WARNING_NAMES) for node in classes] == [False, True]


def test_user_errors_and_control_flow_are_two_separate_trees() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    user = [cls for cls in classes if issubclass(cls, errors.ComputewiseError)]
    control = [cls for cls in classes if issubclass(cls, errors.ControlFlow)]
    assert set(user) | set(control) == set(classes)
    assert not set(user) & set(control)
    assert {cls.__name__ for cls in control} == {
        "ControlFlow",
        "ItemFailed",
        "QueueFull",
        "RequestTimeout",
        "VariantSkipped",
    }


def test_control_flow_carries_its_message_for_the_handler() -> None:
    full = errors.QueueFull("the queue is full (4 of 4 items waiting)", retry_after_s=0.5)
    assert (full.message, full.retry_after_s, str(full)) == (
        "the queue is full (4 of 4 items waiting)",
        0.5,
        full.message,
    )
    failed = errors.ItemFailed("the model failed on input 2", index=2)
    assert (failed.message, failed.index) == ("the model failed on input 2", 2)
    assert errors.VariantSkipped("FP16 needs a CUDA GPU").message == "FP16 needs a CUDA GPU"


def _main_raising(expression: str) -> subprocess.CompletedProcess[str]:
    """``computewise boom`` through the real entry point, with ``boom`` raising ``expression``."""
    script = (
        "import sys\n"
        "from computewise import errors\n"
        "from computewise.cli.app import main, whole_app\n"
        "app = whole_app()\n"
        "@app.command('boom')\n"
        "def boom() -> None:\n"
        f"    raise {expression}\n"
        "sys.argv = ['computewise', 'boom']\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    "expression",
    [
        "errors.JobEngineError('sbatch not found', 'install Slurm')",
        "errors.SpaceError('--space is empty', 'name a dimension')",
        "errors.CommandNotFoundError('command not found: trian.py', 'check the spelling')",
    ],
)
def test_a_user_error_exits_2_with_its_fix(expression: str) -> None:
    done = _main_raising(expression)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and "To fix: " in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "expression",
    [
        "errors.QueueFull('the queue is full', 1.0)",
        "errors.RequestTimeout('not answered within 30 s')",
        "errors.ItemFailed('the model failed on input 0', 0)",
        "errors.VariantSkipped('FP16 needs a CUDA GPU')",
    ],
)
def test_an_escaped_control_flow_signal_is_a_bug_with_a_traceback_never_a_user_error(expression: str) -> None:
    done = _main_raising(expression)
    assert done.returncode == 1, done.stderr
    assert "Traceback" in done.stderr and expression.split("(")[0].split(".")[1] in done.stderr
    assert "error: " not in done.stderr.splitlines()[0] and "To fix:" not in done.stderr
