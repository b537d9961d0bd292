"""The command line never hard-wraps messages, paths or JSON, whatever the terminal width.

Real subprocesses of ``python -m rejoinder`` at 40 and at 200 columns: piped (rich then takes its
width from ``$COLUMNS``) and, for a few commands, on a pseudo-terminal of that width. Each
expected message and path must come out whole on one line (issue 13).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rejoinder.adapters.registry import StackConfig, describe_models
from rejoinder.harness.store import RunStore

SRC = str(Path(__file__).resolve().parents[1] / "src")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _env(columns: int) -> dict[str, str]:
    """This environment (its TERM included: CI runs these tests once more with TERM=dumb) at
    ``columns`` columns."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(COLUMNS=str(columns), PYTHONPATH=SRC + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def run_piped(args: list[str], columns: int) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "rejoinder", *args], capture_output=True, text=True,
                          timeout=60, env=_env(columns))
    return proc.returncode, proc.stdout, proc.stderr


def run_on_tty(args: list[str], columns: int) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal ``columns`` wide; return (rc, output)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = _env(columns)
    del env["COLUMNS"]  # the terminal's own size decides
    proc = subprocess.Popen([sys.executable, "-m", "rejoinder", *args], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    rc = proc.wait(timeout=10)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")
    return rc, text


def on_one_line(output: str, needle: str) -> bool:
    return any(needle in line for line in output.splitlines())


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[tuple[str, list[str], int, list[str]]]:
    """(name, argv, exit code, texts that must each be on one line)."""
    deep = tmp_path_factory.mktemp("cli")
    for part in ("a-rather-long-folder-name-for-recordings", "another-level-of-nesting-here",
                 "and-one-more-to-pass-two-hundred"):
        deep = deep / part
    deep.mkdir(parents=True)
    assert len(str(deep)) > 120
    missing = deep / "nope.wav"
    scen = deep / "bad-scenario.yaml"
    scen.write_text("name: x\nturns:\n  - audio:\n      - asterisk: hello\n    after_agent_ms: -5\n")
    silent = deep / "silent.wav"
    sf.write(silent, np.zeros(1600, dtype=np.int16), 16000)
    cfg = deep / "agent.yaml"
    cfg.write_text("stack:\n  tts: kokoro\n")
    store = deep / "runs.sqlite"
    label = "a suite label that is much longer than forty columns, so rich would have wrapped it"
    with RunStore(store) as st:
        st.begin_run({"concurrency": [1]}, suite=label, command="rejoinder bench")
    no_store = deep / "missing-store.sqlite"
    return [
        ("missing audio", ["call", str(missing)], 2, [f"error: {missing}: no such file"]),
        ("bad scenario", ["call", str(scen)], 2, [f"{scen}:5", "after_agent_ms"]),
        ("unknown adapter", ["call", str(silent), "--config", str(cfg)], 2, ["kokoro", "espeak"]),
        ("missing store", ["runs", "list", "--store", str(no_store)], 2, [f"no run store at {no_store}"]),
        ("missing suite", ["scenarios", str(deep / "no-such-suite")], 2, [str(deep / "no-such-suite")]),
        ("serve bad config", ["serve", "--config", str(cfg), "--token", "cli-output-test-token",
                              "--no-store", "--port", "0"], 2, ["unknown tts adapter 'kokoro'"]),
        ("usage error", ["bench", "--concurrency", "one,two"], 2,
         ["expected comma-separated integers like 1,2,4, got 'one,two'"]),
        ("json", ["runs", "list", "--json", "--store", str(store)], 0, [json.dumps(label)]),
        ("prepare", ["prepare"], 0, [f["path"] for info in describe_models(StackConfig()).values()
                                     for f in info.get("files", [])] + ["whisper model ready in "]),
    ]


@pytest.mark.parametrize("columns", [40, 200])
def test_messages_paths_and_json_stay_on_one_line_when_piped(cases, columns):
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda c: run_piped(c[1], columns), cases))
    for (name, _args, rc, needles), (code, out, err) in zip(cases, results):
        assert code == rc, (name, err[-2000:])
        both = out + err
        for needle in needles:
            assert on_one_line(both, needle), f"{name} at {columns} columns: {needle!r} not on one line:\n{both}"
        if name == "json":
            assert json.loads(out)[0]["suite"].startswith("a suite label")


@pytest.mark.parametrize("columns", [40, 200])
def test_messages_and_paths_stay_on_one_line_on_a_terminal(cases, columns):
    picked = [c for c in cases if c[0] in ("missing audio", "usage error", "prepare")]
    for name, args, rc, needles in picked:
        code, out = run_on_tty(args, columns)
        assert code == rc, (name, out[-2000:])
        for needle in needles:
            assert on_one_line(out, needle), f"{name} on a {columns}-column terminal: {needle!r}:\n{out}"
