"""Shrink inference: build, grade and time variants of a model, export the fastest that keeps its quality.

``run_search`` is the engine behind ``computewise optimize``; ``load_source`` reads MODEL,
``load_metric`` the EVAL, and ``write_artifact`` / ``load_artifact`` the exported variant that
``computewise serve`` loads. onnx, onnxruntime and torch are imported inside functions only.
"""
