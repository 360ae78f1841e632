"""Hardware, prices, carbon intensities and estimator assumptions, as data files with a source per row.

The bundled CSV files live in ``computewise/catalog/data``; a user adds or overrides rows with
files named ``accelerators*.csv``, ``offerings*.csv``, ``carbon*.csv``, ``onprem*.csv``,
``assumptions*.csv`` or ``fabrics*.csv`` in ``$COMPUTEWISE_CATALOG_DIR`` (default: the ``catalog`` folder of the
user config dir, e.g. ``~/.config/computewise/catalog``) or passed with ``--catalog PATH``.

    >>> from computewise.catalog import load_catalog
    >>> load_catalog().accelerator("H100").slug
    'h100-sxm'
"""

from computewise.catalog.catalog import Catalog, load_catalog, usd_per_accelerator_h
from computewise.catalog.loader import (
    ACCELERATOR_KINDS,
    ENV_CATALOG_DIR,
    TABLES,
    CatalogFile,
    Row,
    RowOrigin,
    TableName,
    table_for_filename,
    user_catalog_dir,
)
from computewise.specs.hardware import Assumption

__all__ = [
    "ACCELERATOR_KINDS",
    "ENV_CATALOG_DIR",
    "TABLES",
    "Assumption",
    "Catalog",
    "CatalogFile",
    "Row",
    "RowOrigin",
    "TableName",
    "load_catalog",
    "table_for_filename",
    "usd_per_accelerator_h",
    "user_catalog_dir",
]
