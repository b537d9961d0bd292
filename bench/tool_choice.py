"""Benchmark: how often the embedded LLM picks the right tool with the right arguments, for the
agent users run (default: the reference support agent, ``rejoinder.app.support``).

Each item is one caller utterance as Whisper transcribes it, after the agent's greeting and
sometimes after earlier turns of the call (the agent asked for the order number; the caller's
appointments were listed by the real ``list_appointments``), labelled with the acceptable tool
calls (or none, for small talk). Requests are built by the runtime's own ``Conversation`` from
the agent (instructions, tool schemas from the type hints, LLM settings; see
``_agent_requests.py``), so the model sees exactly what it sees in a call. Arguments are graded
as the tools read them: order numbers by their digits, times by ``support.parse_time`` ("3 pm" =
"15:00"), weekdays and services case-insensitively (a service argument that names none of the
salon's services, e.g. the tool's own name, as omitted: the tool then takes the caller's only
appointment), an omitted optional argument as its default.

Each design answers every item at temperature 0 through the LLM port. A design name is
``MODE[-EXAMPLES][-SCHEMAS]``: MODE ``lazy`` or ``eager`` (``LlamaLLM.tool_mode``); EXAMPLES
``fewshot`` (worked examples in plain words appended to the instructions), ``fewcall`` (the
same in SmolLM2's call syntax) or ``nocall`` (fewcall with SmolLM2's empty call list
``<tool_call>[]</tool_call>`` before the small-talk replies); SCHEMAS ``strict`` (a 4-digit
order number pattern and a weekday enum over the declared schemas), ``hhmm`` (strict plus a
24-hour time pattern) or ``bare`` (every constraint dropped); none of them: the agent as
declared. MODE ``gate`` may add how it picks the tool: ``-nearest`` (the nearest example,
``tool_which: examples``), ``-probe`` (the linear probe, ``tool_which: probe``) or ``-labels``;
``-nocheck`` drops the small-talk check in SmolLM2's space, ``-noveto`` lets no small talk
compete (none of them: the model's defaults). The table reports:

- right tool: share of tool items where the first call names an acceptable tool;
- right args: … with acceptable arguments;
- no tool: share of small-talk items answered with text and no call;
- latency per decision: time to the complete ToolCall (tool answers) and TTFT (text answers),
  medians in ms;

then what the tool machinery costs before the first delta (tool_choice none vs auto lazy vs auto
eager on the small-talk items, interleaved).

    PYTHONPATH=src .venv/bin/python bench/tool_choice.py [--designs lazy,eager-fewshot]
        [--agent SPEC] [--model PATH [--chat-format auto]] [--items FILE] [--limit N]
        [--extra-examples FILE] [--cost-rounds 3] [--json]

``--items FILE`` replaces the 38 built-in items (tuning items, saturated at 96.6 % right tool
for the bundled model) with labelled utterances from a file (:func:`load_items`), e.g.
``bench/data/decisions_blind.tsv``: 185 written blind, said after the greeting, arguments not
graded. ``--extra-examples FILE`` (the same format) adds its utterances to the tools'
``examples`` and the talk examples, e.g. ``bench/data/examples_second_set.tsv``.

``--model`` runs any local GGUF (default: the bundled SmolLM2-135M-Instruct) in its own chat
format (``LlamaLLM.format``, read from the GGUF's metadata). Eager decides inside the call only in
a format with an empty call list (SmolLM2's); with the others it behaves as lazy. The
``fewcall``/``nocall`` examples are written in SmolLM2's call syntax whatever the model.

Wall-clock figures are noisy on a shared machine; accuracy at temperature 0 is deterministic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace

from _agent_requests import EXAMPLES, DemoCall, agent_for, make_llm, variant, warm
from rejoinder.app.support import SERVICES, _digits, parse_time
from rejoinder.ports import LLMRequest, PortError, ToolCall, ToolDecision

ANY_SERVICE = ("", "haircut")  # the demo caller has one appointment, a haircut


@dataclass(frozen=True)
class Item:
    say: str
    #: acceptable (tool, {arg: value or tuple of values}, or None: any arguments)
    expect: tuple[tuple[str, dict | None], ...]
    ctx: str | None = None

    @property
    def kind(self) -> str:
        return "tool" if self.expect else "none"


def _t(name: str, **args) -> tuple[str, dict]:
    return (name, args)


def _move(day: str, time: str) -> tuple[str, dict]:
    return _t("reschedule_appointment", day=day, time=time, service=ANY_SERVICE)


_CANCEL = _t("cancel_appointment", service=ANY_SERVICE)
_LIST = _t("list_appointments")

ITEMS: list[Item] = [
    # order lookups
    Item("4217.", (_t("lookup_order", order_id="4217"),), "asked_order"),
    Item("It's 6402.", (_t("lookup_order", order_id="6402"),), "asked_order"),
    Item("Can you check order 4217?", (_t("lookup_order", order_id="4217"),)),
    Item("Where is my order? The number is 3085.", (_t("lookup_order", order_id="3085"),)),
    Item("I'd like to know the status of order number 5120.", (_t("lookup_order", order_id="5120"),)),
    Item("Order 7734, please.", (_t("lookup_order", order_id="7734"),)),
    Item("Has my order 2291 shipped yet?", (_t("lookup_order", order_id="2291"),)),
    Item("My order number is 9 0 1 3.", (_t("lookup_order", order_id="9013"),)),
    Item("Hi, I'm calling about my order, 1178.", (_t("lookup_order", order_id="1178"),)),
    Item("What's the status of 4420?", (_t("lookup_order", order_id="4420"),)),
    # list appointments
    Item("What appointments do I have?", (_LIST,)),
    Item("When is my next appointment?", (_LIST,)),
    Item("Do I have anything booked?", (_LIST,)),
    Item("Can you tell me my appointments?", (_LIST,)),
    Item("I forgot when my appointment is.", (_LIST,)),
    # reschedule / cancel before the appointments were listed: act (the tool finds the caller's
    # only appointment) or look them up first
    Item("I want to move my haircut to Thursday at 3 pm.", (_move("Thursday", "15:00"), _LIST)),
    Item("I need to cancel my appointment.", (_CANCEL, _LIST)),
    # reschedule with the appointments listed
    Item("I want to move my haircut to Thursday at 3 pm.", (_move("Thursday", "15:00"),),
         "appointments"),
    Item("Can you move it to Friday at 10 am?", (_move("Friday", "10:00"),), "appointments"),
    Item("Reschedule my appointment to Monday at 2:30 pm.", (_move("Monday", "14:30"),),
         "appointments"),
    Item("Change it to Wednesday at 11.", (_move("Wednesday", "11:00"),), "appointments"),
    Item("Let's do Saturday at 9 in the morning instead.", (_move("Saturday", "09:00"),),
         "appointments"),
    Item("Move it to Friday. Wait, Thursday afternoon at 4.", (_move("Thursday", "16:00"),),
         "appointments"),
    # cancel with the appointments listed
    Item("Cancel my appointment.", (_CANCEL,), "appointments"),
    Item("Please cancel the haircut.", (_CANCEL,), "appointments"),
    Item("I can't make it, cancel it please.", (_CANCEL,), "appointments"),
    # small talk and questions no tool answers
    Item("Hello.", ()),
    Item("Thank you.", ()),
    Item("Goodbye.", (_t("end_call"),)),
    Item("Okay, thanks.", ()),
    Item("How are you?", ()),
    Item("What are your opening hours?", ()),
    Item("Can I talk to a human?", (_t("transfer_to_human"),)),
    Item("Hi, this is Maria.", ()),
    Item("That's all, thanks.", (_t("end_call"),)),
    Item("Great, thank you so much.", ()),
    Item("Sorry, I didn't catch that.", ()),
    Item("Thanks, that's great.", (), "appointments"),
]


def load_items(path: str) -> list[Item]:
    """Labelled utterances from a tab-separated file, one a line: the acceptable tools
    (``lookup_order``, several joined by ``|``) or ``none`` (no call), a tab, the caller's words
    (said after the agent's greeting; arguments not graded: right args = right tool).

    Raises:
        SystemExit: a line without a tab or with an empty label (its line number named)."""
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            label, sep, say = line.rstrip("\n").partition("\t")
            if not sep or not label.strip() or not say.strip():
                raise SystemExit(f"{path}:{n}: expected 'TOOL[|TOOL…] or none<TAB>utterance'")
            tools = () if label.strip() == "none" else tuple((t.strip(), None) for t in label.split("|"))
            items.append(Item(say.strip(), tools))
    return items


MODES = ("gate", "lazy", "eager")
SCHEMA_SUFFIXES = ("strict", "hhmm", "bare")
#: The designs run by default (any MODE[-EXAMPLES][-SCHEMAS] can be named with --designs;
#: "gate-labels" is the gate choosing the tool by its labels instead of the nearest example;
#: "gate-noveto" the nearest example without small talk competing, rejoinder.adapters._which):
#: each mode as declared and strict, then eager (the mode that calls) across examples and schemas.
DESIGNS = ["gate", "gate-labels", "lazy", "lazy-strict", "lazy-fewshot", "eager", "eager-strict", "eager-hhmm",
           "eager-bare", "eager-fewshot", "eager-fewshot-strict", "eager-fewcall",
           "eager-fewcall-strict", "eager-nocall-strict"]


CHOOSERS = {"-labels": "labels", "-nearest": "examples", "-probe": "probe"}


def chooser_parts(name: str) -> tuple[str, str | None, bool, bool]:
    """``"gate-probe-nocheck"`` → (the design without its chooser parts, tool_which or None
    for the model's default, no small-talk check, no small-talk veto)."""
    parts = name.split("-")
    which = next((CHOOSERS[f"-{p}"] for p in parts if f"-{p}" in CHOOSERS), None)
    rest = [p for p in parts if f"-{p}" not in CHOOSERS and p not in ("nocheck", "noveto")]
    return "-".join(rest), which, "nocheck" in parts, "noveto" in parts


def parse_design(name: str) -> tuple[str, str, str]:
    """``"eager-fewshot-strict"`` → (tool_mode, examples key, schemas key).

    Raises:
        ValueError: an unknown mode or part.
    """
    mode, *rest = name.split("-")
    examples = next((p for p in rest if p in EXAMPLES), "")
    schemas = next((p for p in rest if p in SCHEMA_SUFFIXES), "declared")
    if mode not in MODES or any(p not in EXAMPLES and p not in SCHEMA_SUFFIXES for p in rest):
        raise ValueError(f"unknown design {name!r}: MODE[-fewshot|-fewcall|-nocall][-strict|-hhmm|-bare], "
                         f"MODE one of {', '.join(MODES)}")
    return mode, examples, schemas


def _same(key: str, got, want) -> bool:
    """One argument as the tool reads it."""
    if not isinstance(got, str) or not isinstance(want, str):
        return got == want
    if key == "order_id":
        return _digits(got) == want
    if key == "time":
        try:
            return parse_time(got) == parse_time(want)
        except ValueError:
            return False
    if key == "service" and not any(s in got.casefold() for s in SERVICES):
        got = ""  # names no service: the tool reads it as omitted (support._pick)
    return got.strip().casefold() == want.strip().casefold()


def args_match(got: dict, want: dict, params: dict) -> bool:
    """``got`` (the call's arguments, an omitted optional one read as its default) against
    ``want`` (each value, or a tuple of acceptable values)."""
    props = params.get("properties") or {}
    got = {**{k: p["default"] for k, p in props.items() if "default" in p}, **got}
    for key in set(got) | set(want):
        if key not in want:
            if key not in props or got[key] != props[key].get("default"):
                return False
            continue
        alts = want[key] if isinstance(want[key], tuple) else (want[key],)
        if key not in got or not any(_same(key, got[key], w) for w in alts):
            return False
    return True


def grade(item: Item, call: ToolCall | None, params: dict[str, dict]) -> tuple[bool, bool]:
    """(right tool, right tool with right arguments) for the first call (None: text only);
    ``params``: each tool's declared parameter schema (for defaults)."""
    if not item.expect:
        return call is None, call is None
    if call is None:
        return False, False
    tool_ok = any(call.name == name for name, _ in item.expect)
    args_ok = any(call.name == name and (args is None or args_match(call.arguments, args, params.get(name, {})))
                  for name, args in item.expect)
    return tool_ok, args_ok


async def ask(agent, item: Item, key: str, **edits) -> LLMRequest:
    """The request of the reply's first step to ``item`` in a fresh demo call of ``agent``."""
    call = await DemoCall(agent, key).open()
    try:
        await call.context(item.ctx)
        return replace(call.request(item.say), **edits)
    finally:
        await call.close()


async def run_design(llm, base, name: str, items: list[Item],
                     extra: dict[str, tuple[str, ...]] | None = None) -> dict:
    # "gate-labels": the gate's label ranking picks the tool (LlamaLLM tool_which="labels");
    # plain "gate": the nearest tool example does (tool_which="examples", the default of models
    # not in rejoinder.adapters._which.WHICH_BY_MODEL)
    # "gate-noveto": the nearest example picks the tool, but small talk does not compete there
    # "-nearest" / "-probe": the nearest example / the linear probe picks (tool_which
    # "examples" / "probe"; plain "gate": the model's default); "-nocheck": no small-talk check
    # in the second embedding space (rejoinder.adapters._which.TalkCheckedMatcher)
    eng = llm.engine
    defaults = getattr(llm, "_bench_defaults", None) or (eng.which, eng.check_embed)
    llm._bench_defaults = defaults
    base_name, which, nocheck, noveto = chooser_parts(name)
    eng.talk_veto = not noveto
    mode, examples, schemas = parse_design(base_name)
    llm.tool_mode = mode
    eng.which = which or defaults[0]
    eng.check_embed = None if nocheck else defaults[1]
    agent = variant(base, EXAMPLES[examples], schemas, extra)
    params = {t.name: t.schema.parameters for t in base.tools.values()}
    await warm(llm, agent)
    rows = []
    for n, item in enumerate(items):
        req = await ask(agent, item, f"{name}-{n}")
        t0 = time.perf_counter()
        first_text = call_ms = None
        call, text, error, decision = None, "", None, None
        try:
            async for d in llm.stream(req):
                now = (time.perf_counter() - t0) * 1000
                if isinstance(d, ToolDecision):
                    decision = d.as_dict()
                elif isinstance(d, ToolCall):
                    call, call_ms = call or d, call_ms or now
                else:
                    first_text = first_text if first_text is not None else now
                    text += d
        except PortError as exc:  # e.g. a free-string argument that never closes
            error = str(exc)[:120]
        llm.forget(req.cache_key)  # the call is over (no saved state to swap next time)
        tool_ok, args_ok = grade(item, call, params) if error is None else (False, False)
        rows.append({"say": item.say, "ctx": item.ctx, "kind": item.kind, "tool_ok": tool_ok,
                     "args_ok": args_ok, "call": [call.name, call.arguments] if call else None,
                     "text": text.strip()[:80], "error": error, "call_ms": call_ms,
                     "ttft_ms": first_text if call is None else None, "decision": decision})
        print(f"  [{name}] {'ok ' if args_ok else 'BAD'} {item.say!r} -> "
              f"{rows[-1]['call'] or error or rows[-1]['text']!r}", file=sys.stderr)
    return summarise(name, rows)


def _pct(rows: list[dict], key: str) -> float | None:
    return round(100 * sum(r[key] for r in rows) / len(rows), 1) if rows else None


def _median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return round(statistics.median(v), 1) if v else None


def summarise(name: str, rows: list[dict]) -> dict:
    tool_rows = [r for r in rows if r["kind"] == "tool"]
    none_rows = [r for r in rows if r["kind"] == "none"]
    return {"design": name, "items": len(rows), "tool_items": len(tool_rows),
            "right_tool_pct": _pct(tool_rows, "tool_ok"),
            "right_args_pct": _pct(tool_rows, "args_ok"),
            "no_tool_pct": _pct(none_rows, "tool_ok"),
            "overall_pct": _pct(rows, "args_ok"),
            "errors": sum(r["error"] is not None for r in rows),
            "call_ms_p50": _median([r["call_ms"] for r in rows]),
            "text_ttft_ms_p50": _median([r["ttft_ms"] for r in rows]),
            "rows": rows}


def print_table(results: list[dict], agent_name: str, model: str = "SmolLM2-135M-Instruct Q4_1") -> None:
    head = ("design", "right tool", "right args", "no tool", "overall", "call ms p50",
            "text TTFT ms p50")
    print(f"{head[0]:24s} " + " ".join(f"{h:>16s}" for h in head[1:]))
    for r in results:
        vals = [r["right_tool_pct"], r["right_args_pct"], r["no_tool_pct"], r["overall_pct"],
                r["call_ms_p50"], r["text_ttft_ms_p50"]]
        cells = [f"{v:>15.1f}{'%' if i < 4 else ' '}" if v is not None else f"{'-':>16s}"
                 for i, v in enumerate(vals)]
        print(f"{r['design']:24s} " + " ".join(cells))
    n = results[0]
    print(f"(agent {agent_name!r}; {n['tool_items']} tool items, "
          f"{n['items'] - n['tool_items']} small-talk items; temperature 0; "
          f"{model})")


async def _first_delta_ms(llm, req: LLMRequest) -> tuple[float, bool]:
    t0 = time.perf_counter()
    gen = llm.stream(req)
    try:
        d = await gen.__anext__()
        while isinstance(d, ToolDecision):  # the gate's decision is not the first delta
            d = await gen.__anext__()
        return (time.perf_counter() - t0) * 1000, isinstance(d, ToolCall)
    finally:
        await gen.aclose()


async def decision_cost(llm, agent, items: list[Item], rounds: int) -> dict:
    """What the tool machinery costs before the first delta, on the small-talk items: the
    agent's request (tools listed) with ``tool_choice`` "none" (text only), "auto" lazy,
    "auto" eager and "auto" gate (the decision's scoring pass included), interleaved item by item so load drift hits all three alike; each request
    starts from the warmed system turn (as a call's first reply does), so all three prefill the
    same tokens. Medians in ms."""
    times: dict[str, list[float]] = {"none": [], "lazy": [], "eager": [], "gate": []}
    eager_calls = 0
    for r in range(rounds):
        for n, item in enumerate(i for i in items if i.kind == "none"):
            for mode in times:
                llm.tool_mode = "lazy" if mode == "none" else mode
                req = await ask(agent, item, f"cost-{r}-{n}-{mode}", max_tokens=8,
                                tool_choice="none" if mode == "none" else "auto")
                await warm(llm, agent)
                ms, is_call = await _first_delta_ms(llm, req)
                llm.forget(req.cache_key)
                times[mode].append(ms)
                eager_calls += is_call and mode == "eager"
    return {"first_delta_ms_p50": {k: _median(v) for k, v in times.items()},
            "eager_first_delta_was_a_call": eager_calls, "samples": len(times["none"])}


async def main(designs: list[str], agent_spec: str | None, limit: int | None,
               cost_rounds: int, model: str | None = None, chat_format: str = "auto",
               embed_model: str | None = None, items_path: str | None = None,
               embedder: str = "minilm", extra_path: str | None = None) -> dict:
    base = agent_for(agent_spec)
    items = load_items(items_path) if items_path else ITEMS
    items = items[:limit] if limit else items
    llm = make_llm(**({"model_path": model, "chat_format": chat_format} if model else {}),
                   **({"embed_model": embed_model} if embed_model else {}), embedder=embedder)
    from rejoinder.adapters.registry import file_sha256
    model_info = {"model": llm.model_name, "chat_format": llm.format.name,
                  "sha256": file_sha256(llm.model_path), "embedder": llm.embedder}
    print(f"model {model_info['model']} ({model_info['chat_format']} format, sha256 "
          f"{model_info['sha256'][:16]}…)", file=sys.stderr)
    default_mode = llm.tool_mode
    extra = None
    if extra_path:  # more labelled utterances as the tools' examples and talk examples
        groups: dict[str, list[str]] = {}
        for it in load_items(extra_path):
            groups.setdefault(it.expect[0][0] if it.expect else "none", []).append(it.say)
        extra = {k: tuple(v) for k, v in groups.items()}
    results = [await run_design(llm, base, name, items, extra) for name in designs]
    cost = await decision_cost(llm, base, items, cost_rounds) if cost_rounds else None
    return {"agent": base.name, **model_info, "default_tool_mode": default_mode,
            "designs": results, "decision_cost": cost}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", default=",".join(DESIGNS),
                    help="comma-separated MODE[-fewshot|-fewcall|-nocall][-strict|-hhmm|-bare] "
                         f"(default: {','.join(DESIGNS)})")
    ap.add_argument("--agent", default=None,
                    help="agent spec (YAML, module:attribute or bundled name; default: support); "
                         "the items assume the support agent's four tools")
    ap.add_argument("--model", default=None,
                    help="a local GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    ap.add_argument("--chat-format", default="auto",
                    help="auto (from the GGUF's metadata) | smollm2 | hermes | llama3")
    ap.add_argument("--embedder", default="minilm", choices=["minilm", "gguf"],
                    help="the space the nearest example is found in (default minilm: "
                         "all-MiniLM-L6-v2, small talk checked in --embed-model's; gguf: "
                         "--embed-model's alone, the choice before 2026-12-06)")
    ap.add_argument("--embed-model", default=None,
                    help="the GGUF of the PromptEOL embeddings (implies --embedder gguf; "
                         "default: the bundled SmolLM2-135M; 'smollm2': the same, by name)")
    ap.add_argument("--items", default=None,
                    help="labelled utterances, TOOL[|TOOL]<TAB>words or none<TAB>words a line "
                         "(default: the 38 built-in items; bench/data/decisions_blind.tsv: 185 written blind)")
    ap.add_argument("--extra-examples", default=None,
                    help="a TSV as --items (TOOL or none, a tab, the words) appended to the "
                         "tools' examples and the talk examples, e.g. "
                         "bench/data/examples_second_set.tsv")
    ap.add_argument("--limit", type=int, default=None, help="first N items only (smoke run)")
    ap.add_argument("--cost-rounds", type=int, default=3,
                    help="rounds of the none/lazy/eager first-delta comparison (0: skip)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = [d for d in a.designs.split(",") if d]
    try:
        for d in names:
            parse_design(chooser_parts(d)[0])
    except ValueError as exc:
        sys.exit(str(exc))
    embed = a.embed_model
    if embed == "smollm2":
        from rejoinder.adapters.llama_llm import smollm2_model_path
        embed = str(smollm2_model_path())
    out = asyncio.run(main(names, a.agent, a.limit, a.cost_rounds, a.model, a.chat_format, embed,
                           a.items, a.embedder, a.extra_examples))
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out["designs"], out["agent"],
                    f"{out['model']}, {out['chat_format']} format, {out['embedder']} embeddings")
        cost = out["decision_cost"]
        if cost:
            c = cost["first_delta_ms_p50"]
            print(f"first delta on small talk, p50 over {cost['samples']} requests each: "
                  f"tool_choice none {c['none']} ms, auto/lazy {c['lazy']} ms, auto/eager "
                  f"{c['eager']} ms (eager's first delta was a call "
                  f"{cost['eager_first_delta_was_a_call']} times)")
