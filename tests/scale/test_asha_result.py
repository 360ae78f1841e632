"""An ASHA search's JSON, checked without Ray: the Ray Tune tests skip where the ray extra is not installed."""

from __future__ import annotations

import json

from computewise.scale.ray_tune import AshaResult, AshaTrial


def test_an_asha_result_writes_its_trials_and_the_iterations_stopping_saved() -> None:
    trials = (
        AshaTrial({"rate": 0.8}, 9, 0.99, False),
        AshaTrial({"rate": 0.1, "layers": [1, 2]}, 1, 0.1, True),
        AshaTrial({"rate": 0.5}, 0, None, False, "the trial raised"),
    )
    data = json.loads(json.dumps(AshaResult("score", "max", 9, {"rate": 0.8}, 0.99, trials, 12.5).to_dict()))
    assert list(data) == [
        "metric",
        "mode",
        "max_iterations",
        "best_config",
        "best_value",
        "iterations",
        "iterations_without_stopping",
        "stopped_early",
        "trials",
        "wall_s",
    ]
    assert (data["iterations"], data["iterations_without_stopping"], data["stopped_early"]) == (10, 27, 1)
    assert data["trials"][1] == {
        "config": {"rate": 0.1, "layers": [1, 2]},
        "iterations": 1,
        "value": 0.1,
        "stopped_early": True,
        "error": None,
    }
    assert data["trials"][2]["error"] == "the trial raised"
