"""``catalog validate --json``: whether the catalog files load, the files read and their row counts, or the error.

A typed document rather than a dict built in the CLI, so its schema (``docs/schemas``) is generated from
the same type that writes it and scripts can rely on its keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Self

from computewise.catalog.catalog import Catalog
from computewise.catalog.loader import CatalogFile
from computewise.errors import CatalogError, ComputewiseError
from computewise.specs.codec import Document, Jsonable, json_field

__all__ = ["CatalogCounts", "CatalogProblem", "CatalogValidation"]


@dataclass(frozen=True)
class CatalogProblem(Jsonable):
    """Why the catalog did not load: where the bad cell is (a ``CatalogError`` knows it) and how to fix it."""

    json_description: ClassVar[str] = "Why the catalog did not load; file, line and column are null when no cell is."

    file: str | None
    line: int | None = field(metadata=json_field(minimum=1))
    column: str | None
    message: str
    hint: str | None

    @classmethod
    def of(cls, error: ComputewiseError) -> Self:
        if isinstance(error, CatalogError):
            return cls(error.path, error.line, error.column, error.message, error.hint)
        return cls(None, None, None, error.message, error.hint)


@dataclass(frozen=True)
class CatalogCounts(Jsonable):
    """How many files and rows were read."""

    json_description: ClassVar[str] = "How many files and rows were read, and the rows of each table."

    files: int = field(metadata=json_field(minimum=0))
    rows: int = field(metadata=json_field(minimum=0))
    rows_by_table: dict[str, int]

    @classmethod
    def of(cls, catalog: Catalog) -> Self:
        by_table: dict[str, int] = {}
        for file in catalog.files:
            by_table[file.table] = by_table.get(file.table, 0) + file.rows
        return cls(len(catalog.files), sum(by_table.values()), by_table)


@dataclass(frozen=True)
class CatalogValidation(Jsonable):
    """The catalog loaded (its files, counts and oldest data) or not (the error, and no files)."""

    json_document: ClassVar[Document] = Document(
        "catalog-validate",
        "catalog validate --json",
        "Whether the bundled, user and given catalog files load: the files read and their rows, or where the "
        "first bad cell is and how to fix it (catalog.validation.CatalogValidation).",
    )

    valid: bool
    errors: tuple[CatalogProblem, ...] = field(metadata=json_field(description="Empty when valid."))
    files: tuple[CatalogFile, ...] = field(metadata=json_field(description="Empty when not valid."))
    counts: CatalogCounts | None = field(metadata=json_field(description="Null when not valid."))
    oldest_retrieved: str | None = field(
        default=None,
        metadata=json_field(
            omit_empty=True, description="The oldest row's retrieval date, YYYY-MM-DD; absent when not valid."
        ),
    )

    @classmethod
    def of(cls, catalog: Catalog) -> Self:
        """The catalog that loaded: its files, their rows and its oldest data."""
        return cls(True, (), catalog.files, CatalogCounts.of(catalog), catalog.oldest_retrieved(None).isoformat())

    @classmethod
    def failed(cls, error: ComputewiseError) -> Self:
        """The catalog did not load: ``error`` is why."""
        return cls(False, (CatalogProblem.of(error),), (), None)
