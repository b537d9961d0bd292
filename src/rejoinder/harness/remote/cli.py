"""``rejoinder bench --target URL`` and ``rejoinder call --target URL``: the same scenarios, caller,
expectations and run store, against an agent reached over a socket.

Everything that can stop a run from starting — a malformed URL, a refused connection, a target
that never completes the WebSocket handshake or does not speak WebSocket, a rejected token, models
that failed to load, a missing Whisper — is checked *before* the run is written to the store, so
such a run leaves no row. Once the run has started, a failing call is stored as failed with its
reason and the sweep goes on.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import typer

from ...errors import RejoinderError
from .. import conditions as cond_mod


def remote_conditions(target: dict[str, Any], *, concurrency: list[int], scenarios: dict[str, str], repeat: int,
                      suite: str, hosting: str | None, network: str | None) -> dict[str, Any]:
    """A remote run's conditions: everything a local run records about the harness's side
    (code, software, machine), the target as described by itself, and the jitter buffer."""
    return {
        "code": {**cond_mod.git_state(), "rejoinder": _version()},
        "software": {"python": sys.version.split()[0], "packages": cond_mod.package_versions()},
        "machine": cond_mod.machine(),
        "config": None,
        "target": cond_mod.redact(target),
        "hosting": hosting or "remote",
        "network": network or ("loopback" if _loopback(target.get("url", "")) else "unknown"),
        "arrangement": "remote target over a socket: N simulated callers at once, one socket each, "
                       "in the harness process",
        "jitter_ms": target.get("jitter_ms"),
        "concurrency": concurrency,
        "repeat": repeat,
        "suite": suite,
        "scenarios": scenarios,
    }


def _version() -> str | None:
    from importlib import metadata
    try:
        return metadata.version("rejoinder")
    except metadata.PackageNotFoundError:
        return None


def _loopback(url: str) -> bool:
    from urllib.parse import urlsplit
    return (urlsplit(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


def make_target(url: str, protocol: str, token: str | None, jitter_ms: float):
    """Raises TargetError for a malformed URL or protocol."""
    from .target import RemoteTarget, parse_target
    return RemoteTarget(parse_target(url, protocol, token, jitter_ms=jitter_ms))


def bench(*, target_url: str, protocol: str, token: str | None, jitter_ms: float, suite: str | None,
          only: list[str] | None, tags: list[str] | None, levels: list[int], repeat: int, hosting: str | None,
          network: str | None, note: str | None, store: str | None, artifacts: Path | None, keep_audio: bool,
          call_timeout: float, report: Path | None, json_out: bool, ui: Any) -> None:
    """The remote branch of ``rejoinder bench`` (options as there). ``ui``: the harness CLI
    module (its error, store and summary helpers; passed in, so this module does not import
    the one that imports it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench import BenchOptions, run_bench
    _fail, _open, _store_flag, err = ui._fail, ui._open, ui._store_flag, ui.err
    from ..suite import load_suite, scenario_hash

    try:
        label, scs = load_suite(suite, only)
        if tags:
            scs = [s for s in scs if set(tags) & set(s.tags)]
            if not scs:
                raise RejoinderError(f"{label}: no scenario is tagged {', '.join(tags)}")
        target = make_target(target_url, protocol, token, jitter_ms)
        st = _open(store)
    except RejoinderError as exc:
        _fail(exc)
    hashes = {sc.name: scenario_hash(sc) for sc in scs}
    total = sum(levels) * len(scs) * repeat

    async def main() -> str:
        with err.status(f"checking {target.spec.shown_url}…"):
            await target.probe()
            await target.transcriber.start()
        conds = remote_conditions(target.describe(), concurrency=levels, scenarios=hashes, repeat=repeat,
                                  suite=label, hosting=hosting, network=network)
        run_id = st.begin_run(conds, suite=label, command=" ".join(["rejoinder"] + sys.argv[1:]))
        if note:
            st.add_note(run_id, note)
        err.print(f"run [bold]{run_id}[/] · target {target.spec.shown_url} ({target.spec.protocol}, jitter buffer "
                  f"{target.spec.jitter_ms:.0f} ms) · {len(scs)} scenario(s) × levels {levels} × {repeat} → {total} "
                  f"calls · store {st.where}", soft_wrap=True)
        failed = 0
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err) as progress:
            task = progress.add_task("calling…", total=total)

            def on_call(rec: dict[str, Any]) -> None:
                nonlocal failed
                failed += 0 if rec["success"] else 1
                progress.update(task, advance=1, description=f"{rec['concurrency']} at once · {failed} failed task(s)")

            opts = BenchOptions(levels=levels, repeat=repeat, hashes=hashes, on_call=on_call,
                                artifacts=artifacts or st.artifacts_root, keep_audio=keep_audio,
                                call_timeout_s=call_timeout)
            await run_bench(target, scs, st, run_id, opts)
        return run_id

    try:
        run_id = asyncio.run(main())
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: every finished call is stored")
        raise typer.Exit(130)
    except RejoinderError as exc:
        _fail(exc)
    finally:
        target.close()
    ui.show_run(st, run_id, report, json_out)
    err.print(f"stored as run [bold]{run_id}[/]; `rejoinder runs compare A {run_id}{_store_flag(store)}` puts it "
              "beside another run", soft_wrap=True)


def call(*, source: Path, target_url: str, protocol: str, token: str | None, jitter_ms: float, out: Path,
         json_out: bool) -> Any:
    """The remote branch of ``rejoinder call``: one scripted call to the target; returns
    ``(result, scenario)``."""
    from ...runtime import load_caller

    target = make_target(target_url, protocol, token, jitter_ms)

    async def main():
        turns, phone, sc = await load_caller(source)
        out.mkdir(parents=True, exist_ok=True)
        await target.warmup()
        return await target.call(turns, out_dir=out, caller_phone=phone, tail_ms=sc.tail_ms), sc

    try:
        return asyncio.run(main())
    finally:
        target.close()
