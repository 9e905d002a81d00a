"""The benchmark's tables, deterministic for a given size: each has an int64 ``id``, a
float32 ``vector`` and a string ``text``, written with Lance itself."""
from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa


def rows(start: int, n: int, dim: int) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": pa.array(ids),
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * dim, dtype=np.float32)), dim),
        "text": pa.array([f"event {i} " + "x" * int(i % 31) for i in ids]),
    })


def _fresh(uri: str) -> None:
    shutil.rmtree(uri, ignore_errors=True)


def streaming(uri: str, appends: int = 600, rows_per_append: int = 500, dim: int = 64,
              delete_every: int = 3, deleted_share: int = 10) -> lance.LanceDataset:
    """A streamed table: ``appends`` appends of ``rows_per_append`` rows (a fragment each),
    then 1/``deleted_share`` of the rows deleted in every ``delete_every``-th fragment."""
    _fresh(uri)
    for a in range(appends):
        lance.write_dataset(rows(a * rows_per_append, rows_per_append, dim), uri,
                            mode="create" if a == 0 else "append")
    ds = lance.dataset(uri)
    ds.delete(f"(id / {rows_per_append}) % {delete_every} = 0 AND id % {deleted_share} = 0")
    return lance.dataset(uri)


def big(uri: str, fragments: int = 2000, rows_per_fragment: int = 2000, dim: int = 128,
        per_write: int = 100, deleted_quarter: bool = True) -> lance.LanceDataset:
    """``fragments`` fragments of ``rows_per_fragment`` rows (written ``per_write`` fragments
    at a time), then 20% of the rows deleted in a quarter of the fragments."""
    _fresh(uri)
    for w, first in enumerate(range(0, fragments, per_write)):
        n = min(per_write, fragments - first) * rows_per_fragment
        lance.write_dataset(rows(first * rows_per_fragment, n, dim), uri,
                            mode="create" if w == 0 else "append", max_rows_per_file=rows_per_fragment)
    ds = lance.dataset(uri)
    if deleted_quarter:
        ds.delete(f"(id / {rows_per_fragment}) % 4 = 0 AND id % 5 = 0")
    return lance.dataset(uri)


def many_fragments(uri: str, fragments: int, rows_per_fragment: int, small: int = 0,
                   small_rows: int = 0) -> lance.LanceDataset:
    """``fragments`` fragments of ``rows_per_fragment`` rows in one commit (a tiny schema),
    then ``small`` fragments of ``small_rows`` rows appended one by one."""
    _fresh(uri)
    total = fragments * rows_per_fragment
    ids = np.arange(total, dtype=np.int64)
    table = pa.table({"id": ids, "text": pa.array(np.char.mod("r%d", ids % 1000))})
    lance.write_dataset(table, uri, max_rows_per_file=rows_per_fragment,
                        max_rows_per_group=rows_per_fragment)
    for s in range(small):
        start = total + s * small_rows
        ids = np.arange(start, start + small_rows, dtype=np.int64)
        lance.write_dataset(pa.table({"id": ids, "text": pa.array(np.char.mod("r%d", ids % 1000))}),
                            uri, mode="append")
    return lance.dataset(uri)


def warehouse(root: str, tables: int = 60, fragments: int = 35, rows_per_fragment: int = 100,
              dim: int = 16, indexed_every: int = 3) -> list[str]:
    """``tables`` small degraded tables ``<root>/t<i>.lance``: ``fragments`` fragments of
    ``rows_per_fragment`` rows, 10% of the rows deleted in every third fragment; every
    ``indexed_every``-th table has a BTREE index on ``id`` and then two unindexed appends."""
    shutil.rmtree(root, ignore_errors=True)
    uris = []
    for i in range(tables):
        uri = f"{root}/t{i:04d}.lance"
        lance.write_dataset(rows(i * 1_000_000, fragments * rows_per_fragment, dim), uri,
                            max_rows_per_file=rows_per_fragment)
        ds = lance.dataset(uri)
        ds.delete(f"((id - {i * 1_000_000}) / {rows_per_fragment}) % 3 = 0 AND id % 10 = 0")
        if indexed_every and i % indexed_every == 0:
            ds.create_scalar_index("id", index_type="BTREE")
            for a in range(2):
                lance.write_dataset(rows(i * 1_000_000 + 900_000 + a * rows_per_fragment, rows_per_fragment, dim),
                                    uri, mode="append")
        uris.append(uri)
    return uris


def tiny_tables(root: str, tables: int = 1000) -> None:
    """``tables`` tables of one 10-row fragment each, ``<root>/t<i>.lance``."""
    shutil.rmtree(root, ignore_errors=True)
    for i in range(tables):
        lance.write_dataset(rows(i * 10, 10, 4), f"{root}/t{i:04d}.lance")
