"""How much CPU an index build costs, from its rows and parameters, and so where it may run: in
the statement's engine worker (small and cheap: no Spark job's overhead) or as Spark tasks
(where it can be scheduled, shared fairly and cancelled).

The cost is counted in multiply-adds of vector distances (for a scalar index, a few operations
per row), the work that dominates each part of a build:

- IVF training: k-means over the training sample, ``sample x partitions x dim x iterations``
  (the sample: ``partitions x sample_rate``, at most the rows);
- IVF assignment: every row against every centroid, ``rows x partitions x dim``;
- PQ: the codebook's k-means (``2^bits`` centroids per sub-vector over ``2^bits x sample_rate``
  vectors) and every row encoded against it, ``(sample_pq x iterations + rows) x 2^bits x dim``;
- HNSW: each insertion searches ``ef_construction`` candidates and compares each with its
  neighbour list (``2 x m`` at the graph's base layer), and the neighbour selection and the
  upper layers add about as much again twice over (:data:`HNSW_FACTOR`, measured below),
  ``3 x rows x ef_construction x 2m x dim``: with m 256 and ef_construction 5000 that is 427
  times the defaults (20, 150) per row, so 5,000 rows cost what 2.1 million do by default;
- RaBitQ: a rotation of every row, ``rows x dim x dim``.

Measured with pylance's create_index on 20,000 x 16-d rows, on 2 cores under a load average of 15
(other builds running): IVF_PQ (16 partitions, 4 sub-vectors) 4.8 s, modelled 4.2 s; IVF_FLAT
0.07 s, modelled 0.06 s; IVF_HNSW_FLAT (8 partitions) 8.4 s and IVF_HNSW_SQ 6.4 s, modelled 1.9 s
without :data:`HNSW_FACTOR`; IVF_HNSW_FLAT with m 64, ef_construction 500 57.8 s, modelled 20.5 s
without it. The issue's IVF_HNSW_FLAT build (5,000 x 32-d, one partition, m 256, ef_construction
5000: 1.2e12 by this count, 1,229 s at :data:`RATE`) ran past 90 s in one process there. The
model routes builds; it is not a forecast."""
from __future__ import annotations

import math
from typing import Any, Mapping

# Lance's defaults for the parameters the cost grows with.
HNSW_M, HNSW_EF = 20, 150
# Work of an HNSW graph beyond ef_construction x 2m distances per insertion (neighbour selection,
# upper layers): the measured builds above took 2.5 to 4 times the plain count.
HNSW_FACTOR = 3
SAMPLE_RATE, ITERATIONS, PQ_BITS = 256, 50, 8


def build_work(index_type: str, rows: int, dimension: int | None, params: Mapping[str, Any],
               partitions: int | None = None) -> float:
    """Multiply-adds a build of ``rows`` rows costs (see the module's model); ``params``: Lance's
    keywords and the build's settings (m, ef_construction, num_partitions, num_sub_vectors,
    num_bits, sample_rate, max_iters); ``partitions``: the IVF partitions chosen."""
    rows = max(0, int(rows))
    if not index_type.startswith("IVF"):
        return 8.0 * rows * max(1.0, math.log2(rows + 1))  # a sort or a hash per row
    d = int(dimension or 1)
    p = int(partitions or params.get("num_partitions") or max(1, round(math.sqrt(rows or 1))))
    rate = int(params.get("sample_rate") or SAMPLE_RATE)
    iters = int(params.get("max_iters") or ITERATIONS)
    sample = min(rows, p * rate)
    work = float(sample) * p * d * iters + float(rows) * p * d  # k-means, then assignment
    if "PQ" in index_type:
        centroids = 1 << int(params.get("num_bits") or PQ_BITS)
        work += (float(min(rows, centroids * rate)) * iters + rows) * centroids * d
    if "HNSW" in index_type:
        m = int(params.get("m") or HNSW_M)
        ef = int(params.get("ef_construction") or HNSW_EF)
        work += HNSW_FACTOR * float(rows) * ef * 2 * m * d
    if index_type == "IVF_RQ":
        work += float(rows) * d * d
    return work


# Multiply-adds a second on one busy core, as the model counts them (a conservative rate: Lance's
# SIMD kernels do more, but a build also reads, sorts and writes).
RATE = 1e9


def seconds(work: float) -> float:
    """The model's CPU seconds on one core for ``work`` multiply-adds."""
    return work / RATE
