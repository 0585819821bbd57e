"""What the long-running daemon process leaves out of its memory (issue 19: RSS ≤ 40 MB).

`ddtreed run` calls `lean_daemon_process()` first, before anything imports structlog or hashlib:

- OpenSSL stays unloaded: hashlib then uses CPython's built-in SHA-256 (the same digests: it is
  the same function), so `libcrypto` (3.5 MB resident) is never mapped. The daemon hashes only
  short texts (signatures, launch records, file contents it patches); nothing in it needs what only
  OpenSSL offers (`pbkdf2_hmac`, `scrypt`). Skipped when this Python has no built-in SHA-256 (a
  build without it keeps OpenSSL), and when hashlib was already imported.
- structlog imports `asyncio` (and through it `ssl`) for its `await logger.ainfo(...)` methods
  only; the daemon never awaits. While structlog is first imported, `asyncio` in `sys.modules`
  is a stand-in whose first attribute read imports the real module; once structlog is imported
  the stand-in leaves `sys.modules`, so every other `import asyncio` gets the real one. (~2.8 MB.)

A daemon that posts webhooks or serves /metrics still imports what those need, when it needs it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types

BUILTIN_SHA256 = ("_sha2", "_sha256")  # CPython 3.12+ / 3.11


def lean_daemon_process() -> list[str]:
    """Leave OpenSSL and asyncio out of this process (see the module doc); what it left out."""
    left_out = []
    if _keep_openssl_out():
        left_out.append("_hashlib")
    if _import_structlog_without_asyncio():
        left_out.append("asyncio")
    return left_out


def _keep_openssl_out() -> bool:
    if "hashlib" in sys.modules or "_hashlib" in sys.modules:
        return False
    if not any(importlib.util.find_spec(name) is not None for name in BUILTIN_SHA256):
        return False
    sys.modules["_hashlib"] = None  # type: ignore[assignment]  # `import _hashlib` raises ImportError
    return True


def _import_structlog_without_asyncio() -> bool:
    if "structlog" in sys.modules or "asyncio" in sys.modules:
        return False
    stand_in = DeferredModule("asyncio")
    sys.modules["asyncio"] = stand_in
    try:
        import structlog  # noqa: F401
    finally:
        if sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]
    return True


class DeferredModule(types.ModuleType):
    """Stands for module `name` where it was imported but not used yet; reading any attribute it
    lacks imports the real module (from then on `sys.modules` holds that) and answers from it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)  # `import name` sees it loaded

    def __getattr__(self, attribute: str):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)
