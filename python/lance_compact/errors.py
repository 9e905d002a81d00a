"""Errors a user sees. Each names the table and the option or value at fault."""
from __future__ import annotations

# The JVM side finds this marker in Spark's PYTHON_DATA_SOURCE_ERROR text and shows the
# message after it as the error of the CALL.
MARKER = "[LANCE_COMPACT]"


# What kind of failure an error is; the JVM names each with an error condition and SQLSTATE
# (LanceCompactException.Kind, docs/failures-and-cancellation.md). The Lance failure kinds of
# runtime/failures.py (conflict, storage, missing, corrupt, config, bug) plus these three
# (MAINTENANCE_FAILED: maintain or maintain_warehouse with fail_on_error => true, some table failed):
INVALID, CANCELLED, MAINTENANCE_FAILED = "invalid", "cancelled", "maintenance_failed"


class CompactionError(Exception):
    """A compaction request that cannot be carried out, with a message for the user.

    ``kind``: what kind of failure it is (:data:`INVALID` bad input, or a kind of
    ``runtime/failures.py``); left out, the engine reads it from the message's words."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(f"{MARKER} {message}")
        self.message = message
        self.kind = kind


class MaintenanceFailed(CompactionError):
    """``maintain`` / ``maintain_warehouse`` with ``fail_on_error => true``: the run did all it
    could and some table failed. The message names each failed table and why, and what was
    committed; ``rows`` (in parameters.json's ``section`` columns) are the run's result rows,
    which the JVM still records (metrics) before it fails the statement."""

    def __init__(self, message: str, section: str, rows: list) -> None:
        super().__init__(message, MAINTENANCE_FAILED)
        self.section = section
        self.rows = rows


class TableNotFoundError(LookupError):
    """The PySpark API's error for a table it was named that does not exist in the catalog
    (``table_health``, ``history``, ``LanceTable.for_name``): it names the table and the
    catalog, and the closest existing name when one is near. The condition is the one the
    catalog's statements use for a missing table (``LANCE_TABLE_NOT_FOUND``)."""

    condition = "LANCE_TABLE_NOT_FOUND"

    def __init__(self, message: str, table: str, catalog: str) -> None:
        super().__init__(f"[{self.condition}] {message}")
        self.message, self.table, self.catalog = message, table, catalog


class StatementInterrupted(KeyboardInterrupt):
    """The PySpark API's call was interrupted (Ctrl-C, a notebook's stop) and its statement
    cancelled (python/lance_compact/call_runner.py). A ``KeyboardInterrupt``, so a script stops
    as on any Ctrl-C; its message is the statement's own answer to the cancel ("... cancelled
    ...; nothing was committed", or what landed when its commit came first). ``answer``: the
    statement's error, if it answered with one; ``result``: its result, if it had finished
    (its commit came first); ``seconds``: from the cancel to the answer."""

    def __init__(self, message: str, answer: BaseException | None = None, result: object = None,
                 seconds: float | None = None) -> None:
        super().__init__(message)
        self.message, self.answer, self.result, self.seconds = message, answer, result, seconds

    def __str__(self) -> str:
        return self.message
