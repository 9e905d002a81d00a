"""Make, show and check degraded Lance tables: many small fragments, deletions, a vector and a
string column, deterministic for a given seed. ``bin/demo`` runs it (create, then check after
the compaction). The tables and the check are the tests' own (tests/oracle.py).

    python examples/degraded_table.py create /tmp/wh/demo/events.lance --fragments 600
    python examples/degraded_table.py check /tmp/wh/demo/events.lance --version 22"""
from __future__ import annotations

import sys
from pathlib import Path

import lance

# One generator and oracle: the tests' own (tests/oracle.py), so the demo makes the tables the
# tests check. Re-exported here for the benchmarks, which import them from this module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import batch, content, degraded_table, layout  # noqa: E402,F401


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
