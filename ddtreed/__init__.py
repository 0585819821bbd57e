"""ddtreed: crash diagnostics and auto-remediation for SGLang speculative-decoding servers."""

__version__ = "0.1.0"
