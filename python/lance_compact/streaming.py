"""Table maintenance from a Structured Streaming query, without a separate job.

Wrap the function a query hands to ``foreachBatch``; every ``every`` micro-batches (and on
the first one) it runs ``CALL lance.maintain`` on the same session, after the batch was
written, with a byte budget so the stream is held up only briefly::

    from lance_compact.streaming import with_maintenance

    def write(batch, batch_id):                      # the query's own write
        lance.write_dataset(batch.toArrow(), uri, mode="append")

    query = (stream.writeStream
             .foreachBatch(with_maintenance(spark, "db.events", write, every=20,
                                            max_rewrite_bytes=256 << 20, older_than="8d"))
             .start())

Maintenance failures are logged and do not stop the stream (the next round tries again; with
``fail_on_error=True`` a round with a failed table is such a failure, its warning naming them);
``on_result`` receives each round's rows (for metrics). ``with_warehouse_maintenance`` does
the same for every table of the warehouse (or of a namespace) with ``maintain_warehouse``.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from .api import maintain, maintain_warehouse
from .runtime.envelope import DEFAULT_CATALOG

log = logging.getLogger(__name__)


def with_maintenance(spark: Any, table: str, write: Callable[[Any, int], None], every: int = 10,
                     catalog: str = DEFAULT_CATALOG, on_result: Callable[[int, list], None] | None = None,
                     **params: Any) -> Callable[[Any, int], None]:
    """``write`` followed, every ``every`` micro-batches, by ``maintain(spark, table,
    **params)`` (``max_rewrite_bytes`` bounds the compaction step; see ``CALL lance.maintain``)."""
    return _every(write, every, table, lambda: maintain(spark, table, catalog=catalog, **params).collect(), on_result)


def with_warehouse_maintenance(spark: Any, write: Callable[[Any, int], None], every: int = 10,
                               namespace: str | None = None, catalog: str = DEFAULT_CATALOG,
                               on_result: Callable[[int, list], None] | None = None,
                               **params: Any) -> Callable[[Any, int], None]:
    """``write`` followed, every ``every`` micro-batches, by ``maintain_warehouse(spark,
    namespace, **params)``: a job writing many tables keeps all of them maintained (bound
    each round with ``max_duration``, ``max_tables`` or ``max_total_rewrite_bytes``)::

        query = stream.writeStream.foreachBatch(with_warehouse_maintenance(
            spark, write, every=50, namespace="events", max_duration="2 minutes")).start()
    """
    what = f"namespace {namespace}" if namespace else "the warehouse"
    return _every(write, every, what,
                  lambda: maintain_warehouse(spark, namespace, catalog=catalog, **params).collect(), on_result)


def _every(write: Callable[[Any, int], None], every: int, what: str, run_maintenance: Callable[[], list],
           on_result: Callable[[int, list], None] | None) -> Callable[[Any, int], None]:
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    batches = {"n": 0}

    def run(batch: Any, batch_id: int) -> None:
        write(batch, batch_id)
        batches["n"] += 1
        if (batches["n"] - 1) % every:
            return
        clock = time.monotonic()
        try:
            rows = run_maintenance()
        except Exception as e:  # the stream goes on; the next round tries again
            log.warning("maintenance of %s after batch %s failed: %s", what, batch_id,
                        str(e).splitlines()[0])
            return
        log.info("maintenance of %s after batch %s: %s in %.1f s", what, batch_id,
                 ", ".join(f"{getattr(r, 'table', what)}:{r.step}={'ran' if r.ran else 'skipped'}" for r in rows),
                 time.monotonic() - clock)
        if on_result is not None:
            on_result(batch_id, rows)

    return run
