"""What a Lance table's storage holds against what its latest version references: files
nobody references (orphans) and referenced files that are gone (missing). Listed with
Lance's own ``LanceFileSession``, so it works the same on a local folder and an object store."""
from __future__ import annotations

import lance
from lance.file import LanceFileSession

PREFIXES = ("data", "_deletions")


def referenced(ds: lance.LanceDataset) -> set[str]:
    """Paths (relative to the table) of the data and deletion files ``ds`` references."""
    out = set()
    for f in ds.get_fragments():
        out |= {f"data/{d.path}" for d in f.metadata.files}
        if f.metadata.deletion_file is not None:
            out.add(f.metadata.deletion_file.path(f.fragment_id))
    return out


def stored(uri: str, storage_options: dict[str, str] | None = None) -> set[str]:
    """Paths (relative to the table) of every object under ``data/`` and ``_deletions/``."""
    session = LanceFileSession(uri.rstrip("/"), storage_options or None)
    out = set()
    for prefix in PREFIXES:
        out |= {n if n.startswith(prefix + "/") else f"{prefix}/{n}" for n in session.list(prefix)}
    return out


def orphans_and_missing(uri: str, storage_options: dict[str, str] | None = None) -> tuple[set[str], set[str]]:
    """(stored but not referenced by the latest version, referenced but not stored)."""
    ds = lance.dataset(uri, storage_options=storage_options or None)
    have, need = stored(uri, storage_options), referenced(ds)
    return have - need, need - have


def rewrites_since(ds: lance.LanceDataset, version: int) -> int:
    """How many compactions (Lance Rewrite transactions) landed after ``version``."""
    n = ds.version - version
    if n <= 0:
        return 0
    return sum(1 for t in ds.get_transactions(n)
               if t is not None and type(t.operation).__name__ == "Rewrite")


def cleanup_everything(table: str) -> str:
    """``CALL lance.cleanup`` removing every old version and every unreferenced file at once:
    files of any age (``unverified_min_age => '0 seconds'`` where cleanup has that bound)."""
    from lance_compact.options import spec

    bounded = any(p["name"] == "unverified_min_age" for p in spec()["cleanup_parameters"])
    return (f"CALL lance.cleanup(table => '{table}', older_than => '0 seconds', delete_unverified => true"
            + (", unverified_min_age => '0 seconds'" if bounded else "") + ")")
