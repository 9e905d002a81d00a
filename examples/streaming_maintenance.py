"""A streaming query writing a Lance table and maintaining it from its own foreachBatch.

    .venv/bin/python examples/streaming_maintenance.py /tmp/stream-wh --seconds 30
    .venv/bin/python examples/streaming_maintenance.py /tmp/stream-wh --seconds 10 --batches 20

It streams for ``--seconds``, then on until ``--batches`` micro-batches wrote rows (default
``2 * --every + 2``: three maintenance rounds), at most ten times ``--seconds`` in all.

A rate source (``--rows-per-second``) feeds micro-batches every second; each is appended to
``<warehouse>/db/stream.lance`` with Lance, so the table grows a small fragment per batch.
Every ``--every`` batches the same foreachBatch runs ``CALL lance.maintain`` with a byte
budget (lance_compact.streaming.with_maintenance). At the end the query stops and the table
is checked: exactly the rows the stream wrote, each once.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import lance

RETENTION = "10 seconds"  # maintain's older_than here: a demo's versions are seconds old


def run(spark, warehouse: str, seconds: float, rows_per_second: int, every: int,
        batches: int = 0) -> dict:
    """Stream for ``seconds``, and on until ``batches`` micro-batches wrote rows (a slow
    machine runs fewer per second; bounded by ten times ``seconds``)."""
    from pyspark.sql import functions as F
    from lance_compact.streaming import with_maintenance

    uri = os.path.join(warehouse, "db", "stream.lance")
    written: list[int] = []
    written_batches: set[int] = set()
    rounds: list[tuple[int, list]] = []

    def write(batch, batch_id):
        table = batch.select(F.col("value").alias("id"),
                             F.concat(F.lit("event "), F.col("value").cast("string")).alias("payload"),
                             F.col("timestamp").alias("ts")).toArrow()
        if table.num_rows:
            lance.write_dataset(table, uri, mode="append" if os.path.exists(uri) else "create")
            written.extend(table["id"].to_pylist())
            written_batches.add(batch_id)

    def maintained(batch_id, rows):
        rounds.append((batch_id, [(r.step, r.ran, r.outcome or r.reason) for r in rows]))

    sink = with_maintenance(spark, "db.stream", write, every=every, max_rewrite_bytes=64 << 20,
                            min_small_fragments=4, older_than=RETENTION, on_result=maintained)

    def guarded(batch, batch_id):  # maintenance needs the table to exist
        if os.path.exists(uri) or batch.count():
            sink(batch, batch_id) if os.path.exists(uri) else write(batch, batch_id)

    query = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
             .writeStream.foreachBatch(guarded).trigger(processingTime="1 second").start())
    try:
        time.sleep(seconds)
        deadline = time.monotonic() + 9 * seconds
        while len(written_batches) < batches and time.monotonic() < deadline and query.isActive:
            time.sleep(0.2)
    finally:
        query.stop()
    ds = lance.dataset(uri)
    ids = ds.to_table(columns=["id"])["id"].to_pylist()
    return {"written": len(written), "rows": len(ids), "exact": sorted(ids) == sorted(written),
            "distinct": len(set(ids)) == len(ids), "fragments": len(ds.get_fragments()),
            "batches": len(written_batches), "rounds": rounds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("warehouse")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--rows-per-second", type=int, default=100)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--batches", type=int, default=None,
                   help="go on after --seconds until this many micro-batches wrote rows (default: "
                        "2 x --every + 2, three maintenance rounds; at most 10x --seconds)")
    a = p.parse_args()
    from pyspark.sql import SparkSession
    from lance_compact import configure_spark_with_lance_compact

    shutil.rmtree(os.path.join(a.warehouse, "db", "stream.lance"), ignore_errors=True)
    os.makedirs(os.path.join(a.warehouse, "db"), exist_ok=True)
    spark = configure_spark_with_lance_compact(
        SparkSession.builder.master("local[2]").appName("streaming-maintenance")
        .config("spark.ui.enabled", "false")
        # the operator's version floor lowered to the demo's retention (default 7 days: no
        # cleanup removes a younger version, as Delta's VACUUM)
        .config("spark.lance.compact.cleanup.versionMinAge", RETENTION), warehouse=a.warehouse).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    batches = a.batches if a.batches is not None else 2 * a.every + 2
    out = run(spark, a.warehouse, a.seconds, a.rows_per_second, a.every, batches)
    for batch_id, steps in out.pop("rounds"):
        print(f"after batch {batch_id}: " + "; ".join(f"{s} {'ran: ' if ran else 'skipped: '}{what}"
                                                       for s, ran, what in steps))
    print(out)
    spark.stop()
    return 0 if out["exact"] and out["distinct"] else 1


if __name__ == "__main__":
    sys.exit(main())
