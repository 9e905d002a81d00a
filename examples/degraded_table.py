"""Make, show and check degraded Lance tables: many small fragments, deletions, a vector and a
string column, deterministic for a given seed. ``bin/demo`` runs it (create, then check after
the compaction); the tests have their own data and oracle (tests/oracle.py).

    python examples/degraded_table.py create /tmp/wh/demo/events.lance --fragments 600
    python examples/degraded_table.py check /tmp/wh/demo/events.lance --version 22"""
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


def _print_layout(title: str, info: dict) -> None:
    sizes = info["rows_per_fragment"]
    small = sum(1 for s in sizes if s < 1024)
    print(f"{title}: version {info['version']}, {info['fragments']} fragments "
          f"({small} with under 1,024 rows), {info['rows']:,} rows, "
          f"{info['fragments_with_deletions']} fragments with deletion files "
          f"({info['deleted_rows']:,} deleted rows)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Make, show and check degraded Lance tables.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create", help="write a degraded table")
    c.add_argument("uri")
    c.add_argument("--fragments", type=int, default=600)
    c.add_argument("--rows-per-fragment", type=int, default=500)
    c.add_argument("--appends", type=int, default=20)
    c.add_argument("--dim", type=int, default=16)
    s = sub.add_parser("layout", help="print a table's layout")
    s.add_argument("uri")
    k = sub.add_parser("check", help="check the latest version holds exactly the rows of --version")
    k.add_argument("uri")
    k.add_argument("--version", type=int, required=True)
    a = p.parse_args(argv)

    if a.cmd == "create":
        import shutil
        shutil.rmtree(a.uri, ignore_errors=True)
        ds = degraded_table(a.uri, fragments=a.fragments, rows_per_fragment=a.rows_per_fragment,
                            appends=a.appends, dim=a.dim)
        _print_layout("before", layout(ds))
    elif a.cmd == "layout":
        _print_layout("layout", layout(lance.dataset(a.uri)))
    else:
        latest = lance.dataset(a.uri)
        before = lance.dataset(a.uri, version=a.version)
        _print_layout("after", layout(latest))
        if content(latest) != content(before):
            print(f"FAILED: the rows of version {latest.version} differ from version {a.version}")
            return 1
        print(f"check: version {latest.version} holds the same {latest.count_rows():,} rows "
              f"as version {a.version} (compared row by row, sorted by id)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
