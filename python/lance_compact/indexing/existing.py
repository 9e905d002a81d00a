"""A committed index as its upkeep needs it: its segments (as ``lance.dataset.Index`` records a
``CreateIndex`` can remove and ``merge_existing_index_segments`` can read), the type to build a
new segment with, and its model, so a segment added to it is built as the index's own would be.

The model, read back through public API (pylance 14.0.2, ../shared/NOTES.md "Incremental index
upkeep"): IVF centroids by ``LanceDataset.get_ivf_model``; metric, PQ/SQ/RQ bits, sub-vectors and
HNSW settings from ``describe_indices()``; the PQ codebook, which no API returns, from the
segment's ``auxiliary.idx`` (a Lance file: ``storage_metadata`` names the global buffer holding
it, a protobuf tensor [256, dimension] of float32). A segment built with it answered exactly as
pylance's own delta. SQ bounds cannot be given to a build (each segment trains its own); an RQ
segment gets a rotation minted for its build (segments of one build share it)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import lance
import numpy as np
import pyarrow as pa
from lance.dataset import Index

from ..runtime import protobuf

# Lance's names (list_indices' "type") of the scalar types built in segments, and the
# create_index name of each. INVERTED is left to pylance: its tokenizer settings would have to
# round-trip through describe_indices' details, which is not checked.
SCALAR = {"BTree": "BTREE", "Bitmap": "BITMAP", "LabelList": "LABEL_LIST", "ZoneMap": "ZONEMAP",
          "BloomFilter": "BLOOMFILTER", "NGram": "NGRAM"}
VECTOR = ("IVF_PQ", "IVF_FLAT", "IVF_SQ", "IVF_RQ", "IVF_HNSW_PQ", "IVF_HNSW_SQ", "IVF_HNSW_FLAT")
PQ = ("IVF_PQ", "IVF_HNSW_PQ")
# SQ shards each train their own bounds, and merging such shards lost recall (0.968 -> 0.935):
# a segment of these types is always built by one task, never merged from shards.
ONE_SHARD = ("IVF_SQ", "IVF_HNSW_SQ")


@dataclass(frozen=True)
class ExistingIndex:
    """One index of the table: ``name``, ``column``, Lance's ``lance_type`` ("BTree",
    "IVF_PQ", ...), the ``build_type`` a new segment is built as (None: not built in segments,
    ``why`` says why), and its committed ``segments``."""

    name: str
    column: str
    lance_type: str
    build_type: str | None
    segments: tuple[Index, ...]
    details: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def is_vector(self) -> bool:
        return self.build_type in VECTOR


def describe(ds: lance.LanceDataset, name: str) -> ExistingIndex:
    """Index ``name`` of ``ds`` (it must exist) with its segments."""
    d = next(d for d in ds.describe_indices() if d.name == name)
    lance_type = next((i["type"] for i in ds.list_indices() if i["name"] == name), d.index_type)
    segments = tuple(Index(uuid=s.uuid, name=name, fields=list(d.fields),
                           dataset_version=s.dataset_version_at_last_update, fragment_ids=s.fragment_ids,
                           index_version=s.index_version, created_at=s.created_at, base_id=s.base_id,
                           index_details=(d.type_url, b"")) for s in d.segments)
    column = list(d.field_names)[0] if len(d.field_names) == 1 else ""
    build_type, why = _build_type(lance_type, d, segments)
    if build_type is not None and column not in ds.schema.names:
        build_type, why = None, f"an index on the nested field {column}"
    return ExistingIndex(name, column, lance_type, build_type, segments, dict(d.details or {}), why)


def _build_type(lance_type: str, d: Any, segments: tuple[Index, ...]) -> tuple[str | None, str]:
    if len(d.field_names) != 1:
        return None, f"an index on {len(d.field_names)} columns"
    if any(s.base_id is not None for s in segments):
        return None, "a segment in another base (a shallow clone's)"
    if lance_type in VECTOR:
        return lance_type, ""
    if lance_type in SCALAR:
        return SCALAR[lance_type], ""
    return None, f"a {lance_type} index (not built in segments here)"


def model(ds: lance.LanceDataset, index: ExistingIndex, uri: str, storage_options: Mapping[str, str]
          ) -> tuple[dict[str, Any], str | None]:
    """``create_index_uncommitted``'s keywords that make a new segment use ``index``'s model
    (IVF centroids, PQ codebook, bits, HNSW settings; a fresh RaBitQ rotation for IVF_RQ), and
    its metric; ({}, None) for a scalar index."""
    if not index.is_vector:
        return {}, None
    details = index.details
    metric = str(details.get("metric_type") or "L2").upper()
    ivf = ds.get_ivf_model(index.name)
    out: dict[str, Any] = {"ivf_centroids": ivf.centroids, "num_partitions": len(ivf.centroids)}
    compression = details.get("compression") or {}
    if index.build_type in PQ:
        codebook, sub, bits = pq_codebook(index.segments[0].uuid, uri, storage_options)
        out.update(pq_codebook=codebook, num_sub_vectors=sub, num_bits=bits)
    elif index.build_type in ONE_SHARD and compression.get("num_bits"):
        out["num_bits"] = int(compression["num_bits"])
    elif index.build_type == "IVF_RQ":
        from lance.lance import indices as native

        bits = int(compression.get("num_bits") or 1)
        dimension = ds.schema.field(index.column).type.list_size
        out.update(num_bits=bits, rabitq_model=native.build_rq_model(dimension=dimension, num_bits=bits))
    hnsw = details.get("hnsw") or {}
    if "HNSW" in (index.build_type or ""):
        if hnsw.get("max_connections"):
            out["m"] = int(hnsw["max_connections"])
        if hnsw.get("construction_ef"):
            out["ef_construction"] = int(hnsw["construction_ef"])
    return out, metric


def pq_codebook(uuid: str, uri: str, storage_options: Mapping[str, str]) -> tuple[pa.FixedSizeListArray, int, int]:
    """A PQ segment's codebook (2^bits rows of the vector's dimension), sub-vectors and bits,
    read from its ``auxiliary.idx``."""
    from lance.file import LanceFileReader

    reader = LanceFileReader(f"{uri.rstrip('/')}/_indices/{uuid}/auxiliary.idx",
                             storage_options=dict(storage_options) or None)
    meta = json.loads(json.loads(reader.metadata().schema.metadata[b"storage_metadata"])[0])
    shape, data = _tensor(reader.read_global_buffer(int(meta["codebook_position"])))
    dimension, bits = int(meta["dimension"]), int(meta.get("nbits") or 8)
    if len(shape) != 2 or shape[0] != 1 << bits or shape[1] != dimension:
        raise ValueError(f"index segment {uuid}: a PQ codebook of shape {shape}, expected "
                         f"[{1 << bits}, {dimension}]")
    values = np.frombuffer(data, dtype=np.float32)
    if values.size != shape[0] * shape[1]:
        raise ValueError(f"index segment {uuid}: a PQ codebook of {values.size} values, expected {shape[0] * shape[1]}")
    return pa.FixedSizeListArray.from_arrays(pa.array(values), dimension), int(meta["num_sub_vectors"]), bits


def _tensor(buf: bytes) -> tuple[list[int], bytes]:
    """Lance's protobuf ``Tensor`` (1: data type, 2: packed shape, 3: data): shape and data."""
    fields = dict(protobuf.fields(buf, "a PQ codebook"))
    if fields.get(1, 2) != 2:  # Lance's DataType FLOAT32
        raise ValueError(f"a PQ codebook of data type {fields.get(1)}, expected float32")
    return protobuf.packed_varints(fields.get(2, b"")), fields.get(3, b"")
