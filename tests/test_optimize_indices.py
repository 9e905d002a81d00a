"""CALL lance.optimize_indices: the fragments indices do not cover (appended, or compacted
with a concurrent delete carried over) are built as a new segment of each index with its own
model, by Spark tasks (``engineRewrite.maxBatchBytes=0``: no build in the engine), and committed
beside its segments, which are merged size-tiered; queries equal a scan before and after;
vector recall@10 against brute force within 0.02 of pylance's own optimize_indices on the same
data (vectors on a 4-d subspace: real neighbours), over repeated append+optimize cycles; retrain;
a concurrent append; dry_run reports only. Job descriptions are read from Spark's event log."""
import os
import shutil
import threading
import time

import lance
import numpy as np
import pyarrow as pa
import pytest

from conftest import refused
from oracle import batch, content
from index_checks import index_agrees_with_scan, job_descriptions
import writers

SPARK_MASTER = "local[2,2]"
SPARK_CONF = {"spark.lance.compact.engineRewrite.maxBatchBytes": "0", "spark.eventLog.enabled": "true",
              "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false"}


@pytest.fixture(scope="module")
def event_log(tmp_path_factory):
    """Where this module's Spark application writes its event log (set before the session starts)."""
    folder = tmp_path_factory.mktemp("events")
    SPARK_CONF["spark.eventLog.dir"] = str(folder)
    return folder


@pytest.fixture(scope="module")
def spark(event_log, warehouse):
    from conftest import STRATEGIES, lance_session

    session = lance_session(SPARK_MASTER, "lance-compact-optimize-indices", str(warehouse),
                            {"spark.sql.shuffle.partitions": "2", **SPARK_CONF}, strategies=STRATEGIES)
    yield session
    session.stop()


@pytest.fixture
def indexed(warehouse, request):
    path = warehouse / "db" / f"oi_{request.node.name[:30].replace('[', '_').replace(']', '')}.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = lance.write_dataset(batch(0, 1200), str(path), max_rows_per_file=60)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=2)
    lance.write_dataset(batch(5000, 300), str(path), mode="append", max_rows_per_file=60)  # unindexed
    return f"db.{path.name[:-6]}", path


def unindexed(spark, t):
    layout = spark.sql(f"CALL lance.describe_layout(table => '{t}')").collect()[0]
    return {ix.name: ix.unindexed_fragments for ix in layout.indices}


def test_dry_run_reports_and_changes_nothing(spark, indexed):
    t, path = indexed
    version = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', dry_run => true)").collect()[0]
    assert r.dry_run and r.indices_optimized == 0 and r.new_version == version
    assert r.unindexed_fragments_before == r.unindexed_fragments_after == 10  # 5 fragments x 2 indices
    assert {i.name: i.unindexed_fragments_before for i in r.indices} == {"id_idx": 5, "vector_idx": 5}
    assert lance.dataset(str(path)).version == version


def test_after_a_carried_over_compaction_every_fragment_is_indexed_again(spark, indexed):
    t, path = indexed
    # restore_indices off: the compaction leaves the carried-over fragments to optimize_indices
    c = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 600, options => map("
                  "'test_before_commit', 'writers.delete_everywhere', 'restore_indices', 'false'))").collect()[0]
    assert c.tasks_rebased >= 1
    ds = lance.dataset(str(path))
    expected = content(ds)
    index_agrees_with_scan(ds)
    assert all(n >= 1 for n in unindexed(spark, t).values())
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
    after = lance.dataset(str(path))
    assert r.indices_optimized == 2 and r.unindexed_fragments_after == 0 and r.new_version == after.version
    assert unindexed(spark, t) == {"id_idx": 0, "vector_idx": 0}
    assert content(after) == expected
    index_agrees_with_scan(after)


def test_one_index_by_name_and_retrain(spark, indexed):
    t, path = indexed
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'id_idx')").collect()[0]
    assert [i.name for i in r.indices] == ["id_idx"] and r.unindexed_fragments_after == 0
    assert unindexed(spark, t) == {"id_idx": 0, "vector_idx": 5}
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'vector_idx', retrain => true)").collect()[0]
    assert r.indices_optimized == 1 and unindexed(spark, t) == {"id_idx": 0, "vector_idx": 0}
    index_agrees_with_scan(lance.dataset(str(path)))


def test_an_unknown_index_is_named(spark, indexed):
    t, path = indexed
    with refused(path, "no index named nope; its indices are: id_idx, vector_idx"):
        spark.sql(f"CALL lance.optimize_indices(table => '{t}', indices => 'nope')").collect()


# Incremental upkeep (issue 35 item 3): vectors on a 4-d subspace of R^16 (real neighbours).
DIM, BASE_ROWS, PER_FRAGMENT = 16, 6_000, 600


def subspace(n: int, seed: int) -> np.ndarray:
    basis = np.random.default_rng(0).standard_normal((4, DIM))
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 4)) @ basis + 0.01 * rng.standard_normal((n, DIM))).astype(np.float32)


def embeddings(start: int, n: int, seed: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(subspace(n, seed).ravel()), DIM)})


@pytest.fixture
def embedded(warehouse, request):
    """6,000 vectors in 10 fragments with an IVF_PQ (8 partitions, 4 sub-vectors) and a BTREE
    index built by pylance; the table's name, its path and a reference folder."""
    name = f"up_{request.node.name[:24]}"
    path = warehouse / "db" / f"{name}.lance"
    for p in (path, warehouse / "ref" / f"{name}.lance"):
        shutil.rmtree(p, ignore_errors=True)
    ds = lance.write_dataset(embeddings(0, BASE_ROWS, 1), str(path), max_rows_per_file=PER_FRAGMENT)
    ds.create_scalar_index("id", index_type="BTREE")
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=8, num_sub_vectors=4)
    return f"db.{name}", path, warehouse / "ref" / f"{name}.lance"


def append(path, start: int, n: int, seed: int) -> None:
    lance.write_dataset(embeddings(start, n, seed), str(path), mode="append", max_rows_per_file=n)


def segments(ds: lance.LanceDataset, name: str) -> dict[str, frozenset]:
    return {i["uuid"]: frozenset(i["fragment_ids"]) for i in ds.list_indices() if i["name"] == name}


def folder_state(path, uuids) -> dict[str, tuple]:
    """Each segment folder's files: names, sizes and modification times."""
    out = {}
    for u in uuids:
        for f in sorted((path / "_indices" / u).iterdir()):
            st = f.stat()
            out[f"{u}/{f.name}"] = (st.st_size, st.st_mtime_ns)
    return out


QUERIES = subspace(40, 99)


def recall(ds: lance.LanceDataset, **search) -> float:
    """recall@10 of the ANN index against brute force over the table's live rows."""
    t = ds.to_table(columns=["id", "vector"])
    ids, v = t["id"].to_numpy(), np.stack(t["vector"].to_numpy(zero_copy_only=False))
    found = 0
    for q in QUERIES:
        truth = set(ids[np.argsort(((v - q) ** 2).sum(axis=1))[:10]].tolist())
        got = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4, **search},
                          columns=["id"])["id"].to_pylist()
        found += len(truth & set(got))
    return found / (10 * len(QUERIES))


def scalar_agrees(ds: lance.LanceDataset) -> None:
    """BTREE answers equal a full scan (the index path used: every fragment covered)."""
    top = ds.count_rows()
    for f in ["id = 17", f"id = {BASE_ROWS + 5}", f"id >= {BASE_ROWS - 3}", "id < 40", f"id > {top + 10_000}"]:
        indexed = ds.to_table(filter=f, columns=["id"]).sort_by("id")
        scanned = ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")
        assert indexed == scanned, f


def test_a_one_percent_append_is_a_new_segment_beside_the_old_ones(spark, embedded, event_log):
    t, path, ref = embedded
    before = lance.dataset(str(path))
    old = {n: segments(before, n) for n in ("vector_idx", "id_idx")}
    files = folder_state(path, [u for s in old.values() for u in s])
    append(path, BASE_ROWS, BASE_ROWS // 100, 2)
    new_fragment = max(f.fragment_id for f in lance.dataset(str(path)).get_fragments())
    shutil.copytree(path, ref)
    delta = ref.parent / f"{ref.name[:-6]}_delta.lance"
    shutil.rmtree(delta, ignore_errors=True)
    shutil.copytree(path, delta)
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
    assert r.built_by == "spark tasks" and r.rows_indexed == 2 * 60 and r.segments_built == 2, r
    assert r.unindexed_fragments_before == 2 and r.unindexed_fragments_after == 0
    assert {i.name: (i.built_by, i.rows_indexed, i.segments_merged, i.segments_before, i.segments_after)
            for i in r.indices} == {"id_idx": ("spark tasks", 60, 0, 1, 2), "vector_idx": ("spark tasks", 60, 0, 1, 2)}
    ds = lance.dataset(str(path))
    assert r.new_version == ds.version
    for n in ("vector_idx", "id_idx"):
        now = segments(ds, n)
        assert {u: f for u, f in now.items() if u in old[n]} == old[n]  # the old segments, untouched
        assert [f for u, f in now.items() if u not in old[n]] == [frozenset({new_fragment})]
    assert folder_state(path, [u for s in old.values() for u in s]) == files  # their files too
    scalar_agrees(ds)
    index_agrees_with_scan_vectors(ds)
    theirs = lance.dataset(str(ref))
    theirs.optimize.optimize_indices()  # pylance's own, in one process, on the same data
    lance.dataset(str(delta)).optimize.optimize_indices(num_indices_to_merge=0)  # pylance's own delta
    ours, pylance, own_delta = recall(ds), recall(lance.dataset(str(ref))), recall(lance.dataset(str(delta)))
    print(f"recall@10 after a 1% append: ours {ours:.3f}, pylance's optimize_indices {pylance:.3f}, "
          f"with num_indices_to_merge=0 {own_delta:.3f}")
    assert ours >= pylance - 0.02 and ours >= own_delta - 0.02
    assert any(d.startswith(f"lance.optimize_indices {t}: building 1 IVF_PQ segments of vector_idx")
               for d in job_descriptions(event_log)), job_descriptions(event_log)


def index_agrees_with_scan_vectors(ds: lance.LanceDataset) -> None:
    """Every partition probed and every candidate re-ranked exactly: the ANN answer is the exact
    one, so every segment points at the right rows."""
    for q in QUERIES[:5]:
        ann = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 8, "refine_factor": 1000},
                          columns=["id"])["id"].to_pylist()
        exact = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "use_index": False},
                            columns=["id"])["id"].to_pylist()
        assert ann == exact


def test_cycles_merge_size_tiered_and_recall_holds(spark, embedded):
    t, path, ref = embedded
    shutil.copytree(path, ref)
    base = {n: segments(lance.dataset(str(path)), n) for n in ("vector_idx", "id_idx")}
    start = BASE_ROWS
    expected = [[300], [600], [600, 300], [1200]]  # rows of the segments besides the base: a binary counter
    figures = []
    for cycle, want in enumerate(expected):
        for p in (path, ref):
            append(p, start, 300, 10 + cycle)
        start += 300
        r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
        assert r.rows_indexed == 600 and r.unindexed_fragments_after == 0, r
        merged = {i.name: i.segments_merged for i in r.indices}
        assert merged == {"id_idx": [0, 1, 0, 2][cycle], "vector_idx": [0, 1, 0, 2][cycle]}, (cycle, merged)
        ds = lance.dataset(str(path))
        rows = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
        for n in ("vector_idx", "id_idx"):
            now = segments(ds, n)
            assert set(base[n]) <= set(now)  # the base segment is never rebuilt by an append
            assert sorted((sum(rows[f] for f in frags) for u, frags in now.items() if u not in base[n]),
                          reverse=True) == want, (cycle, n)
        scalar_agrees(ds)
        lance.dataset(str(ref)).optimize.optimize_indices()
        ours, pylance = recall(ds), recall(lance.dataset(str(ref)))
        figures.append((ours, pylance))
        assert ours >= pylance - 0.02, (cycle, ours, pylance)
    print("recall@10 per cycle (ours, pylance's optimize_indices):", figures)
    index_agrees_with_scan_vectors(lance.dataset(str(path)))


def test_num_indices_to_merge_and_retrain(spark, embedded):
    t, path, ref = embedded
    append(path, BASE_ROWS, 300, 2)
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', num_indices_to_merge => 0)").collect()[0]
    assert {i.name: (i.segments_merged, i.segments_after) for i in r.indices} == {"id_idx": (0, 2), "vector_idx": (0, 2)}
    append(path, BASE_ROWS + 300, 300, 3)
    shutil.copytree(path, ref)
    # the newest segment and the new rows; the base kept
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', num_indices_to_merge => 1)").collect()[0]
    assert {i.name: (i.segments_merged, i.segments_after) for i in r.indices} == {"id_idx": (1, 2), "vector_idx": (1, 2)}
    before = segments(lance.dataset(str(path)), "vector_idx")
    r = spark.sql(f"CALL lance.optimize_indices(table => '{t}', retrain => true)").collect()[0]
    ds = lance.dataset(str(path))
    assert r.indices_optimized == 2 and r.unindexed_fragments_after == 0 and r.built_by == "spark tasks", r
    now = segments(ds, "vector_idx")
    assert not set(now) & set(before) and set().union(*now.values()) == {f.fragment_id for f in ds.get_fragments()}
    scalar_agrees(ds)
    index_agrees_with_scan_vectors(ds)
    lance.dataset(str(ref)).optimize.optimize_indices(retrain=True)
    ours, pylance = recall(ds), recall(lance.dataset(str(ref)))
    print(f"recall@10 after retrain: ours {ours:.3f}, pylance's optimize_indices(retrain=True) {pylance:.3f}")
    assert ours >= pylance - 0.02


def test_a_concurrent_append_during_the_upkeep(spark, embedded):
    """Appends every few ms while optimize_indices runs, until one lands between the version the
    upkeep read and the one it committed (Lance rebases the index commit over it): the new
    fragments stay unindexed, every segment covers live fragments, answers are exact."""
    t, path, _ = embedded
    stop, landed = threading.Event(), []

    def writer():
        start = 100_000
        while not stop.is_set():
            append(path, start, 50, start)
            landed.append(lance.dataset(str(path)).version)
            start += 50
            time.sleep(0.01)

    met = False
    for attempt in range(6):
        append(path, 10_000 * (attempt + 1), 600, attempt)
        stop.clear()
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            r = spark.sql(f"CALL lance.optimize_indices(table => '{t}')").collect()[0]
        finally:
            stop.set()
            thread.join()
        ds = lance.dataset(str(path))
        live = {f.fragment_id for f in ds.get_fragments()}
        for n in ("vector_idx", "id_idx"):
            for frags in segments(ds, n).values():
                assert frags <= live
        scalar_agrees(ds)
        index_agrees_with_scan_vectors(ds)
        assert ds.count_rows() == BASE_ROWS + 600 * (attempt + 1) + 50 * len(landed)
        if any(r.read_version < v < r.new_version for v in landed):
            met = True
            # every fragment of the version it read is covered; only those appended since are not
            at_read = {f.fragment_id for f in lance.dataset(str(path), version=r.read_version).get_fragments()}
            for n in ("vector_idx", "id_idx"):
                covered = set().union(*segments(ds, n).values())
                assert at_read <= covered and covered <= live, n
            assert r.unindexed_fragments_after > 0
            break
    assert met, "no append landed while optimize_indices ran"


@pytest.mark.parametrize("index_type, params", [
    ("IVF_FLAT", {}), ("IVF_SQ", {}), ("IVF_RQ", {}), ("IVF_HNSW_SQ", {}), ("IVF_HNSW_PQ", {"num_sub_vectors": 4})])
def test_every_vector_type_keeps_its_model_and_recall(spark, warehouse, index_type, params):
    """Two append+optimize cycles (the second merges the first's segment with the new rows):
    recall within 0.02 of pylance's own optimize_indices on the same data, exact with every
    partition probed and re-ranked."""
    name = f"vt_{index_type.lower()}"
    path, ref = warehouse / "db" / f"{name}.lance", warehouse / "ref" / f"{name}.lance"
    for p in (path, ref):
        shutil.rmtree(p, ignore_errors=True)
    ds = lance.write_dataset(embeddings(0, 3_000, 1), str(path), max_rows_per_file=PER_FRAGMENT)
    ds.create_index("vector", index_type=index_type, num_partitions=8, **params)
    shutil.copytree(path, ref)
    for cycle in range(2):
        for p in (path, ref):
            append(p, 3_000 + 300 * cycle, 300, 5 + cycle)
        r = spark.sql(f"CALL lance.optimize_indices(table => 'db.{name}')").collect()[0]
        assert r.unindexed_fragments_after == 0 and r.built_by == "spark tasks", r
        assert [(i.rows_indexed, i.segments_merged, i.segments_after) for i in r.indices] == [(300, cycle, 2)], r
        lance.dataset(str(ref)).optimize.optimize_indices()
        ours, pylance = recall(lance.dataset(str(path))), recall(lance.dataset(str(ref)))
        print(f"{index_type} cycle {cycle}: recall@10 ours {ours:.3f}, pylance's optimize_indices {pylance:.3f}")
        assert ours >= pylance - 0.02
    index_agrees_with_scan_vectors(lance.dataset(str(path)))


def test_scalar_types_answer_as_a_scan_and_inverted_is_left_to_pylance(spark, warehouse):
    """Two append+optimize cycles; INVERTED and an index on a nested field are kept by pylance's
    optimize_indices in the engine, and the row says so."""
    words = ["alpha", "beta", "gamma", "delta", "eps"]

    def rows(start: int, n: int) -> pa.Table:
        ids = np.arange(start, start + n, dtype=np.int64)
        return pa.table({"id": pa.array(ids), "cat": pa.array([f"c{i % 7}" for i in ids]),
                         "tags": pa.array([[words[i % 5], words[(i // 5) % 5]] for i in ids]),
                         "txt": pa.array([f"{words[i % 5]} {words[i % 3]} w{i % 11}" for i in ids]),
                         "s": pa.array([{"a": int(i % 13)} for i in ids])})
    path = warehouse / "db" / "scalar_up.lance"
    shutil.rmtree(path, ignore_errors=True)
    ds = lance.write_dataset(rows(0, 2_000), str(path), max_rows_per_file=400)
    for column, kind in [("id", "ZONEMAP"), ("cat", "BITMAP"), ("tags", "LABEL_LIST"), ("txt", "NGRAM"),
                         ("txt", "INVERTED")]:
        ds.create_scalar_index(column, kind, name=f"{kind.lower()}_idx")
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", "BLOOMFILTER", name="bloom_idx")
    ds.create_scalar_index("s.a", "BTREE", name="nested_idx")
    filters = ["id = 2050", "id > 2150", "cat = 'c3'", "array_has_any(tags, ['beta'])", "contains(txt, 'w7')",
               "s.a = 5"]
    for cycle in range(2):
        lance.write_dataset(rows(2_000 + 200 * cycle, 200), str(path), mode="append", max_rows_per_file=200)
        r = spark.sql("CALL lance.optimize_indices(table => 'db.scalar_up')").collect()[0]
        by = {i.name: (i.built_by, i.segments_merged, i.segments_after) for i in r.indices}
        assert by["inverted_idx"][0] == by["nested_idx"][0] == "pylance (engine)", by
        for n in ("zonemap_idx", "bitmap_idx", "label_list_idx", "ngram_idx", "bloom_idx"):
            assert by[n] == ("spark tasks", cycle, 2), (n, by)
        ds = lance.dataset(str(path))
        assert r.unindexed_fragments_after == 0
        for f in filters:
            assert ds.to_table(filter=f, columns=["id"]).sort_by("id") == \
                ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f
        fts = ds.to_table(full_text_query="gamma", columns=["id"])["id"].to_pylist()
        assert sorted(fts) == sorted(ds.to_table(filter="contains(txt, 'gamma')", columns=["id"],
                                                 use_scalar_index=False)["id"].to_pylist())


def test_a_compaction_between_the_restore_build_and_its_commit_is_planned_again(spark, embedded):
    """compact's coverage restore takes the same path; a concurrent compaction of every fragment
    lands right before the index commit (``test_fail_at = 'index_commit:...'``): the commit
    conflicts, the restore plans again on the new version and commits; every index covers every
    fragment and answers exactly."""
    t, path, _ = embedded
    for k in range(3):
        append(path, BASE_ROWS + 100 * k, 100, 20 + k)
    read = lance.dataset(str(path)).version
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 600, options => map("
                  "'test_fail_at', 'index_commit:writers.compact_into_one'))").collect()[0]
    ds = lance.dataset(str(path))
    assert os.path.exists(writers._state(str(path), "compact_into_one"))  # the concurrent compaction ran
    assert "restored by optimize_indices" in (r.index_coverage or ""), r
    assert r.new_version == ds.version and ds.version > read
    before = lance.dataset(str(path), version=ds.version - 1)  # the concurrent compaction's version
    assert {f.fragment_id for f in before.get_fragments()} == {f.fragment_id for f in ds.get_fragments()}
    live = {f.fragment_id for f in ds.get_fragments()}
    for n in ("vector_idx", "id_idx"):
        assert set().union(*segments(ds, n).values()) == live, n
    assert ds.count_rows() == BASE_ROWS + 300
    scalar_agrees(ds)
    index_agrees_with_scan_vectors(ds)


def test_a_delete_between_the_restore_build_and_its_commit_commits_beside_it(spark, embedded):
    """A delete in every fragment (the new segment's too) right before the index commit: Lance
    rebases the index commit over it (no conflict), the deleted rows are masked, answers exact."""
    t, path, _ = embedded
    append(path, BASE_ROWS, 300, 30)
    r = spark.sql(f"CALL lance.compact(table => '{t}', target_rows_per_fragment => 600, options => map("
                  "'test_fail_at', 'index_commit:writers.delete_everywhere'))").collect()[0]
    ds = lance.dataset(str(path))
    assert "restored by optimize_indices" in (r.index_coverage or ""), r
    assert r.new_version == ds.version
    gone = ds.to_table(filter="id % 97 = 0", columns=["id"], use_scalar_index=False).num_rows
    assert gone == 0 and ds.count_rows() == sum(1 for i in range(BASE_ROWS + 300) if i % 97)
    live = {f.fragment_id for f in ds.get_fragments()}
    for n in ("vector_idx", "id_idx"):
        assert set().union(*segments(ds, n).values()) == live, n
    scalar_agrees(ds)
    index_agrees_with_scan_vectors(ds)


def test_the_tiering_rule():
    """indexing/tiers.py on its own: equal appends merge as a binary counter (a row is rebuilt at
    most log2(appends) + 1 times), a big segment is never rebuilt for a small append, the bound on segments,
    dead segments dropped, Lance's num_indices_to_merge (newest n)."""
    from lance_compact.indexing.tiers import MAX_SEGMENTS, SegmentSize, pick

    segs = [SegmentSize("base", 10_000, 1)]
    sizes, rebuilt = [], 0
    for run in range(8):
        picked = set(pick(segs, 100))
        rebuilt += 100 + sum(s.rows for s in segs if s.uuid in picked)
        segs = [s for s in segs if s.uuid not in picked] + [
            SegmentSize(f"s{run}", 100 + sum(s.rows for s in segs if s.uuid in picked), run + 2)]
        sizes.append(sorted(s.rows for s in segs if s.uuid != "base"))
    assert "base" in {s.uuid for s in segs}
    assert sizes[:4] == [[100], [200], [100, 200], [400]] and sizes[7] == [800]
    assert rebuilt == 2_000  # 8 appends of 100 rows: 100+200+100+400+100+200+100+800, the base never
    many = [SegmentSize(f"m{i}", 1_000 << i, i) for i in range(MAX_SEGMENTS + 2)]  # no two comparable
    assert pick(many, 0) == ["m0", "m1", "m2"]  # past the bound the smallest merge: 7 + the merged one
    assert pick(many[:3], 0) == [] and pick([SegmentSize("a", 500, 1)], 0) == []  # nothing to do
    assert pick([SegmentSize("dead", 0, 1), SegmentSize("a", 5_000, 2)], 10) == ["dead"]
    assert pick([SegmentSize("a", 5_000, 1), SegmentSize("b", 9_000, 2)], 10, num_to_merge=1) == ["b"]
    assert pick([SegmentSize("a", 5_000, 1)], 10, num_to_merge=0) == []
