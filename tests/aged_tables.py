"""Tables as maintenance and other writers leave them, each small and built fresh with pylance:
history cleaned after an index-remapping compaction, transactions pylance 14.0.2 cannot decode,
deferred index remaps, stable row ids, v2 manifest paths, lance-spark's layout, a single
version, deletion files everywhere, no rows, an IVF_PQ index. ``AGED`` maps a table name to its
builder; ``build(path, name)`` writes it and returns its oracle (every live row, sorted by id).

lance-spark's layout is built with pylance here, not by lance-spark: running lance-spark 0.4.0
needs a Spark 3.5 session of its own and a package resolution (tests/lance_spark_side.py),
tens of seconds, too slow for a fixture; tests/test_lance_spark_interop.py runs the real one.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Callable

import lance
import pyarrow as pa

from oracle import batch, content

ROWS = 20  # rows per fragment


def _append(uri: str, start: int, n: int = ROWS, **kw) -> lance.LanceDataset:
    mode = "append" if start else "create"
    return lance.write_dataset(batch(start, n), uri, mode=mode, max_rows_per_file=ROWS, **kw)


def _fragments(uri: str, count: int, **kw) -> lance.LanceDataset:
    """``count`` appends of one small fragment each (ids 0 ..)."""
    for i in range(count):
        ds = _append(uri, i * ROWS, **(kw if i == 0 else {}))
    return ds


def _compact(uri: str, facts: dict, **kw) -> None:
    """pylance's compact_files; records in ``facts`` the version it committed and the
    fragments it removed and added, as pylance sees them (the oracle of the last compaction)."""
    ds = lance.dataset(uri)
    before = {f.fragment_id for f in ds.get_fragments()}
    ds.optimize.compact_files(**kw)
    ds = lance.dataset(uri)
    after = {f.fragment_id for f in ds.get_fragments()}
    facts["compacted"] = (ds.version, len(before - after), len(after - before))


def _cleanup_all(uri: str) -> None:
    """Every version but the current one removed (what a 7-day cleanup does to a quiet table)."""
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0))


def cleaned_after_remap(uri: str, facts: dict) -> None:
    """(a) BTREE index, compaction remapping it, then cleanup: one version left, whose
    transaction is a Rewrite with rewritten indices (undecodable) and whose predecessor is gone."""
    ds = _fragments(uri, 6)
    ds.delete("id % 9 = 0")
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)
    _cleanup_all(uri)
    facts["counts_lost"] = True  # the Rewrite's predecessor is gone and pylance cannot decode it


def undecodable_newest(uri: str, facts: dict) -> None:
    """(b) the newest transaction an undecodable Rewrite, every older version present."""
    ds = _fragments(uri, 5)
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)


def undecodable_partly_cleaned(uri: str, facts: dict) -> None:
    """(b) an append after an undecodable Rewrite, then cleanup keeping the two newest
    versions: the Rewrite's predecessor is gone, the search for it passes an Append first."""
    ds = _fragments(uri, 5)
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)
    ds = _append(uri, 1000)
    ds.cleanup_old_versions(older_than=timedelta(seconds=0), retain_versions=2)
    facts["counts_lost"] = True  # the Rewrite's predecessor is gone and pylance cannot decode it


def compacted_long_ago(uri: str, facts: dict) -> None:
    """(a, b) an undecodable Rewrite 18 commits back, the oldest version cleanup kept: the
    search for it reads past pylance's first window of 16 transactions, one at a time."""
    ds = _fragments(uri, 4)
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)
    for i in range(18):
        _append(uri, 1000 + i * ROWS, n=2)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), retain_versions=19)
    facts["counts_lost"] = True  # the Rewrite's predecessor is gone and pylance cannot decode it


def deferred_remap(uri: str, facts: dict) -> None:
    """(c) ``defer_index_remap``: the compaction leaves a ``__lance_frag_reuse`` index instead
    of remapping the BTREE."""
    ds = _fragments(uri, 5)
    ds.create_scalar_index("id", "BTREE")
    ds.update_config({"lance.compaction.defer_index_remap": "true"})
    _compact(uri, facts, defer_index_remap=True)


def unindexed_fragments(uri: str, facts: dict) -> None:
    """(c) a BTREE index that leaves appended fragments uncovered."""
    ds = _fragments(uri, 3)
    ds.create_scalar_index("id", "BTREE")
    for i in range(3, 6):
        _append(uri, i * ROWS)


def stable_row_ids(uri: str, facts: dict) -> None:
    """(d) stable row ids: appends, deletes, an index, a compaction."""
    ds = _fragments(uri, 5, enable_stable_row_ids=True)
    ds.delete("id % 4 = 1")
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)
    _append(uri, 1000)
    lance.dataset(uri).delete("id = 1003")


def v2_manifest_paths(uri: str, facts: dict) -> None:
    """(e) v2 manifest paths (``_versions/{u64::MAX - version:020}.manifest``), compacted and
    partly cleaned."""
    ds = _fragments(uri, 5, enable_v2_manifest_paths=True)
    ds.delete("id % 5 = 2")
    ds.create_scalar_index("id", "BTREE")
    _compact(uri, facts)
    _append(uri, 1000)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), retain_versions=2)
    facts["counts_lost"] = True  # the Rewrite's predecessor is gone and pylance cannot decode it


def lance_spark_layout(uri: str, facts: dict) -> None:
    """(f) what lance-spark 0.4.0 leaves (seen on tables it wrote, tests/test_lance_spark_interop.py):
    file format 2.0, its ``lance.auto_cleanup.*`` config, a fragment per Spark partition and
    INSERT, and a DELETE committed as an Update transaction whose updated fragments carry
    deletion files (pylance's own delete commits a Delete). All of it decodes in pylance 14.0.2."""
    for i in range(4):
        lance.write_dataset(batch(i * ROWS, ROWS), uri, mode="append" if i else "create",
                            max_rows_per_file=ROWS, data_storage_version="2.0")
    ds = lance.dataset(uri)
    ds.update_config({"lance.auto_cleanup.interval": "20", "lance.auto_cleanup.older_than": "14days"})
    ds = lance.dataset(uri)
    updated = []
    for f in ds.get_fragments():
        ids = f.to_table(columns=["id"])["id"].to_pylist()
        updated.append(f.delete_rows([k for k, i in enumerate(ids) if i % 7 == 0]))
    lance.LanceDataset.commit(uri, lance.LanceOperation.Update(updated_fragments=updated),
                              read_version=ds.version)


def one_version(uri: str, facts: dict) -> None:
    """(g) a plain table compacted and cleaned: a single version, a decodable Rewrite."""
    ds = _fragments(uri, 4)
    ds.delete("id % 3 = 0")
    _compact(uri, facts)
    _cleanup_all(uri)


def deletions_everywhere(uri: str, facts: dict) -> None:
    """(g) every fragment carries a deletion file."""
    ds = _fragments(uri, 4)
    ds.delete("id % 10 = 3")
    ds.create_scalar_index("id", "BTREE")


def empty(uri: str, facts: dict) -> None:
    """(g) a table with no rows (created empty)."""
    lance.write_dataset(batch(0, 1).slice(0, 0), uri)  # batch(0, 0) would type its strings null


def all_deleted(uri: str, facts: dict) -> None:
    """(g) every row deleted: Lance drops the fragments, 0 rows, older versions present."""
    ds = _fragments(uri, 3)
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id >= 0")


def ivf_pq(uri: str, facts: dict) -> None:
    """(g) an IVF_PQ vector index and a BTREE, then appends and deletes."""
    ds = lance.write_dataset(batch(0, 600), uri, max_rows_per_file=100)
    ds.create_index("vector", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=2)
    ds.create_scalar_index("id", "BTREE")
    for i in range(3):
        _append(uri, 1000 + i * ROWS)
    lance.dataset(uri).delete("id % 11 = 0")


AGED: dict[str, Callable[[str, dict], None]] = {f.__name__: f for f in (
    cleaned_after_remap, undecodable_newest, undecodable_partly_cleaned, compacted_long_ago,
    deferred_remap, unindexed_fragments, stable_row_ids, v2_manifest_paths, lance_spark_layout,
    one_version, deletions_everywhere, empty, all_deleted, ivf_pq)}


def build(path: str, name: str) -> tuple[pa.Table, dict]:
    """Write the aged table ``name`` at ``path``; its oracle (every live row, by id) and the
    facts its builder recorded: ``compacted`` (version, fragments removed, added) of its last
    compaction, ``counts_lost`` when those counts cannot be known any more."""
    facts: dict = {}
    AGED[name](path, facts)
    return content(lance.dataset(path)), facts
