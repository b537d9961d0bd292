"""Connecting to a Ray cluster (or starting a local one) and describing it for a run's record.

Ray is an optional extra (``pip install 'rejoinder[ray]'``); it is imported only here and in
the modules that run on it, so every other command works without it.

* ``local`` — start a one-node Ray cluster from this process (``ray.init(num_cpus=…)``, no
  dashboard; Ray binds its ports on the node's own IP, never loopback) and stop it when the run
  ends;
* ``auto`` — join the cluster ``RAY_ADDRESS`` names, or the one ``ray start --head`` started on
  this machine;
* ``HOST:PORT`` — join that cluster's head (``ray start --head`` prints it); every node needs
  the same rejoinder version installed (checked when the workers start).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..errors import ConfigError, MissingExtra


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        MissingExtra: Ray is not installed (names ``pip install 'rejoinder[ray]'``).
    """
    try:
        import ray
    except ImportError:
        raise MissingExtra("Ray (bench --ray, serve --ray)", "rejoinder[ray]") from None
    return ray


@dataclass
class Cluster:
    """A connection to a Ray cluster; ``started_here`` when this process started it."""

    address: str
    started_here: bool
    info: dict[str, Any] = field(default_factory=dict)
    owned: bool = True  # this connection was made by connect(): shutdown() closes it

    @property
    def cpus(self) -> int:
        return int(self.info.get("cpus") or 0)


def describe(address: str, started_here: bool) -> dict[str, Any]:
    """The cluster as recorded with a run: Ray version, address, nodes (host, IP, CPUs, memory)
    and the total CPUs (``ray.cluster_resources()``)."""
    ray = require_ray()
    nodes = [{"node_id": n.get("NodeID", "")[:12], "host": n.get("NodeManagerHostname"),
              "ip": n.get("NodeManagerAddress"), "cpus": (n.get("Resources") or {}).get("CPU"),
              "memory_gb": round((n.get("Resources") or {}).get("memory", 0) / 2**30, 2)}
             for n in ray.nodes() if n.get("Alive")]
    res = ray.cluster_resources()
    return {"ray": ray.__version__, "address": address, "started_here": started_here,
            "nodes": nodes, "n_nodes": len(nodes), "cpus": int(res.get("CPU", 0))}


def connect(address: str | None = "local", *, num_cpus: int | None = None) -> Cluster:
    """Start a local cluster (``local``/None) or join one (``auto``, ``HOST:PORT``); a process
    already connected keeps its connection (and :func:`shutdown` leaves it open).

    Raises:
        MissingExtra: Ray is not installed.
        ConfigError: the cluster cannot be reached (names the address and how to start one).
    """
    ray = require_ray()
    local = address in (None, "", "local")
    if ray.is_initialized():  # this process is connected already (a test's cluster, a notebook's)
        gcs = ray.get_runtime_context().gcs_address
        return Cluster(gcs, False, describe(gcs, False), owned=False)
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    # workers must import this rejoinder: the one on the driver's path (a checkout's src/ too)
    env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if os.environ.get("PYTHONPATH") else None
    try:
        if local:
            ctx = ray.init(num_cpus=num_cpus, runtime_env=env, **kw)
        else:
            ctx = ray.init(address=address, runtime_env=env, **kw)
    except Exception as exc:  # noqa: BLE001 — Ray raises bare Exception for a node that did not start
        if local:
            raise ConfigError(f"the local Ray cluster did not start: {exc}; an overloaded machine delays Ray's "
                              "start-up past its timeout: retry, or start one with `ray start --head` and pass "
                              "--ray auto") from exc
        raise ConfigError(f"cannot reach a Ray cluster at {address!r}: {exc}; start one with "
                          "`ray start --head` (then pass its address, or auto), or use --ray local") from exc
    gcs = getattr(ctx, "address_info", {}).get("gcs_address") or address or "local"
    return Cluster(gcs, local, describe(gcs, local))


def shutdown(cluster: Cluster | None) -> None:
    """Disconnect (a connection :func:`connect` made); a cluster started here is stopped with it."""
    if cluster is not None and not cluster.owned:
        return
    ray = require_ray()
    with contextlib.suppress(Exception):
        ray.shutdown()


@contextlib.contextmanager
def connected(address: str | None, *, num_cpus: int | None = None) -> Iterator[Cluster]:
    """``with connected("local", num_cpus=4) as cluster: …`` — connect, and always disconnect."""
    cluster = connect(address, num_cpus=num_cpus)
    try:
        yield cluster
    finally:
        shutdown(cluster)
