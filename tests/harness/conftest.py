"""Fixtures for the harness tests: synthetic stored runs and a fake agent on virtual clocks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from harness_fakes import synthetic_run  # noqa: E402


@pytest.fixture
def store(tmp_path):
    from rejoinder.harness.store import SQLiteStore

    s = SQLiteStore(tmp_path / "runs.sqlite")
    yield s
    s.close()


@pytest.fixture
def two_runs(store):
    """Runs A and B with the same distributions except TTS time to first audio (+120 ms in B)."""
    a = synthetic_run(store, tts="piper", seed=1)
    b = synthetic_run(store, tts="espeak", seed=2, tts_shift_ms=120.0)
    return a, b
