"""Remediations: load the catalog, plan, apply, revert and reconcile them (see docs/remediations.md)."""

from .catalog import Catalog, Remediation, RemediationError, load_remediations
from .engine import ApplyError, Engine, Plan, PlannedFile
from .ladder import Ladder
from .width import WidthState, inspect_ddtree_width

__all__ = ["ApplyError", "Catalog", "Engine", "Ladder", "Plan", "PlannedFile", "Remediation",
           "RemediationError", "WidthState", "inspect_ddtree_width", "load_remediations"]
