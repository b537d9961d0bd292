"""The model servers of ``rejoinder models serve stt|tts|llm`` as Ray Serve deployments of their
own (``rejoinder serve --ray … --models stt,tts,llm``), each scaled separately from the agent and
from each other, each under ``/models/<name>`` on Serve's proxy:

* **stt** — Whisper base behind Cartesia Ink's WebSocket protocol
  (:class:`~rejoinder.hosting.cartesia_stt_server.CartesiaSTTServer` through its ASGI face,
  :func:`~rejoinder.hosting.cartesia_stt_server.create_app`: Serve routes WebSockets to ASGI apps
  only): ``ws://HOST:PORT/models/stt/stt/websocket``; the agent's ``cartesia`` STT adapter is
  pointed at ``ws://HOST:PORT/models/stt``. Its ``initial_prompt`` is the agent's, as in-process.
* **tts** — the SageMaker-shaped streaming endpoint (:mod:`rejoinder.hosting.sagemaker_server`,
  Piper or espeak, SigV4-checked with a key pair made for the run); the agent's ``sagemaker`` TTS.
* **llm** — llama-cpp-python's OpenAI-compatible server (``llama_cpp.server``'s FastAPI app with
  rejoinder's ``rejoinder-tools`` chat format, :func:`rejoinder.adapters.llama_server.asgi_app`:
  the settings ``rejoinder models serve llm`` runs with, the agent's ``stack.llama`` model path,
  threads, context and batch): ``http://HOST:PORT/models/llm/v1``; the agent's ``openai`` LLM.

STT and LLM check one API key (``X-API-Key``/``Authorization: Bearer``), given or made for the
run. Each replica builds its server (loads its model) in ``__serve_build_asgi_app__``, before it
is RUNNING. What Serve autoscales on is ongoing requests per replica: for stt the open sockets
(the adapter keeps one open ahead of each utterance, so about two per call in progress), for tts
the open response streams, for llm the chat completions (``llama_cpp.server`` runs one at a time
per replica; the others wait in it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ray_serve import ScaleOptions

MODELS = {"stt": "Whisper base behind Cartesia Ink's WebSocket protocol (ASGI face of CartesiaSTTServer)",
          "tts": "SageMaker-shaped streaming TTS endpoint (Piper/espeak), SigV4-checked",
          "llm": "llama-cpp-python's OpenAI-compatible server (llama_cpp.server) with rejoinder-tools"}


def parse_models(spec: str | None) -> list[str]:
    """``"stt,llm"`` → ``["stt", "llm"]`` (in :data:`MODELS` order, each once).

    Raises:
        ConfigError: a name that is not a model server (lists the valid ones).
    """
    from ..errors import ConfigError

    wanted = [m for m in (spec or "").replace(" ", "").split(",") if m]
    bad = [m for m in wanted if m not in MODELS]
    if bad:
        raise ConfigError(f"--models {spec!r}: {', '.join(map(repr, bad))} is not a model server; "
                          f"deployable: {', '.join(MODELS)} (comma-separated)")
    return [m for m in MODELS if m in wanted]


def model_scale(name: str, agent: ScaleOptions, *, replicas: int | None = None, cpus: float = 0.25) -> ScaleOptions:
    """The scale of model deployment ``name`` next to an agent scaled as ``agent``: 1 to
    ``replicas`` (default the agent's most) replicas of ``cpus`` CPUs each, the agent's scale-down
    delay and drain. Calls per replica: stt and tts aim at twice the agent's calls per replica
    and take four times its most (a call holds one or two sockets or streams at once); llm aims at
    one chat completion per replica and takes the agent's most (they queue in the replica)."""
    most = max(1, replicas or agent.max_replicas)
    if name == "llm":
        target, most_calls = 1.0, max(4, agent.max_calls)
    else:
        target, most_calls = max(1.0, 2 * agent.target_calls), 4 * agent.max_calls
    return ScaleOptions(min_replicas=1, max_replicas=most, target_calls=target, max_calls=most_calls,
                        upscale_delay_s=agent.upscale_delay_s, downscale_delay_s=agent.downscale_delay_s,
                        drain_s=agent.drain_s, cpus=cpus)


@dataclass
class ModelDeployment:
    """One model server to deploy: its name (:data:`MODELS`), scale and what its replicas build
    their server from (``args``; keys included, never recorded)."""

    name: str
    scale: ScaleOptions
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def route_prefix(self) -> str:
        return f"/models/{self.name}"

    def describe(self) -> dict[str, Any]:
        """For the run's conditions: what it serves, where, and its Serve options."""
        return {"serves": MODELS[self.name], "route_prefix": self.route_prefix,
                **self.scale.deployment_options()}

    def app(self) -> Any:
        """The Serve application (``ray.serve`` imported here: it is an optional extra)."""
        from ray import serve

        @serve.deployment(name=self.name, **self.scale.deployment_options())
        @serve.ingress()
        class ModelServer:
            def __init__(self, name: str, args: dict[str, Any]) -> None:
                self.name, self.args = name, args

            async def __serve_build_asgi_app__(self):
                return await asyncio.to_thread(BUILD[self.name], self.args)  # loads the model

        return ModelServer.bind(self.name, self.args)


def plan(models: dict[str, ScaleOptions], agent_cfg: Any, *, api_key: str, tts_engine: str = "piper") -> list[ModelDeployment]:
    """The deployments of ``models`` (name → scale) for an agent configured by ``agent_cfg``
    (:class:`~rejoinder.config.AgentConfig`): STT with its Whisper options and the agent's
    vocabulary prompt, LLM with its llama.cpp options, TTS with ``tts_engine``; STT and LLM
    check ``api_key``, TTS a SigV4 key pair made here."""
    import secrets

    out = []
    stack = agent_cfg.stack
    for name, scale in models.items():
        if name == "stt":
            whisper = stack.whisper.model_dump()
            if whisper["initial_prompt"] is None:
                from ..agent import load_agent
                whisper["initial_prompt"] = load_agent(agent_cfg.agent).stt_prompt()
            args: dict[str, Any] = {"whisper": whisper, "api_key": api_key}
        elif name == "llm":
            ll = stack.llama
            argv = ["--n_threads", str(ll.n_threads), "--n_ctx", str(ll.n_ctx), "--n_batch", str(ll.n_batch),
                    "--api_key", api_key, "--tool_mode", "eager" if ll.tool_mode == "eager" else "lazy"]
            args = {"argv": argv + (["--model", ll.model_path] if ll.model_path else []), "api_key": api_key}
        else:
            args = {"engine": tts_engine, "access_key": "AKID" + secrets.token_hex(8).upper(),
                    "secret_key": secrets.token_hex(16)}
        out.append(ModelDeployment(name, scale, args))
    return out


def point(agent_cfg: Any, deployments: list[ModelDeployment], host: str, port: int) -> Any:
    """A copy of ``agent_cfg`` whose stack uses the deployments through Serve's proxy at
    ``host:port`` (``127.0.0.1`` for a wildcard ``host``: every node runs a proxy): ``cartesia``
    STT, ``openai`` LLM, ``sagemaker`` TTS."""
    cfg = agent_cfg.model_copy(deep=True)
    where = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    for d in deployments:
        base = f"{where}:{port}{d.route_prefix}"
        if d.name == "stt":
            cfg.stack.stt = "cartesia"
            cfg.stack.cartesia_stt.base_url, cfg.stack.cartesia_stt.api_key = f"ws://{base}", d.args["api_key"]
        elif d.name == "llm":
            cfg.stack.llm = "openai"
            o = cfg.stack.openai
            o.base_url, o.api_key, o.warm = f"http://{base}/v1", d.args["api_key"], True
            o.model = Path(cfg.stack.llama.model_path).stem if cfg.stack.llama.model_path else "smollm2"
        else:
            cfg.stack.tts = "sagemaker"
            sm = cfg.stack.sagemaker
            sm.base_url, sm.endpoint_name = f"http://{base}", "rejoinder-tts"
            sm.aws_access_key_id, sm.aws_secret_access_key = d.args["access_key"], d.args["secret_key"]
    return cfg


# ----------------------------------------------------------------- what a replica builds (in a thread)
def _build_stt_app(args: dict[str, Any]) -> Any:
    from ..adapters.registry import BUILDERS, StackConfig, WhisperOptions
    from ..hosting.cartesia_stt_server import CartesiaSTTServer, create_app

    stt = BUILDERS["stt"]["whisper-base"](StackConfig(whisper=WhisperOptions(**args["whisper"])))
    return create_app(CartesiaSTTServer(stt, api_key=args["api_key"]))


def _build_tts_app(args: dict[str, Any]) -> Any:
    from ..hosting.cli import _build_tts
    from ..hosting.sagemaker_server import create_app

    return create_app(_build_tts(args["engine"]), endpoint_name="rejoinder-tts", access_key=args["access_key"],
                      secret_key=args["secret_key"])


def _build_llm_app(args: dict[str, Any]) -> Any:
    from ..adapters import llama_server

    return llama_server.asgi_app(args["argv"])


BUILD = {"stt": _build_stt_app, "tts": _build_tts_app, "llm": _build_llm_app}
