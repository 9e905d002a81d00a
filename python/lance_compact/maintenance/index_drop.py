"""``CALL lance.drop_index`` and ``DROP INDEX name ON lance.db.t``: one of the table's indices
removed with Lance's own ``LanceDataset.drop_index`` (one commit; the data and the other
indices are untouched, the index's files stay until cleanup removes them with the versions
that still name them). Any index of the user's can be dropped by its exact name, whatever
pylance let it be (runtime/identifiers.py, kind ``existing index``), except that a name with
a control character is refused before anything is read or logged. Lance's own system indices
(``compaction.fragments.system_index``: ``__lance_frag_reuse``, the fragment-reuse index of
a deferred remap, ...) are not the user's to remove: refused, saying so, and not listed."""
from __future__ import annotations

import time
from typing import Any, Mapping

from ..errors import CompactionError
from ..compaction.fragments import index_state, system_index
from ..runtime import commit_gate, identifiers
from ..runtime.envelope import Target


def drop_index(target: Target, args: Mapping[str, Any]) -> dict[str, Any]:
    """Drop the index ``args['name']`` of ``target``; its row (parameters.json's
    ``drop_index_columns``) by column name. An unknown name is refused before anything is
    written, naming the table's indices."""
    started = time.monotonic()
    table = target.table
    name = args.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CompactionError(f"table {table}: drop_index needs the index's name (name => 'id_idx')")
    identifiers.check(identifiers.EXISTING_INDEX, table, name, "drop_index")
    ds = target.open()
    system = [ix for ix in ds.list_indices() if ix["name"] == name and system_index(ix)]
    if system:
        raise CompactionError(f"table {table}: drop_index: index {identifiers.shown(name)} is Lance's own system "
                              f"index ({system[0]['type']}), not a user's: Lance writes and removes it itself "
                              "(nothing was changed)")
    state = index_state(ds)
    if name not in state:
        raise CompactionError(f"table {table}: no index named {identifiers.shown(name)}; its indices are: "
                              f"{', '.join(identifiers.escape(n, identifiers.SHOWN) for n in sorted(state)) or 'none'}"
                              " (nothing was changed)")
    read_version = ds.version
    dropped = state[name]
    with commit_gate.gate(table, f"drop_index of {identifiers.shown(name)}") as landed:
        ds.drop_index(name)  # one commit by Lance; ds moves to the version it committed
        landed(f"version {ds.version}")
    return {"table": table, "name": name, "type": dropped["type"], "columns": list(dropped["fields"]),
            "segments": dropped["segments"], "read_version": read_version, "new_version": ds.version,
            "elapsed_ms": int((time.monotonic() - started) * 1000)}
