"""Errors a user sees. Each names the table and the option or value at fault."""
from __future__ import annotations

# The JVM side finds this marker in Spark's PYTHON_DATA_SOURCE_ERROR text and shows the
# message after it as the error of the CALL.
MARKER = "[LANCE_COMPACT]"


# What kind of failure an error is; the JVM names each with an error condition and SQLSTATE
# (LanceCompactException.Kind, docs/failures-and-cancellation.md). The Lance failure kinds of
# runtime/failures.py (conflict, storage, missing, corrupt, config, bug) plus these two:
INVALID, CANCELLED = "invalid", "cancelled"


class CompactionError(Exception):
    """A compaction request that cannot be carried out, with a message for the user.

    ``kind``: what kind of failure it is (:data:`INVALID` bad input, or a kind of
    ``runtime/failures.py``); left out, the engine reads it from the message's words."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(f"{MARKER} {message}")
        self.message = message
        self.kind = kind
