"""The tests' data and oracle: degraded Lance tables (many small fragments, deletions, a vector
and a string column; deterministic for a given seed), and what a table holds (``content``: every
live row, sorted by id; ``layout``: fragments, rows, deletions), read with pylance alone so the
tests judge the product by Lance's own view. The tests' concurrent writers (writers.py) use it
in the engine's process too (tests/ is on its PYTHONPATH).

The demo (``bin/demo``, examples/degraded_table.py) makes and checks its table with these too."""
from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa


def batch(start: int, n: int, dim: int = 8, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + n, dtype=np.int64)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    return pa.table({
        "id": pa.array(ids),
        "category": pa.array([f"cat-{i % 17}" for i in ids]),
        "payload": pa.array([f"event {i} " + "x" * int(i % 23) for i in ids]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
    })


def degraded_table(uri: str, fragments: int = 60, rows_per_fragment: int = 40,
                   delete_every: int = 5, appends: int = 1, dim: int = 8,
                   seed: int = 0, storage_options: dict[str, str] | None = None) -> lance.LanceDataset:
    """Write ``fragments`` small fragments (in ``appends`` commits), then delete rows.

    Rows whose id % 13 == 0 are deleted in every ``delete_every``-th fragment, plus half the
    rows of one fragment in ten, so some fragments cross Lance's 10% deletion threshold.
    """
    total = fragments * rows_per_fragment
    per_append = total // appends
    ds = None
    for a in range(appends):
        start = a * per_append
        n = per_append if a < appends - 1 else total - start
        ds = lance.write_dataset(batch(start, n, dim, seed), uri,
                                 mode="create" if a == 0 else "append",
                                 max_rows_per_file=rows_per_fragment, storage_options=storage_options)
    if delete_every:
        frag_of = f"(id / {rows_per_fragment})"
        ds.delete(f"{frag_of} % {delete_every} = 0 AND id % 13 = 0")
        ds.delete(f"{frag_of} % 10 = 3 AND id % 2 = 0")
    return lance.dataset(uri, storage_options=storage_options)


def layout(ds: lance.LanceDataset) -> dict:
    """Fragments, rows and deletions of a dataset, for printing and comparing."""
    frags = ds.get_fragments()
    deleted = [f.metadata.deletion_file.num_deleted_rows if f.metadata.deletion_file else 0
               for f in frags]
    return {
        "version": ds.version,
        "fragments": len(frags),
        "rows": ds.count_rows(),
        "fragments_with_deletions": sum(1 for d in deleted if d),
        "deleted_rows": sum(deleted),
        "rows_per_fragment": [f.count_rows() for f in frags],
    }


def content(ds: lance.LanceDataset) -> pa.Table:
    """Every live row, sorted by id: compare two versions of a table with ==."""
    return ds.to_table().sort_by("id")


def says_committed(message: str, versions: list[int]) -> bool:
    """The message names exactly ``versions`` as committed, or says nothing was."""
    if not versions:
        return "nothing was committed" in message
    if len(versions) == 1:
        return f"version {versions[0]} was committed" in message
    listed = ", ".join(map(str, versions[:-1])) + f" and {versions[-1]}"
    return f"versions {listed} were committed" in message
