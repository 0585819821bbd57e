"""The output canary: golden greedy outputs, checked token by token, acceptance watched.

See docs/canary.md. The daemon builds one `Canary(store, config.canary)` and calls `check` after
each restart and remediation, and `PeriodicCanary.run_if_due` while serving.
"""

from .compare import Comparison, compare
from .core import DEFAULT_PROMPTS, Canary, CanaryError, golden_key, validate
from .periodic import PeriodicCanary
from .results import (ACCEPTANCE_COLLAPSE, SILENT_CORRUPTION, CanaryResult, GoldenKey,
                      PromptResult, canary_crash, result_from_dict)

__all__ = ["ACCEPTANCE_COLLAPSE", "Canary", "CanaryError", "CanaryResult", "Comparison",
           "DEFAULT_PROMPTS", "GoldenKey", "PeriodicCanary", "PromptResult", "SILENT_CORRUPTION",
           "canary_crash", "compare", "golden_key", "result_from_dict", "validate"]
