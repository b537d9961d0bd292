"""Fixtures for the reference application's tests: a fresh seeded SQLite database per test.
Caller IDs of the demo customers live in demo_phones.py."""

from __future__ import annotations

import sqlite3

import pytest

from rejoinder.app.db import fresh_demo_db


@pytest.fixture
def conn(tmp_path) -> sqlite3.Connection:
    c = fresh_demo_db(tmp_path / "demo.db")
    yield c
    c.close()
