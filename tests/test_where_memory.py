"""``where`` narrows a compaction to the fragments holding matching rows; the driver finds them
batch by batch, never holding every matching row address (about 1M here)."""
from __future__ import annotations

import subprocess
import sys

import lance
import pyarrow as pa
import pytest

from lance_compact.errors import CompactionError
from lance_compact.compaction.orchestrate import fragments_matching

MEASURE = """
import resource, sys, time
import lance
from lance_compact.compaction.orchestrate import fragments_matching
ds = lance.dataset(sys.argv[1])
fragments_matching(ds, "id < 10", "t")  # the first scan's one-off allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
ids = fragments_matching(ds, "id >= 0", "t")
print(sorted(ids), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, time.monotonic() - started)
"""


def test_a_million_matching_rows_cost_the_driver_one_batch(tmp_path):
    """~980,000 matching rows in 50 fragments (one without live rows): the right fragments,
    and the driver's peak memory grows by a few MB (collecting every address grew it by
    about 112 MB)."""
    path = str(tmp_path / "w.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(1_000_000), pa.int64())}), path, max_rows_per_file=20_000)
    lance.dataset(path).delete("id >= 500000 and id < 520000")  # fragment 25
    p = subprocess.run([sys.executable, "-c", MEASURE, path], capture_output=True, text=True, timeout=120)
    ids, grown_mb, seconds = p.stdout.strip().rsplit(" ", 2)[0], *map(float, p.stdout.split()[-2:])
    assert ids == str([i for i in range(50) if i != 25]), p.stderr[-2000:]
    assert grown_mb < 30, f"the driver grew by {grown_mb:.0f} MB"
    assert seconds < 20


def test_where_that_lance_cannot_evaluate_names_the_table(tmp_path):
    ds = lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), str(tmp_path / "e.lance"))
    with pytest.raises(CompactionError, match=r"table db.e: where 'nope = 1' is not a predicate Lance can evaluate"):
        fragments_matching(ds, "nope = 1", "db.e")
    assert fragments_matching(ds, "id = 99", "db.e") == set()


# Times or measures the machine: run alone, not beside other modules (bin/test).
pytestmark = pytest.mark.serial
