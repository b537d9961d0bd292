"""Hosting arrangements compared with identical agent logic (``rejoinder bench --hosting …``).

The same agent, configuration and scenarios run under each arrangement; only the adapters and
where the models run change:

* ``in-process`` — every model loaded in the agent process (the embedded default);
* ``servers`` — STT behind a Cartesia-Ink-protocol server, TTS behind a Cartesia-Sonic-protocol
  server and the LLM behind llama.cpp's OpenAI-compatible server (``rejoinder models serve``), each
  its own process, the agent speaking the protocols;
* ``managed-tts`` — as ``servers``, but TTS through the SageMaker-shaped managed endpoint (one
  signed HTTP request and one new stream per utterance, no continuation, event-stream framing);
* ``managed-bidi`` — STT and TTS each behind a SageMaker bidirectional-streaming container
  (:mod:`rejoinder.hosting.sagemaker_bidi_server`: one WebSocket per adapter, frames both ways,
  many utterances per connection), the LLM behind its server;
* ``speech-to-speech`` — no cascade in the agent: one service speaking Nova Sonic's
  bidirectional event protocol (:mod:`rejoinder.hosting.nova_sonic_server`, the same embedded
  models behind it) hears, thinks and speaks; the agent process runs the tools
  (:mod:`rejoinder.s2s`).

Server arrangements run once per network profile (:mod:`rejoinder.hosting.network`): ``loopback``
puts the servers on 127.0.0.1; every other profile puts them in a network namespace behind an
impaired link. The LLM stays in the agent process: serving it (``models serve llm``) needs
:mod:`rejoinder.adapters.llama_server`, recorded in the conditions as ``llm_hosting``.

Each arrangement × profile is its own stored run whose conditions record the arrangement, the
profile's parameters and emulator, the round trip measured on the model-server socket, the
servers' commands and cold starts. Each level also records CPU and RSS of every server process
and of the delay line. With ``failures``, each arrangement runs once more with the TTS stream
dying mid-sentence in half of the requests (a dropped socket for Cartesia, a ``ModelStreamError``
for SageMaker, the in-process fault injector for in-process).
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adapters.llama_server import free_port
from ..errors import ConfigError
from ..hosting.network import Link, NetworkProfile, PROFILES, preflight, profile as get_profile
from ..hosting.servers import ServerProcess, ServerStartError, probe_llm, probe_stt, probe_tts, socket_rtt_ms

ARRANGEMENTS = {
    "in-process": "every model in the agent process",
    "servers": "STT, TTS and LLM model servers (Cartesia Ink / Sonic WebSocket protocols, "
               "OpenAI chat API on llama.cpp's server)",
    "managed-tts": "STT server (Cartesia Ink) and LLM server (OpenAI chat API); TTS through a "
                   "SageMaker-shaped response stream (one request per utterance)",
    "ray-serve": "the agent as one Ray Serve replica (its models in the replica) behind Serve's proxy, "
                 "callers over /twilio (rejoinder.harness.hosting_ray)",
    "managed-bidi": "STT and TTS behind SageMaker bidirectional-streaming containers (WebSocket frames "
                    "both ways, one connection per adapter); LLM server (OpenAI chat API)",
    "speech-to-speech": "one speech-to-speech service over Nova Sonic's bidirectional event protocol "
                        "(VAD + Whisper + SmolLM2 + Piper behind it); tools run in the agent",
}
# The TTS stream dies mid-sentence in half of the requests (≈400 ms into the audio on servers).
FAILURES = {"in-process": "tts:drop@0%0.5", "servers": "tts:drop@4%0.5", "managed-tts": "tts:error@20%0.5",
            "ray-serve": "tts:drop@0%0.5", "managed-bidi": "tts:drop@10%0.5"}
LOCAL = ("in-process", "ray-serve")  # arrangements without model servers: no network profile
BASE_PORT = 47400


@dataclass
class Plan:
    """One stored run: an arrangement under a network profile (None: in-process)."""

    arrangement: str
    profile: NetworkProfile | None
    failure: str | None = None

    @property
    def label(self) -> str:
        where = f"@{self.profile.name}" if self.profile else ""
        return f"{self.arrangement}{where}" + (" +failure" if self.failure else "")


def plans(hosting: list[str], networks: list[str], failures: bool = False) -> list[Plan]:
    """The runs of a comparison, in order: in-process once, each server arrangement per profile.

    Raises:
        ConfigError: an unknown arrangement or profile (lists the valid ones).
    """
    for h in hosting:
        if h not in ARRANGEMENTS:
            raise ConfigError(f"unknown hosting arrangement {h!r}; valid: {', '.join(ARRANGEMENTS)}")
    profs = [get_profile(n) for n in networks] or [PROFILES["loopback"]]
    out: list[Plan] = []
    for h in hosting:
        for p in ([None] if h in LOCAL else profs):
            out.append(Plan(h, p))
            if failures and h in FAILURES:
                out.append(Plan(h, p, FAILURES[h]))
    return out


def needs_namespaces(items: list[Plan]) -> bool:
    return any(p.profile is not None and p.profile.name != "loopback" for p in items)


def _port_taken(exc: BaseException) -> bool:
    """Whether a server failed to start only because its port was taken (EADDRINUSE in its log)."""
    return isinstance(exc, ServerStartError) and ("address already in use" in str(exc).lower()
                                                  or "errno 98" in str(exc).lower())


@dataclass
class Deployment:
    """The servers (and link) of one plan; ``async with`` starts and stops them."""

    plan: Plan
    index: int
    logs: Path
    key: str = field(default_factory=lambda: secrets.token_hex(12))
    aws: tuple[str, str] = field(default_factory=lambda: ("AKID" + secrets.token_hex(8).upper(),
                                                          secrets.token_hex(16)))
    link: Link | None = None
    agent_spec: Any = None  # the agent (speech-to-speech: its prompt warms the service)
    servers: dict[str, ServerProcess] = field(default_factory=dict)
    rtt: dict[str, Any] = field(default_factory=dict)
    _stack: AsyncExitStack | None = None

    @property
    def host(self) -> str:
        return self.link.server_ip if self.link else "127.0.0.1"

    def _port(self, k: int) -> int:
        """Port of server ``k`` (0 STT, 1 TTS, 2 LLM): fixed inside a namespace of our own, free
        ones on this host's loopback."""
        if not hasattr(self, "_ports"):
            self._ports = [BASE_PORT + k for k in range(3)] if self.link else [free_port() for _ in range(3)]
        return self._ports[k]

    async def __aenter__(self) -> "Deployment":
        p = self.plan
        if p.arrangement == "in-process":
            return self
        self._stack = AsyncExitStack()
        try:
            if p.profile is not None and p.profile.name != "loopback":
                self.link = Link(p.profile, index=self.index % 64)
                self.link.up()
                self._stack.callback(self.link.down)
            prefix = self.link.exec_prefix() if self.link else []
            if p.arrangement == "speech-to-speech":
                await self._start_s2s(prefix)
                return self
            fault = ["--faults", p.failure, "--fault-seed", "1"] if p.failure and p.arrangement != "in-process" else []
            for attempt in range(3):
                self.servers = self._server_processes(prefix, fault)
                failed = [e for e in await asyncio.gather(*(srv.start() for srv in self.servers.values()),
                                                           return_exceptions=True) if e is not None]
                if not failed:
                    break
                for srv in self.servers.values():
                    srv.stop()
                # another process took a port between free_port() and the server's bind: new ports
                if self.link is not None or attempt == 2 or not all(_port_taken(e) for e in failed):
                    raise failed[0]
                del self._ports
            for srv in self.servers.values():
                self._stack.callback(srv.stop)
            await self._probe()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    def _server_processes(self, prefix: list[str], fault: list[str]) -> dict[str, ServerProcess]:
        """The STT, TTS and LLM server processes of this plan, on :meth:`_port`'s ports (not started)."""
        p, log = self.plan, lambda what: str(self.logs / f"{self.index}-{what}.log")
        at = ["--host", self.host, "--port"]
        if p.arrangement == "managed-bidi":
            stt = ServerProcess("stt-endpoint", ["stt", "--protocol", "sagemaker-bidi", *at, str(self._port(0))],
                                prefix, log_path=log("stt"))
            tts = ServerProcess("tts-endpoint", ["tts", "--protocol", "sagemaker-bidi", *at, str(self._port(1)),
                                                 *fault], prefix, log_path=log("tts"))
        else:
            stt = ServerProcess("stt-server", ["stt", "--protocol", "cartesia", *at, str(self._port(0)),
                                               "--api-key", self.key], prefix, log_path=log("stt"))
        if p.arrangement == "servers":
            tts = ServerProcess("tts-server", ["tts", "--protocol", "cartesia", *at, str(self._port(1)),
                                               "--api-key", self.key, *fault], prefix, log_path=log("tts"))
        elif p.arrangement != "managed-bidi":
            tts = ServerProcess("tts-endpoint", ["tts", "--protocol", "sagemaker", *at, str(self._port(1)), *fault],
                                prefix, env={"AWS_ACCESS_KEY_ID": self.aws[0], "AWS_SECRET_ACCESS_KEY": self.aws[1]},
                                log_path=log("tts"))
        llm = ServerProcess("llm-server", ["llm", *at, str(self._port(2))], prefix, log_path=log("llm"))
        return {"stt": stt, "tts": tts, "llm": llm}

    @property
    def s2s_url(self) -> str:
        return f"ws://{self.host}:{self._port(0)}"

    async def _start_s2s(self, prefix: list[str], agent: Any = None) -> None:
        """The speech-to-speech service alone; cold start = its first answered turn (a typed
        "Hello." until the first ``audioOutput``), with the agent's instructions and tools (so its
        prompt is prefilled, as the cascade's runtime warms up before the first call)."""
        from ..adapters.nova_sonic import NovaSonic
        from ..agent import load_agent

        srv = ServerProcess("s2s-service", ["s2s", "--protocol", "nova-sonic", "--host", self.host, "--port",
                                            str(self._port(0))], prefix, log_path=str(self.logs / f"{self.index}-s2s.log"))
        self.servers = {"s2s": srv}
        self._stack.callback(srv.stop)  # type: ignore[union-attr]
        await srv.start()
        agent = load_agent(self.agent_spec)
        stream = await NovaSonic(self.s2s_url).open(agent.instructions, tuple(t.schema for t in agent.tools.values()),
                                                    max_tokens=agent.llm.max_tokens, temperature=agent.llm.temperature)
        try:
            stream.send_text("Hello.")
            async for e in stream.events():
                if e.name == "audioOutput":
                    break
        finally:
            await stream.close()
        srv.first_answer()
        from ..adapters.nova_sonic import DEFAULT_MODEL
        await self._rtt(f"{self.s2s_url}/model/{DEFAULT_MODEL}/invoke-with-bidirectional-stream", "s2s-service")

    async def _rtt(self, url: str, what: str) -> None:
        samples = await socket_rtt_ms(url, self.key, n=40)
        self.rtt = {"socket": f"{what} WebSocket ping", "n": len(samples),
                    "median_ms": round(statistics.median(samples), 3),
                    "p95_ms": round(sorted(samples)[int(0.95 * (len(samples) - 1))], 3)}

    async def _probe(self) -> None:
        """Cold start (first answered request per server) and the socket round trip."""
        from ..adapters.registry import StackConfig, BUILDERS

        cfg = self.stack_config(StackConfig())
        async def first(kind: str, probe) -> None:
            port = BUILDERS[kind][getattr(cfg, kind)](cfg)
            if self.plan.failure is None:
                await probe(port)
            else:  # a faulty server may fail the probe: the first answer still counts
                for _ in range(6):
                    try:
                        await probe(port)
                        break
                    except Exception:  # noqa: BLE001
                        continue
            self.servers[kind].first_answer()
            await port.aclose()
        await asyncio.gather(first("stt", probe_stt), first("tts", probe_tts), first("llm", probe_llm))
        if self.plan.arrangement == "managed-bidi":
            from ..hosting.sagemaker_bidi_server import PATH
            await self._rtt(f"ws://{self.host}:{self._port(0)}{PATH}?model=stt", "stt-endpoint")
            return
        url = f"ws://{self.host}:{self._port(0)}/stt/websocket?model=ink-whisper&encoding=pcm_s16le&sample_rate=16000"
        await self._rtt(url, "stt-server")

    async def __aexit__(self, *exc: Any) -> None:
        if self._stack is not None:
            await self._stack.aclose()

    def stack_config(self, stack: Any) -> Any:
        """``stack`` with the STT/TTS adapters pointed at this deployment's servers."""
        stack = stack.model_copy(deep=True)
        if self.plan.arrangement in ("in-process", "speech-to-speech"):
            return stack
        stack.llm = "openai"
        stack.openai.base_url, stack.openai.model = f"http://{self.host}:{self._port(2)}/v1", "smollm2"
        stack.stt = "cartesia"
        stack.cartesia_stt.base_url, stack.cartesia_stt.api_key = f"ws://{self.host}:{self._port(0)}", self.key
        if self.plan.arrangement == "managed-bidi":
            stack.stt = stack.tts = "sagemaker-bidi"
            stack.sagemaker_bidi.stt_url = f"ws://{self.host}:{self._port(0)}"
            stack.sagemaker_bidi.tts_url = f"ws://{self.host}:{self._port(1)}"
        elif self.plan.arrangement == "servers":
            stack.tts = "cartesia"
            stack.cartesia.base_url, stack.cartesia.api_key = f"ws://{self.host}:{self._port(1)}", self.key
        else:
            stack.tts = "sagemaker"
            stack.sagemaker.base_url, stack.sagemaker.endpoint_name = f"http://{self.host}:{self._port(1)}", "rejoinder-tts"
            stack.sagemaker.aws_access_key_id, stack.sagemaker.aws_secret_access_key = self.aws
        return stack

    def processes(self) -> dict[str, int]:
        import psutil

        out = {name: s.pid for name, s in self.servers.items() if s.pid}
        if out.get("llm"):  # `models serve llm` supervises llama.cpp's server: measure that child
            try:
                kids = psutil.Process(out["llm"]).children()
                if kids:
                    out["llm"] = kids[0].pid
            except psutil.Error:
                pass
        if self.link is not None and self.link.relay_pid:
            out["delayline"] = self.link.relay_pid
        return out

    def conditions(self) -> dict[str, Any]:
        p = self.plan
        net: dict[str, Any] = ({"name": "none", "description": "no network between the agent and its models"}
                               if p.profile is None else
                               self.link.describe() if self.link else {**p.profile.model_dump(), "emulator": None})
        if self.rtt:
            net["measured_rtt"] = self.rtt
        return {"hosting_arrangement": {"name": p.arrangement, "description": ARRANGEMENTS[p.arrangement],
                                        "llm_hosting": {"in-process": "in-process",
                                                        "speech-to-speech": "inside the speech-to-speech service"}
                                        .get(p.arrangement, "llama.cpp OpenAI server"), "failure": p.failure},
                "network_profile": net,
                "servers": {n: s.describe() for n, s in self.servers.items()}}


class _Warmed:
    """The runtime, plus: adapters open their sockets before the first call (a deployment keeps its
    connections warm), and the in-process cold start is measured."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.cold_start_ms: float | None = None

    async def warmup(self) -> None:
        if self.cold_start_ms is not None:
            return
        t0 = time.perf_counter()
        await self.agent.warmup()
        stack = self.agent.models
        for port in (stack.stt, stack.tts, stack.llm):
            connect = getattr(port, "connect", None)
            if connect is not None:
                await connect()
        self.cold_start_ms = round(1000.0 * (time.perf_counter() - t0), 1)

    async def call(self, turns: Any, **kw: Any) -> Any:
        return await self.agent.call(turns, **kw)

    async def close(self) -> None:
        stack = self.agent.models
        for port in (stack.stt, stack.tts, stack.llm) if stack else ():
            close = getattr(port, "aclose", None)
            if close is not None:
                await close()


def check_network(items: list[Plan]) -> str | None:
    """Preflight when any plan needs namespaces; returns the emulator (None when not needed).

    Raises:
        NetworkUnavailable: namespaces cannot be made here (nothing has been started).
    """
    return preflight() if needs_namespaces(items) else None


async def run_plans(items: list[Plan], cfg: Any, scenarios: list, store: Any, opts: Any, *,
                    suite: str, command: str, logs: Path, on_run=None) -> list[tuple[Plan, str, str]]:
    """Run every plan in turn (each a stored run); returns ``[(plan, run_id, status)]``. Servers
    and links of a plan are stopped and removed before the next starts, also on failure."""
    from ..runtime import Runtime
    from .bench import run_bench
    from .conditions import collect

    out: list[tuple[Plan, str, str]] = []
    logs.mkdir(parents=True, exist_ok=True)
    for i, plan in enumerate(items):
        if plan.arrangement == "ray-serve":
            from .hosting_ray import run_plan
            run_id, status = await run_plan(plan, cfg, scenarios, store, opts, suite=suite, command=command,
                                            on_run=on_run)
            out.append((plan, run_id, status))
            continue
        async with Deployment(plan, i, logs, agent_spec=cfg.agent) as dep:
            run_cfg = cfg.model_copy(deep=True)
            run_cfg.stack = dep.stack_config(cfg.stack)
            run_cfg.hosting = plan.arrangement
            run_cfg.network = plan.profile.name if plan.profile else "none"
            if plan.failure and plan.arrangement == "in-process":
                run_cfg.faults, run_cfg.fault_seed = plan.failure, 1
            if plan.arrangement == "speech-to-speech":
                from ..adapters.nova_sonic import NovaSonic
                from ..s2s import S2SRuntime
                runtime = S2SRuntime(run_cfg, NovaSonic(dep.s2s_url))
            else:
                runtime = Runtime(run_cfg)
            agent = _Warmed(runtime)
            try:
                await agent.warmup()
                extra = dep.conditions()
                extra["hosting_arrangement"]["agent_cold_start_ms"] = agent.cold_start_ms
                from .ledger import run_ledger
                extra["data_boundary"] = opts.ledger = run_ledger(
                    run_cfg, arrangement=plan.label, artifacts=str(opts.artifacts) if opts.artifacts else None,
                    keep_audio=opts.keep_audio, store=str(getattr(store, "where", store.path)),
                    s2s_endpoint=runtime.service.endpoint if plan.arrangement == "speech-to-speech" else None,
                    server_logs=str(logs) if dep.servers else None)
                conds = collect(run_cfg, concurrency=opts.levels, scenarios=opts.hashes, repeat=opts.repeat,
                                suite=suite, agent=runtime.agent, arrangement=f"{plan.label}: {ARRANGEMENTS[plan.arrangement]}",
                                **extra)
                run_id = store.begin_run(conds, suite=suite, command=command)
                if on_run:
                    on_run(plan, run_id)
                opts.processes = dep.processes()
                status = await run_bench(agent, scenarios, store, run_id, opts)
            finally:
                await agent.close()
        out.append((plan, run_id, status))
    return out


def comparison(store: Any, results: list[tuple[Plan, str, str]], min_ms: float = 10.0) -> dict[str, Any]:
    """Side by side (first level of each run): per-boundary p50/p95, the sum check, cold starts,
    CPU/RSS per process, mid-stream failure behaviour, and which differences from the first run
    are real (:func:`rejoinder.harness.compare.compare_runs`)."""
    from ..timeline import SEGMENTS
    from .compare import compare_runs
    from .summary import run_summary

    cols = []
    base = results[0][1] if results else None
    for plan, run_id, status in results:
        summ = run_summary(store, run_id)
        lv = summ["levels"][0] if summ["levels"] else None
        info = store.run(run_id)
        cond = info["conditions"]
        turns = [t for t in store.turns(run_id) if t["v2v_ms"] is not None]
        worst = max((abs(sum(t["segments"].values()) - t["v2v_ms"]) for t in turns), default=None)
        col: dict[str, Any] = {
            "label": plan.label, "run_id": run_id, "status": status, "turns": len(turns),
            "v2v_ms": lv["v2v_ms"] if lv else {},
            "segments": {s: lv["segments"][s] for s in SEGMENTS} if lv else {},
            "segments_sum_max_dev_ms": round(worst, 3) if worst is not None else None,
            "network": cond.get("network_profile"),
            "cold_start_ms": {"agent": (cond.get("hosting_arrangement") or {}).get("agent_cold_start_ms"),
                              **{n: s.get("cold_start_ms") for n, s in (cond.get("servers") or {}).items()}},
            "resources": {"agent": {k: (lv.get("resources") or {}).get(k) for k in ("cpu_pct", "rss_peak_mb")}
                          if lv else {},
                          **((info["levels"].get(lv["concurrency"]) or {}).get("processes", {}) if lv else {})},
            "failure": plan.failure,
            "control": {k: lv.get(k) for k in ("recoveries", "recovery_gap_ms", "overlapping_audio",
                                               "unheard_context_words", "repeated_words",
                                               "silences_over_1s_in_reply",
                                               "task_success_rate", "stalls")} if lv else {},
        }
        if base and run_id != base:
            cmp = compare_runs(store, base, run_id, min_ms=min_ms)
            rows = cmp["levels"][0]["rows"] if cmp["levels"] else []
            col["real_vs_first"] = [{"boundary": r["boundary"], "diff_ms": r["diff"], "ci95": r["ci95"]}
                                    for r in rows if r["verdict"] == "real"]
        cols.append(col)
    _added_rtt(cols)
    return {"baseline": base, "runs": cols}


def _added_rtt(cols: list[dict[str, Any]]) -> None:
    """The round trip each profile added on the model-server socket, against a loopback run of
    the same comparison, and whether it is within 10 % of the profile's (the verification)."""
    loop = [c["network"]["measured_rtt"]["median_ms"] for c in cols
            if (c["network"] or {}).get("name") == "loopback" and (c["network"] or {}).get("measured_rtt")]
    if not loop:
        return
    base = min(loop)
    for c in cols:
        net = c["network"] or {}
        if net.get("measured_rtt") and net.get("rtt_ms"):
            added = net["measured_rtt"]["median_ms"] - base
            net["added_rtt_ms"] = round(added, 2)
            net["added_within_10pct"] = abs(added - net["rtt_ms"]) <= 0.1 * net["rtt_ms"]
