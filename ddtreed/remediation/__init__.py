"""Remediations: load the catalog, plan, apply, revert and reconcile them (see docs/remediations.md)."""

from .catalog import Catalog, Remediation, RemediationError, load_remediations
from .engine import ApplyError, Engine, Plan, PlannedFile
from .ladder import Attempt, Launch, attempt, revert
from .inspect_width import WidthState, inspect_ddtree_width

__all__ = ["ApplyError", "Attempt", "Catalog", "Engine", "Launch", "Plan", "PlannedFile", "Remediation",
           "RemediationError", "WidthState", "attempt", "inspect_ddtree_width", "load_remediations",
           "revert"]
