"""computewise: plan, measure and cut the compute cost of ML training and inference.

The package root stays import-light (the CLI must start in well under 0.3 s); import the
layers you need, e.g. ``from computewise.estimate import estimate_train``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
