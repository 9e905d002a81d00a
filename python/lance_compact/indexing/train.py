"""One model for every segment of a vector index, trained on the driver from the sample the
executors gathered (sample.py): IVF centroids (``IndicesBuilder.train_ivf``), a PQ codebook
(``train_pq``) or a RaBitQ rotation (``build_rq_model``). IndicesBuilder trains only from a
dataset, so the sample is written to a small temporary Lance dataset first (local, removed
after). Segments trained apart cannot be merged (lance PR 6313): every segment gets this model."""
from __future__ import annotations

import logging
import shutil
import tempfile
from typing import Any

import lance
import pyarrow as pa
from lance.indices import IndicesBuilder

from ..errors import CompactionError
from .spec import PQ_TYPES, IndexRequest, num_sub_vectors

log = logging.getLogger(__name__)


def sample_size(req: IndexRequest, rows: int, num_partitions: int, most: int) -> int:
    """Vectors the training needs: ``num_partitions x sample_rate`` (and ``2^num_bits x
    sample_rate`` for PQ), at most the table's live rows; a sample_rate left out is lowered to
    keep within ``most`` (the bound max_training_rows), one given and over it is refused."""
    rate = int(req.setting("sample_rate"))
    bits = int(req.lance.get("num_bits") or 8)
    need = lambda r: max(num_partitions * r, (1 << bits) * r if req.index_type in PQ_TYPES else 0)  # noqa: E731
    if min(rows, need(rate)) > most:
        if "sample_rate" in req.build:
            raise CompactionError(
                f"table {req.table}: create_index: refused by the bound max_training_rows: num_partitions "
                f"{num_partitions:,} x sample_rate {rate:,} would sample {need(rate):,} vectors; at most {most:,} "
                "are allowed: lower sample_rate or num_partitions; nothing was built and the table is unchanged")
        while rate > 2 and need(rate) > most:
            rate //= 2
    return min(rows, need(rate))


def train(req: IndexRequest, sample: pa.Table, num_partitions: int) -> dict[str, Any]:
    """The model as ``create_index_uncommitted``'s keywords (num_partitions, ivf_centroids,
    pq_codebook, num_sub_vectors, rabitq_model), trained on ``sample``."""
    rows = sample.num_rows
    if rows < 2 * num_partitions:
        raise CompactionError(
            f"table {req.table}: create_index: {num_partitions:,} partitions need at least "
            f"{2 * num_partitions:,} non-null vectors to train on, the sample has {rows:,}: lower num_partitions; "
            "nothing was built and the table is unchanged")
    folder = tempfile.mkdtemp(prefix="lance-compact-train-")
    try:
        ds = lance.write_dataset(sample.select([req.column]), f"{folder}/sample.lance")
        builder = IndicesBuilder(ds, req.column)
        iters = int(req.setting("max_iters"))
        ivf = builder.train_ivf(num_partitions, distance_type=(req.metric or "L2").lower(),
                                sample_rate=max(2, rows // num_partitions), max_iters=iters)
        model: dict[str, Any] = {"num_partitions": num_partitions, "ivf_centroids": ivf.centroids}
        if req.index_type in PQ_TYPES:
            bits = int(req.lance.get("num_bits") or 8)
            if rows < 2 << bits:
                raise CompactionError(
                    f"table {req.table}: create_index: a {bits}-bit PQ codebook needs at least {2 << bits:,} "
                    f"non-null vectors to train on, the table has {rows:,}; nothing was built and the table is unchanged")
            sub = num_sub_vectors(req)
            pq = builder.train_pq(ivf, sub, sample_rate=max(2, rows // (1 << bits)), max_iters=iters, num_bits=bits)
            model.update(pq_codebook=pq.codebook, num_sub_vectors=sub)
        elif req.index_type == "IVF_RQ":
            from lance.lance import indices as native
            model["rabitq_model"] = native.build_rq_model(dimension=req.dimension,
                                                          num_bits=int(req.lance.get("num_bits") or 5))
        return model
    finally:
        shutil.rmtree(folder, ignore_errors=True)
