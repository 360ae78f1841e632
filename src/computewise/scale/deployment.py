"""What ``computewise deploy --json`` prints: the application running on Ray Serve and the command that
deletes it, or what ``--delete`` removed.

Apart from ``scale.ray_serve`` so that the document types (and their generated schema) import without
Ray, Starlette or the serving app.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from computewise.specs.codec import Document, Jsonable, json_field

__all__ = ["DeletedApp", "DeployedApp", "RayServeDeployment"]

_DEPLOY = Document(
    "deploy",
    "deploy --json",
    "The application deployed on Ray Serve with the command that deletes it (DeployedApp), or with --delete "
    "whether there was one to delete (DeletedApp).",
)
_APP_NAME = "The Ray Serve application: the model's name, so each model is one application."
_ADDRESS = "The cluster's GCS address (HOST:PORT)."


@dataclass(frozen=True)
class RayServeDeployment(Jsonable):
    """A running application: where to send requests and how it was deployed."""

    url: str = field(metadata=json_field(description="The base URL: the routes of `computewise serve` are under it."))
    app_name: str = field(metadata=json_field(description=_APP_NAME))
    address: str = field(metadata=json_field(description=_ADDRESS))
    status: str = field(metadata=json_field(description="Ray Serve's status of the application once deployed."))
    deploy_s: float = field(metadata=json_field(description="Seconds from connecting to replicas answering."))
    replica_cpus: float = field(metadata=json_field(description="CPUs each replica reserves.", exclusive_minimum=0))
    max_ongoing_requests: int = field(
        metadata=json_field(description="Requests a replica holds at once before Ray queues more.", minimum=1)
    )
    autoscaling_config: dict[str, Any] | None = field(
        metadata=json_field(description="Ray Serve's autoscaling, from `plan serve --ray-config`; null: one replica.")
    )
    notes: tuple[str, ...] = field(default=(), metadata=json_field(description="What to know about this deploy."))


@dataclass(frozen=True)
class DeployedApp(Jsonable):
    """``deploy --json``: the deployment, and the command that removes it from the cluster."""

    json_document: ClassVar[Document] = _DEPLOY
    json_description: ClassVar[str] = "`deploy --json`: the application running, and how to delete it."

    deployment: RayServeDeployment = field(metadata=json_field(inline=True))
    delete_command: str = field(metadata=json_field(description="The command that deletes the application."))


@dataclass(frozen=True)
class DeletedApp(Jsonable):
    """``deploy --delete --json``: the application named, and whether the cluster had it."""

    json_document: ClassVar[Document] = _DEPLOY
    json_description: ClassVar[str] = "`deploy --delete --json`: the application removed, if there was one."

    app_name: str = field(metadata=json_field(description=_APP_NAME))
    address: str = field(metadata=json_field(description=_ADDRESS))
    deleted: bool = field(metadata=json_field(description="False: the cluster had no such application."))
