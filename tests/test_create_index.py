"""CALL lance.create_index built by the cluster (issue 35): every vector and scalar type through
CALL on Spark tasks (``engineRewrite.maxBatchBytes=0``: no build in the engine), scalar answers equal
a full scan, vector recall@10 against brute force within 0.01 of pylance's create_index given our
model and within pylance's own spread of its trained builds (vectors on a 4-d subspace of 16-d:
real neighbours), the plan of a dry run,
bad input refused before anything is built (version unchanged), a concurrent append and a
concurrent compaction during a build, a cancel that leaves no committed index and no segment
files (the build on the S3-compatible server: test_object_store.py). The job descriptions are
read from Spark's event log."""
import shutil
import threading
import time

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import refused, wait_for
from lance_compact.indexing import existing
from index_checks import job_descriptions

N, DIM, PER_FRAGMENT = 20_000, 16, 2_500
SCALAR_ROWS = 4_000
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]

SPARK_CONF = {"spark.lance.compact.engineRewrite.maxBatchBytes": "0", "spark.eventLog.enabled": "true",
              "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false"}


@pytest.fixture(scope="module", autouse=True)
def event_log(warehouse, tmp_path_factory):
    """Where this module's Spark application writes its event log (set before the session starts)."""
    folder = tmp_path_factory.mktemp("events")
    SPARK_CONF["spark.eventLog.dir"] = str(folder)
    return folder


@pytest.fixture(scope="module")
def spark(event_log, warehouse, request):
    from conftest import STRATEGIES, lance_session

    session = lance_session("local[2]", "lance-compact-create-index", str(warehouse),
                            {"spark.sql.shuffle.partitions": "2", **SPARK_CONF}, strategies=STRATEGIES)
    yield session
    session.stop()


def vectors(n: int = N, seed: int = 0) -> np.ndarray:
    """Points on a random 4-d subspace of R^16 with a little noise: each has real neighbours."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((4, DIM))
    return (rng.standard_normal((n, 4)) @ basis + 0.01 * rng.standard_normal((n, DIM))).astype(np.float32)


def vector_table(start: int = 0, n: int = N, seed: int = 0) -> pa.Table:
    v = vectors(n, seed)
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "emb": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)})


def scalar_table(start: int = 0, n: int = SCALAR_ROWS) -> pa.Table:
    rng = np.random.default_rng(start + 1)
    ids = np.arange(start, start + n, dtype=np.int64)
    words = np.array(WORDS)
    return pa.table({
        "id": pa.array(ids), "cat": pa.array((ids * 7919) % 50),
        "word": pa.array([str(words[i % len(words)]) + f"-{i % 13}" for i in ids]),
        "tags": pa.array([list(rng.choice(words, 2, replace=False)) for _ in ids]),
        "txt": pa.array([" ".join(rng.choice(words, 4)) for _ in ids]),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(n * 4, dtype=np.float32)), 4)})


@pytest.fixture(scope="module")
def base_vectors(warehouse):
    """The vector table once; each test copies it."""
    path = warehouse / "base" / "vectors.lance"
    lance.write_dataset(vector_table(), str(path), max_rows_per_file=PER_FRAGMENT)
    return path


def copy_of(base, warehouse, name: str):
    path = warehouse / "db" / f"{name}.lance"
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base, path)
    return f"db.{name}", path


def create(spark, table: str, column: str, index_type: str, **kw):
    """CALL lance.create_index(...) with ``kw`` (options as a dict): its row."""
    args = [f"table => '{table}'", f"column => '{column}'", f"index_type => '{index_type}'"]
    for k, v in kw.items():
        if k == "options":
            args.append("options => map(" + ", ".join(f"'{a}', '{b}'" for a, b in v.items()) + ")")
        elif isinstance(v, bool):
            args.append(f"{k} => {str(v).lower()}")
        else:
            args.append(f"{k} => '{v}'")
    return spark.sql(f"CALL lance.create_index({', '.join(args)})").collect()[0]


def recall(ds: lance.LanceDataset, queries: np.ndarray, truth: list[set], **search) -> float:
    found = 0
    for q, t in zip(queries, truth):
        got = ds.to_table(nearest={"column": "emb", "q": q, "k": 10, **search}, columns=["id"])["id"].to_pylist()
        found += len(t & set(got))
    return found / (10 * len(queries))


def brute_force(queries: np.ndarray, metric: str = "L2") -> list[set]:
    v = vectors()
    if metric == "COSINE":
        vn = v / np.linalg.norm(v, axis=1, keepdims=True)
        return [set(np.argsort(-(vn @ (q / np.linalg.norm(q))))[:10].tolist()) for q in queries]
    return [set(np.argsort(((v - q) ** 2).sum(axis=1))[:10].tolist()) for q in queries]


def pylance_build(base, warehouse, name: str, index_type: str, metric: str, params: dict) -> lance.LanceDataset:
    """pylance's own create_index over a copy of ``base``, in this process."""
    ref_path = warehouse / "ref" / f"{name}.lance"
    shutil.rmtree(ref_path, ignore_errors=True)
    shutil.copytree(base, ref_path)
    lance.dataset(str(ref_path)).create_index("emb", index_type, metric=metric, **params)
    return lance.dataset(str(ref_path))


def segment_dirs(path) -> set[str]:
    folder = path / "_indices"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


VECTOR_CASES = [
    ("IVF_PQ", {"num_partitions": "16", "num_sub_vectors": "4"}, "L2"),
    ("IVF_PQ", {"num_partitions": "16", "num_sub_vectors": "4"}, "COSINE"),
    ("IVF_FLAT", {"num_partitions": "16"}, "L2"),
    ("IVF_RQ", {"num_partitions": "16"}, "L2"),
    ("IVF_HNSW_FLAT", {"num_partitions": "8"}, "L2"),
    ("IVF_HNSW_PQ", {"num_partitions": "8", "num_sub_vectors": "4"}, "L2"),
    # pylance 14.0.2 cannot merge SQ segments (each trains its own bounds): ONE Spark task builds
    # every fragment, training its own model as pylance's create_index does
    ("IVF_SQ", {"num_partitions": "16"}, "L2"),
    ("IVF_HNSW_SQ", {"num_partitions": "8"}, "L2"),
]
SEARCHES = ({"nprobes": 2}, {"nprobes": 4, "refine_factor": 5}, {"nprobes": 8, "refine_factor": 10})


@pytest.mark.parametrize("index_type,options,metric", VECTOR_CASES, ids=[f"{c[0]}-{c[2]}" for c in VECTOR_CASES])
def test_vector_index_built_by_spark_tasks_has_pylances_recall(spark, base_vectors, warehouse, event_log,
                                                              index_type, options, metric):
    t, path = copy_of(base_vectors, warehouse, f"v_{index_type.lower()}_{metric.lower()}")
    before = lance.dataset(str(path)).version
    r = create(spark, t, "emb", index_type, metric=metric.lower(), options={**options, "rows_per_segment": "5000"})
    segmented = "SQ" not in index_type
    assert r.built_by == "spark tasks" and not r.dry_run
    assert r.read_version == before and r.new_version == before + 1
    assert r.fragments == 8 and r.rows == N and len(r.groups) == (4 if segmented else 1)
    assert sum(g.rows for g in r.groups) == N
    if segmented:
        # num_partitions x sample_rate 256 (and 256 x 256 for PQ's codebook), at most the rows
        need = int(options["num_partitions"]) * 256
        assert r.segments_built == 4 and r.segments_committed == 1
        assert r.sample_rows == min(N, max(need, 65536 if "PQ" in index_type else 0))
    else:
        assert r.segments_built == r.segments_committed == 1 and r.sample_rows == 0
    ds = lance.dataset(str(path))
    stats = ds.stats.index_stats("emb_idx")
    assert stats["index_type"] == index_type and stats["num_indexed_fragments"] == 8
    assert stats["num_unindexed_fragments"] == 0
    queries = vectors(200, seed=99)
    truth = brute_force(queries, metric)
    ours = [recall(ds, queries, truth, **s) for s in SEARCHES]
    # pylance's own build on a copy, with the same parameters; k-means is seeded at random and
    # pylance's own builds of this table span 0.028 in the mean over the searches (10 builds of
    # IVF_PQ L2: 0.6985-0.7263): our training is held to that spread
    params = {"num_partitions": int(options["num_partitions"])}
    if "num_sub_vectors" in options:
        params["num_sub_vectors"] = int(options["num_sub_vectors"])
    theirs = [recall(pylance_build(base_vectors, warehouse, f"{index_type}_{metric}", index_type, metric, params),
                     queries, truth, **s) for s in SEARCHES]
    # and pylance's build with our model (centroids, codebook): what segments and their merge
    # cost, free of k-means' chance (identical answers here); IVF_RQ's rotation is drawn at
    # random by each build and cannot be handed over, so it is held to the spread only (10 pylance
    # builds of IVF_RQ here: 0.7515-0.804 at 2 probes, 0.917-0.934 in the mean)
    same_model, _ = existing.model(ds, existing.describe(ds, "emb_idx"), str(path), {})
    same_model.pop("rabitq_model", None)
    same = [recall(pylance_build(base_vectors, warehouse, f"{index_type}_{metric}_same", index_type, metric,
                                 same_model), queries, truth, **s) for s in SEARCHES]
    print(f"recall@10 {index_type} {metric}: ours {ours}, pylance's with our model {same}, pylance's {theirs}")
    given = index_type != "IVF_RQ"
    assert np.mean(ours) >= np.mean(same) - (0.01 if given else 0.04), (ours, same)
    assert all(o >= p - (0.02 if given else 0.06) for o, p in zip(ours, same)), (ours, same)
    assert np.mean(ours) >= np.mean(theirs) - 0.04, (ours, theirs)
    if segmented:
        assert any(d.startswith(f"lance.create_index {t}: building 4 {index_type} segments")
                   for d in job_descriptions(event_log))
        assert any(d.startswith(f"lance.create_index {t}: training {index_type} on") for d in job_descriptions(event_log))


def test_a_vector_index_of_one_group_is_trained_and_built_by_one_task(spark, base_vectors, warehouse, event_log):
    """A table of one fragment group (the default grouping of these 20,000 rows): no training job
    and no model handed over; the one task trains its own as pylance's create_index does (on an
    object store the training job was a third of the build), with pylance's recall."""
    t, path = copy_of(base_vectors, warehouse, "one_group")
    r = create(spark, t, "emb", "IVF_PQ", options={"num_partitions": "16", "num_sub_vectors": "4"})
    assert r.built_by == "spark tasks" and len(r.groups) == 1 and r.segments_built == r.segments_committed == 1
    assert r.sample_rows == 0 and r.train_ms == 0
    descriptions = [d for d in job_descriptions(event_log) if d.startswith(f"lance.create_index {t}:")]
    assert len(descriptions) == 1 and ": building 1 IVF_PQ segments" in descriptions[0], descriptions
    ds = lance.dataset(str(path))
    assert ds.stats.index_stats("emb_idx")["num_indexed_fragments"] == 8
    queries = vectors(200, seed=99)
    truth = brute_force(queries)
    ours = [recall(ds, queries, truth, **s) for s in SEARCHES]
    theirs = [recall(pylance_build(base_vectors, warehouse, "one_group", "IVF_PQ", "L2",
                                   {"num_partitions": 16, "num_sub_vectors": 4}), queries, truth, **s) for s in SEARCHES]
    assert np.mean(ours) >= np.mean(theirs) - 0.04, (ours, theirs)


def test_partitions_past_the_sample_rate_train_on_every_row(spark, base_vectors, warehouse):
    """100 partitions x sample_rate 256 is more than the table's 20,000 rows: the training task
    samples every row (pylance's IndicesBuilder refuses the rate; its create_index trains on all),
    and an exhaustive search of the IVF_FLAT segments is exact."""
    t, path = copy_of(base_vectors, warehouse, "every_row")
    r = create(spark, t, "emb", "IVF_FLAT", options={"num_partitions": "100", "rows_per_segment": "10000"})
    assert len(r.groups) == 2 and r.sample_rows == N and r.segments_committed == 1
    queries = vectors(20, seed=3)
    assert recall(lance.dataset(str(path)), queries, brute_force(queries), nprobes=100) == 1.0


SCALAR_CASES = [
    ("BTREE", "cat", ["cat = 7", "cat < 5", "cat >= 10 AND cat < 12", "cat IN (1, 2, 3)"]),
    ("BITMAP", "cat", ["cat = 7", "cat IN (1, 2, 3)"]),
    ("ZONEMAP", "cat", ["cat = 7", "cat < 5"]),
    ("BLOOMFILTER", "cat", ["cat = 7", "cat IN (4, 9)"]),
    ("LABEL_LIST", "tags", ["array_has_any(tags, ['alpha'])", "array_has_all(tags, ['beta', 'gamma'])"]),
    ("NGRAM", "word", ["contains(word, 'lph')", "contains(word, 'eta-1')"]),
]


@pytest.mark.parametrize("index_type,column,filters", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_index_built_by_spark_tasks_answers_as_a_scan(spark, warehouse, index_type, column, filters):
    path = warehouse / "db" / f"s_{index_type.lower()}.lance"
    shutil.rmtree(path, ignore_errors=True)
    lance.write_dataset(scalar_table(), str(path), max_rows_per_file=500)
    lance.dataset(str(path)).delete("id % 11 = 0")
    r = create(spark, f"db.s_{index_type.lower()}", column, index_type, name="ix",
               options={"rows_per_segment": "1000"})
    assert r.built_by == "spark tasks" and r.segments_built == 4 and r.segments_committed == 1
    assert r.sample_rows == 0 and r.rows == SCALAR_ROWS - len(range(0, SCALAR_ROWS, 11))
    ds = lance.dataset(str(path))
    assert ds.stats.index_stats("ix")["num_indexed_fragments"] == 8
    for f in filters:
        indexed = ds.to_table(filter=f, columns=["id"]).sort_by("id")
        scanned = ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")
        assert indexed == scanned and indexed.num_rows > 0, f
        assert "ScalarIndexQuery" in ds.scanner(filter=f, columns=["id"]).explain_plan() or index_type in (
            "NGRAM", "LABEL_LIST"), f


@pytest.mark.parametrize("index_type,groups", [("INVERTED", 4), ("FTS", 1)])
def test_full_text_index_built_by_spark_tasks_finds_what_a_scan_finds(spark, warehouse, index_type, groups):
    """In 4 segments merged, and in one segment (an INVERTED segment is staging files until merged)."""
    path = warehouse / "db" / f"fts_{index_type.lower()}.lance"
    shutil.rmtree(path, ignore_errors=True)
    lance.write_dataset(scalar_table(), str(path), max_rows_per_file=500)
    r = create(spark, f"db.fts_{index_type.lower()}", "txt", index_type,
               options={"rows_per_segment": str(SCALAR_ROWS // groups), "with_position": "false"})
    assert r.built_by == "spark tasks" and r.segments_built == groups and r.segments_committed == 1
    ds = lance.dataset(str(path))
    for word in ("alpha", "theta"):
        found = sorted(ds.to_table(full_text_query=word, columns=["id"])["id"].to_pylist())
        expected = sorted(i for i, t in zip(ds.to_table(columns=["id", "txt"])["id"].to_pylist(),
                                            ds.to_table(columns=["txt"])["txt"].to_pylist())
                          if word in t.split())
        assert found == expected and found, word


def test_dry_run_returns_the_plan_and_builds_nothing(spark, base_vectors, warehouse):
    t, path = copy_of(base_vectors, warehouse, "dry")
    version = lance.dataset(str(path)).version
    r = create(spark, t, "emb", "IVF_PQ", dry_run=True,
               options={"num_partitions": "32", "num_sub_vectors": "8", "rows_per_segment": "7000"})
    assert r.dry_run and r.new_version == r.read_version == version and r.built_by == "spark tasks"
    # whole fragments, at most 7,000 rows a group: two fragments of 2,500 each
    assert [g.fragment_ids for g in r.groups] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [g.rows for g in r.groups] == [5000] * 4 and r.rows == N
    assert [g.estimated_bytes for g in r.groups] == [5000 * DIM * 4] * 4
    assert r.sample_rows == min(N, max(32 * 256, 256 * 256)) and r.segments_built == 0
    assert lance.dataset(str(path)).version == version and not lance.dataset(str(path)).describe_indices()


BAD = [
    ({"column": "embb", "index_type": "IVF_PQ"}, r"no column 'embb' \(did you mean 'emb'\?\)"),
    ({"column": "id", "index_type": "IVF_PQ"}, r"IVF_PQ index needs a vector column .* column 'id' is int64"),
    ({"column": "emb", "index_type": "BTREE"}, r"BTREE index needs a column of numbers.*'emb' is fixed_size_list"),
    ({"column": "emb", "index_type": "IVF_PQX"}, r"unknown index_type 'IVF_PQX' \(did you mean 'IVF_PQ'\?\)"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"num_partition": "8"}},
     r"unknown option 'num_partition' \(did you mean 'num_partitions'\?\)"),
    ({"column": "id", "index_type": "BTREE", "options": {"num_partitions": "8"}},
     r"option num_partitions is for IVF_.* indices, not BTREE"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"num_partitions": "100000"}},
     r"option num_partitions must be <= 65536"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"num_partitions": "15000"}},
     r"num_partitions 15,000 needs at least 30,000 live rows"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"num_sub_vectors": "5"}},
     r"num_sub_vectors must divide the dimension of column 'emb' \(16\), got 5"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"sample_rate": "5000"}},
     r"option sample_rate must be <= 4096"),
    ({"column": "emb", "index_type": "IVF_PQ", "options": {"rows_per_segment": "10"}},
     r"option rows_per_segment must be >= 1000"),
    ({"column": "id", "index_type": "BTREE", "metric": "cosine"}, r"metric is for vector indices"),
    ({"column": "emb", "index_type": "IVF_FLAT", "metric": "manhattan"}, r"metric must be one of L2, COSINE"),
]


@pytest.mark.parametrize("kw,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_input_is_refused_before_anything_is_built(spark, base_vectors, warehouse, kw, message):
    t, path = copy_of(base_vectors, warehouse, "bad")
    before = segment_dirs(path)
    kw = dict(kw)
    with refused(path, message + r".*nothing was built and the table is unchanged|" + message) as e:
        create(spark, t, kw.pop("column"), kw.pop("index_type"), **kw)
    assert f"table {t}" in str(e.value)
    assert segment_dirs(path) == before


def test_an_existing_name_needs_replace(spark, base_vectors, warehouse):
    t, path = copy_of(base_vectors, warehouse, "named")
    lance.dataset(str(path)).create_scalar_index("id", "BTREE", name="ix")
    with refused(path, r"an index named 'ix' already exists \(on id\).*replace => true"):
        create(spark, t, "id", "BITMAP", name="ix")
    r = create(spark, t, "id", "BITMAP", name="ix", replace=True, options={"rows_per_segment": "5000"})
    ds = lance.dataset(str(path))
    assert r.new_version == ds.version and [i.name for i in ds.describe_indices()] == ["ix"]
    assert ds.stats.index_stats("ix")["index_type"] == "Bitmap"
    assert ds.to_table(filter="id = 77", columns=["id"])["id"].to_pylist() == [77]


# writer -> (rows after, fragments it adds): an update and an upsert delete the old rows in
# place (deletion files) and append the changed ones as a new fragment
WRITERS = {"append_copies": (N + 25, 1), "delete_in_first_fragment": (N - 5, 0),
           "update_ids": (N, 1), "upsert_copies": (N + 10, 1)}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_concurrent_append_delete_update_or_upsert_during_the_build_keeps_answers_right(
        spark, base_vectors, warehouse, writer):
    t, path = copy_of(base_vectors, warehouse, f"concurrent_{writer}")
    r = create(spark, t, "id", "BTREE", options={"rows_per_segment": "5000", "test_before_commit": f"writers.{writer}"})
    ds = lance.dataset(str(path))
    assert r.retries == 0 and r.new_version == ds.version
    rows, added = WRITERS[writer]
    assert ds.count_rows() == rows
    stats = ds.stats.index_stats("id_idx")
    # a written fragment is not indexed (optimize_indices adds it); deleted rows are masked
    assert stats["num_indexed_fragments"] == 8 and stats["num_unindexed_fragments"] == added
    for f in ("id = 900010", "id < 100", "id >= 899990", "id = 3", "id IN (0, 1, 2, 3, 4, 5, 6)",
              "id = 7", "id = 1007", "id = 900007", "id = 11", "id = 950000", "id > 19990"):
        assert ds.to_table(filter=f, columns=["id"]).sort_by("id") == \
            ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id"), f


@pytest.mark.parametrize("writer", ["update_ids", "upsert_copies", "delete_in_first_fragment"])
def test_a_concurrent_change_during_a_vector_build_never_finds_changed_rows(spark, base_vectors, warehouse, writer):
    """IVF_FLAT searched over every partition is exact: its answers are the table's exact nearest
    neighbours after the writer's change (no deleted row found, the changed vectors found)."""
    t, path = copy_of(base_vectors, warehouse, f"vector_{writer}")
    r = create(spark, t, "emb", "IVF_FLAT", options={"num_partitions": "16", "rows_per_segment": "5000",
                                                      "test_before_commit": f"writers.{writer}"})
    ds = lance.dataset(str(path))
    assert r.new_version == ds.version and ds.count_rows() == WRITERS[writer][0]
    table = ds.to_table(columns=["id", "emb"])
    ids = table["id"].to_numpy()
    v = np.stack(table["emb"].to_numpy(zero_copy_only=False))
    queries = np.concatenate([vectors(10, seed=7), -v[ids % 1000 == 11][:5], v[ids % 1000 == 7][:5]])
    for q in queries:
        got = ds.to_table(nearest={"column": "emb", "q": q, "k": 10, "nprobes": 16}, columns=["id", "_distance"])
        exact = np.sort(((v - q) ** 2).sum(axis=1))[:10]
        assert np.allclose(np.sort(got["_distance"].to_numpy()), exact, rtol=1e-4, atol=1e-5)
        assert set(got["id"].to_pylist()) <= set(ids.tolist())


def test_a_concurrent_compaction_makes_the_build_plan_again(spark, base_vectors, warehouse):
    t, path = copy_of(base_vectors, warehouse, "compacted")
    r = create(spark, t, "emb", "IVF_FLAT", options={"num_partitions": "16", "rows_per_segment": "5000",
                                                      "test_before_commit": "writers.compact_into_one"})
    ds = lance.dataset(str(path))
    assert r.retries == 1 and r.new_version == ds.version
    stats = ds.stats.index_stats("emb_idx")
    assert stats["num_unindexed_fragments"] == 0 and stats["num_indexed_fragments"] == len(ds.get_fragments())
    queries = vectors(20, seed=5)
    assert recall(ds, queries, brute_force(queries), nprobes=16) == 1.0
    # no segment left behind: only the committed index's segments are in _indices
    assert segment_dirs(path) == {str(s.uuid) for i in ds.describe_indices() for s in i.segments}


def test_a_failed_segment_task_commits_nothing_and_leaves_no_segment_files(spark, base_vectors, warehouse):
    t, path = copy_of(base_vectors, warehouse, "failed")
    with refused(path, r"table db.failed: building the index segment of fragments 4, 5 failed.*injected failure of "
                       r"task 2, attempt 0.*nothing was committed"):
        create(spark, t, "emb", "IVF_PQ", options={"num_partitions": "16", "num_sub_vectors": "4",
                                                   "rows_per_segment": "5000", "test_fail_task": "2:all:raise"})
    assert not lance.dataset(str(path)).describe_indices() and segment_dirs(path) == set()


@pytest.mark.parametrize("column,index_type,options", [
    # BITMAP: its segments are named before their tasks start (index_uuid), so a task that ends
    # after the cancel leaves no folder behind (BTREE's refuse a name: cleanup's work)
    ("id", "BITMAP", {}),
    # two groups: the cancel stops the job that trains the model, before any segment
    ("emb", "IVF_FLAT", {"num_partitions": "16"})], ids=["segments", "training"])
def test_cancel_leaves_no_committed_index_and_no_segment_files(spark, base_vectors, warehouse, column, index_type,
                                                                options):
    t, path = copy_of(base_vectors, warehouse, f"cancelled_{index_type.lower()}")
    version = lance.dataset(str(path)).version
    sc = spark.sparkContext
    out = {}

    def run():
        sc.setJobGroup("create-index-cancel", "cancelled build", interruptOnCancel=True)
        try:
            create(spark, t, column, index_type,
                   options={**options, "rows_per_segment": "10000", "test_task_sleep_ms": "all:4000"})
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["error"] = str(e)

    thread = threading.Thread(target=run)
    thread.start()
    tracker = sc.statusTracker()
    wait_for(lambda: tracker.getJobIdsForGroup("create-index-cancel"), timeout=60)
    time.sleep(1)
    sc.cancelJobGroup("create-index-cancel")
    thread.join(60)
    assert not thread.is_alive() and "cancelled" in out.get("error", "")
    assert "nothing was committed" in out["error"]
    assert ("while training the model" in out["error"]) == (index_type == "IVF_FLAT"), out["error"]
    ds = lance.dataset(str(path))
    assert ds.version == version and not ds.describe_indices()
    assert segment_dirs(path) == set()



def test_the_training_sample_is_bounded(tmp_path):
    """max_training_rows: a sample_rate left out is lowered to keep within it; one given that
    goes over is refused, naming the bound (a unit of indexing/train.py: no table this large)."""
    from lance_compact.errors import CompactionError
    from lance_compact.indexing.plan import allowed
    from lance_compact.indexing.spec import IndexRequest
    from lance_compact.indexing.train import sample_size

    rows = 100_000_000
    most = allowed("max_training_rows", rows)
    assert most == 2_097_152
    plain = IndexRequest("db.t", "emb", "IVF_PQ", "emb_idx", "L2", False, False, {}, {}, {}, 128)
    assert sample_size(plain, rows, 10_000, most) == 10_000 * 128  # 256 halved to fit
    assert sample_size(plain, 5_000, 16, most) == 5_000  # never more than the rows
    given = IndexRequest("db.t", "emb", "IVF_PQ", "emb_idx", "L2", False, False, {}, {"sample_rate": 4096}, {}, 128)
    with pytest.raises(CompactionError, match=r"refused by the bound max_training_rows: num_partitions 1,000 x "
                                              r"sample_rate 4,096 would sample 4,096,000 vectors; at most 2,097,152"):
        sample_size(given, rows, 1_000, most)
    # and at most 1 GiB of vectors on the driver: 174,762 of 1,536 float32
    from lance_compact.indexing.build import training_rows

    wide = lance.write_dataset(pa.table({"emb": pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(1536, dtype=np.float32)), 1536)}), str(tmp_path / "wide.lance"))
    wide_request = IndexRequest("db.t", "emb", "IVF_FLAT", "emb_idx", "L2", False, False, {}, {}, {}, 1536)
    assert training_rows(wide_request, wide, rows) == (1 << 30) // (1536 * 4) == 174_762
    assert training_rows(plain, wide, rows) == 174_762


def test_a_new_index_of_a_million_rows_is_built_by_several_tasks():
    """A new index's groups are merged at its commit, so the default spreads a 1M-row table over
    the cores (2 here: twice as many groups of at most MIN_BUILD_ROWS), not one task."""
    from lance_compact.indexing.plan import MIN_BUILD_ROWS, FragmentSize, default_rows_per_segment, group

    fragments = [FragmentSize(i, 100_000, 100_000 * 512) for i in range(10)]
    per = default_rows_per_segment(1_000_000, 2, MIN_BUILD_ROWS)
    groups = group(fragments, per, 2 << 30, 64)
    assert per == MIN_BUILD_ROWS and len(groups) == 5
    assert all(g.rows <= MIN_BUILD_ROWS for g in groups) and sum(g.rows for g in groups) == 1_000_000
    assert default_rows_per_segment(1_000_000, 2) == 1_000_000  # the segments an index keeps: larger


def test_a_text_columns_bytes_are_not_shared_among_the_tables_other_columns(tmp_path):
    """A variable-width column's estimate (which decides whether its build runs in the engine
    worker) counts the data files that hold it, not their bytes split among the table's columns:
    a large text column beside 100 one-byte columns was estimated at a hundredth of its size,
    so its full-text build went to the worker (and ran into the worker's time limit there)."""
    from lance_compact.indexing.plan import fragment_sizes

    rng = np.random.default_rng(0)
    words = np.array([f"w{i:05d}" for i in range(5000)])
    text = [" ".join(words[rng.integers(0, 5000, 200)]) for _ in range(2000)]
    columns = {"id": pa.array(np.arange(2000, dtype=np.int64)), "body": pa.array(text),
               **{f"c{i}": pa.array(np.zeros(2000, dtype=np.int8)) for i in range(100)}}
    ds = lance.write_dataset(pa.table(columns), str(tmp_path / "wide.lance"), max_rows_per_file=500)
    files = sum(d.file_size_bytes for f in ds.get_fragments() for d in f.metadata.files)
    body = sum(f.estimated_bytes for f in fragment_sizes(ds, "body"))
    assert body == files > sum(map(len, text)) // 4  # every file holds it; not files // 102
    # a column added later lives in files of its own: only those count
    ds.add_columns({"note": "'n' || CAST(id AS STRING)"})
    ds = lance.dataset(str(tmp_path / "wide.lance"))
    note_files = sum(d.file_size_bytes for f in ds.get_fragments() for d in f.metadata.files
                     if ds.lance_schema.field("note").id() in d.fields)
    assert sum(f.estimated_bytes for f in fragment_sizes(ds, "note")) == note_files < files
    assert sum(f.estimated_bytes for f in fragment_sizes(ds, "body")) == files


def test_a_compressible_text_column_is_measured_decoded_before_a_build_in_the_worker(tmp_path):
    """Lance compresses text: 2 MB of repeated words are a few KB of files, and a full-text build
    reads and tokenizes them decoded (81 MB of them took 47 s in one process, modelled as 2,000
    rows). Whether a build runs in the engine worker is decided on the decoded bytes, read only
    until the limit is passed."""
    from lance_compact.indexing.plan import decoded_within, fragment_sizes

    text = ["lorem ipsum dolor sit amet " * 40] * 2000
    ds = lance.write_dataset(pa.table({"id": pa.array(np.arange(2000, dtype=np.int64)), "body": pa.array(text)}),
                             str(tmp_path / "repeated.lance"), max_rows_per_file=500)
    decoded = sum(map(len, text))
    assert sum(f.estimated_bytes for f in fragment_sizes(ds, "body")) * 20 < decoded  # the files say little
    assert not decoded_within(ds, "body", decoded // 2)
    assert decoded_within(ds, "body", 2 * decoded)
    first = [ds.get_fragments()[0].fragment_id]
    assert decoded_within(ds, "body", decoded // 2, first) and not decoded_within(ds, "body", decoded // 8, first)
    assert decoded_within(ds, "id", 1)  # fixed width: its estimate is exact, nothing read
