"""Keeping storage credentials out of what users and logs see.

Credentials reach the engine and the executors only as Lance storage options. Any text that
may quote them (a Lance or object-store error, a task's exception on an executor) passes
through :func:`redact` before it is raised, logged or returned.
"""
from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Mapping

# Storage option names whose values are secrets or identify one: aws_access_key_id,
# aws_secret_access_key, aws_session_token, azure_storage_account_key, *_sas_*, tokens,
# passwords, service account keys and credentials.
SECRET_OPTION = re.compile(r"(?i)secret|key|token|password|credential|sas|signature|session")
REDACTED = "*********(redacted)"


def secret_values(storage_options: Mapping[str, str] | None) -> list[str]:
    """The values of the secret-bearing options, longest first (so no part of one survives)."""
    values = {str(v) for k, v in (storage_options or {}).items()
              if SECRET_OPTION.search(k) and v is not None and len(str(v)) >= 3}
    return sorted(values, key=len, reverse=True)


def redact(text: str, storage_options: Mapping[str, str] | None) -> str:
    """``text`` with every secret storage option value replaced."""
    for value in secret_values(storage_options):
        text = text.replace(value, REDACTED)
    return text


# The engine's log: every line passes through redaction of every secret the engine has seen
# (the catalogs' storage options at start, each request's storage options).
_seen: dict[str, str] = {}
_seen_lock = threading.Lock()


def remember(storage_options: Mapping[str, str] | None) -> None:
    """Redact ``storage_options``' secret values from every later log line of this process."""
    with _seen_lock:
        for k, v in (storage_options or {}).items():
            if SECRET_OPTION.search(k) and v is not None:
                _seen[str(v)] = k


class _RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        with _seen_lock:
            known = sorted((v for v in _seen if len(v) >= 3), key=len, reverse=True)
        if not known:
            return True

        def clean(text: str) -> str:
            for value in known:
                text = text.replace(value, REDACTED)
            return text

        record.msg = clean(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = clean(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def install_log_redaction() -> None:
    """Redact every handler's lines on the root logger, and route uncaught exceptions (which
    Python would print to stderr, the engine's log) through logging."""
    redacting = _RedactingFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(redacting)
    log = logging.getLogger("lance_compact")
    sys.excepthook = lambda t, e, tb: log.error("uncaught exception", exc_info=(t, e, tb))
    threading.excepthook = lambda a: log.error("uncaught exception in thread %s",
                                               a.thread.name if a.thread else "?",
                                               exc_info=(a.exc_type, a.exc_value, a.exc_traceback))
