"""``rejoinder serve``: the agent over WebSockets (browser client, ``/ws``, ``/twilio``, ``/health``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""

    @app.command()
    def serve(host: str = typer.Option("127.0.0.1", help="interface to listen on"),
              port: int = typer.Option(8765, help="TCP port"),
              token: Optional[str] = typer.Option(None, help="socket token (default: $REJOINDER_TOKEN, "
                                                  "else one saved on first start)"),
              max_calls: int = typer.Option(4, min=1, help="calls at once; more are refused"),
              max_call_s: float = typer.Option(900, help="longest call in seconds"),
              agent: Optional[str] = typer.Option(None, help="the agent: YAML file, module:attribute "
                                                  "or bundled name (default: support)"),
              config: Optional[Path] = typer.Option(None, help="runtime config YAML"),
              tts: Optional[str] = typer.Option(None, help="TTS adapter: piper | espeak"),
              llm: Optional[str] = typer.Option(None, help="LLM adapter: smollm2 | llama | openai"),
              llm_model: Optional[Path] = typer.Option(None, "--llm-model", help="a local GGUF for "
                                                       "the in-process LLM (chat format from its "
                                                       "metadata)"),
              store: Path = typer.Option(Path("out/live"), help="folder for call recordings and timelines"),
              runs: Optional[str] = typer.Option(None, help="harness run store for live calls: a SQLite "
                                                 "file or postgresql://… (default: $REJOINDER_STORE or "
                                                 "the user data dir)"),
              no_store: bool = typer.Option(False, "--no-store", help="keep no call records"),
              transfer_webhook: Optional[str] = typer.Option(
                  None, help="/twilio: URL that receives the agent's transfer requests (JSON "
                  "with the <Dial> TwiML to run)"),
              transfer_target: Optional[str] = typer.Option(
                  None, help="/twilio: <Dial> target when the transfer tool names none"),
              log_level: str = typer.Option("info"),
              ray: Optional[str] = typer.Option(None, "--ray", help="deploy on Ray Serve, autoscaled on calls in "
                                                "progress: local (start a cluster here), auto, or the head's "
                                                "HOST:PORT (needs rejoinder[ray])"),
              ray_cpus: Optional[int] = typer.Option(None, min=1, help="with --ray local: CPUs of the local cluster"),
              min_replicas: int = typer.Option(1, min=1, help="with --ray: fewest agent replicas"),
              max_replicas: int = typer.Option(2, min=1, help="with --ray: most agent replicas"),
              target_calls: float = typer.Option(2.0, help="with --ray: calls in progress per replica that "
                                                 "autoscaling aims for (a replica is added above it)"),
              downscale_delay_s: float = typer.Option(10.0, help="with --ray: idle seconds before a replica is "
                                                      "removed (its calls are drained first)"),
              models: Optional[str] = typer.Option(None, help="with --ray: model servers deployed on their own "
                                                   "under /models/<name>, scaled separately, the agent "
                                                   "pointed at them: stt,tts,llm (any of them)"),
              stt_replicas: Optional[int] = typer.Option(None, min=1, help="with --models stt: most STT "
                                                         "replicas (default: --max-replicas)"),
              tts_replicas: Optional[int] = typer.Option(None, min=1, help="with --models tts: most TTS "
                                                         "replicas (default: --max-replicas)"),
              llm_replicas: Optional[int] = typer.Option(None, min=1, help="with --models llm: most LLM "
                                                         "replicas (default: --max-replicas)"),
              model_cpus: float = typer.Option(0.25, min=0.01, help="with --models: CPUs reserved per model "
                                               "replica (the agent's: 1)"),
              models_api_key: Optional[str] = typer.Option(None, envvar="REJOINDER_SERVER_API_KEY",
                                                           help="with --models: the key the stt and llm "
                                                           "deployments check (default: one made for the run)"),
              duration_s: Optional[float] = typer.Option(None, help="with --ray: stop after this many seconds"),
              zero_cost: bool = typer.Option(False, "--zero-cost", help="zero-cost models (every stage answers at "
                                             "once): for load tests of the serving path")) -> None:
        """Serve the agent: talk to it from a browser (/), a WebSocket client (/ws) or a phone
        line through Twilio Media Streams (/twilio). Each socket is one call, measured like
        `rejoinder call`, and recorded under --store."""
        import platformdirs
        import uvicorn

        from ..adapters.registry import validate
        from ..cliout import console as make_console
        from ..cliout import error, plain
        from ..config import load_config
        from ..runtime import Runtime
        from ..errors import RejoinderError
        from .app import AgentProvider, ServerConfig, create_app
        from .guard import resolve_token

        console = make_console(stderr=True)
        try:
            cfg = load_config(config, agent=agent, tts=tts, llm=llm, llm_model=llm_model)
            validate(cfg.stack)  # an unknown adapter is an error now, not a crash after start-up
            if zero_cost:
                from ..harness.zerocost import ZeroCostRuntime
                runtime = ZeroCostRuntime(cfg)
            else:
                runtime = Runtime(cfg)
        except RejoinderError as exc:
            error(console, exc)
            raise typer.Exit(2)
        token_file = Path(platformdirs.user_config_dir("rejoinder")) / "server-token"
        secret, source = resolve_token(token, token_file)
        if len(secret) < 8:
            error(console, "the token must have at least 8 characters")
            raise typer.Exit(2)
        if not no_store:  # a wrong store URL or a server that is down: say so before serving
            from ..harness.store import open_store
            try:
                open_store(runs).close()
            except RejoinderError as exc:
                console.print(f"[bold red]error:[/] {exc}", soft_wrap=True, highlight=False)
                raise typer.Exit(2)
        server_cfg = ServerConfig(token=secret, max_calls=max_calls, max_call_s=max_call_s,
                                  store_dir=None if no_store else store, run_store=runs,
                                  record_runs=not no_store, transfer_webhook=transfer_webhook,
                                  transfer_target=transfer_target)
        if ray:
            _serve_ray(ray, ray_cpus, host, port, server_cfg, cfg, zero_cost, min_replicas, max_replicas,
                       target_calls, max_calls, downscale_delay_s, max_call_s, duration_s, runs, console,
                       models=models, replicas={"stt": stt_replicas, "tts": tts_replicas, "llm": llm_replicas},
                       model_cpus=model_cpus, models_api_key=models_api_key)
            return
        web = create_app(server_cfg, AgentProvider(runtime))
        shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
        if source == "generated":
            console.print(f"generated a server token (saved to {plain(token_file)}):\n  {plain(secret)}")
            console.print(plain(f"browser: http://{shown}:{port}/#token={secret}"))
        else:
            console.print(plain(f"token from {source}; browser: http://{shown}:{port}/#token=<token>"))
        if host not in ("127.0.0.1", "localhost", "::1"):
            console.print("[yellow]listening beyond loopback: put TLS in front (wss://); the token "
                          "and audio travel in clear otherwise[/]")
        console.print(plain(f"sockets: ws://{shown}:{port}/ws (browser protocol), ws://{shown}:{port}/twilio "
                            f"(Media Streams); models load in the background — GET /health"))
        uvicorn.run(web, host=host, port=port, log_level=log_level, ws_max_size=1 << 20,
                    ws_ping_interval=20, ws_ping_timeout=20)


def _serve_ray(address, cpus, host, port, server_cfg, cfg, zero_cost, min_replicas, max_replicas, target_calls,
               max_calls, downscale_delay_s, max_call_s, duration_s, runs, console, *, models, replicas,
               model_cpus, models_api_key) -> None:
    """``serve --ray``: see :mod:`rejoinder.server.ray_serve` and :mod:`rejoinder.server.ray_models`.
    Each agent replica takes up to ``max_calls`` calls; they keep no call folders (the serve run in
    the store records the scaling events, the harness records the calls)."""
    import secrets

    from ..cliout import error
    from ..errors import RejoinderError
    from ..harness.store import open_store
    from .ray_driver import serve_ray
    from .ray_models import model_scale, parse_models, plan
    from .ray_serve import ScaleOptions

    agent = ScaleOptions(min_replicas=min_replicas, max_replicas=max_replicas, target_calls=target_calls,
                         max_calls=max_calls, downscale_delay_s=downscale_delay_s, drain_s=max_call_s)
    scfg = server_cfg.model_dump(mode="json")
    scfg.update(store_dir=None, record_runs=False, run_store=None)
    try:
        wanted = parse_models(models)
        deployments = plan({m: model_scale(m, agent, replicas=replicas[m], cpus=model_cpus) for m in wanted}, cfg,
                           api_key=models_api_key or secrets.token_hex(16),
                           tts_engine=cfg.stack.tts if cfg.stack.tts in ("piper", "espeak") else "piper")
        st = open_store(runs)
        serve_ray(address=address, cpus=cpus, host=host, port=port, server_cfg=scfg, agent_cfg=cfg,
                  zero_cost=zero_cost, agent_scale=agent, models=deployments, store=st,
                  duration_s=duration_s, console=console)
    except (RejoinderError, RuntimeError) as exc:
        error(console, exc)
        raise typer.Exit(2)
