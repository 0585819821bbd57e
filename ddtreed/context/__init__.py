"""The service's launch facts: its argv parsed, and the sglang its interpreter would import."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from typing import Any, Mapping

import structlog

from ..records import ServiceContext
from .argv import (
    ALGORITHM_ALIASES,
    BLOCK_SIZE_FLAGS,
    DEFAULT_DFLASH_BLOCK_SIZE,
    DFLASH_FAMILY,
    DraftConfigReader,
    block_size_flags,
    draft_block_size,
    is_boolean_flag,
    max_captured_batch_size,
    normalize_flag,
    parse_argv,
    read_local_draft_config,
    split_flags,
)
from .installation import PROBE_TIMEOUT_S, probe_installation, version_in_site_packages

__all__ = [
    "ALGORITHM_ALIASES", "BLOCK_SIZE_FLAGS", "DEFAULT_DFLASH_BLOCK_SIZE", "DFLASH_FAMILY",
    "DraftConfigReader", "PROBE_TIMEOUT_S", "block_size_flags", "draft_block_size",
    "host_draft_config_reader", "is_boolean_flag", "max_captured_batch_size", "normalize_flag",
    "parse_argv", "probe_installation", "read_local_draft_config", "service_context",
    "service_interpreter",
    "split_flags", "version_in_site_packages",
]

log = structlog.get_logger(__name__)


def _looks_like_python(token: str) -> bool:
    return os.path.basename(token).startswith("python")


def service_interpreter(config, host) -> str | None:
    """config.service.python, else argv[0] when it is python, else the shebang of a `sglang` script."""
    argv = list(config.service.argv)
    if config.service.python:
        return config.service.python
    if not argv:
        return None
    if _looks_like_python(argv[0]):
        return argv[0]
    script = argv[0] if os.path.isabs(argv[0]) else shutil.which(
        argv[0], path=config.service.env.get("PATH", os.environ.get("PATH")))
    if script is None or not getattr(host, "local", False) and not os.path.isabs(argv[0]):
        return None
    try:
        first = host.read_bytes(script)[:256].split(b"\n", 1)[0].decode("utf-8", "replace")
    except OSError:
        return None
    # `#!/venv/bin/python3` or `#!/usr/bin/env python3`: the console script's interpreter.
    words = first[2:].split() if first.startswith("#!") else []
    return next((word for word in words if _looks_like_python(word)), None)


def service_context(config, host) -> ServiceContext:
    """The context of the configured service: argv facts, port override, installed sglang."""
    argv = list(config.service.argv)
    context = parse_argv(argv, draft_config_reader=host_draft_config_reader(host))
    if config.service.port is not None:
        context = replace(context, port=config.service.port)
    python = service_interpreter(config, host)
    if config.service.site_packages:
        site_packages = config.service.site_packages
        version = version_in_site_packages(host, site_packages)
    elif python:
        version, site_packages = probe_installation(
            python, host, config.paths.state_dir, env=config.service.env)
    else:
        version, site_packages = None, None
    return replace(context, sglang_version=version, site_packages=site_packages)


def host_draft_config_reader(host) -> DraftConfigReader:
    """Read the draft model's `config.json` on the service's host (it may be remote)."""
    def read(path: str) -> Mapping[str, Any] | None:
        candidate = os.path.join(path, "config.json")
        try:
            if not host.exists(candidate):
                return None
            return json.loads(host.read_bytes(candidate).decode("utf-8"))
        except (OSError, ValueError) as error:
            log.warning("draft_config_unreadable", path=candidate, error=str(error))
            return None
    return read


