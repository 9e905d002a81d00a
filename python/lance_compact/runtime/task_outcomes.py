"""Finished tasks report what they wrote through an accumulator rather than the job's result:
Spark merges a task's accumulator updates when that task succeeds, so when another task fails
all its attempts the driver still knows what the finished ones wrote. Used by the compaction's
rewrite jobs and the clustering's sort-and-write job."""
from __future__ import annotations

from typing import Any

# _accumulatorRegistry: PySpark (4.0-4.3) has no public way to drop an accumulator the driver no
# longer needs; without the pop in drop() the long-lived engine would keep every job's outcomes.
from pyspark.accumulators import AccumulatorParam, _accumulatorRegistry


class _Outcomes(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


def outcomes_accumulator(sc: Any) -> Any:
    """A list accumulator: a task adds ``[outcome]``, the driver reads ``.value``."""
    return sc.accumulator([], _Outcomes())


def drop(accumulator: Any) -> None:
    """Forget the accumulator on the driver once its job's outcomes are read."""
    _accumulatorRegistry.pop(accumulator.aid, None)
