"""Suites: named folders of scenario YAML files.

A suite is given as a bundled name (``reference``; ``heldout``, the scenarios no tool decision
was tuned on; ``unseen``, written apart from tuning, read only as an aggregate score; see
``harness/suites/``), a folder of ``*.yaml`` files, a single scenario file, or
several of these comma-separated (``reference,heldout``: one run over both). Scenarios are identified by their ``name`` and
fingerprinted by :func:`scenario_hash` (the YAML text and every audio file it plays), so a stored
run says exactly which script was played.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..scenario import ASTERISK_DIR, Scenario, ScenarioError, load_scenario

SUITES_DIR = Path(__file__).parent / "suites"
DEFAULT_SUITE = "reference"


def bundled_suites() -> list[str]:
    return sorted(p.name for p in SUITES_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def suite_files(suite: str | Path | None) -> tuple[str, list[Path]]:
    """(suite label, scenario files). Raises ScenarioError for an unknown suite or empty folder."""
    if suite is None:
        suite = DEFAULT_SUITE
    p = Path(suite)
    if not p.exists() and (SUITES_DIR / str(suite)).is_dir():
        p = SUITES_DIR / str(suite)
        label = str(suite)
    else:
        label = str(p)
    if p.is_file():
        return label, [p]
    if p.is_dir():
        files = sorted(list(p.glob("*.yaml")) + list(p.glob("*.yml")))
        if not files:
            raise ScenarioError(f"{p}: no scenario files (*.yaml) in this folder")
        return label, files
    raise ScenarioError(f"{suite}: no such suite; give a folder of scenarios, a scenario .yaml, or one "
                        f"of the bundled suites: {', '.join(bundled_suites()) or '(none)'}")


def load_suite(suite: str | Path | None = None, only: list[str] | None = None) -> tuple[str, list[Scenario]]:
    """Load and validate every scenario of a suite (or of comma-separated suites), optionally
    only those named in ``only``.

    Raises:
        ScenarioError: an invalid scenario (file:line: field), duplicate names, or an unknown
            name in ``only``.
    """
    parts = [x for x in str(suite).split(",") if x] if suite is not None and not Path(suite).exists() else []
    if len(parts) > 1:  # "reference,heldout": one run over several suites
        found = [suite_files(x) for x in parts]
        label, files = "+".join(lb for lb, _ in found), [f for _, fs in found for f in fs]
    else:
        label, files = suite_files(suite)
    scenarios = [load_scenario(f) for f in files]
    names = [s.name for s in scenarios]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ScenarioError(f"{label}: duplicate scenario names: {', '.join(dup)}")
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ScenarioError(f"{label}: no scenario named {', '.join(unknown)}; "
                                f"this suite has: {', '.join(names)}")
        scenarios = [s for s in scenarios if s.name in only]
    return label, scenarios


def scenario_hash(sc: Scenario) -> str:
    """sha256 (first 16 hex digits) of the scenario file and every audio file it plays."""
    h = hashlib.sha256()
    if sc.path:
        h.update(Path(sc.path).read_bytes())
    else:
        h.update(sc.model_dump_json().encode())
    base = Path(sc.path).parent if sc.path else Path(".")
    for turn in sc.turns:
        for seg in (src for top in turn.audio for src in top.sources()):
            f = None
            if seg.asterisk:
                f = ASTERISK_DIR / f"{seg.asterisk}.wav"
            elif seg.file:
                f = base / seg.file if (base / seg.file).exists() else Path(seg.file)
            if f is not None and f.exists():
                h.update(f.read_bytes())
    return h.hexdigest()[:16]
