"""What a ``create_index`` asks for, checked against the table before anything is read or
built: the index type, the column's type for it, the metric, the name (an existing one only
with ``replace``), and the options map (parameters.json ``index_options``: the names
``LanceDataset.create_index`` takes, typed and bounded, and the build's own settings). Lance
itself ignores a keyword it does not know (seen: ``create_index_uncommitted(..., bogus=3)``
builds), so every key is checked here, each against the index types that take it."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

import pyarrow as pa

from ..errors import CompactionError
from ..options import OptionSpec, convert_value, did_you_mean, hook_specs, hooks_enabled, spec
from ..runtime import identifiers

# Vector types: trained once (IVF centroids, a PQ codebook, a RaBitQ rotation), then a segment
# per fragment group with that model (checked on pylance 14.0.2: 8 fragments in segments, merged,
# committed, queried, recall against pylance's own build).
VECTOR_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_RQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ")
# Scalar types: a segment per fragment group, no training (checked the same way).
SCALAR_TYPES = ("BTREE", "BITMAP", "LABEL_LIST", "ZONEMAP", "BLOOMFILTER", "INVERTED", "FTS", "NGRAM")
TYPES = VECTOR_TYPES + SCALAR_TYPES
# The types built in segments (create_index_uncommitted, merge, commit); the others are built
# in the engine by pylance's create_index, the row saying so. SQ is not among them on pylance
# 14.0.2: each segment trains its own quantizer bounds and the merge keeps the first segment's
# for every code (lance PR 7901, closed unmerged), so answers go wrong silently -- measured on
# 20,000 x 16-d, 4 segments, nprobes 2: recall@10 0.48 merged against 0.78 for pylance's own;
# left unmerged 0.74. There is no keyword to hand segments shared bounds.
SEGMENTED = frozenset(TYPES) - {"IVF_SQ", "IVF_HNSW_SQ"}
PQ_TYPES = ("IVF_PQ", "IVF_HNSW_PQ")
METRICS = ("L2", "COSINE", "DOT", "HAMMING")
# The build's own settings (not Lance's): their defaults.
DEFAULTS = {"sample_rate": 256, "max_iters": 50, "bytes_per_segment": 2 << 30, "merge_fan_in": 16,
            "max_retries": 2}


@dataclass(frozen=True)
class IndexOption(OptionSpec):
    """An ``index_options`` entry: the index types that take it, and whether it goes to Lance."""

    types: tuple[str, ...] | None = None  # None: every type (a build setting)
    lance: bool = False


@lru_cache(maxsize=None)
def index_options() -> dict[str, IndexOption]:
    """parameters.json's ``index_options`` by name."""
    fields = set(IndexOption.__dataclass_fields__)
    out = {}
    for o in spec()["index_options"]:
        o = {k: (tuple(v) if isinstance(v, list) else v) for k, v in o.items() if k in fields}
        out[o["name"]] = IndexOption(**o)
    return out


@dataclass(frozen=True)
class IndexRequest:
    """A checked ``create_index``: which index, Lance's keyword arguments for it (``lance``),
    the build's own settings (``build``: sample_rate, rows_per_segment, ...), test hooks."""

    table: str
    column: str
    index_type: str
    name: str
    metric: str | None  # None for a scalar index
    replace: bool
    dry_run: bool
    lance: Mapping[str, Any] = field(default_factory=dict)
    build: Mapping[str, Any] = field(default_factory=dict)
    hooks: Mapping[str, Any] = field(default_factory=dict)
    dimension: int | None = None  # a vector column's

    @property
    def is_vector(self) -> bool:
        return self.index_type in VECTOR_TYPES

    def setting(self, name: str) -> Any:
        """A build setting: given, else its default."""
        return self.build.get(name, DEFAULTS.get(name))


def _bad(table: str, text: str) -> CompactionError:
    return CompactionError(f"table {table}: create_index: {text}; nothing was built and the table is unchanged")


def _closest(name: str, known: tuple[str, ...]) -> str:
    """`` (did you mean 'IVF_PQ'?)`` for an upper-case name (did_you_mean compares lower case)."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_column(table: str, schema: pa.Schema, column: str, index_type: str) -> int | None:
    """The column exists and its type suits ``index_type`` (as pylance checks it, said before
    anything is built); a vector column's dimension."""
    names = schema.names
    if column not in names:
        raise _bad(table, f"no column {column!r}{did_you_mean(column, names)}; its columns are: "
                          f"{', '.join(identifiers.escape(n, identifiers.SHOWN) for n in names)}")
    t = schema.field(column).type
    if hasattr(t, "storage_type"):
        t = t.storage_type
    want = None
    if index_type in VECTOR_TYPES:
        inner = t.value_type if pa.types.is_list(t) and pa.types.is_fixed_size_list(t.value_type) else t
        if not pa.types.is_fixed_size_list(inner) or not (
                pa.types.is_floating(inner.value_type) or pa.types.is_uint8(inner.value_type)):
            want = "a vector column (fixed-size list of floats)"
        else:
            return inner.list_size
    elif index_type in ("BTREE", "BITMAP", "ZONEMAP", "BLOOMFILTER"):
        ok = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
              or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
              or pa.types.is_temporal(t) or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))
        want = None if ok else "a column of numbers, booleans, strings, binary, dates or times"
    elif index_type == "LABEL_LIST":
        want = None if pa.types.is_list(t) or pa.types.is_large_list(t) else "a list column"
    elif index_type == "NGRAM":
        want = None if pa.types.is_string(t) or pa.types.is_large_string(t) else "a string column"
    elif index_type in ("INVERTED", "FTS"):
        v = t.value_type if pa.types.is_list(t) or pa.types.is_large_list(t) else t
        want = None if pa.types.is_string(v) or pa.types.is_large_string(v) else "a string column (or a list of strings)"
    if want:
        raise _bad(table, f"a {index_type} index needs {want}; column {column!r} is {schema.field(column).type}")
    return None


def check_names(table: str, args: Mapping[str, Any]) -> tuple[str, str]:
    """The column and the index's name ``args`` give (the name by default ``<column>_idx``),
    each checked as its kind of name (runtime/identifiers.py) before the table is opened: a
    refused one is never read with, logged or shown raw."""
    column = args.get("column") or ""  # as written (options.AS_WRITTEN)
    if not column:
        raise _bad(table, "parameter column is required (the column to index)")
    identifiers.check(identifiers.COLUMN, table, column, "create_index")
    name = args.get("name")
    if name is None:
        return column, identifiers.check(identifiers.INDEX, table, f"{column}_idx", "create_index",
                                         "the default index name (<column>_idx; give one with name =>)")
    return column, identifiers.check(identifiers.INDEX, table, name, "create_index")


def parse(table: str, schema: pa.Schema, existing: Mapping[str, list[str]], args: Mapping[str, Any],
          options: Mapping[str, Any] | None) -> IndexRequest:
    """``create_index``'s checked parameters (``args``: column, index_type, name, metric,
    replace, dry_run) and options map, against the table's ``schema`` and ``existing`` indices
    (name -> its columns). Every refusal names the table, the value and what was expected."""
    column, name = check_names(table, args)
    kind = (args.get("index_type") or "").strip().upper()
    if not kind:
        raise _bad(table, "parameter index_type is required: " + ", ".join(TYPES))
    if kind not in TYPES:
        raise _bad(table, f"unknown index_type {args['index_type']!r}{_closest(kind, TYPES)}; "
                          f"valid ones are: {', '.join(TYPES)}")
    dimension = check_column(table, schema, column, kind)
    metric = args.get("metric")
    if metric is not None:
        metric = metric.strip().upper()
        if metric == "EUCLIDEAN":
            metric = "L2"
        if kind not in VECTOR_TYPES:
            raise _bad(table, f"metric is for vector indices; a {kind} index takes none")
        if metric not in METRICS:
            raise _bad(table, f"metric must be one of {', '.join(METRICS)}, got {args['metric']!r}")
    elif kind in VECTOR_TYPES:
        metric = "L2"
    replace = bool(args.get("replace", False))
    if name in existing and not replace:
        raise _bad(table, f"an index named {identifiers.shown(name)} already exists (on {', '.join(map(identifiers.escape, existing[name]))}): "
                          "choose another name, or replace => true to replace it")
    lance_kwargs, build, hooks = _options(table, kind, options or {})
    req = IndexRequest(table, column, kind, name, metric, replace, bool(args.get("dry_run", False)),
                       lance_kwargs, build, hooks, dimension)
    _check_vector(req)
    return req


def _options(table: str, kind: str, options: Mapping[str, Any]
             ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The options map into (Lance's keywords, build settings, test hooks)."""
    known = index_options()
    lance_kwargs: dict[str, Any] = {}
    build: dict[str, Any] = {}
    hooks: dict[str, Any] = {}
    for key, value in options.items():
        name = key.strip().lower() if isinstance(key, str) else key
        if value is None:
            continue
        if name in hook_specs() and hooks_enabled():
            hooks[name] = convert_value(hook_specs()[name], value, table)
            continue
        o = known.get(name)
        if o is None:
            takes = sorted(n for n, x in known.items() if x.types is None or kind in x.types)
            raise _bad(table, f"unknown option {key!r}{did_you_mean(str(name), known)}; a {kind} index takes: "
                              + ", ".join(takes))
        if o.types is not None and kind not in o.types:
            raise _bad(table, f"option {name} is for {', '.join(o.types)} indices, not {kind}")
        (lance_kwargs if o.lance else build)[name] = convert_value(o, value, table)
    return lance_kwargs, build, hooks


def _check_vector(req: IndexRequest) -> None:
    """What pylance would refuse only once the build ran: PQ's sub-vectors must divide the
    dimension, PQ codes are 4 or 8 bits."""
    if req.index_type not in PQ_TYPES:
        return
    sub = req.lance.get("num_sub_vectors")
    if sub is not None and req.dimension and req.dimension % sub:
        raise _bad(req.table, f"option num_sub_vectors must divide the dimension of column {req.column!r} "
                              f"({req.dimension}), got {sub}")
    if sub is None and req.dimension and req.dimension % 16 and req.dimension % 8:
        raise _bad(req.table, f"column {req.column!r} has dimension {req.dimension}, divisible by neither 16 nor "
                              "8: give num_sub_vectors (a divisor of the dimension)")
    bits = req.lance.get("num_bits")
    if bits is not None and bits not in (4, 8):
        raise _bad(req.table, f"option num_bits of a {req.index_type} index must be 4 or 8, got {bits}")


def num_sub_vectors(req: IndexRequest) -> int | None:
    """PQ's sub-vectors: given, else pylance's default (dimension / 16, else / 8)."""
    if req.index_type not in PQ_TYPES:
        return None
    given = req.lance.get("num_sub_vectors")
    if given is not None:
        return int(given)
    d = req.dimension or 16
    return d // 16 if d % 16 == 0 else d // 8
