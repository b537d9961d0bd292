"""The ``rejoinder`` command line (typer + rich)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .cliout import console as make_console
from .cliout import error, plain, table_console
from .errors import RejoinderError

# rich_markup_mode=None: usage errors print as plain text (rich's error panel hard-wraps them at
# the terminal width); pretty_exceptions_enable=False: tracebacks are not re-wrapped either.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False,
                  help="rejoinder: real-time voice agents, measured honestly.")
console = make_console(stderr=True)
BUNDLED_CALL = Path(__file__).parent / "assets" / "calls" / "order_status_real.yaml"
#: exit status of ``call`` / ``demo`` on a scenario whose ``expect:`` blocks were not all met (the
#: call itself ran; 1 is a call that failed, 2 bad input)
EXPECTATIONS_UNMET = 3


def _fail(exc: Exception) -> None:
    error(console, exc)
    raise typer.Exit(2)


def print_turns(result, as_json: bool) -> None:
    """Per turn: V2V and the critical-path segments with the largest named."""
    if as_json:
        for r in result.turns:
            s = r.summary()
            print(json.dumps({k: s[k] for k in ("turn_id", "status", "v2v_ms", "time_to_answer_ms", "segments",
                                                "largest_segment", "transcript", "heard_text",
                                                "boundaries", "estimated", "tools", "tool_decisions",
                                                "stalls", "steps", "call_end")}))
        return
    table = Table(title=f"call {result.call_id}: voice-to-voice latency per turn (ms)")
    for col in ("turn", "caller said", "agent said (heard)", "V2V", "critical path", "largest"):
        table.add_column(col, overflow="fold")
    for r in result.turns:
        s = r.summary()
        segs = "  ".join(f"{k} {v:.0f}" for k, v in s["segments"].items() if v >= 0.5)
        v2v = f"{s['v2v_ms']:.0f}" if s["v2v_ms"] is not None else f"— ({s['status']})"
        table.add_row(str(r.turn_id), r.transcript, r.heard_text, v2v, segs,
                      str(s["largest_segment"] or ""))
    table_console().print(table)
    if result.out_dir:
        console.print(f"recording: {plain(result.out_dir / 'call.wav')}  (caller left, agent right)\n"
                      f"timeline:  {plain(result.out_dir / 'timeline.jsonl')}\n"
                      f"transcript: {plain(result.out_dir / 'transcript.txt')}")
    if result.error:
        error(console, f"{result.error} (recording and timeline kept)", "the call failed midway")


@app.command()
def call(source: Path = typer.Argument(..., help="caller audio (WAV/FLAC) or scenario (.yaml)"),
         out: Path = typer.Option(Path("out/call"), help="folder for call.wav, timeline.jsonl, transcript.txt"),
         agent: Optional[str] = typer.Option(None, help="the agent: YAML file, module:attribute or "
                                             "bundled name (default: support)"),
         config: Optional[Path] = typer.Option(None, help="runtime config YAML"),
         tts: Optional[str] = typer.Option(None, help="TTS adapter: piper | espeak"),
         llm: Optional[str] = typer.Option(None, help="LLM adapter: smollm2 | llama | openai"),
         llm_model: Optional[Path] = typer.Option(None, "--llm-model", help="a local GGUF for the "
                                                  "in-process LLM (chat format from its metadata)"),
         json_out: bool = typer.Option(False, "--json", help="one JSON object per turn on stdout"),
         target: Optional[str] = typer.Option(None, help="call an agent over a socket instead: ws://HOST:PORT/PATH"),
         protocol: str = typer.Option("auto", help="with --target: twilio | rejoinder | auto"),
         target_token: Optional[str] = typer.Option(None, envvar="REJOINDER_TARGET_TOKEN",
                                                    help="with --target: the target's token"),
         jitter_ms: float = typer.Option(60.0, help="with --target: the caller's jitter buffer (ms)")) -> None:
    """Stream a caller's audio into the agent in real time (20 ms frames) and measure every turn.
    Exit status: 0, or 3 when a scenario's expectations were not all met, 1 when the call
    failed, 2 on bad input."""
    from .config import load_config
    from .runtime import Runtime, load_caller
    try:
        if target:
            from .harness.remote import cli as remote_cli
            result, sc = remote_cli.call(source=source, target_url=target, protocol=protocol, token=target_token,
                                     jitter_ms=jitter_ms, out=out, json_out=json_out)
        else:
            cfg = load_config(config, agent=agent, tts=tts, llm=llm, llm_model=llm_model)
            from .adapters.registry import validate
            validate(cfg.stack)
            runtime = Runtime(cfg)

            async def main():
                turns, phone, sc = await load_caller(source)
                out.mkdir(parents=True, exist_ok=True)
                with console.status("loading models…"):
                    await runtime.warmup()
                console.print(f"calling: {plain(sc.name)} ({len(turns)} caller turns, real time) "
                              f"with agent {plain(repr(runtime.agent.name))}…")
                res = await runtime.call(turns, out_dir=out, caller_phone=phone, tail_ms=sc.tail_ms,
                                         turn_policy=sc.turn_policy)
                return res, sc

            result, sc = asyncio.run(main())
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]: the recording and timeline so far are in {plain(out)}")
        raise typer.Exit(130)
    except RejoinderError as exc:
        _fail(exc)
    print_turns(result, json_out)
    met = True
    if source.suffix.lower() in (".yaml", ".yml"):
        met = print_expectations(sc, result)
    if result.error:
        raise typer.Exit(1)
    if not met:
        raise typer.Exit(EXPECTATIONS_UNMET)


def print_expectations(sc, result) -> bool:
    """Check the call against its scenario's ``expect:`` blocks, as ``bench`` does: ✓ / ✗ on
    stderr (stdout keeps one JSON object per turn with ``--json``), and ``expectations.json``
    (scenario, success, checks, failures, causes) beside the recording. Returns whether every
    expectation was met (``call`` and ``demo`` then exit with :data:`EXPECTATIONS_UNMET`)."""
    from .harness.expect import evaluate
    caller = result.caller
    v = evaluate(sc, result, caller.truth if caller else [], caller.cues if caller else [])
    if result.out_dir:
        (result.out_dir / "expectations.json").write_text(json.dumps(
            {"scenario": sc.name, "success": v.success, "checks": v.checks, "failures": v.failures,
             "causes": v.causes}, indent=2) + "\n", encoding="utf-8")
    if v.success:
        console.print(f"[green]✓[/] {plain(sc.name)}: all {v.checks} expectations met")
    else:
        console.print(f"[red]✗[/] {plain(sc.name)}: {len(v.failures)} of {v.checks} expectations failed")
        for f, cause in zip(v.failures, v.causes):
            console.print(f"  [red]✗[/] {plain(f)} [dim]({plain(cause)})[/]")
    if result.hangup:
        console.print(f"the agent hung up ({plain(result.hangup)})")
    return v.success


@app.command()
def demo(out: Path = typer.Option(Path("out/demo")),
         agent: Optional[str] = typer.Option(None, help="the agent (default: support)"),
         tts: Optional[str] = typer.Option(None, help="piper | espeak"),
         llm: Optional[str] = typer.Option(None, help="smollm2 | llama | openai"),
         llm_model: Optional[Path] = typer.Option(None, "--llm-model", help="a local GGUF for the "
                                                  "in-process LLM (chat format from its metadata)"),
         json_out: bool = typer.Option(False, "--json")) -> None:
    """Run the bundled real-speech call (Asterisk prompts, CC-BY-SA-3.0, voice: Allison Smith)
    against the LLM-driven support agent (or ``--agent``)."""
    call(BUNDLED_CALL, out=out, agent=agent, config=None, tts=tts, llm=llm, llm_model=llm_model,
         json_out=json_out, target=None)


@app.command()
def prepare() -> None:
    """One-time model preparation (idempotent): join the Whisper weight parts into a cache folder
    and check every embedded model file is installed."""
    from .adapters.registry import StackConfig, describe_models
    from .adapters.whisper_stt import prepare_whisper_model
    try:
        folder = prepare_whisper_model()
        models = describe_models(StackConfig())
    except RejoinderError as exc:
        _fail(exc)
    console.print(f"whisper model ready in {plain(folder)}")
    for stage, info in models.items():
        files = ", ".join(f["path"] for f in info.get("files", [])) or "(no weight file)"
        console.print(plain(f"  {stage}: {info.get('model')} [{info.get('license')}]  {files}"))


@app.command()
def calibrate(agent: Optional[str] = typer.Option(None, help="the agent (default: support)"),
              llm_model: Optional[Path] = typer.Option(None, help="a local GGUF (default: the "
                                                       "bundled SmolLM2-135M)"),
              config: Optional[Path] = typer.Option(None, help="runtime config YAML"),
              max_spurious: float = typer.Option(0.05, min=0.0, max=1.0,
                                                 help="highest share of talk examples that may call a tool"),
              json_out: bool = typer.Option(False, "--json", help="the result as JSON on stdout")) -> None:
    """Fit the embedded LLM's tool-gate threshold on the agent's own examples (each tool's
    ``examples``, and ``llm.talk_examples``), scored leave-one-out; prints the threshold to set
    as ``llm: {tool_threshold: …}`` in the agent."""
    from .calibrate import calibrate as fit, fingerprint
    from .config import load_config
    try:
        cfg = load_config(config, agent=agent, tts=None, llm="smollm2")
        opts = cfg.stack.llama.model_dump()
        if llm_model is not None:
            if not llm_model.is_file():
                raise RejoinderError(f"no GGUF file at {llm_model}: give the path of a local .gguf model")
            opts["model_path"] = str(llm_model)
        from .adapters.llama_llm import LlamaLLM
        with console.status("loading the model…"):
            model = LlamaLLM(**opts)
        from .agent import load_agent
        the_agent = load_agent(cfg.agent)
        with console.status(f"scoring {the_agent.name!r}'s examples leave-one-out…"):
            result = fit(the_agent, model, max_spurious=max_spurious)
    except RejoinderError as exc:
        _fail(exc)
    if json_out:
        print(json.dumps({"agent": the_agent.name, "model": model.model_name,
                          "fingerprint": fingerprint(the_agent), **result.as_dict()}))
        return
    t = Table("utterance", "label", "margin", "gate's tool", "called", title=f"{plain(the_agent.name)} on {plain(model.model_name)}")
    for p in result.points:
        t.add_row(plain(p.say), p.label or "(talk)", f"{p.margin:.2f}", p.best or "",
                  p.called or "(talk)")
    table_console().print(t)
    console.print(f"threshold {result.threshold:.2f}: right tool {result.right_tool:.0%} of "
                  f"{result.positives} tool examples, spurious calls {result.spurious:.0%} of "
                  f"{result.negatives} talk examples (leave-one-out); examples and prompt "
                  f"fingerprint {fingerprint(the_agent)}")
    print(f"llm: {{tool_threshold: {result.threshold:.2f}}}")


from .harness.cli import register as _register_harness  # noqa: E402
from .server.cli import register as _register_server  # noqa: E402
from .hosting.cli import register as _register_hosting  # noqa: E402

_register_harness(app)
_register_server(app)
_register_hosting(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app(prog_name="rejoinder"))
