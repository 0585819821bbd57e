"""paramiko, imported without `invoke` where OpenSSH's client is installed.

`paramiko.config` imports `invoke` (about 0.1 s of a fleet command's start: its vendored YAML and
task machinery) only to run `Match exec` lines in paramiko's own ssh-config parser. The fleet reads
the ssh config with `ssh -G` whenever `ssh` is installed, and uses paramiko's parser only without
it (`ssh._resolve_with_paramiko`, which calls `with_invoke()` first), so with `ssh` present the
import is skipped; another importer of `invoke` later gets it as usual.
"""

from __future__ import annotations

import shutil
import sys


def _import_without_invoke() -> None:
    if "paramiko" in sys.modules or "invoke" in sys.modules or shutil.which("ssh") is None:
        return
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError
    try:
        import paramiko  # noqa: F401
    finally:
        if "invoke" in sys.modules and sys.modules["invoke"] is None:
            del sys.modules["invoke"]


def with_invoke() -> None:
    """Give paramiko's config parser `invoke` back (for `Match exec`) when it was imported without."""
    import paramiko.config

    if getattr(paramiko.config, "invoke", True) is None:
        try:
            import invoke
        except ImportError:
            return
        paramiko.config.invoke = invoke
        paramiko.config.invoke_import_error = None


_import_without_invoke()
