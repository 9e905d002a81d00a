"""One Lance session per engine process (runtime/tables.py): object-store clients and immutable
metadata are kept, and still every open sees the table as it is now -- a commit from another
process, a table dropped and created again at the same place, a cleaned-up version -- and a
store is never reached with another store's endpoint or keys."""
from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
import time

import lance
import pyarrow as pa
import pytest

from lance_compact.errors import CompactionError
from lance_compact.runtime import tables
from lance_compact.runtime.tables import FILE_SESSIONS, HELD, dataset, list_folder, open_dataset


def _append_elsewhere(uri: str, storage: dict | None, value: int) -> None:
    """A commit by another process (its own Lance, its own caches)."""
    code = ("import lance, pyarrow as pa, sys; lance.write_dataset(pa.table({'a': [int(sys.argv[3])]}), "
            "sys.argv[1], mode='append', storage_options=eval(sys.argv[2]))")
    subprocess.run([sys.executable, "-c", code, uri, repr(storage), str(value)], check=True, timeout=120)


def _sees_every_commit(uri: str, storage: dict | None) -> None:
    lance.write_dataset(pa.table({"a": [0]}), uri, storage_options=storage)
    for i in range(1, 4):
        before = open_dataset("db.t", uri, storage)
        _append_elsewhere(uri, storage, i)
        after = open_dataset("db.t", uri, storage)
        assert (after.version, after.count_rows()) == (before.version + 1, i + 1)
        assert sorted(after.to_table()["a"].to_pylist()) == list(range(i + 1))


def test_a_commit_elsewhere_is_seen_locally(tmp_path):
    _sees_every_commit(str(tmp_path / "t.lance"), None)


def test_a_commit_elsewhere_is_seen_on_s3(s3):
    _sees_every_commit(s3.fresh_bucket("seen") + "/t.lance", s3.storage_options)


def test_a_table_created_again_is_read_afresh(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri)
    assert open_dataset("db.t", uri).to_table().to_pydict() == {"a": [1, 2, 3]}
    shutil.rmtree(uri)
    lance.write_dataset(pa.table({"b": ["x"]}), uri)  # version 1 again, at the same path
    again = open_dataset("db.t", uri)
    assert again.schema.names == ["b"] and again.to_table().to_pydict() == {"b": ["x"]}


def _held():
    slot = HELD._slot
    return None if slot is None else slot[1]


def _held_uri():
    held = _held()
    return None if held is None else held.uri


@pytest.fixture
def every_table_held(monkeypatch):
    """The held table (tables.HELD) for tables of any size: a test's tables have manifests far
    under the 4 MiB a table needs to be held (tables.held_from_file_bytes)."""
    monkeypatch.setattr(tables, "held_from_file_bytes", lambda: 0)
    HELD.clear()
    yield
    HELD.clear()


def test_a_held_table_is_handed_out_while_it_is_the_newest(tmp_path, every_table_held, monkeypatch):
    uri, other = str(tmp_path / "t.lance"), str(tmp_path / "u.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    lance.write_dataset(pa.table({"a": [2]}), other)
    open_dataset("db.t", uri)
    opens = []
    real = tables.lance.dataset
    monkeypatch.setattr(tables.lance, "dataset", lambda *a, **k: opens.append(a) or real(*a, **k))
    assert _held() is not None and open_dataset("db.t", uri).version == 1 and not opens  # held: not opened again
    assert open_dataset("db.t", uri, version=1).version == 1 and len(opens) == 1  # a version asked for: opened
    assert _held_uri() == uri
    open_dataset("db.u", other)
    assert _held_uri() == other  # the other table replaces it
    monkeypatch.setitem(tables._cache_bytes, "held", 8)  # a manifest over the bound is not held
    HELD.clear()
    open_dataset("db.t", uri)
    assert _held() is None


def test_a_held_table_sees_every_commit_elsewhere(tmp_path, every_table_held):
    _sees_every_commit(str(tmp_path / "t.lance"), None)


def test_a_held_table_changed_in_place_is_not_handed_out_stale(tmp_path, every_table_held):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [0, 1, 2]}), uri)
    before = open_dataset("db.t", uri)
    other = open_dataset("db.t", uri)  # the held table again: another caller's copy
    before.delete("a = 0")  # a statement's own commit through its object: its version moves
    assert (other.version, _held().version) == (1, 1)  # not another caller's, not the held one
    again = open_dataset("db.t", uri)
    assert (again.version, sorted(again.to_table()["a"].to_pylist())) == (2, [1, 2])
    lance.write_dataset(pa.table({"a": [9]}), uri, mode="append")  # and then another writer's
    assert sorted(open_dataset("db.t", uri).to_table()["a"].to_pylist()) == [1, 2, 9]


def test_a_held_table_created_again_at_its_path_is_read_afresh(tmp_path, every_table_held):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri)
    open_dataset("db.t", uri)
    held = _held()
    size = tables._manifest_identity(uri, 1)[0]
    for _ in range(20):  # version 1 again, with a manifest of the same size (a timestamp's
        shutil.rmtree(uri)  # encoding may take a byte more or less)
        # The file times tell the new manifest from the old (the inode may be reused): a coarse
        # clock ticks every few ms, and a table held is never written again within a tick of
        # its first write (one of over a megabyte of manifest takes far longer).
        time.sleep(0.05)
        lance.write_dataset(pa.table({"a": [4, 5, 6]}), uri)
        if tables._manifest_identity(uri, 1)[0] == size:
            break
    assert tables._manifest_identity(uri, 1)[0] == size
    again = open_dataset("db.t", uri)
    assert _held() is not held and again.to_table().to_pydict() == {"a": [4, 5, 6]}


def test_a_table_moved_in_while_held_is_not_mistaken_for_it(tmp_path, every_table_held, monkeypatch):
    """Another table moved to the path while Lance reads the manifest: the file checked after
    the open is not the one read, and the table is not held."""
    uri, other = str(tmp_path / "t.lance"), str(tmp_path / "u.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    lance.write_dataset(pa.table({"a": [2]}), other)  # version 1 too
    real = lance.dataset

    def open_then_swap(*args, **kwargs):
        ds = real(*args, **kwargs)
        shutil.move(uri, str(tmp_path / "old.lance"))
        shutil.move(other, uri)
        return ds

    monkeypatch.setattr(tables.lance, "dataset", open_then_swap)
    open_dataset("db.t", uri)
    monkeypatch.setattr(tables.lance, "dataset", real)
    assert _held() is None  # not held: the folder changed during the open
    assert open_dataset("db.t", uri).to_table().to_pydict() == {"a": [2]}


def test_every_spelling_of_a_local_table_is_its_folder(tmp_path, every_table_held):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    for spelling in (uri, f"file://{uri}", f"file://localhost{uri}", f"file:{uri}"):
        HELD.clear()
        open_dataset("db.t", spelling)
        assert _held() is not None, spelling
    assert tables._local_root("file://elsewhere/t.lance") is None  # another host's: never held
    assert tables._local_root(f"file://{tmp_path}/t%2Elance") is None


def test_a_held_table_is_let_go_when_idle(tmp_path, every_table_held):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1]}), uri)
    open_dataset("db.t", uri)
    first = _held()
    HELD.expire(3600)
    assert _held() is first
    HELD.expire(0)
    assert _held() is None and "no table held" in tables.session_figures()


def test_a_table_the_metadata_cache_keeps_is_not_held(monkeypatch):
    """Held only when the manifest would take over half the session's metadata cache."""
    monkeypatch.setattr(tables, "_cache_bytes", dict(tables._cache_bytes))
    assert tables.held_from_file_bytes() == 4 << 20  # 64 MiB: a 4 MiB manifest file
    tables._cache_bytes["metadata"] = 512 << 20
    assert tables.held_from_file_bytes() == 32 << 20
    tables._cache_bytes["metadata"] = 0
    assert tables.held_from_file_bytes() == 1 << 20


def test_one_malformed_cache_setting_keeps_the_others(monkeypatch):
    monkeypatch.setattr(tables, "_cache_bytes", dict(tables._cache_bytes))
    with pytest.raises(ValueError, match="metadataCacheBytes"):
        tables.configure({tables.METADATA_CACHE_SETTING: "64mib", tables.INDEX_CACHE_SETTING: "8m",
                          tables.HELD_TABLE_SETTING: "0"})
    assert (tables._cache_bytes["index"], tables._cache_bytes["held"]) == (8 << 20, 0)


def test_a_table_on_an_object_store_is_not_held(s3, every_table_held):
    uri = s3.fresh_bucket("held") + "/t.lance"
    lance.write_dataset(pa.table({"a": [1]}), uri, storage_options=s3.storage_options)
    open_dataset("db.t", uri, s3.storage_options)
    assert _held() is None


def test_a_cleaned_up_version_is_not_served_from_the_cache(tmp_path):
    uri = str(tmp_path / "t.lance")
    for i in range(3):
        lance.write_dataset(pa.table({"a": [i]}), uri, mode="append" if i else "create")
    assert open_dataset("db.t", uri, version=1).to_table().to_pydict() == {"a": [0]}  # now cached
    lance.dataset(uri).cleanup_old_versions(older_than=datetime.timedelta(0))
    with pytest.raises(CompactionError, match="version 1 does not exist .*at version 3"):
        open_dataset("db.t", uri, version=1)


@pytest.fixture(scope="module")
def second_store(tmp_path_factory):
    from s3_server import S3Server
    server = S3Server(log=tmp_path_factory.mktemp("s3b") / "moto.log").start()
    yield server
    server.stop()


def test_the_same_bucket_on_two_endpoints_is_two_tables(s3, second_store):
    """Same bucket name and path on two stores: each open and each listing reaches its own."""
    bucket = f"same-{id(s3) % 10**6}"
    for server, rows in ((s3, [1]), (second_store, [2, 2])):
        server.create_bucket(bucket)
        lance.write_dataset(pa.table({"a": rows}), f"s3://{bucket}/t.lance", storage_options=server.storage_options)
    for server, rows in ((s3, [1]), (second_store, [2, 2]), (s3, [1])):
        assert dataset(f"s3://{bucket}/t.lance", server.storage_options).to_table()["a"].to_pylist() == rows
    lance.write_dataset(pa.table({"a": [3]}), f"s3://{bucket}/t.lance", mode="append",
                        storage_options=second_store.storage_options)
    assert len(list_folder(f"s3://{bucket}/t.lance", second_store.storage_options, "_versions")) == 2
    assert len(list_folder(f"s3://{bucket}/t.lance", s3.storage_options, "_versions")) == 1


def test_a_listing_session_per_store_not_per_table(s3):
    """Tables in one bucket share one file session (one HTTP client); its listings are each
    table's own."""
    bucket = s3.fresh_bucket("lists")
    for name, versions in (("a", 1), ("b", 3)):
        for i in range(versions):
            lance.write_dataset(pa.table({"x": [i]}), f"{bucket}/ns/{name}.lance", mode="append" if i else "create",
                                storage_options=s3.storage_options)
    first, base_a = FILE_SESSIONS.folder(f"{bucket}/ns/a.lance", s3.storage_options)
    second, base_b = FILE_SESSIONS.folder(f"{bucket}/ns/b.lance/", s3.storage_options)
    assert first is second and (base_a, base_b) == ("ns/a.lance", "ns/b.lance")
    assert len(list_folder(f"{bucket}/ns/a.lance", s3.storage_options, "_versions")) == 1
    assert len(list_folder(f"{bucket}/ns/b.lance", s3.storage_options, "_versions")) == 3
    other = {**s3.storage_options, "aws_secret_access_key": "another"}
    assert FILE_SESSIONS.folder(f"{bucket}/ns/a.lance", other)[0] is not first  # other keys: another client
