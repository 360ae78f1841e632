"""``get_backend(name)``: one place that knows every engine, importing each only when it is asked for.

Importing lazily keeps ``computewise --help`` fast and lets a machine without Ray or the
Kubernetes client use the other backends.
"""

from __future__ import annotations

from computewise.errors import UnknownNameError
from computewise.scale.backend import Backend, BackendError

__all__ = ["BACKEND_NAMES", "get_backend"]

BACKEND_NAMES = ("local", "ray", "kubernetes", "slurm", "skypilot")


def get_backend(name: str, address: str | None = None) -> Backend:
    """The backend called ``name``; ``address`` is the Ray dashboard URL (ray only)."""
    if name == "local":
        from computewise.scale.local import LocalBackend

        return LocalBackend()
    if name == "ray":
        if address is None:
            raise BackendError(
                "the ray backend needs the cluster's address",
                "pass --address http://HEAD:8265 (the Ray dashboard), or set RAY_ADDRESS",
            )
        from computewise.scale.ray_jobs import RayJobsBackend

        return RayJobsBackend(address)
    if name == "kubernetes":
        from computewise.scale.kubernetes import KubernetesBackend

        return KubernetesBackend()
    if name == "slurm":
        from computewise.scale.slurm import SlurmBackend

        return SlurmBackend()
    if name == "skypilot":
        from computewise.scale.skypilot import SkyPilotBackend

        return SkyPilotBackend()
    raise UnknownNameError("backend", name, BACKEND_NAMES)
