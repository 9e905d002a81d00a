"""Keeping storage credentials out of what users and logs see.

Credentials reach the engine and the executors only as Lance storage options. Any text that
may quote them (a Lance or object-store error, a task's exception on an executor) passes
through :func:`redact` before it is raised, logged or returned.
"""
from __future__ import annotations

import re
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
