"""Move runs between stores (``rejoinder runs export | import``), whatever their backends.

The file is JSON Lines: a header line ``{"format": "rejoinder-runs", "version": 1, "schema": N}``,
then one line per run holding the run row, its levels, notes, and calls with their turns — all
that a store keeps, so a run imported elsewhere shows, searches and compares the same. The search
index is rebuilt on import. A run whose id the target already has is skipped, so importing the
same file twice adds nothing; each run is imported in one transaction (all of it or none).
"""

from __future__ import annotations

import json
from typing import IO, Any, Iterable

from .base import SCHEMA_VERSION, RunStore, StoreError, dumps

FORMAT = "rejoinder-runs"
VERSION = 1


def export_runs(store: RunStore, refs: Iterable[str], out: IO[str]) -> tuple[int, int]:
    """Write the runs ``refs`` (ids, prefixes, ``last``…; empty: every run) to ``out``.
    Returns (runs, calls) written."""
    ids = [store.resolve(r) for r in refs] or store.run_ids()
    out.write(dumps({"format": FORMAT, "version": VERSION, "schema": SCHEMA_VERSION}) + "\n")
    n_calls = 0
    for run_id in ids:
        run = store.run(run_id)
        notes, _levels = run.pop("notes"), run.pop("levels")
        for k in ("n_calls", "n_ok"):
            run.pop(k, None)
        turns: dict[str, list[dict[str, Any]]] = {}
        for t in store.turns(run_id):
            turns.setdefault(t["call_id"], []).append(t)
        calls = [{**c, "turns": turns.get(c["id"], [])} for c in store.calls(run_id)]
        n_calls += len(calls)
        out.write(dumps({"run": run, "levels": store.levels(run_id), "notes": notes, "calls": calls}) + "\n")
    return len(ids), n_calls


def import_runs(store: RunStore, lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """Read an export and add its runs to ``store``. Returns (imported ids, skipped ids).

    Raises:
        StoreError: not an export file, or one from a newer rejoinder.
    """
    it = iter(lines)
    try:
        head = json.loads(next(it))
    except (StopIteration, json.JSONDecodeError):
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StoreError("not a rejoinder runs export (no header line); make one with `rejoinder runs export`")
    if head.get("version", 0) > VERSION:
        raise StoreError(f"this export is format v{head.get('version')} (a newer rejoinder); "
                         f"this version reads up to v{VERSION}: upgrade rejoinder")
    existing = set(store.run_ids())
    imported, skipped = [], []
    for n, line in enumerate(it, start=2):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            run = doc["run"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise StoreError(f"line {n} of the export is not a run ({exc}); the file is damaged") from None
        if run["id"] in existing:
            skipped.append(run["id"])
            continue
        with store.atomic():
            store.put_run(run)
            for lv in doc.get("levels", []):
                store.add_level(run["id"], lv["concurrency"], lv["stats"], started_at=lv.get("started_at"))
            for note in doc.get("notes", []):
                store.add_note(run["id"], note["text"], at=note["at"])
            for call in doc.get("calls", []):
                store.add_call(run["id"], call, call.get("turns", []))
        imported.append(run["id"])
        existing.add(run["id"])
    return imported, skipped
