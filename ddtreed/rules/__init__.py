"""Rules: TOML files that turn an assembled crash into a category, a diagnosis and remediation ids."""

from .ruleset import Diagnosis, RuleSet, informativeness, load_rules
from .expression import UNKNOWN, ExpressionError, compile_expression
from .loader import RuleError, remediation_ids_in, rule_files
from .model import Rule

__all__ = [
    "Diagnosis", "RuleSet", "RuleError", "Rule", "load_rules", "informativeness", "UNKNOWN",
    "ExpressionError", "compile_expression", "remediation_ids_in", "rule_files",
]
