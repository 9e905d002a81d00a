"""An engine over its memory ceiling is replaced once no statement uses it (issue 33, item 7):
whatever the native libraries leave behind over days (docs/benchmark.md, the soaks), the
driver's engine holds no more than ``spark.lance.compact.engine.memoryCeiling`` for long.
Here the ceiling (1 MiB) is below any engine, checked every second: every engine asks to be
replaced after its first statement. Statements in a row and at once, from four threads, all
answer with exact results; none is cut off by a replacement; the engines change between them;
each engine's log says why it asked. The settings' parsing: defaults, a typo, 0 for none."""
from __future__ import annotations

import threading
import time

import lance
import pytest

from conftest import wait_for
from oracle import batch, content

CEILING = {"spark.lance.compact.engine.memoryCeiling": "1m",
           "spark.lance.compact.engine.memoryCheckInterval": "1s",
           "spark.lance.compact.engine.heartbeatTimeout": "5s"}  # a heartbeat every second


@pytest.fixture(scope="module")
def spark(warehouse, tmp_path_factory):
    from conftest import logged_session

    session = logged_session(warehouse, tmp_path_factory, "lance-compact-engine-replaced", CEILING)
    yield session
    session.stop()


def engine_pid(spark) -> int:
    return spark._jvm.io.github.lancecompact.spark.engine.EngineProcess.get(spark._jsparkSession).pid()


def small_table(warehouse, name: str, fragments: int = 6) -> str:
    uri = str(warehouse / "db" / f"{name}.lance")
    for i in range(fragments):
        lance.write_dataset(batch(i * 10, 10), uri, mode="append" if i else "create")
    return uri


def compact(spark, name: str):
    return spark.sql(f"CALL lance.compact(table => 'db.{name}', target_rows_per_fragment => 1000)").collect()[0]


ASKED = "over the engine's ceiling of 1.0 MiB (spark.lance.compact.engine.memoryCeiling)"


def test_an_engine_over_its_ceiling_is_replaced_between_statements(spark, warehouse):
    pids = []
    for round_ in range(4):
        uri = small_table(warehouse, f"seq{round_}")
        expected = content(lance.dataset(uri))
        row = compact(spark, f"seq{round_}")
        assert row.fragments_removed == 6 and row.fragments_added == 1, row
        assert content(lance.dataset(uri)) == expected
        pids.append(engine_pid(spark))
        # this engine's keeper asks (1 s after the statement), then a heartbeat (1 s) says so
        wait_for(lambda: spark.engine_log.read_text().count(ASKED) > round_, timeout=60)
        time.sleep(2.5)
    # each engine asked; a statement finds the engine of the one before it when the request
    # reached the driver just after its heartbeat: at least 3 engines over 4 statements
    assert len(set(pids)) >= 3, f"the engines of the 4 statements: {pids}"
    assert spark.engine_log.read_text().count("engine ready (pid") >= 4


def test_statements_at_once_are_never_cut_off_by_a_replacement(spark, warehouse):
    names = [f"par{i}_{j}" for i in range(4) for j in range(4)]
    uris = {n: small_table(warehouse, n, fragments=4) for n in names}
    expected = {n: content(lance.dataset(u)) for n, u in uris.items()}
    errors, pids = [], set()

    def lane(i: int) -> None:
        for j in range(4):
            try:
                row = compact(spark, f"par{i}_{j}")
                assert row.fragments_removed == 4, row
                pids.add(engine_pid(spark))
                spark.sql("CALL lance.describe_layout(table => 'db.par0_0')").collect()
            except Exception as e:  # noqa: BLE001 - collected and shown below
                errors.append(f"par{i}_{j}: {e}")
            time.sleep(0.7 * (i + 1))  # lanes out of step: the engine is idle only now and then

    lanes = [threading.Thread(target=lane, args=(i,)) for i in range(4)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join(300)
    assert not errors, errors
    for n, u in uris.items():
        ds = lance.dataset(u)
        assert content(ds) == expected[n] and len(ds.get_fragments()) == 1, n
    assert len(pids) >= 2, f"the engine was never replaced while statements ran: {pids}"


def test_the_settings_take_sizes_and_durations_and_a_typo_keeps_the_default(caplog):
    from lance_compact.runtime.memory import CEILING_MARGIN, INTERVAL_S, settings

    caches = 128 << 20
    assert settings({}, caches) == (INTERVAL_S, caches + CEILING_MARGIN)
    assert settings({"spark.lance.compact.engine.memoryCeiling": "2g",
                     "spark.lance.compact.engine.memoryCheckInterval": "5 minutes"}, caches) == (300.0, 2 << 30)
    assert settings({"spark.lance.compact.engine.memoryCeiling": "0"}, caches)[1] is None  # never replaced
    assert settings({"spark.lance.compact.engine.memoryCheckInterval": "0s"}, caches)[0] == 1.0  # at most once a second
    with caplog.at_level("ERROR"):
        assert settings({"spark.lance.compact.engine.memoryCeiling": "two gigs",
                         "spark.lance.compact.engine.memoryCheckInterval": "often"}, caches) == (
            INTERVAL_S, caches + CEILING_MARGIN)
    said = caplog.text
    assert "spark.lance.compact.engine.memoryCeiling = 'two gigs': expected a size" in said, said
    assert "spark.lance.compact.engine.memoryCheckInterval" in said and "often" in said, said
