"""Secrets out of everything ddtreed writes: argv flags, environment values and free text.

The service's config holds its secrets (`--api-key`, `HF_TOKEN`…); records, logs and reports
only ever need to say that one was there. One rule set, applied where text leaves the process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

# A flag whose last word is a secret noun: --api-key, --admin-api-key, --hf-token, --password.
# Not --ssl-keyfile or --tokenizer-path: the secret word must end the flag name.
_SECRET_FLAG = re.compile(r"^--?(?:[A-Za-z0-9]+[-_])*(?:key|token|secret|password|passwd)$", re.IGNORECASE)
_SECRET_ENV = re.compile(r"^(?:.*_(?:TOKEN|KEY|SECRET)|.*PASSWORD.*|.*PASSWD.*|HF_TOKEN)$", re.IGNORECASE)
# Environment names that look secret but are identifiers ddtreed itself needs to read back.
_NOT_SECRET_ENV = frozenset({"DDTREED_SERVICE_TOKEN"})
_NOT_SECRET_FIELDS = frozenset({"service_token"})  # finds a leftover service tree after a crash

# In free text (a joined argv, a log line, SGLang's printed ServerArgs):
#   --api-key X   --api-key=X   HF_TOKEN=X   api_key='X'   "api_key": "X"
_WORD = r"(?:[A-Za-z0-9]+[-_])*(?:key|token|secret|password|passwd)"
# In `name='value'` and JSON forms a bare `key=` or `token=` is too common in messages to hide.
_NAMED = r"(?:(?:[A-Za-z0-9]+[-_])+(?:key|token)|(?:[A-Za-z0-9]+[-_])*(?:secret|password|passwd))"
# Field names of records and log events whose string value is a secret as a whole.
_SECRET_FIELD = re.compile(rf"^{_NAMED}$", re.IGNORECASE)
_TEXT_FLAG = re.compile(rf"(?<![\w-])(--?{_WORD})(=|\s+)(?!{re.escape(REDACTED)})([^\s'\"]+)", re.IGNORECASE)
_TEXT_ENV = re.compile(r"(?<![\w])([A-Za-z_][A-Za-z0-9_]*(?:_TOKEN|_KEY|_SECRET|PASSWORD[A-Za-z0-9_]*|PASSWD))="
                       rf"(?!{re.escape(REDACTED)})([^\s'\",]+)")
_TEXT_REPR = re.compile(rf"(?<![\w-])({_NAMED}['\"]?\s*[=:]\s*)(['\"])(?!{re.escape(REDACTED)})([^'\"]*)\2",
                        re.IGNORECASE)


def is_secret_flag(flag: str) -> bool:
    return bool(_SECRET_FLAG.match(flag.split("=", 1)[0]))


def is_secret_env(name: str) -> bool:
    return name not in _NOT_SECRET_ENV and bool(_SECRET_ENV.match(name))


def is_secret_field(name: str) -> bool:
    return name not in _NOT_SECRET_FIELDS and bool(_SECRET_FIELD.match(name))


def redact_argv(argv: Iterable[str]) -> list[str]:
    """argv with the value of every secret flag replaced: `--api-key X` and `--api-key=X`."""
    redacted: list[str] = []
    hide_next = False
    for item in argv:
        item = str(item)
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        if item.startswith("-") and "=" in item and is_secret_flag(item):
            redacted.append(item.split("=", 1)[0] + "=" + REDACTED)
        elif item.startswith("-") and is_secret_flag(item):
            redacted.append(item)
            hide_next = True
        else:
            redacted.append(redact_text(item))
    return redacted


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """env with the value of every secret-named variable (*_TOKEN, *_KEY, *_SECRET, *PASSWORD*)."""
    return {key: (REDACTED if is_secret_env(str(key)) else value) for key, value in env.items()}


def redact_text(text: str) -> str:
    """Free text with secret flag values, NAME_TOKEN=values and api_key='…' reprs replaced."""
    if not text or not any(word in text.lower() for word in ("key", "token", "secret", "passw")):
        return text  # the common case costs one scan
    text = _TEXT_FLAG.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _TEXT_ENV.sub(lambda m: m.group(1) + "=" + (REDACTED if is_secret_env(m.group(1)) else m.group(2)),
                         text)
    return _TEXT_REPR.sub(lambda m: m.group(1) + m.group(2) + REDACTED + m.group(2), text)


def redact(value: Any) -> Any:
    """A JSON-ready value (dicts, lists, strings) with every secret replaced.

    `argv` lists and `env` tables are redacted by structure, other strings as free text, and a
    value under a secret-named key (`api_key`, `HF_TOKEN`) is replaced whole.
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            name = str(key)
            if name == "argv" and isinstance(item, (list, tuple)):
                result[key] = redact_argv(item)
            elif name == "env" and isinstance(item, Mapping):
                result[key] = {k: redact(v) for k, v in redact_env(item).items()}
            elif isinstance(item, str) and (is_secret_field(name) or (name.isupper() and is_secret_env(name))):
                result[key] = REDACTED if item else item
            else:
                result[key] = redact(item)
        return result
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return value


def restore_argv(stored: Sequence[str], reference: Sequence[str]) -> list[str]:
    """A redacted argv with each secret put back from `reference` (the config's argv), matched by
    the flag it belongs to; a secret the reference no longer has stays redacted."""
    original = [str(item) for item in reference]
    redacted = redact_argv(original)
    by_context: dict[tuple[str, str], str] = {}
    by_token: dict[str, str] = {}
    for index, (plain, hidden) in enumerate(zip(original, redacted)):
        if plain != hidden:
            by_context[(redacted[index - 1] if index else "", hidden)] = plain
            by_token.setdefault(hidden, plain)
    restored = []
    for index, item in enumerate(stored):
        item = str(item)
        if REDACTED in item:
            before = str(stored[index - 1]) if index else ""
            item = by_context.get((before, item), by_token.get(item, item))
        restored.append(item)
    return restored


def restore_env(stored: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, Any]:
    """A redacted env with each secret value put back from `reference` by its name."""
    return {key: (reference.get(key, value) if value == REDACTED else value) for key, value in stored.items()}


def structlog_processor(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """A structlog processor: every field of every log event passes through `redact`."""
    return redact(event)
