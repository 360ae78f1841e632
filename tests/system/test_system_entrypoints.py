"""``import_entry_point``: ``package.module:function`` importable from the working directory, or a clear error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewise.errors import InputError, ModelConfigError
from computewise.system.entrypoints import import_entry_point


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory with a package in it, as a user's project looks; sys.path restored after."""
    package = tmp_path / "system_ep_project"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("def build():\n    return 'built'\n\nVALUE = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("system_ep_project")]:
        del sys.modules[name]


def test_a_function_in_the_working_directory_is_imported(project_dir: Path) -> None:
    build = import_entry_point("system_ep_project.models:build", "the model", ModelConfigError)
    assert build() == "built"
    assert str(project_dir) in sys.path
    assert import_entry_point("system_ep_project.models:VALUE", "the model", ModelConfigError) == 7


@pytest.mark.parametrize("spec", ["system_ep_project.models", ":build", "system_ep_project.models:"])
def test_a_spec_without_module_colon_function_is_refused(project_dir: Path, spec: str) -> None:
    with pytest.raises(InputError, match=r"the eval function .* is not an entry point"):
        import_entry_point(spec, "the eval function", InputError)


def test_a_missing_module_or_attribute_raises_the_callers_error_naming_what(project_dir: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"cannot import the model system_ep_project\.nothing:build"):
        import_entry_point("system_ep_project.nothing:build", "the model", ModelConfigError)
    with pytest.raises(ModelConfigError, match=r"cannot import the model system_ep_project\.models:missing") as caught:
        import_entry_point("system_ep_project.models:missing", "the model", ModelConfigError)
    assert isinstance(caught.value.__cause__, AttributeError)
