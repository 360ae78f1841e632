"""SkyPilot's own checks on task YAML files: run by SkyPilot's venv (``make install-skypilot``), not the project's.

``python skypilot_validate.py TASK.yaml ...`` loads each file with ``sky.Task.from_yaml``, which holds it to
SkyPilot's task schema and builds its resources as ``sky jobs launch`` would. Two checks that
``from_yaml`` leaves to launch time are made here too: the job recovery strategy is looked up in
SkyPilot's registry of strategies, and each label is held to every cloud's rule (at launch SkyPilot
refuses a label that any enabled cloud refuses). It prints one line per invalid file, with SkyPilot's
message, and exits 1 if any is invalid.

Accelerator names are not checked here: SkyPilot reads them from cloud catalogs it downloads when first
needed, and the tests download nothing.
"""

from __future__ import annotations

import sys

import sky  # type: ignore[import-not-found,unused-ignore]
import sky.jobs.recovery_strategy  # type: ignore[import-not-found,unused-ignore]  # registers the strategies
from sky.utils import registry  # type: ignore[import-not-found,unused-ignore]


def problem(path: str) -> str | None:
    """SkyPilot's objection to the task in ``path``, or None when it has none."""
    try:
        task = sky.Task.from_yaml(path)
        for resources in task.resources:
            if resources.job_recovery is not None:
                registry.JOBS_RECOVERY_STRATEGY_REGISTRY.from_str(resources.job_recovery.get("strategy"))
            for key, value in (resources.labels or {}).items():
                for cloud in registry.CLOUD_REGISTRY.values():
                    valid, reason = cloud.is_label_valid(key, value)
                    if not valid:
                        return f"label {key}: {value}: {reason}"
    except Exception as error:  # SkyPilot raises ValueError and its own exceptions alike: each is the answer
        return f"{type(error).__name__}: {error}"
    return None


def main(paths: list[str]) -> int:
    problems = [(path, problem(path)) for path in paths]
    for path, message in problems:
        if message is not None:
            print(f"{path}: {message}")
    return 1 if any(message is not None for _, message in problems) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
