"""Seeded randomized stress: concurrent writers (threads and a separate process) append,
delete and update while CALL lance.compact runs; after every step the live rows must equal
an oracle kept beside the table, and index queries must agree with a brute-force scan.

Each writer owns an id range, so its oracle does not depend on how the writers interleave.

    STRESS_SEEDS=20 STRESS_OPS=40 .venv/bin/python -m pytest -q tests/test_stress.py -s
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import lance
import pyarrow as pa

RANGE = 1_000_000


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "payload": pa.array([f"{tag}-{i}" for i in ids])})


def retrying(op, attempts: int = 20):
    """Writers retry their own commit conflicts (with compaction or each other)."""
    for i in range(attempts):
        try:
            return op()
        except OSError as e:
            if "onflict" not in str(e) or i == attempts - 1:
                raise
            time.sleep(0.05 * (i + 1))


class Writer:
    """Random appends, deletes, updates and upserts (merge_insert) inside [base, base + RANGE),
    with an oracle."""

    def __init__(self, uri: str, base: int, seed: int, initial: dict[int, str] | None = None,
                 storage_options: dict[str, str] | None = None):
        self.uri, self.base = uri, base
        self.storage = storage_options
        self.rng = random.Random(seed)
        self.oracle: dict[int, str] = dict(initial or {})
        self.next_id = base + len(self.oracle)
        self.lock = threading.Lock()
        self.ops = 0

    def step(self) -> None:
        with self.lock:
            live = sorted(self.oracle)
            kind = self.rng.choice(["append", "append", "delete", "update", "upsert"]) if live else "append"
            if kind == "append":
                ids = list(range(self.next_id, self.next_id + self.rng.randint(1, 30)))
                self.next_id += len(ids)
                retrying(lambda: lance.write_dataset(rows(ids, "a"), self.uri, mode="append",
                                                     storage_options=self.storage))
                self.oracle.update({i: f"a-{i}" for i in ids})
            elif kind == "delete":
                ids = self.rng.sample(live, min(len(live), self.rng.randint(1, 15)))
                retrying(lambda: self.dataset().delete(f"id IN ({', '.join(map(str, ids))})"))
                for i in ids:
                    del self.oracle[i]
            elif kind == "update":
                ids = self.rng.sample(live, min(len(live), self.rng.randint(1, 5)))
                tag = f"u{self.ops}"
                retrying(lambda: self.dataset().update(
                    {"payload": f"'{tag}'"}, where=f"id IN ({', '.join(map(str, ids))})"))
                self.oracle.update({i: tag for i in ids})
            else:  # a CDC upsert: some rows changed, some new
                ids = self.rng.sample(live, min(len(live), self.rng.randint(1, 5)))
                ids += list(range(self.next_id, self.next_id + self.rng.randint(0, 5)))
                self.next_id = max(self.next_id, max(ids) + 1)
                tag = f"m{self.ops}"
                retrying(lambda: self.dataset().merge_insert("id").when_matched_update_all()
                         .when_not_matched_insert_all().execute(rows(ids, tag).set_column(
                             1, "payload", pa.array([tag] * len(ids)))))
                self.oracle.update({i: tag for i in ids})
            self.ops += 1
            self.check()

    def dataset(self) -> lance.LanceDataset:
        return lance.dataset(self.uri, storage_options=self.storage)

    def check(self) -> None:
        """The table's rows in this writer's range equal the oracle, by an index query
        (BTREE on id) and by a brute-force scan."""
        ds = self.dataset()
        lo, hi = self.base, self.base + RANGE
        indexed = ds.to_table(columns=["id", "payload"], filter=f"id >= {lo} AND id < {hi}")
        got = dict(zip(indexed["id"].to_pylist(), indexed["payload"].to_pylist()))
        assert len(got) == indexed.num_rows, f"duplicated rows in [{lo}, {hi})"
        full = ds.to_table(columns=["id", "payload"])
        scanned = {i: p for i, p in zip(full["id"].to_pylist(), full["payload"].to_pylist())
                   if lo <= i < hi}
        assert scanned == self.oracle, self.diff(scanned)
        assert got == scanned, "index query and scan disagree"

    def diff(self, seen: dict[int, str]) -> str:
        lost = set(self.oracle) - set(seen)
        extra = set(seen) - set(self.oracle)
        changed = {i for i in set(seen) & set(self.oracle) if seen[i] != self.oracle[i]}
        return (f"writer {self.base}: lost {sorted(lost)[:10]}, resurrected/extra "
                f"{sorted(extra)[:10]}, wrong payload {sorted(changed)[:10]}")


def hot_delete(writers: list[Writer], rng: random.Random) -> None:
    """A deleter touching (nearly) every fragment: a few percent of every thread writer's
    live rows, spread over all of its fragments, each in its writer's oracle."""
    for w in writers:
        with w.lock:
            live = sorted(w.oracle)
            ids = live[rng.randrange(25)::25] if live else []
            if ids:
                retrying(lambda: w.dataset().delete(f"id IN ({', '.join(map(str, ids))})"))
                for i in ids:
                    del w.oracle[i]
                w.ops += 1


def create(uri: str, n: int = 600, storage_options: dict[str, str] | None = None) -> dict[int, str]:
    """A degraded starting table: n rows in small fragments, a BTREE index on id."""
    ids = list(range(n))
    ds = lance.write_dataset(rows(ids, "a"), uri, max_rows_per_file=20, storage_options=storage_options)
    ds.create_scalar_index("id", index_type="BTREE")
    return {i: f"a-{i}" for i in ids}


def _compactions(spark, table: str, seed: int, threads: list[threading.Thread],
                 writers: list[Writer], summary: dict) -> None:
    """Random compactions while the writer threads run (at least two); after each, every
    thread writer's rows equal its oracle."""
    rng = random.Random(seed)
    compactions = 0
    while any(t.is_alive() for t in threads) or compactions < 2:
        strategy = rng.choice(["default", "default", "deletion_only", "incremental", "io_bounded"])
        args = [f"target_rows_per_fragment => {rng.choice([50, 200, 1000])}",
                f"strategy => '{strategy}'", f"max_retries => {rng.choice([0, 1, 3])}"]
        if strategy == "io_bounded":
            args.append("options => map('max_rewrite_fragments', '25')")
        if rng.random() < 0.4:
            args.append(f"partial_progress => true, max_commits => {rng.randint(1, 3)}")
        r = spark.sql(f"CALL lance.compact(table => '{table}', {', '.join(args)})").collect()[0]
        compactions += 1
        for k in ("tasks", "commits", "retries", "tasks_conflicted", "tasks_rebased", "tasks_failed"):
            summary[k] = summary.get(k, 0) + getattr(r, k)
        met = r.retries > 0 or r.tasks_conflicted > 0 or r.tasks_rebased > 0
        summary["runs_with_conflicts"] = summary.get("runs_with_conflicts", 0) + int(met)
        summary["runs_replanned"] = summary.get("runs_replanned", 0) + int(r.retries > 0)
        if (r.tasks + r.tasks_conflicted) and "max_retries => 0" not in args:
            # it planned work and may re-plan: it must land
            landed = r.commits > 0 and r.tasks > 0
            summary["runs_with_work"] = summary.get("runs_with_work", 0) + 1
            summary["runs_landed"] = summary.get("runs_landed", 0) + int(landed)
            if not landed:
                summary.setdefault("not_landed", []).append(r.conflicts)
        for w in writers:  # after every compaction, every thread writer's range
            with w.lock:
                w.check()
    summary["compactions"] = summary.get("compactions", 0) + compactions


def run(spark, uri: str, table: str, seed: int, ops: int, summary: dict, state: Path,
        storage_options: dict[str, str] | None = None) -> None:
    """One seed: two writer threads and a writer process against compactions. ``state`` is
    a local folder for the writer process's oracle."""
    initial = create(uri, storage_options=storage_options)
    writers = [Writer(uri, 0, seed, initial, storage_options),
               Writer(uri, RANGE, seed + 1, storage_options=storage_options)]
    oracle_file = state / f"process-oracle-{seed}.json"
    process = subprocess.Popen([sys.executable, __file__, "writer", uri, str(2 * RANGE),
                                str(seed + 2), str(ops), str(oracle_file),
                                json.dumps(storage_options or {})])
    errors: list[BaseException] = []

    def work(w: Writer) -> None:
        try:
            for _ in range(ops):
                w.step()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def hot(stop: threading.Event) -> None:
        rng = random.Random(seed + 3)
        try:
            while not stop.wait(0.3):
                hot_delete(writers, rng)
                summary["hot_deletes"] = summary.get("hot_deletes", 0) + 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    stop_hot = threading.Event()
    hot_thread = threading.Thread(target=hot, args=(stop_hot,), daemon=True)
    hot_thread.start()
    try:
        _compactions(spark, table, seed, threads, writers, summary)
    finally:
        stop_hot.set()
    hot_thread.join(timeout=60)
    for t in threads:
        t.join()
    assert process.wait(timeout=600) == 0, "the writer process failed its own checks"
    if errors:
        raise errors[0]
    process_writer = Writer(uri, 2 * RANGE, 0, {int(k): v for k, v in json.loads(oracle_file.read_text()).items()},
                            storage_options)
    spark.sql(f"CALL lance.compact(table => '{table}')").collect()[0]  # a final full one
    for w in writers + [process_writer]:
        w.check()
    summary["compactions"] = summary.get("compactions", 0) + 1
    summary["writer_ops"] = summary.get("writer_ops", 0) + sum(w.ops for w in writers) + ops
    summary["seeds"] = summary.get("seeds", 0) + 1


def _process_writer(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("uri")
    p.add_argument("base", type=int)
    p.add_argument("seed", type=int)
    p.add_argument("ops", type=int)
    p.add_argument("oracle_out")
    p.add_argument("storage_options", help="JSON")
    a = p.parse_args(argv)
    w = Writer(a.uri, a.base, a.seed, storage_options=json.loads(a.storage_options) or None)
    for _ in range(a.ops):
        w.step()
    Path(a.oracle_out).write_text(json.dumps(w.oracle))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["writer"]:
        raise SystemExit(_process_writer(sys.argv[2:]))
    raise SystemExit("run through pytest: tests/test_stress.py")
