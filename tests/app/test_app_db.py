from __future__ import annotations

import sqlite3

import pytest

from rejoinder.app import db
from rejoinder.app.db import db_diff, db_state, fresh_demo_db, open_db, seed_demo


def test_schema_wal_and_foreign_keys(conn):
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO appointments VALUES (999, 77, 'haircut', '2026-12-07T09:00', 'booked')")


def test_seed_counts_and_shapes(conn):
    n = lambda t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: E731
    assert (n("customers"), n("orders"), n("appointments")) == (5, 8, 6)
    state = db_state(conn)
    assert {"4217", "5031", "3388"} <= set(state["orders"])
    assert all(len(o) == 4 and o.isdigit() for o in state["orders"])
    assert {o["status"] for o in state["orders"].values()} == set(db.ORDER_STATUSES)
    per_customer = conn.execute(
        "SELECT customer_id FROM orders WHERE customer_id IS NOT NULL "
        "GROUP BY customer_id HAVING count(*) = 2"
    ).fetchall()
    assert len(per_customer) == 2
    for a in state["appointments"].values():
        assert a["slot"].startswith("2026-12-") and a["status"] in db.APPOINTMENT_STATUSES
        assert db.within_hours(a["slot"])


def test_seed_is_deterministic_and_fresh_resets(tmp_path):
    c1 = fresh_demo_db(tmp_path / "a.db")
    s1 = db_state(c1)
    c1.execute("UPDATE appointments SET status = 'cancelled' WHERE id = 101")
    c1.close()
    c2 = fresh_demo_db(tmp_path / "a.db")
    assert db_state(c2) == s1
    c2.close()


def test_open_db_is_idempotent_and_seed_twice_fails(tmp_path):
    c = open_db(tmp_path / "b.db")
    seed_demo(c)
    c.close()
    c = open_db(tmp_path / "b.db")  # schema already there
    with pytest.raises(sqlite3.IntegrityError):
        seed_demo(c)
    assert len(db_state(c)["orders"]) == 8  # the failed seed rolled back
    c.close()


def test_db_diff(conn):
    before = db_state(conn)
    conn.execute("UPDATE appointments SET status = 'cancelled' WHERE id = 102")
    assert db_diff(before, db_state(conn)) == {
        "appointments": {102: {"status": ("booked", "cancelled")}}
    }
    assert db_diff(before, before) == {}


def test_customer_lookup_by_phone_formats(conn):
    assert db.customer_by_phone(conn, "+15550101")["name"] == "Maria Lopez"
    assert db.customer_by_phone(conn, "1 (555) 0101")["name"] == "Maria Lopez"
    assert db.customer_by_phone(conn, "555-0102")["name"] == "James Chen"
    assert db.customer_by_phone(conn, "0101") is None  # too short to be a suffix match
    assert db.customer_by_phone(conn, None) is None


def test_slot_helpers():
    assert db.slot_iso("thursday", "14:00") == "2026-12-10T14:00"
    assert db.slot_iso("Monday", "9:30") == "2026-12-07T09:30"
    with pytest.raises(ValueError):
        db.slot_iso("Someday", "10:00")
    with pytest.raises(ValueError):
        db.parse_hhmm("25:00")
    assert db.within_hours("2026-12-07T09:00") and db.within_hours("2026-12-07T16:00")
    assert not db.within_hours("2026-12-07T16:30")  # would end after 17:00
    assert not db.within_hours("2026-12-07T08:59")
    assert not db.within_hours("2026-12-12T10:00")  # Saturday
    assert db.speak_slot("2026-12-10T14:00") == "Thursday at 2 PM"
    assert db.speak_slot("2026-12-10T09:30") == "Thursday at 9:30 AM"
    assert db.speak_time(12, 0) == "12 PM"
    assert db.speak_date("2026-12-09") == "Wednesday, December 9"
