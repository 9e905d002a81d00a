"""Arrow-level ordering for clustering, on executors and (for the small sample) on the
driver: a table's rows in sort order, bounds picked from a sample, the range partition of
each row, and z-values.

Ranks against bounds are found by sorting the bounds together with the rows (Arrow's sort is
stable), so every type Arrow can sort works, with the order's direction and null placement,
without converting values. Rows equal to a bound repeated across several partitions (a heavy
key) are spread over those partitions at random: they are equal in every key, so any of
them keeps the global order, and no single task gets all of them.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .sort_order import SortKey, SortOrder

# Range ids per z-order column: at most 2**16, and at most 62 bits in all.
MAX_BITS_PER_COLUMN = 16


def key_column(table: pa.Table, column: str) -> pa.Array:
    """A key column as Arrow sorts it: halffloat (which Arrow's sort does not take) as float32,
    an exact, order-keeping widening."""
    col = table.column(column).combine_chunks()
    return col.cast(pa.float32()) if pa.types.is_float16(col.type) else col


def key_table(table: pa.Table, keys: tuple[SortKey, ...]) -> pa.Table:
    """The key columns, named k0, k1, ... (so bounds and rows concatenate whatever the names)."""
    return pa.table({f"k{i}": key_column(table, k.column) for i, k in enumerate(keys)})


def sort_indices(k: pa.Table, keys: tuple[SortKey, ...]) -> pa.Array:
    """Indices that sort the key table ``k`` (columns k0, k1, ...) by ``keys``, each key with
    its own direction and null placement. pyarrow takes per-key null placement (sort keys as
    triples) only from 25.0; before, pairs and one ``null_placement`` for all keys. So each key
    that holds nulls is preceded by whether it is null, sorted so its nulls come first or last,
    which every pyarrow from 16 on sorts alike. NaNs go after the numbers (Arrow's default
    placement, at the end; naming it warns from pyarrow 25 on)."""
    columns: dict[str, pa.ChunkedArray] = {}
    sort_keys: list[tuple[str, str]] = []
    for i, key in enumerate(keys):
        col = k.column(f"k{i}")
        if col.null_count:
            columns[f"n{i}"] = pc.is_null(col)
            sort_keys.append((f"n{i}", "descending" if key.nulls_first else "ascending"))
        columns[f"k{i}"] = col
        sort_keys.append((f"k{i}", "descending" if key.descending else "ascending"))
    return pc.sort_indices(pa.table(columns), sort_keys=sort_keys)


def order_indices(table: pa.Table, keys: tuple[SortKey, ...]) -> pa.Array:
    """Indices that put ``table``'s rows in the order of ``keys``."""
    return sort_indices(key_table(table, keys), keys)


def pick_bounds(sample: pa.Table, keys: tuple[SortKey, ...], parts: int) -> pa.Table:
    """``parts - 1`` rows of the sample's key columns (k0, k1, ...) splitting it into ``parts``
    ranges of about equal size, in order."""
    k = key_table(sample, keys)
    if parts <= 1 or k.num_rows == 0:
        return k.slice(0, 0)
    ordered = k.take(sort_indices(k, keys))
    at = [min(k.num_rows - 1, (i * k.num_rows) // parts) for i in range(1, parts)]
    return ordered.take(pa.array(at, pa.int64()))


def _ranks(rows: pa.Table, bounds: pa.Table, keys: tuple[SortKey, ...], ties_after: bool) -> np.ndarray:
    """Per row, how many bounds sort before it: bounds equal to the row count when
    ``ties_after`` (the bounds go first into the stable sort), else they don't."""
    nb, nr = bounds.num_rows, rows.num_rows
    if nb == 0:
        return np.zeros(nr, dtype=np.int64)
    bounds = bounds.cast(rows.schema)
    both = pa.concat_tables([bounds, rows] if ties_after else [rows, bounds])
    order = sort_indices(both, keys).to_numpy()
    is_bound = order < nb if ties_after else order >= nr
    before = np.cumsum(is_bound)
    out = np.empty(nr, dtype=np.int64)
    row_pos = ~is_bound
    out[order[row_pos] - (nb if ties_after else 0)] = before[row_pos]
    return out


def spread(low: np.ndarray, high: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A partition in [low, high] per row, uniformly where they differ."""
    width = high - low
    if not width.any():
        return low
    return low + np.floor(rng.random(len(low)) * (width + 1)).astype(np.int64)


def linear_partitions(rows: pa.Table, bounds: pa.Table, order: SortOrder,
                      rng: np.random.Generator) -> np.ndarray:
    """The range partition (0 .. len(bounds)) of each row under a linear order."""
    k = key_table(rows, order.keys)
    return spread(_ranks(k, bounds, order.keys, ties_after=False),
                  _ranks(k, bounds, order.keys, ties_after=True), rng)


def bits_per_column(columns: int) -> int:
    return max(1, min(MAX_BITS_PER_COLUMN, 62 // columns))


def column_bounds(sample: pa.Table, order: SortOrder) -> list[pa.Table]:
    """Per z-order column, bounds that split the sample's values into up to 2**bits ranges."""
    ranges = 1 << bits_per_column(len(order.keys))
    out = []
    for key in order.keys:
        one = (key,)
        b = pick_bounds(sample, one, min(ranges, max(1, sample.num_rows)))
        # Equal bounds add nothing to a range id: keep each value once.
        u = pa.table({"k0": pc.unique(b["k0"].combine_chunks())}) if b.num_rows else b
        out.append(u.take(sort_indices(u, one)))
    return out


def zvalues(rows: pa.Table, order: SortOrder, bounds: list[pa.Table]) -> np.ndarray:
    """Each row's position on the order's curve: the bits of its per-column range ids
    interleaved (column 0 in the most significant bit of each group), as Delta's
    MultiDimClustering does for a z-order, each column's ids first stretched to the full
    ``bits`` width so every column weighs the same; for a Hilbert curve the ids are first
    turned into the curve's transposed index (:func:`hilbert_transpose`)."""
    bits = bits_per_column(len(order.keys))
    n = len(order.keys)
    ids = []
    for key, b in zip(order.keys, bounds):
        one = (SortKey("k0", False, False),)
        col = pa.table({"k0": key_column(rows, key.column)})
        rid = _ranks(col, b, one, ties_after=True).astype(np.uint64)
        # Stretch the ids over the full width: a column with few distinct values (40 tenants)
        # would otherwise use only the low bits and leave the order to the other columns.
        ids.append((rid << np.uint64(bits)) // np.uint64(b.num_rows + 1))
    if order.curve == "hilbert":
        ids = hilbert_transpose(ids, bits)
    z = np.zeros(rows.num_rows, dtype=np.uint64)
    for j, rid in enumerate(ids):
        for bit in range(bits):
            z |= ((rid >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * n + (n - 1 - j))
    return z


def hilbert_transpose(ids: list[np.ndarray], bits: int) -> list[np.ndarray]:
    """Skilling's "axes to transpose" (Programming the Hilbert curve, 2004), on whole columns:
    coordinates of ``bits`` bits each -> the Hilbert index in transposed form, whose bits,
    interleaved as a z-order's are, give the position on the curve."""
    x = [a.astype(np.uint64).copy() for a in ids]
    n = len(x)
    top = np.uint64(1 << (bits - 1))
    q = top
    while q > 1:  # inverse undo
        p = q - np.uint64(1)
        for i in range(n):
            hit = (x[i] & q) != 0
            x[0] = np.where(hit, x[0] ^ p, x[0])
            t = np.where(hit, np.uint64(0), (x[0] ^ x[i]) & p)
            x[0] ^= t
            x[i] ^= t
        q >>= np.uint64(1)
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros_like(x[0])
    q = top
    while q > 1:
        t = np.where((x[n - 1] & q) != 0, t ^ (q - np.uint64(1)), t)
        q >>= np.uint64(1)
    return [a ^ t for a in x]


def z_bounds(z: np.ndarray, parts: int) -> np.ndarray:
    """``parts - 1`` z-values splitting the sample's z-values into equal ranges."""
    if parts <= 1 or len(z) == 0:
        return np.zeros(0, dtype=np.uint64)
    s = np.sort(z)
    return s[[min(len(s) - 1, (i * len(s)) // parts) for i in range(1, parts)]]


def z_partitions(z: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The range partition of each z-value (ties with a repeated bound spread over its ranges)."""
    return spread(np.searchsorted(bounds, z, side="left").astype(np.int64),
                  np.searchsorted(bounds, z, side="right").astype(np.int64), rng)


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
