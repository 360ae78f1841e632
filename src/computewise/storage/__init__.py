"""``computewise storage``: what stored bytes cost, and a retention policy that removes the ones nobody reads.

inventory -> duplicates -> pricing -> audit          (``storage audit``)
inventory + policy + ledger's running runs -> retention plan -> apply -> ledger   (``storage apply``)
"""

from computewise.storage.apply import ApplyResult, apply_plan
from computewise.storage.audit import StorageAudit, audit_location, build_audit
from computewise.storage.duplicates import Duplicates, find_duplicates
from computewise.storage.inuse import InUse, paths_in_use
from computewise.storage.inventory import Checkpoint, Entry, Inventory, take_inventory
from computewise.storage.kinds import KINDS, Kind
from computewise.storage.location import Location, open_location
from computewise.storage.policy import Policy, read_policy
from computewise.storage.pricing import Pricer
from computewise.storage.retention import PlannedAction, RetentionPlan, plan_retention

__all__ = [
    "KINDS",
    "ApplyResult",
    "Checkpoint",
    "Duplicates",
    "Entry",
    "InUse",
    "Inventory",
    "Kind",
    "Location",
    "PlannedAction",
    "Policy",
    "Pricer",
    "RetentionPlan",
    "StorageAudit",
    "apply_plan",
    "audit_location",
    "build_audit",
    "find_duplicates",
    "open_location",
    "paths_in_use",
    "plan_retention",
    "read_policy",
    "take_inventory",
]
