"""The health score grades: tables further from healthy score strictly worse, so
maintain_warehouse's "worst first" is an order (issue: six tables with 16 to 120 small fragments
all scored 60, and max_tables => 2 picked the 120- and the 16-fragment tables)."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest

COUNTS = (16, 24, 40, 60, 90, 120)


@pytest.fixture(scope="module")
def graded(warehouse):
    (warehouse / "grade").mkdir()
    for n in COUNTS:
        data = pa.table({"id": pa.array(range(n * 40), pa.int64())})
        lance.write_dataset(data, str(warehouse / "grade" / f"t{n:03d}.lance"), max_rows_per_file=40)
    return {f"grade.t{n:03d}": n for n in COUNTS}


def test_more_small_fragments_score_strictly_worse(spark, graded):
    rows = {f"{r['namespace']}.{r['table']}": r for r in spark.sql(
        "SELECT * FROM lance.system.table_health WHERE namespace = 'grade'").collect()}
    assert {n: rows[n]["fragments"] for n in graded} == graded
    scores = [rows[n]["health_score"] for n in sorted(graded, key=graded.get)]
    assert all(a > b for a, b in zip(scores, scores[1:])), scores
    assert all(rows[n]["due"] == ["compact"] for n in graded)


def test_deleted_rows_and_old_versions_grade_too(spark, warehouse):
    from lance_compact.maintenance.health import needs

    base = {"fragments": 20, "rows": 800, "target_rows_per_fragment": 1 << 20, "deleted_row_ratio": 0.0,
            "reclaimable_versions": 0, "unindexed_fragments": 0}
    for part, key, values in (("deleted_rows", "deleted_row_ratio", (0.05, 0.1, 0.3, 0.5, 0.8, 1.0)),
                              ("old_versions", "reclaimable_versions", (1, 5, 10, 50, 500)),
                              ("index_lag", "unindexed_fragments", (1, 2, 5, 10, 20)),
                              ("small_fragments", "fragments", (2, 20, 200, 2000))):
        got = [needs({**base, key: v})[part] for v in values]
        assert all(0 <= a < b <= 1 for a, b in zip(got, got[1:])), (part, got)


def test_maintain_warehouse_takes_the_worst_first(spark, graded):
    rows = spark.sql("CALL lance.maintain_warehouse(namespace => 'grade', max_tables => 2, dry_run => true)").collect()
    chosen = {r.table for r in rows if r.step == "compact" and "max_tables" not in (r.reason or "")}
    assert chosen == {"grade.t120", "grade.t090"}, [tuple(r) for r in rows]
