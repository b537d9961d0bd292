"""The run store, one suite for both backends (SQLite file, real PostgreSQL server): round trip,
search, run references, crash safety, two writers at once, schema versions, export/import, and
the errors that name their fix."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness_fakes import synthetic_run
from rejoinder.harness.store import (SCHEMA_VERSION, SQLiteStore, StoreError, default_store_path,
                                     open_store)
from rejoinder.harness.store.transfer import export_runs, import_runs

import rejoinder

TESTS = Path(__file__).parent
SRC = str(Path(rejoinder.__file__).parents[1])  # the rejoinder under test, for child processes
BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="module")
def pg():
    from pgserver import PgServer
    with PgServer() as server:
        yield server


def new_target(backend: str, tmp_path: Path, request) -> str:
    if backend == "sqlite":
        return str(tmp_path / "runs.sqlite")
    return request.getfixturevalue("pg").new_database()


@pytest.fixture(params=BACKENDS)
def target(request, tmp_path):
    """A new, empty store location (a file path or a database URL) of each backend."""
    return new_target(request.param, tmp_path, request)


@pytest.fixture
def store(target):
    s = open_store(target)
    yield s
    s.close()


def test_round_trip(store):
    run_id = synthetic_run(store, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
    run = store.run(run_id)
    assert run["status"] == "finished" and run["ended_at"] and run["conditions"]["config"]["stack"]["tts"] == "piper"
    assert run["levels"][1]["rss_peak_mb"] == 700.0
    assert run["n_calls"] == 2 and run["n_ok"] == 1  # the second (a reschedule) failed its check
    calls, turns = store.calls(run_id), store.turns(run_id)
    assert len(calls) == 2 and len(turns) == 6
    assert [c["id"] for c in calls] == [f"{run_id}-1-0", f"{run_id}-1-1"]  # insertion order
    t = turns[0]
    assert sum(t["segments"].values()) == pytest.approx(t["v2v_ms"], abs=0.01)
    assert t["caller_turn"] == 0 and t["stalls_n"] in (0, 1) and isinstance(t["tools"], list)
    assert calls[0]["success"] is True and calls[0]["extra"] == {} and calls[0]["failures"] == []
    assert run["summary"]["levels"][0]["concurrency"] == 1
    assert store.version == SCHEMA_VERSION


def test_search_transcripts_failures_notes_and_conditions(store):
    a = synthetic_run(store, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
    b = synthetic_run(store, tts="espeak", seed=1, levels=(1,), calls_per_worker=2)
    store.add_note(a, "Piper voice sounds clipped at the start of replies")
    hits = store.search("espeak")
    assert {h["run_id"] for h in hits} == {b}
    assert {h["kind"] for h in hits} >= {"conditions", "transcript"}
    assert [h["run_id"] for h in store.search("clipped replies")] == [a]
    assert store.search("clipped replies")[0]["kind"] == "note"
    assert "[clipped]" in store.search("clipped replies")[0]["snippet"]
    assert all(h["kind"] == "failure" for h in store.search("final_db appointments"))
    assert store.search("final_db appointments")
    assert store.search('"sounds clipped"')[0]["run_id"] == a  # phrase
    assert store.search('"clipped sounds"') == []               # ... in that order only
    assert store.search("clip*")  # prefix
    assert store.search("haircut")  # stemming: "haircut" in transcripts
    assert {h["run_id"] for h in store.search("piper OR espeak")} == {a, b}
    assert {h["kind"] for h in store.search("haircut NOT espeak")} == {"transcript"}
    assert {h["run_id"] for h in store.search("stack.tts espeak")} == {b}  # punctuation splits words
    assert "conditions" in {h["kind"] for h in store.search("stac* espeak")}
    assert store.search("nothing-like-this-anywhere") == []
    with pytest.raises(StoreError, match="invalid search"):
        store.search('"unbalanced')


def test_resolve_run_references(store):
    a = store.begin_run({}, run_id="20250101-000000-aaaa")
    b = store.begin_run({}, run_id="20250102-000000-bbbb")
    assert store.resolve("20250101") == a
    assert store.resolve("last") == b and store.resolve("last~1") == a
    assert [r["id"] for r in store.runs()] == [b, a]
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve("2025")
    with pytest.raises(StoreError, match="no run matches"):
        store.resolve("1999")
    with pytest.raises(StoreError, match="no run matches"):
        store.resolve("2025%")  # LIKE wildcards are literal
    with pytest.raises(StoreError, match="fewer runs"):
        store.resolve("last~5")


CRASHER = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [{src!r}, {tests!r}, {tests_root!r}]
    from rejoinder.harness.store import open_store
    from harness_fakes import synthetic_run
    store = open_store({target!r})
    run_id = synthetic_run(store, tts="piper", seed=0, levels=(1, 2), calls_per_worker=3, crash_after=2)
    print(run_id, flush=True)
    os._exit(17)  # killed midway: no close, no finish, no cleanup
""")


def test_a_run_killed_midway_keeps_every_finished_call(target):
    script = CRASHER.format(src=SRC, tests=str(TESTS), tests_root=str(TESTS.parent), target=target)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=TESTS)
    assert proc.returncode == 17, proc.stderr
    run_id = proc.stdout.strip()
    with open_store(target) as store:
        run = store.run(run_id)
        assert run["status"] == "interrupted"  # "running", but its process is gone
        assert run["ended_at"] is None
        assert len(store.calls(run_id)) == 2
        assert len(store.turns(run_id)) == 6
        assert store.search("haircut")  # and the finished calls are searchable


WRITER = textwrap.dedent("""
    import asyncio, sys, time
    sys.path[:0] = [{src!r}, {tests!r}, {tests_root!r}]
    from rejoinder.harness.bench import BenchOptions, run_bench
    from rejoinder.harness.store import open_store
    from rejoinder.harness.suite import load_suite
    from harness_fakes import FakeAgent
    store = open_store({target!r})
    _, scenarios = load_suite({suite!r})
    run_id = store.begin_run({{"writer": {n}}}, suite="concurrent", command="test")
    print(run_id, flush=True)
    while time.time() < {start}:  # both writers start together
        time.sleep(0.01)
    status = asyncio.run(run_bench(FakeAgent(), scenarios, store, run_id,
                                   BenchOptions(levels=[1, 2], repeat={repeat})))
    print(status, flush=True)
""")


def test_two_bench_processes_writing_at_once_lose_nothing(target, tmp_path):
    """Two real processes run the bench loop (fake agent on virtual clocks: calls end in
    milliseconds, so the writes really collide) into one store at the same moment."""
    import time
    from harness_fakes import tone_suite
    suite = tone_suite(tmp_path / "suite", names=("alpha", "beta", "gamma"))
    start = time.time() + 4.0
    repeat = 4
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(
        src=SRC, tests=str(TESTS), tests_root=str(TESTS.parent), target=target, suite=str(suite), n=n,
        start=start, repeat=repeat)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS)
        for n in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, errs) in zip(procs, outs):
        assert p.returncode == 0, errs[-3000:]
    run_ids = [out.split()[0] for out, _ in outs]
    assert [out.split()[1] for out, _ in outs] == ["finished", "finished"]
    per_run = (1 + 2) * 3 * repeat  # levels 1 and 2, three scenarios, repeated
    with open_store(target) as store:
        for run_id in run_ids:
            calls = store.calls(run_id)
            assert len(calls) == per_run
            assert len({c["id"] for c in calls}) == per_run
            assert len(store.turns(run_id)) == 2 * per_run  # two caller turns each
            assert sorted(store.run(run_id)["levels"]) == [1, 2]
            assert store.run(run_id)["status"] == "finished"


def test_many_openers_of_a_new_store_migrate_it_once(target):
    import threading
    barrier, errors, versions = threading.Barrier(6), [], []

    def opener() -> None:
        barrier.wait()
        try:
            with open_store(target) as s:
                versions.append(s.version)
        except Exception as exc:  # noqa: BLE001 — collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and versions == [SCHEMA_VERSION] * 6


def test_opens_and_migrates_a_store_written_by_an_older_version(target):
    with _open_at(target, upto=1) as old:  # what version 1 wrote: no search index yet
        assert old.version == 1
        run_id = synthetic_run(old, tts="piper", seed=0, levels=(1,), calls_per_worker=2)
        old.add_note(run_id, "written by v1")
        with pytest.raises(StoreError, match="no search index"):
            old.search("anything")
    with open_store(target) as new:
        assert new.version == SCHEMA_VERSION
        assert len(new.calls(run_id)) == 2
        assert [h["kind"] for h in new.search("written v1")] == ["note"]  # migration indexed old rows
        assert new.search("haircut")


def _open_at(target: str, upto: int):
    if target.startswith("postgresql://"):
        from rejoinder.harness.store.postgres import PostgresStore
        return PostgresStore(target, upto=upto)
    return SQLiteStore(target, upto=upto)


def test_a_newer_store_errors_clearly(target):
    with open_store(target) as s:
        s._exec("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=r"newer rejoinder .*upgrade rejoinder or use another --store"):
        open_store(target)


def test_export_then_import_moves_runs_between_backends(store, tmp_path, request):
    a = synthetic_run(store, tts="piper", seed=0, levels=(1, 2), calls_per_worker=2)
    b = synthetic_run(store, tts="espeak", seed=1, levels=(1,), calls_per_worker=2)
    store.add_note(a, "first run")
    buf = io.StringIO()
    assert export_runs(store, [], buf) == (2, 8)
    other_backend = "postgresql" if store.backend == "sqlite" else "sqlite"
    with open_store(new_target(other_backend, tmp_path / "other", request)) as dest:
        assert import_runs(dest, io.StringIO(buf.getvalue())) == ([a, b], [])
        for run_id in (a, b):
            src, got = store.run(run_id), dest.run(run_id)
            assert got == src
            assert dest.calls(run_id) == store.calls(run_id)
            assert dest.turns(run_id) == store.turns(run_id)
        assert dest.search("first run")[0]["run_id"] == a
        assert import_runs(dest, io.StringIO(buf.getvalue())) == ([], [a, b])  # nothing twice
        with pytest.raises(StoreError, match="not a rejoinder runs export"):
            import_runs(dest, io.StringIO('{"x": 1}\n'))


# --- bad input: each error names the fix ----------------------------------------------------------

def test_not_a_store(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a rejoinder run store"):
        open_store(junk)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE orders (id)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a rejoinder run store.*orders"):
        open_store(other)


def test_wrong_store_urls(tmp_path, pg):
    with pytest.raises(StoreError, match=r"unknown run store URL 'mysql://u:\*\*\*@h/db'.*postgresql://"):
        open_store("mysql://u:secret@h/db")
    with pytest.raises(StoreError, match="malformed PostgreSQL URL 'postgresql:/db'; write it as postgresql://"):
        open_store("postgresql:/db")
    with pytest.raises(StoreError, match="holds no rejoinder run store yet; run `rejoinder bench"):
        open_store(pg.new_database(), create=False)
    with pytest.raises(StoreError, match="no run store at .*; run `rejoinder bench` first"):
        open_store(tmp_path / "missing.sqlite", create=False)
    missing_db = pg.url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreError, match="does not exist.*createdb"):
        open_store(missing_db)
    with pytest.raises(StoreError, match="write the URL as postgresql://") as err:
        open_store("postgresql://u:secret@127.0.0.1:notaport/db")
    assert "secret" not in str(err.value)


def test_a_postgresql_server_that_is_down():
    from pgserver import free_port
    url = f"postgresql://rejoinder:pw@127.0.0.1:{free_port()}/runs"
    with pytest.raises(StoreError, match=r"cannot open the PostgreSQL run store postgresql://rejoinder:\*\*\*@"
                       r".*Connection refused; is the PostgreSQL server running.*--store runs.sqlite") as err:
        open_store(url)
    assert "pw@" not in str(err.value)


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("REJOINDER_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("REJOINDER_STORE")
    p = default_store_path()
    assert p.name == "runs.sqlite" and "rejoinder" in str(p)


def test_wal(tmp_path):
    with SQLiteStore(tmp_path / "runs.sqlite") as s:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
