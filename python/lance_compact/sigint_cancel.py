"""Ctrl-C in a PySpark script cancels what runs, also during ``spark.sql("CALL ...")``.

PySpark's SIGINT handler (``SparkContext.__init__``) calls ``cancelAllJobs()`` and raises
``KeyboardInterrupt``. It runs on the main thread, inside the Py4J call the Ctrl-C interrupted
(``spark.sql(...).collect()``): a second command on that thread's connection fails
(``Py4JError``), so the cancel never reaches Spark and the statement goes on in the JVM -- a
compaction then commits after the user stopped it, and nobody is told. With
:func:`install` (done by ``configure_spark_with_lance_compact``), a call of ``cancelAllJobs`` on
the main thread goes to Spark from a thread of its own (its own Py4J connection): the engine's
cancel watch takes it as the statement's cancel, and nothing commits after it. Elsewhere the
method runs as PySpark's own. (The PySpark API's calls, ``compact(spark, ...)``, run on a
thread of their own anyway and answer with the statement's cancel: call_runner.py.)
"""
from __future__ import annotations

import threading
from typing import Any

# How long the interrupted caller waits for the cancel to be sent (the JVM posts it at once).
SEND_TIMEOUT_S = 10.0


def install() -> None:
    """Make ``SparkContext.cancelAllJobs`` on the main thread send from a thread of its own (once)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # a Spark Connect client alone: no SparkContext, no such handler
        return

    original = SparkContext.cancelAllJobs
    if getattr(original, "_lance_compact_sigint", False):
        return

    def cancelAllJobs(self: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return original(self)
        failed: list[BaseException] = []

        def send() -> None:
            try:
                original(self)
            except BaseException as e:  # re-raised on the caller's thread
                failed.append(e)

        sender = threading.Thread(target=send, name="lance-compact-cancel-all-jobs", daemon=True)
        sender.start()
        sender.join(SEND_TIMEOUT_S)
        if failed:
            raise failed[0]

    cancelAllJobs.__doc__ = original.__doc__
    cancelAllJobs._lance_compact_sigint = True  # type: ignore[attr-defined]
    SparkContext.cancelAllJobs = cancelAllJobs  # type: ignore[method-assign]
