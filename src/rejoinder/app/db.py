"""The reference application's SQLite store: customers, orders and appointments.

A real on-disk SQLite database (WAL journal, foreign keys on). Every simulated call starts from
:func:`fresh_demo_db`, so scenarios are reproducible; :func:`db_state` snapshots the mutable
tables as plain dicts so a scenario can assert the final state.

Conventions:

* Phone numbers are stored as E.164-like strings (``"+15550101"``); compare them with
  :func:`normalize_phone` (digits only), since caller ID formats vary.
* Order ids are 4-digit strings (``"4217"``), appointment ids small integers.
* Appointment slots are naive ISO datetimes (``"2026-12-10T14:00"``) in the fixed demo week that
  starts Monday :data:`DEMO_WEEK_START`; appointments last :data:`SLOT_MINUTES` minutes.
"""

from __future__ import annotations

import re
import sqlite3
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from rejoinder.recording import transaction

DEMO_WEEK_START = date(2026, 12, 7)  # a Monday
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
OPEN_HOUR = 9  # business hours: appointments start at or after 09:00 ...
CLOSE_HOUR = 17  # ... and end by 17:00
SLOT_MINUTES = 60

ORDER_STATUSES = ("processing", "shipped", "delivered", "cancelled")
APPOINTMENT_STATUSES = ("booked", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id     INTEGER PRIMARY KEY,
    name   TEXT NOT NULL,
    phone  TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS orders (
    id           TEXT PRIMARY KEY CHECK (length(id) = 4),
    customer_id  INTEGER REFERENCES customers(id),
    item         TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('processing','shipped','delivered','cancelled')),
    ship_date    TEXT,
    arrival_date TEXT
);
CREATE TABLE IF NOT EXISTS appointments (
    id           INTEGER PRIMARY KEY,
    customer_id  INTEGER NOT NULL REFERENCES customers(id),
    service      TEXT NOT NULL,
    slot         TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('booked','cancelled'))
);
CREATE INDEX IF NOT EXISTS orders_by_customer ON orders(customer_id);
CREATE INDEX IF NOT EXISTS appointments_by_slot ON appointments(slot, status);
"""

_CUSTOMERS = [
    (1, "Maria Lopez", "+15550101"),
    (2, "James Chen", "+15550102"),
    (3, "Aisha Patel", "+15550103"),
    (4, "Tom Becker", "+15550104"),
    (5, "Lena Novak", "+15550105"),
]

# (id, customer_id, item, status, ship_date, arrival_date) — arrival is the (estimated) delivery.
_ORDERS = [
    ("4217", 1, "wireless headphones", "shipped", "2026-12-04", "2026-12-09"),
    ("5031", 1, "phone case", "processing", None, "2026-12-14"),
    ("3388", 2, "coffee grinder", "delivered", "2026-12-01", "2026-12-03"),
    ("6120", 2, "desk lamp", "cancelled", None, None),
    ("7002", 3, "yoga mat", "shipped", "2026-12-05", "2026-12-08"),
    ("2459", 4, "blender", "processing", None, "2026-12-15"),
    ("8814", 5, "hiking backpack", "delivered", "2026-11-27", "2026-12-02"),
    ("9150", None, "gift card", "delivered", "2026-11-30", "2026-11-30"),  # guest checkout
]

# (id, customer_id, service, slot, status)
_APPOINTMENTS = [
    (101, 1, "haircut", "2026-12-08T10:00", "booked"),
    (102, 2, "consultation", "2026-12-09T14:00", "booked"),
    (103, 3, "haircut", "2026-12-11T14:00", "booked"),
    (104, 4, "consultation", "2026-12-11T11:00", "booked"),
    (105, 5, "haircut", "2026-12-07T16:00", "cancelled"),
    (106, 3, "consultation", "2026-12-10T10:00", "booked"),
]


def normalize_phone(phone: str) -> str:
    """Digits only, so ``"+1 (555) 0101"`` and ``"15550101"`` compare equal."""
    return re.sub(r"\D", "", phone or "")


def open_db(path: str | Path) -> sqlite3.Connection:
    """Open (creating if absent) the database at ``path`` with the schema, WAL and foreign keys.

    Rows come back as :class:`sqlite3.Row`. Raises :class:`sqlite3.Error` if the file cannot be
    opened. ``":memory:"`` works too (WAL does not apply there).
    """
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    if str(path) != ":memory:":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(_SCHEMA)
    return conn


def seed_demo(conn: sqlite3.Connection) -> None:
    """Insert the deterministic demo data (5 customers, 8 orders, 6 appointments).

    Raises :class:`sqlite3.IntegrityError` if the rows already exist.
    """
    with transaction(conn):
        conn.executemany("INSERT INTO customers VALUES (?,?,?)", _CUSTOMERS)
        conn.executemany("INSERT INTO orders VALUES (?,?,?,?,?,?)", _ORDERS)
        conn.executemany("INSERT INTO appointments VALUES (?,?,?,?,?)", _APPOINTMENTS)


def fresh_demo_db(path: str | Path) -> sqlite3.Connection:
    """Delete any database at ``path`` (with its WAL/SHM files), create and seed a new one."""
    p = Path(path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(p) + suffix).unlink(missing_ok=True)
    conn = open_db(p)
    seed_demo(conn)
    return conn


# --------------------------------------------------------------------------------------- queries


def customer_by_phone(conn: sqlite3.Connection, phone: str | None) -> dict[str, Any] | None:
    """The customer whose phone matches ``phone`` (see :func:`phones_match`), or None."""
    digits = normalize_phone(phone or "")
    if not digits:
        return None
    for row in conn.execute("SELECT id, name, phone FROM customers"):
        if phones_match(row["phone"], digits):
            return dict(row)
    return None


def phones_match(a: str, b: str) -> bool:
    """Equal digits, or one ends with the other when both have ≥ 7 digits (a caller may omit
    the country code: "555 0101" matches "+15550101")."""
    da, db_ = normalize_phone(a), normalize_phone(b)
    if da == db_ and da:
        return True
    return min(len(da), len(db_)) >= 7 and (da.endswith(db_) or db_.endswith(da))


def order_row(conn: sqlite3.Connection, order_id: str) -> dict[str, Any] | None:
    """One order joined with its customer's name and phone (None for guests), or None."""
    row = conn.execute(
        "SELECT o.*, c.name AS customer_name, c.phone AS customer_phone FROM orders o "
        "LEFT JOIN customers c ON c.id = o.customer_id WHERE o.id = ?",
        (order_id,),
    ).fetchone()
    return dict(row) if row else None


def orders_of(conn: sqlite3.Connection, customer_id: int) -> list[dict[str, Any]]:
    """The customer's orders, ordered by id."""
    rows = conn.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY id", (customer_id,))
    return [dict(r) for r in rows]


def appointments_of(conn: sqlite3.Connection, customer_id: int) -> list[dict[str, Any]]:
    """The customer's appointments (any status), ordered by slot."""
    rows = conn.execute(
        "SELECT * FROM appointments WHERE customer_id = ? ORDER BY slot", (customer_id,)
    )
    return [dict(r) for r in rows]


def booked_slots(conn: sqlite3.Connection) -> dict[str, int]:
    """Every booked slot (ISO datetime) → appointment id."""
    rows = conn.execute("SELECT id, slot FROM appointments WHERE status = 'booked'")
    return {r["slot"]: r["id"] for r in rows}


def db_state(conn: sqlite3.Connection) -> dict[str, dict[str, dict[str, Any]]]:
    """Snapshot of the mutable tables: ``{"orders": {id: row}, "appointments": {id: row}}``.

    Rows are plain dicts (column → value); keys are the ids (order ids str, appointment ids int).
    """
    orders = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM orders ORDER BY id")}
    appts = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM appointments ORDER BY id")}
    return {"orders": orders, "appointments": appts}


def db_diff(before: dict, after: dict) -> dict[str, dict[Any, dict[str, tuple[Any, Any]]]]:
    """Changed columns per row between two :func:`db_state` snapshots: ``{table: {id: {col:
    (old, new)}}}``; a row that appeared or vanished shows all its columns with None opposite."""
    out: dict[str, dict[Any, dict[str, tuple[Any, Any]]]] = {}
    for table in ("orders", "appointments"):
        b, a = before.get(table, {}), after.get(table, {})
        for key in sorted(set(b) | set(a), key=str):
            rb, ra = b.get(key, {}), a.get(key, {})
            cols = {
                c: (rb.get(c), ra.get(c))
                for c in sorted(set(rb) | set(ra))
                if rb.get(c) != ra.get(c)
            }
            if cols:
                out.setdefault(table, {})[key] = cols
    return out


# ------------------------------------------------------------------------------------- slot maths


def slot_iso(day: str, time: str) -> str:
    """ISO datetime of weekday ``day`` (name, any case) at ``time`` ("HH:MM") in the demo week.

    Raises ValueError for an unknown weekday or malformed time.
    """
    d = day.strip().lower()
    if d not in WEEKDAYS:
        raise ValueError(f"unknown weekday {day!r}")
    hh, mm = parse_hhmm(time)
    when = datetime.combine(DEMO_WEEK_START + timedelta(days=WEEKDAYS.index(d)), datetime.min.time())
    return (when + timedelta(hours=hh, minutes=mm)).strftime("%Y-%m-%dT%H:%M")


def parse_hhmm(time: str) -> tuple[int, int]:
    """``"14:05"`` → (14, 5). Raises ValueError unless it is a valid 24 h "H:MM"/"HH:MM"."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", time or "")
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ValueError(f"time must be 24 h 'HH:MM', got {time!r}")
    return int(m.group(1)), int(m.group(2))


def within_hours(slot: str) -> bool:
    """True when an appointment at ``slot`` starts ≥ 09:00 and ends ≤ 17:00 on a weekday."""
    t = datetime.fromisoformat(slot)
    start = t.hour * 60 + t.minute
    return (
        t.weekday() < 5
        and start >= OPEN_HOUR * 60
        and start + SLOT_MINUTES <= CLOSE_HOUR * 60
    )


def overlaps(a: str, b: str) -> bool:
    """True when appointments starting at ISO datetimes ``a`` and ``b`` overlap."""
    delta = abs((datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds())
    return delta < SLOT_MINUTES * 60


def speak_slot(slot: str) -> str:
    """``"2026-12-10T14:00"`` → ``"Thursday at 2 PM"`` (``"2:30 PM"`` with minutes)."""
    t = datetime.fromisoformat(slot)
    return f"{t.strftime('%A')} at {speak_time(t.hour, t.minute)}"


def speak_time(hour: int, minute: int) -> str:
    """(14, 0) → ``"2 PM"``; (9, 30) → ``"9:30 AM"``; (12, 0) → ``"12 PM"``."""
    h12 = hour % 12 or 12
    suffix = "AM" if hour < 12 else "PM"
    return f"{h12}:{minute:02d} {suffix}" if minute else f"{h12} {suffix}"


def speak_date(iso_date: str) -> str:
    """``"2026-12-09"`` → ``"Wednesday, December 9"``."""
    d = date.fromisoformat(iso_date)
    return f"{d.strftime('%A')}, {d.strftime('%B')} {d.day}"
