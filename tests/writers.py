"""Concurrent writers the tests inject right before a compaction's commit (the documented
test-only hook ``test_before_commit``). Each acts once per table (a marker file says so)."""
import os

import lance

from degraded_table import batch


def _once(uri: str, name: str) -> bool:
    marker = f"{uri}.{name}.done"
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def delete_in_first_fragment(uri, storage_options):
    """A streaming delete touching only the table's first fragment."""
    if _once(uri, "delete_first"):
        ds = lance.dataset(uri)
        first = min(f.fragment_id for f in ds.get_fragments())
        ids = lance.dataset(uri).get_fragment(first).to_table(columns=["id"])["id"].to_pylist()
        ds.delete(f"id IN ({', '.join(map(str, ids[:5]))})")


def delete_everywhere(uri, storage_options):
    """A delete touching every fragment, before every commit: always conflicting."""
    ds = lance.dataset(uri)
    n = int(open(f"{uri}.everywhere.count").read()) if os.path.exists(f"{uri}.everywhere.count") else 0
    ds.delete(f"id % 97 = {n}")
    with open(f"{uri}.everywhere.count", "w") as f:
        f.write(str(n + 1))


def append_rows(uri, storage_options):
    """A streaming append: compatible with compaction."""
    if _once(uri, "append"):
        lance.write_dataset(batch(900_000, 25), uri, mode="append")


def overwrite(uri, storage_options):
    """Someone overwrites the table: incompatible with compaction."""
    if _once(uri, "overwrite"):
        lance.write_dataset(batch(700_000, 10), uri, mode="overwrite")
