"""``get_engine(name)``: one place that knows every job engine, importing each only when it is asked for.

Importing lazily keeps ``computewise --help`` fast and lets a machine without Ray or the
Kubernetes client use the other engines.
"""

from __future__ import annotations

from computewise.errors import JobEngineError, UnknownNameError
from computewise.scale.engine import JobEngine

__all__ = ["ENGINE_NAMES", "get_engine"]

ENGINE_NAMES = ("local", "ray", "kubernetes", "slurm", "skypilot")


def get_engine(name: str, address: str | None = None) -> JobEngine:
    """The engine called ``name``; ``address`` is the Ray dashboard URL (ray only)."""
    if name == "local":
        from computewise.scale.local import LocalEngine

        return LocalEngine()
    if name == "ray":
        if address is None:
            raise JobEngineError(
                "the ray engine needs the cluster's address",
                "pass --address http://HEAD:8265 (the Ray dashboard), or set RAY_ADDRESS",
            )
        from computewise.scale.ray_jobs import RayJobsEngine

        return RayJobsEngine(address)
    if name == "kubernetes":
        from computewise.scale.kubernetes import KubernetesEngine

        return KubernetesEngine()
    if name == "slurm":
        from computewise.scale.slurm import SlurmEngine

        return SlurmEngine()
    if name == "skypilot":
        from computewise.scale.skypilot import SkyPilotEngine

        return SkyPilotEngine()
    raise UnknownNameError("engine", name, ENGINE_NAMES)
