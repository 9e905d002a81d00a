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
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator, Mapping

# Storage option names whose values are secrets or identify one: aws_access_key_id,
# aws_secret_access_key, aws_session_token, azure_storage_account_key, *_sas_*, tokens,
# passwords, service account keys and credentials.
# A catalog service's headers (``header.Authorization``, ``header.x-api-key``) are secrets too.
SECRET_OPTION = re.compile(r"(?i)secret|key|token|password|credential|sas|signature|session|header|authorization")
REDACTED = "*********(redacted)"


def secret_values(storage_options: Mapping[str, str] | None) -> list[str]:
    """The values of the secret-bearing options, longest first (so no part of one survives)."""
    values = {str(v) for k, v in (storage_options or {}).items()
              if SECRET_OPTION.search(k) and v is not None and len(str(v)) >= 3}
    return sorted(values, key=len, reverse=True)


def redact(text: str, storage_options: Mapping[str, str] | None) -> str:
    """``text`` with every secret storage option value replaced, and every secret a catalog
    service vended to this process (:func:`remember_vended`)."""
    values = set(secret_values(storage_options))
    with _vended_lock:
        values.update(_vended)
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


# Secrets a catalog service vended (DescribeTable's storage options: temporary keys, tokens),
# remembered by the process that received them and redacted from its errors and log lines. They
# change with every refresh; the newest are kept (bounded: a long-lived engine sees many).
MAX_VENDED_SECRETS = 256
_vended: "OrderedDict[str, None]" = OrderedDict()
_vended_lock = threading.Lock()


def remember_vended(storage_options: Mapping[str, str] | None) -> None:
    """Redact the secret values of storage options a catalog service vended from now on."""
    values = [v for v in secret_values(storage_options) if len(v) >= MIN_LOGGED_SECRET]
    if not values:
        return
    with _vended_lock:
        for value in values:
            _vended[value] = None
            _vended.move_to_end(value)
        while len(_vended) > MAX_VENDED_SECRETS:
            _vended.popitem(last=False)


# The engine's log: every line is redacted of the operator's secrets (the static configuration's
# secret-named storage options, read once at start) and, on the thread serving a request, of
# that request's own secrets. A value a SQL user sets is never remembered beyond its request:
# `SET ...storage.my_secret=compact` must not erase "compact" from everyone's log lines.
MIN_LOGGED_SECRET = 6  # shorter values would turn every log line into mush; a real key is long
MAX_OPERATOR_SECRETS = 64
_operator: set[str] = set()
_operator_lock = threading.Lock()
_request = threading.local()


def redactable_in_logs(value: str) -> bool:
    """Whether ``value`` is redacted from log lines: at least :data:`MIN_LOGGED_SECRET`
    characters, and not a plain word (letters only, up to 12: "compact", "version"), which a
    real key, token or password generated for a store is not."""
    return len(value) >= MIN_LOGGED_SECRET and not (value.isalpha() and len(value) <= 12)


def remember_operator(storage_options: Mapping[str, str] | None) -> None:
    """At engine start: the operator's secret storage option values (its static configuration),
    redacted from every later log line of this process (at most :data:`MAX_OPERATOR_SECRETS`).
    The operator chose them, so only the length bound applies."""
    short = sorted(k for k, v in (storage_options or {}).items()
                   if SECRET_OPTION.search(k) and v is not None and len(str(v)) < MIN_LOGGED_SECRET)
    with _operator_lock:
        for value in secret_values(storage_options):
            if len(value) >= MIN_LOGGED_SECRET and len(_operator) < MAX_OPERATOR_SECRETS:
                _operator.add(value)
    if short:  # named, never shown
        logging.getLogger("lance_compact.runtime.secrets").warning(
            "storage options %s have values shorter than %d characters: too short to redact from "
            "this log without erasing ordinary text; use real credentials", ", ".join(short), MIN_LOGGED_SECRET)


@contextmanager
def request_secrets(storage_options: Mapping[str, str] | None) -> Iterator[None]:
    """While serving one request on this thread: its secret values are also redacted from the
    log lines this thread writes (the plain words and short values excepted, see
    :func:`redactable_in_logs`), and forgotten afterwards."""
    previous = getattr(_request, "values", ())
    _request.values = tuple(v for v in secret_values(storage_options) if redactable_in_logs(v))
    try:
        yield
    finally:
        _request.values = previous


def _log_secrets() -> list[str]:
    with _operator_lock:
        known = set(_operator)
    with _vended_lock:
        known.update(_vended)
    known.update(getattr(_request, "values", ()))
    return sorted(known, key=len, reverse=True)


class _RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        known = _log_secrets()
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
