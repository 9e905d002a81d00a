"""Errors a user sees. Each names the table and the option or value at fault."""

# The JVM side finds this marker in Spark's PYTHON_DATA_SOURCE_ERROR text and shows the
# message after it as the error of the CALL.
MARKER = "[LANCE_COMPACT]"


class CompactionError(Exception):
    """A compaction request that cannot be carried out, with a message for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{MARKER} {message}")
        self.message = message
