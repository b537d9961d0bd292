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
              log_level: str = typer.Option("info")) -> None:
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
                                  record_runs=not no_store)
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
