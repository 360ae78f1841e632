"""Keep the developer's own catalog directory out of the tests: each test gets an empty one."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def user_catalog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "user-catalog"
    directory.mkdir()
    monkeypatch.setenv("COMPUTEWISE_CATALOG_DIR", str(directory))
    return directory
