"""The reference application: a phone support assistant (orders and appointments) over SQLite,
defined with the public agent API (:class:`rejoinder.Agent`) like any user's agent.

* :mod:`rejoinder.app.db` — schema, deterministic demo data, state snapshots.
* :mod:`rejoinder.app.support` — the agent: instructions, four tools, per-call database.
"""

from rejoinder.app.db import db_state, fresh_demo_db, open_db, seed_demo

__all__ = ["db_state", "fresh_demo_db", "open_db", "seed_demo"]
