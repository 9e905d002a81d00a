"""Maintenance from a real streaming query (examples/streaming_maintenance.py): a rate source
writes a Lance table through foreachBatch, which also runs CALL lance.maintain every few
batches; the table compacts while written and keeps exactly the rows the stream wrote."""
from conftest import VERSION_FLOOR_KEY
from streaming_maintenance import RETENTION, run

# the operator's, as the example's own session sets it: its maintain cleans up versions
# older_than '10 seconds', below the default version floor (7 days)
SPARK_CONF = {VERSION_FLOOR_KEY: RETENTION}


def test_a_stream_maintains_its_own_table(spark, warehouse):
    # 10 batches whatever the machine's pace (CI under load ran 3 in 14 s); the first creates
    # the table, the wrapped function maintains after its 1st, 4th and 7th of the other 9
    out = run(spark, str(warehouse), seconds=8, rows_per_second=50, every=3, batches=10)
    assert out["batches"] >= 10, out
    assert out["written"] > 0 and out["exact"] and out["distinct"], out
    ran = [step for _, steps in out["rounds"] for step, did, _ in steps if did]
    assert "compact" in ran, out["rounds"]
    assert out["fragments"] < len({b for b, _ in out["rounds"]}) * 3  # fewer than one per batch
