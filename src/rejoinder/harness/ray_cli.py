"""The ``--ray`` branch of ``rejoinder bench``: the same suite, levels, store and summary, with the
callers on Ray actors (:mod:`.ray_load`) and the cluster recorded in the run's conditions."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import typer

from ..errors import ConfigError, RejoinderError


def conditions_for(cluster: Any, n_workers: int, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` conditions plus the cluster (nodes, CPUs, Ray version, address) and the arrangement."""
    base["ray"] = {**cluster.info, "workers": n_workers}
    base["arrangement"] = (f"callers on {n_workers} Ray actor(s) (one process each) over {cluster.info['n_nodes']} "
                           f"node(s), {cluster.cpus} CPU(s); " + str(base.get("arrangement") or ""))
    return base


def bench(*, address: str, workers: int | None, cpus: int | None, spec: dict[str, Any], conds: dict[str, Any],
          scenarios: list, label: str, levels: list[int], repeat: int, hashes: dict[str, str], store: Any,
          store_flag: str, note: str | None, call_timeout: float, report: Path | None, json_out: bool) -> None:
    """Run the sweep on a Ray cluster and print/store it as ``bench`` does.

    Raises:
        typer.Exit: 2 on a bad cluster address, a missing Ray, or more workers than CPUs.
    """
    from . import ray_cluster
    from .clishow import _fail, err, show_run
    from .ray_load import run_ray_bench

    try:
        cluster = ray_cluster.connect(address, num_cpus=cpus)
    except RejoinderError as exc:
        _fail(exc)
    try:
        n = workers or max(1, min(cluster.cpus, max(levels)))
        if n > cluster.cpus:
            raise ConfigError(f"--ray-workers {n} needs {n} CPUs; the cluster has {cluster.cpus} "
                              f"(start it with more, or ask for fewer workers)")

        async def main() -> tuple[str, str]:
            run_id = store.begin_run(conditions_for(cluster, n, conds), suite=label,
                                     command=" ".join(["rejoinder"] + sys.argv[1:]))
            if note:
                store.add_note(run_id, note)
            total = sum(levels) * len(scenarios) * repeat
            err.print(f"run [bold]{run_id}[/] · Ray {cluster.info['ray']} at {cluster.address}: {cluster.info['n_nodes']} "
                      f"node(s), {cluster.cpus} CPU(s), {n} caller worker(s) · {len(scenarios)} scenario(s) × levels "
                      f"{levels} × {repeat} → {total} calls · store {store.where}", soft_wrap=True, highlight=False)

            def on_workers(where: list[dict[str, Any]]) -> None:
                versions = {w["rejoinder"] for w in where}
                err.print("workers ready: " + ", ".join(f"#{w['worker']} {w['host']}:{w['pid']}" for w in where),
                          soft_wrap=True, highlight=False)
                if len(versions) > 1:
                    err.print(f"[yellow]workers run different rejoinder versions: {sorted(map(str, versions))}[/]")

            def on_level(level: int, stats: dict[str, Any]) -> None:
                err.print(f"{level} at once: {stats['calls']} calls on {len(stats['workers'])} worker(s), "
                          f"CPU {stats['cpu_pct']}% · loop lag p99 {stats['loop_lag_ms']['p99']} ms",
                          highlight=False)

            from .bench import BenchOptions
            opts = BenchOptions(levels=levels, repeat=repeat, hashes=hashes, call_timeout_s=call_timeout)
            status = await run_ray_bench(spec, scenarios, store, run_id, opts, n_workers=n, cores=cluster.cpus,
                                         on_level=on_level, on_workers=on_workers)
            return run_id, status

        run_id, status = asyncio.run(main())
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: every finished level is stored")
        raise typer.Exit(130)
    except RejoinderError as exc:
        _fail(exc)
    finally:
        ray_cluster.shutdown(cluster)
    show_run(store, run_id, report, json_out)
    err.print(f"stored as run [bold]{run_id}[/] ({status}); `rejoinder runs show {run_id}{store_flag}`",
              soft_wrap=True, highlight=False)


def bench_local(*, address: str, workers: int | None, cpus: int | None, cfg: Any, zero_cost: bool, runtime: Any,
                scenarios: list, label: str, levels: list[int], repeat: int, hashes: dict[str, str], store: Any,
                store_flag: str, note: str | None, call_timeout: float, report: Path | None, json_out: bool) -> None:
    """``bench --ray`` with in-process agents: every actor runs ``cfg``'s agent (zero-cost models
    with ``zero_cost``)."""
    from . import conditions as cond_mod
    conds = cond_mod.collect(cfg, concurrency=levels, scenarios=hashes, repeat=repeat, suite=label,
                             agent=runtime.agent, arrangement="each actor one agent process with its own models, "
                             "its callers as asyncio tasks")
    if zero_cost:
        from .zerocost import mark_conditions
        mark_conditions(conds)
    spec = {"kind": "runtime", "cfg": cfg.model_dump(mode="json"), "zero_cost": zero_cost}
    bench(address=address, workers=workers, cpus=cpus, spec=spec, conds=conds, scenarios=scenarios, label=label,
          levels=levels, repeat=repeat, hashes=hashes, store=store, store_flag=store_flag, note=note,
          call_timeout=call_timeout, report=report, json_out=json_out)


def bench_target(*, address: str, workers: int | None, cpus: int | None, url: str, protocol: str, token: str | None,
                 jitter_ms: float, suite: str | None, only: list[str] | None, tags: list[str] | None,
                 levels: list[int], repeat: int, hosting: str | None, network: str | None, store: str | None,
                 note: str | None, call_timeout: float, report: Path | None, json_out: bool) -> None:
    """``bench --ray --target URL``: every actor calls the target over its own sockets (and
    transcribes what its callers heard with its own Whisper). The target is probed first."""
    from .clishow import _fail, _open, _store_flag
    from .remote.cli import make_target, remote_conditions
    from .suite import load_suite, scenario_hash
    try:
        label, scs = load_suite(suite, only)
        if tags:
            scs = [s for s in scs if set(tags) & set(s.tags)]
            if not scs:
                raise RejoinderError(f"{label}: no scenario is tagged {', '.join(tags)}")
        target = make_target(url, protocol, token, jitter_ms)
        asyncio.run(target.probe())
        st = _open(store)
    except RejoinderError as exc:
        _fail(exc)
    hashes = {sc.name: scenario_hash(sc) for sc in scs}
    conds = remote_conditions(target.describe(), concurrency=levels, scenarios=hashes, repeat=repeat, suite=label,
                              hosting=hosting, network=network)
    conds["arrangement"] = "each actor its callers' sockets to the target, in its own process"
    spec = {"kind": "target", "target": target.spec.model_dump(), "token": target.spec.token}
    bench(address=address, workers=workers, cpus=cpus, spec=spec, conds=conds, scenarios=scs, label=label,
          levels=levels, repeat=repeat, hashes=hashes, store=st, store_flag=_store_flag(store), note=note,
          call_timeout=call_timeout, report=report, json_out=json_out)
