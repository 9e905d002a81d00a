"""Whose turn it is when a worker frees (issue 42, EnginePool.next): the waiting statement of
the user who holds the fewest workers, not the first that came. A real PySpark session whose
pool has 2 workers and no reserve (`spark.lance.compact.engine.reserveWorker=false`, so a user
holding none cannot skip the queue through it); two users as a Connect server names them (the
operation tag Spark Connect gives each statement: EnginePool.userOf)."""
from __future__ import annotations

import os

import lance

from conftest import wait_for
from engine_pool import pool
from oracle import content
import writers
from test_engine_pool import Running, compact_sql, small_table, wait_held

os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"
SPARK_CONF = {"spark.lance.compact.engine.workers": "2", "spark.lance.compact.engine.spareWorkers": "0",
              "spark.lance.compact.engine.reserveWorker": "false",
              "spark.lance.compact.engine.waitTimeout": "300s",
              "spark.lance.compact.engineRewrite.maxBatchBytes": "0"}


def as_user(user: str, n: int) -> str:
    """The tag Spark Connect puts on a statement of ``user`` (EnginePool's ConnectUser)."""
    return f"SparkConnect_OperationTag_User_{user}_Session_s{n}_Operation_o{n}"


def test_a_freed_worker_goes_to_the_user_who_holds_fewest_not_to_the_first_waiting(spark, warehouse):
    """alice holds both workers (two compactions held before their commit) and waits with a
    third; bob comes after her with one. When one of alice's ends, bob's runs (he holds none,
    she holds one), though hers waited longer; hers runs once a worker frees again. Every
    table's rows are exact."""
    names = ["alice_1", "alice_2", "alice_3", "bob_1"]
    uris = {n: small_table(warehouse, n) for n in names}
    expected = {n: content(lance.dataset(u)) for n, u in uris.items()}
    held = {n: Running(spark, compact_sql(n, held=True), tag=as_user("alice", i))
            for i, n in enumerate(names[:2])}
    for n in names[:2]:
        wait_held(uris[n])
    third = Running(spark, compact_sql("alice_3", held=True), tag=as_user("alice", 3))
    wait_for(lambda: pool(spark).queued() == 1, timeout=30)
    bobs = Running(spark, compact_sql("bob_1", held=True), tag=as_user("bob", 4))
    wait_for(lambda: pool(spark).queued() == 2, timeout=30)
    assert writers.release(uris["alice_1"])
    held["alice_1"].join()
    wait_held(uris["bob_1"])  # bob's got the worker alice_1 freed
    assert pool(spark).queued() == 1 and not os.path.exists(writers.at_commit(uris["alice_3"]))
    assert writers.release(uris["bob_1"])
    bobs.join()
    wait_held(uris["alice_3"])  # and alice's third the next one
    for n in ("alice_2", "alice_3"):
        assert writers.release(uris[n])
    held["alice_2"].join(), third.join()
    for n, u in uris.items():
        ds = lance.dataset(u)
        assert content(ds) == expected[n] and len(ds.get_fragments()) == 1, n
    assert pool(spark).queued() == 0
