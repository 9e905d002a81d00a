"""Indices survive compaction: Lance's commit remaps them, queries answer the same."""
import shutil

import lance
import numpy as np
import pytest

from oracle import batch, content, degraded_table


@pytest.fixture
def indexed_table(warehouse):
    path = warehouse / "db" / "indexed.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = degraded_table(str(path), fragments=60, rows_per_fragment=50)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    # Streaming goes on after the index build: unindexed fragments, then more deletes.
    ds = lance.write_dataset(batch(10_000, 400, seed=1), str(path), mode="append", max_rows_per_file=50)
    ds.delete("id % 11 = 0")
    return "db.indexed", path


def queries(ds):
    rng = np.random.default_rng(7)
    scalar = {f: ds.to_table(filter=f, columns=["id", "category"]).sort_by("id")
              for f in ["id = 123", "id < 400", "id >= 2900 AND id < 3100", "id > 10100"]}
    vectors = []
    for _ in range(5):
        q = rng.standard_normal(8).astype(np.float32)
        t = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4},
                        columns=["id"])
        vectors.append((t["id"].to_pylist(), np.round(t["_distance"].to_numpy(), 4).tolist()))
    return scalar, vectors


def uses_index(ds, column):
    stats = ds.stats.index_stats(f"{column}_idx")
    return stats["num_indexed_rows"] > 0


@pytest.mark.parametrize("defer", [False, True])
def test_btree_and_ivf_pq_answer_the_same_after_compaction(spark, indexed_table, defer):
    table, path = indexed_table
    before = lance.dataset(str(path))
    expected = queries(before)
    assert "ScalarIndexQuery" in before.scanner(filter="id = 123").explain_plan()

    # restore_indices off: optimize_indices would add the unindexed appends to the IVF_PQ index (other
    # approximate answers); here the compaction's remap alone must keep every answer
    r = spark.sql(f"CALL lance.compact(table => '{table}', target_rows_per_fragment => 500, "
                  f"defer_index_remap => {str(defer).lower()}, options => map('restore_indices', 'false'))").collect()[0]
    after = lance.dataset(str(path))
    assert r.tasks >= 2 and r.new_version == after.version
    assert len(after.get_fragments()) < len(before.get_fragments())
    assert content(after) == content(before)
    names = {i["name"] for i in after.list_indices()}
    assert {"id_idx", "vector_idx"} <= names
    if defer:
        # Deferred remap: Lance records a fragment-reuse index instead of remapping.
        assert any("frag_reuse" in n for n in names)
    assert "ScalarIndexQuery" in after.scanner(filter="id = 123").explain_plan()
    assert uses_index(after, "id") and uses_index(after, "vector")
    assert queries(after) == expected
