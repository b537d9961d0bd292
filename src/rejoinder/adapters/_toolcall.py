"""Tool calling for chat models that were tuned on SmolLM2's function-calling format.

SmolLM2-Instruct learnt function calling from Argilla's Synth-APIGen data (SmolLM2 model card).
Its format, as the Ollama ``smollm2`` template renders it: the tools are listed as JSON inside
``<tools>…</tools>`` in the system prompt; the assistant calls them with
``<tool_call>[{"name": "…", "arguments": {…}}]</tool_call>``; a tool result comes back as a user
turn wrapped in ``<tool_response>…</tool_response>``; the 135M model echoes that wrapper
instead of answering, so results render as a system turn instead (:data:`DEFAULT_TOOL_RESULT_PROMPT`).

This module is pure (no model): prompt rendering, the GBNF grammar that makes every call valid
JSON for a declared tool, a scanner that holds back text that may be the start of the call opener
or of a stop string, and the parser of the generated call.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Iterable, Mapping, Sequence

from ..dictation import DIGIT_WORDS
from ..ports import ChatMessage, PortError, ToolCall, ToolSchema

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_END = "<|im_end|>"

#: SmolLM2's chat template inserts this system prompt when the conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

#: Appended to the system prompt when a request carries tools; ``{tools}`` is the JSON list.
#: The wording follows SmolLM2's function-calling prompt, cut to what a voice agent needs (its
#: original also tells the model to refuse when no function fits, which a voice agent must not).
DEFAULT_TOOL_PROMPT = (
    "You have access to the following tools:\n<tools>{tools}</tools>\n"
    "To call a tool, reply only with:\n"
    '<tool_call>[{{"name": "tool_name", "arguments": {{"argument": "value"}}}}]</tool_call>\n'
    "Otherwise reply to the caller in plain words."
)


#: How a tool result is shown to the model: a system turn, ``{name}`` the tool, ``{result}`` the
#: result flattened to ``key: value`` text (:func:`flatten_result`). SmolLM2-135M echoed results
#: rendered as the Ollama template's user turn ``<tool_response>{json}</tool_response>`` in all of
#: 4 probes, and answered from this rendering in 4 of 4 (bench notes in the adapter's report).
DEFAULT_TOOL_RESULT_PROMPT = "{name} result: {result}. Tell the caller what it says, in one short sentence."


def flatten_result(content: str) -> str:
    """A JSON tool result as short ``key: value`` text (``{"order_id": "4217", "eta": "Friday"}``
    → ``order 4217, eta: Friday``: an ``…_id`` key names what its value identifies, as a person
    would say it; list items joined by ``; ``); other text unchanged."""
    try:
        value = json.loads(content)
    except ValueError:
        return content

    def pair(k: Any, x: Any) -> str:
        key = str(k)
        if key.lower().endswith("_id") and len(key) > 3 and not isinstance(x, (dict, list)):
            return f"{key[:-3].replace('_', ' ')} {flat(x)}"
        return f"{key.replace('_', ' ')}: {flat(x)}"

    def flat(v: Any) -> str:
        if isinstance(v, dict):
            return ", ".join(pair(k, x) for k, x in v.items())
        if isinstance(v, list):
            return "; ".join(flat(x) for x in v) or "none"
        return str(v)

    return flat(value) if isinstance(value, (dict, list)) else content


def _clean(schema: Any) -> Any:
    """A JSON Schema without ``title`` keys (fewer prompt tokens, nothing the model needs)."""
    if isinstance(schema, dict):
        return {k: _clean(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def tools_json(tools: Sequence[ToolSchema]) -> str:
    """The tool list as the model reads it: ``[{"name", "description", "parameters"}, …]``."""
    return json.dumps([{"name": t.name, "description": t.description,
                        "parameters": _clean(t.parameters)} for t in tools])


def calls_json(calls: Sequence[ToolCall]) -> str:
    """Canonical text of an assistant's calls: ``[{"name": …, "arguments": …}, …]``."""
    return json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])


def render_prompt(messages: Iterable[ChatMessage], tools: Sequence[ToolSchema] = (), *,
                  tool_prompt: str = DEFAULT_TOOL_PROMPT,
                  tool_result_prompt: str = DEFAULT_TOOL_RESULT_PROMPT,
                  raw_calls: Mapping[tuple[str, ...], str] | None = None) -> str:
    """ChatML prompt ending with an open assistant turn (``<|im_start|>assistant\\n``).

    A conversation without a system message gets SmolLM2's default one, as its template does.
    With ``tools``, ``tool_prompt`` (``{tools}`` → :func:`tools_json`) is appended to the first
    system message. An assistant message with ``tool_calls`` renders as its content followed by
    ``<tool_call>[…]</tool_call>``: ``raw_calls`` maps the tuple of call ids to the exact JSON the
    model generated, so the rendered history matches the tokens already in the KV cache; unknown
    ids render canonically (:func:`calls_json`). A ``tool`` message renders as a system turn
    ``tool_result_prompt`` (``{name}``: the tool its ``tool_call_id`` answers, ``{result}``: its
    content through :func:`flatten_result`).
    """
    msgs = list(messages)
    system = DEFAULT_SYSTEM
    if msgs and msgs[0].role == "system":
        system = msgs[0].content
        msgs = msgs[1:]
    if tools:
        system = f"{system}\n\n{tool_prompt.format(tools=tools_json(tools))}"
    parts = [f"<|im_start|>system\n{system}{_END}\n"]
    raw_calls = raw_calls or {}
    names: dict[str, str] = {}
    for m in msgs:
        if m.role == "tool":
            name = m.name or names.get(m.tool_call_id or "", "tool")
            text = tool_result_prompt.format(name=name, result=flatten_result(m.content))
            parts.append(f"<|im_start|>system\n{text}{_END}\n")
        elif m.role == "assistant" and m.tool_calls:
            names.update((c.id, c.name) for c in m.tool_calls)
            raw = raw_calls.get(tuple(c.id for c in m.tool_calls))
            body = raw if raw is not None else calls_json(m.tool_calls) + TOOL_CALL_CLOSE
            parts.append(f"<|im_start|>assistant\n{m.content}{TOOL_CALL_OPEN}{body}{_END}\n")
        else:
            parts.append(f"<|im_start|>{m.role}\n{m.content}{_END}\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def check_tool_choice(tools: Sequence[ToolSchema], choice: str) -> None:
    """Raise :class:`PortError` for a ``tool_choice`` that names no declared tool, or that requires
    a call when there are no tools."""
    if choice in ("auto", "none"):
        return
    if not tools:
        raise PortError(f"tool_choice {choice!r} needs tools, but the request declares none")
    if choice != "required" and choice not in {t.name for t in tools}:
        raise PortError(f"tool_choice {choice!r} is not one of the declared tools: "
                        f"{', '.join(t.name for t in tools)}")


#: Longest free-text argument the grammar allows (characters) when its schema sets no
#: ``maxLength``, ``pattern``, ``enum``, ``const`` or ``format``: a small model that starts a
#: string it cannot fill runs on (SmolLM2-135M wrote ``}}]</tool_call> I'm sorry…`` inside one
#: until the token budget ended); bounded, the call completes and the tool rejects the value.
MAX_FREE_STRING = 64


def _bounded(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v) for k, v in schema.items()}
    if out.get("type") == "string" and not any(
            k in out for k in ("maxLength", "pattern", "enum", "const", "format")):
        out["maxLength"] = MAX_FREE_STRING
    return out


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameter schema for the grammar: no extra properties unless it allows them,
    free-text strings bounded by :data:`MAX_FREE_STRING`."""
    out = _bounded(_clean(schema) or {"type": "object"})
    if out.get("type", "object") == "object":
        out = {"type": "object", "properties": {}, **out}
        out.setdefault("additionalProperties", False)
    return out


def call_grammar(tools: Sequence[ToolSchema], choice: str = "required", max_calls: int = 1, *,
                 allow_empty: bool = False) -> str:
    """GBNF for what follows ``<tool_call>``: ``[`` 1..``max_calls`` calls ``]</tool_call>``
    (``[]</tool_call>`` too with ``allow_empty``).

    Each call is ``{"name": <a declared tool>, "arguments": <that tool's parameters>}``; with
    ``choice`` naming one tool only that tool. Built with llama-cpp-python's JSON-Schema→GBNF
    converter (a port of llama.cpp's ``json_schema_to_grammar``), then pinned to ``json.dumps``
    spacing (``{"a": 1, "b": 2}``): the layout the model saw in its prompt, one token sequence
    per call (the KV cache then matches the rendered history), and no whitespace loops.

    Raises:
        PortError: a tool's parameter schema cannot be converted.
    """
    chosen = [t for t in tools if choice in ("auto", "required", "none") or t.name == choice]
    variants = [{"type": "object",
                 "properties": {"name": {"const": t.name}, "arguments": _strict(t.parameters)},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for t in chosen]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    conv = _converter()
    try:
        ref = conv.visit(conv.resolve_refs(schema, "tools"), "call")
    except Exception as exc:
        raise PortError(f"cannot build a tool-call grammar from the tool schemas: {exc}") from exc
    rules = _tight(conv.format_grammar())
    more = f' ( ", " {ref} ){{0,{max_calls - 1}}}' if max_calls > 1 else ""
    calls = f'"\\n"? {ref}{more} "\\n"? "]"'
    body = f'( "]" | {calls} )' if allow_empty else calls
    return f'root ::= "[" {body} "{TOOL_CALL_CLOSE}"\n{rules}\n'


def _converter() -> Any:
    from llama_cpp.llama_grammar import SchemaConverter

    return SchemaConverter(prop_order={"name": 0, "arguments": 1}, allow_fetch=False,
                           dotall=False, raw_pattern=False)


#: a backslash escape llama.cpp's GBNF parser does not know (it knows \n \r \t \\ \" \[ \] \x
#: \u \U; ``\-`` and ``\^`` are left alone: unescaped they would mean a range or a negation),
#: or an escaped backslash (kept as it is)
_UNKNOWN_ESCAPE = re.compile(r'(\\\\)|\\([^nrt\\"xuU\[\]\-^])')


def _tight(rules: str) -> str:
    """Pin the converter's optional whitespace to ``json.dumps`` spacing; no control characters
    inside strings; an escaped punctuation mark of a ``pattern`` (``\\.`` in ``"p\\.m\\."``)
    as the mark itself: the converter writes it as the GBNF literal ``"\\."``, which llama.cpp
    rejects ("unknown escape"), so the support agent's ``time`` argument had no grammar."""
    rules = _UNKNOWN_ESCAPE.sub(lambda m: m.group(1) or m.group(2), rules)
    for loose, tight in ((' space ":" space', ' ": "'), ('"," space', '", "'),
                         ('"{" space', '"{"'), ('"[" space', '"["')):
        rules = rules.replace(loose, tight)
    rules = re.sub(r"^space ::= .*$", 'space ::= ""', rules, flags=re.M)
    # JSON strings hold no raw control characters (json.loads rejects them; a newline in a value
    # is a small model running away)
    return rules.replace('char ::= [^"\\\\] |', 'char ::= [^"\\\\\\x00-\\x1F] |')


def _literal(text: str) -> str:
    return json.dumps(text)  # a GBNF literal escapes like a JSON string


def value_grammar(schema: dict[str, Any], sep: str, lead: str = "") -> str:
    """GBNF of the literal ``lead``, one JSON value matching ``schema``, the literal ``sep``. An integer
    with ``minimum`` ≥ 0 and ``maximum`` gets at most as many digits as ``maximum`` (the JSON
    Schema converter ignores integer bounds).

    Raises:
        PortError: the schema cannot be converted.
    """
    tail = f" {_literal(sep)}" if sep else ""
    head = f"{_literal(lead)} " if lead else ""
    hi, lo = schema.get("maximum"), schema.get("minimum")
    if schema.get("type") == "integer" and isinstance(hi, int) and isinstance(lo, int) and lo >= 0:
        # the converter ignores integer bounds; at least cap the digits (a small model loops)
        k = len(str(hi))
        digits = '"0" | [1-9]' + (f" [0-9]{{0,{k - 1}}}" if k > 1 else "")
        return f"root ::= {head}({digits}){tail}\n"
    conv = _converter()
    try:
        ref = conv.visit(conv.resolve_refs(_strict(schema), "tools"), "arg")
    except Exception as exc:
        raise PortError(f"cannot build a grammar from the schema {schema!r}: {exc}") from exc
    return f"root ::= {head}{ref}{tail}\n{_tight(conv.format_grammar())}\n"


def grounded_values(schema: dict[str, Any], text: str) -> list[str]:
    """The spans of ``text`` (what the caller said) that a string argument with a ``pattern``
    accepts whole, in order of appearance, without repeats: ``[]`` for another schema or when
    no span fits. A span starts and ends at a word boundary (``"4, 2, 1, 7"`` in ``"It's 4, 2,
    1, 7."`` for ``^[0-9]([, -]{0,2}[0-9]){3}$``; nothing inside ``"42178"``).

    Used to *ground* such an argument: a small model asked to write an order number the caller
    read out writes a number it has seen more often (SmolLM2-135M wrote ``1234`` and ``4234`` for
    ``4, 2, 1, 7``); choosing among the caller's own spans, it copies (issue 16). Digits read
    as words count as digits ("four two one seven" offers ``4 2 1 7``).

    A string argument with an ``enum`` is grounded the same way: its values that the caller
    said as whole words (case-insensitive), in order of appearance ("Monday at 2, sorry, I mean
    Tuesday" offers ``Monday``, ``Tuesday`` for a weekday enum)."""
    if schema.get("type", "string") == "string" and schema.get("enum") and text:
        found = []
        for v in schema["enum"]:
            if isinstance(v, str) and v.strip():
                m = re.search(rf"(?<!\w){re.escape(v)}(?!\w)", text, re.IGNORECASE)
                if m:
                    found.append((m.start(), v))
        return [v for _, v in sorted(found)]
    pattern = schema.get("pattern") if schema.get("type") == "string" else None
    if not pattern or not text:
        return []
    core = pattern[1:] if pattern.startswith("^") else pattern
    core = core[:-1] if core.endswith("$") and not core.endswith("\\$") else core
    try:
        rx = re.compile(rf"(?<!\w)(?:{core})(?!\w)")
    except re.error:
        return []
    out: list[str] = []
    for version in spoken_versions(text):  # as transcribed, digit words, ellipses
        for m in rx.finditer(version):
            if m.group(0) and m.group(0) not in out:
                out.append(m.group(0))
    return out


def groundable(schema: dict[str, Any]) -> bool:
    """Whether a property can be grounded in the caller's words: a ``pattern``, or an ``enum``
    with a non-empty string value."""
    return bool(schema.get("pattern")) or any(isinstance(v, str) and v.strip()
                                              for v in schema.get("enum") or ())


def value_alone(tools: Sequence[ToolSchema], said: str) -> str | None:
    """The one tool of ``tools`` whose only required typed argument (a ``pattern``) is all the
    caller said (``"4, 2, 1, 7."``, ``"four two one seven"``; punctuation aside), or None (no
    such tool, or more than one). The answer to "what's the order number?" is often the number
    alone, and the agent's instructions say a number alone is an order number; the tool gate
    of Qwen2.5-Coder-1.5B put the margin of a bare "4, 2, 1, 7." under its threshold (4.35 <
    4.77, reference scenario ``order-digits-real``, 2026-12-04)."""
    if not said.strip():
        return None
    versions = spoken_versions(said)
    found = []
    for t in tools:
        params = t.parameters or {}
        props = params.get("properties") or {}
        required = list(params.get("required") or ())
        if len(required) != 1 or not (props.get(required[0]) or {}).get("pattern"):
            continue
        schema = props[required[0]]
        if any(not re.sub(r"[\W_]+", "", text.replace(span, "", 1))
               for text in versions for span in grounded_values(schema, text)):
            found.append(t.name)
    return found[0] if len(found) == 1 else None


def argument_sources(schema: dict[str, Any], said: str, before: str = "") -> dict[str, str]:
    """Per groundable property of a tool's parameter ``schema``, the caller's words its value
    is read from (:func:`grounded_values`): ``said``, the caller's last message; for a required
    one that message lacks, ``before`` (the caller's message before it) when ``said`` grounds
    another required one. A request that restates part of the one before inherits the rest:
    "Thursday at six in the evening?" … "Four o'clock that same day, then." is Thursday at
    four. A message that grounds none of them ("Okay.") inherits nothing, so a small model's
    call on it is still vetoed, and a self-repair inside one message still takes the value
    said last (``said`` alone)."""
    props = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or ())
    out = {k: said for k, p in props.items() if groundable(p or {})}
    missing = [k for k in out if k in required and not grounded_values(props[k], said)]
    if before and len(missing) < sum(k in required for k in out):  # said grounds one of them
        for k in missing:
            if grounded_values(props[k], before):
                out[k] = before
    return out


_DIGIT_OF = DIGIT_WORDS
_DIGIT_WORD = re.compile(r"(?<![\w'])(?:" + "|".join(_DIGIT_OF) + r")(?![\w'])", re.IGNORECASE)
#: the homophones a recogniser writes for a digit said before "a.m."/"p.m." ("For PM, if
#: you've got it." for "four p.m.", Whisper base on the synthetic caller voice, 2026-12-05)
#: ("to" is left alone: "move it to PM" is no hour)
_HOMOPHONE_OF = {"for": "4", "too": "2"}
_HOUR_HOMOPHONE = re.compile(r"(?<![\w'])(?:for|too)(?=\s*[ap]\.?\s*m\b)", re.IGNORECASE)
#: an ellipsis between two digits: Whisper's transcript of digits read with long pauses
_DIGIT_PAUSE = re.compile(r"(?<=\d)\s*(?:\.{2,}|\u2026)\s*(?=\d)")


def spoken_versions(text: str) -> list[str]:
    """``text`` as transcribed, then with digits read as words written as digits ("Four, two,
    one, seven." → "4, 2, 1, 7."), then with an ellipsis between digits written as a comma
    ("3... 6... 0... 7..." → "3, 6, 0, 7...", as Whisper writes a number read with long pauses):
    a recogniser writes any of these; each different version once. In the digit version a
    homophone of a digit before "am"/"pm" is that digit too ("for PM" → "4 PM")."""
    digits = _DIGIT_WORD.sub(lambda m: _DIGIT_OF[m.group(0).lower()], text)
    digits = _HOUR_HOMOPHONE.sub(lambda m: _HOMOPHONE_OF[m.group(0).lower()], digits)
    return list(dict.fromkeys((text, digits, _DIGIT_PAUSE.sub(", ", digits))))


def choice_grammar(values: Sequence[str], sep: str, lead: str = "") -> str:
    """GBNF of the literal ``lead``, one of ``values`` as a JSON string, the literal ``sep``."""
    tail = f" {_literal(sep)}" if sep else ""
    head = f"{_literal(lead)} " if lead else ""
    alts = " | ".join(_literal(json.dumps(v)) for v in values)
    return f"root ::= {head}({alts}){tail}\n"


def names_grammar(names: Sequence[str]) -> str:
    """GBNF of one tool name followed by the closing quote."""
    return f'root ::= ({" | ".join(_literal(n) for n in names)}) "\\""\n'


#: GBNF of the first token after ``<tool_call>[``: ``]`` (no call) or the start of a call.
DECIDE_GRAMMAR = 'root ::= "]" | "\\n"? "{\\"name\\": \\""\n'


def object_plan(schema: dict[str, Any], said: str | None = None
                ) -> list[tuple[str, dict[str, Any]]] | None:
    """``[(key, subschema), …]`` when ``schema`` is an object that allows no other properties
    and whose JSON can be written key by key (the keys forced, only the values sampled); None
    otherwise.

    Every property must be required, unless ``said`` (the caller's words) is given: then an
    optional property that can be grounded (a ``pattern`` or an ``enum``, :func:`grounded_values`)
    is written only when the caller said a value it accepts, and left out (its default)
    otherwise. An optional property that cannot be grounded (free text) still gives None: the
    whole object is then sampled, so the model may write it or not."""
    s = _strict(schema)
    props = s.get("properties") or {}
    if s.get("type", "object") != "object" or s.get("additionalProperties") is not False:
        return None
    if any(k in s for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return None
    required = set(s.get("required") or ())
    if required == set(props):
        return list(props.items())
    if said is None:
        return None
    plan = []
    for key, sub in props.items():
        if key in required:
            plan.append((key, sub))
        elif not (sub.get("pattern") or sub.get("enum")):
            return None
        elif grounded_values(sub, said):
            plan.append((key, sub))
    return plan


def json_complete(text: str, sep: str) -> bool:
    """True when ``text`` is one complete JSON value followed by ``sep``."""
    if not text.endswith(sep):
        return False
    try:
        json.loads(text[: len(text) - len(sep)] if sep else text)
    except ValueError:
        return False
    return True


def parse_calls(text: str, tools: Sequence[ToolSchema]) -> list[ToolCall]:
    """Parse what followed ``<tool_call>`` (``[…]</tool_call>``) into :class:`ToolCall` objects
    with fresh ids (``call_<hex>``).

    Raises:
        PortError: not a JSON list of ``{"name", "arguments"}`` objects, an undeclared tool, or
            arguments that are not an object (the message names the tool).
    """
    body = text.strip()
    if body.endswith(TOOL_CALL_CLOSE):
        body = body[: -len(TOOL_CALL_CLOSE)]
    try:
        items = json.loads(body)
    except json.JSONDecodeError as exc:
        raise PortError(f"the model's tool call is not valid JSON ({exc}): {body[:200]!r}") from exc
    if isinstance(items, dict):
        items = [items]
    names = {t.name for t in tools}
    calls = []
    for item in items if isinstance(items, list) else [None]:
        if not isinstance(item, dict) or "name" not in item:
            raise PortError(f"the model's tool call is not {{'name', 'arguments'}}: {body[:200]!r}")
        name, args = item["name"], item.get("arguments", {})
        if name not in names:
            raise PortError(f"the model called an undeclared tool {name!r}")
        if not isinstance(args, dict):
            raise PortError(f"the arguments of the model's call to {name!r} are not a JSON "
                            f"object: {args!r}")
        calls.append(ToolCall(id=f"call_{uuid.uuid4().hex[:16]}", name=name, arguments=args))
    return calls


class SentinelScanner:
    """Streams text while watching for sentinels (the call opener, stop strings) that may arrive
    split across tokens.

    ``feed(text)`` returns ``(safe, hit)``: ``safe`` is text that can be shown now (it cannot be
    part of a sentinel); ``hit`` is the first sentinel found (everything after it is dropped), or
    None. A tail that could still become a sentinel is held back until the next ``feed``;
    ``flush()`` releases it at the end of the stream.
    """

    def __init__(self, sentinels: Iterable[str]) -> None:
        self.sentinels = tuple(s for s in sentinels if s)
        self._held = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        buf = self._held + text
        first: tuple[int, str] | None = None
        for s in self.sentinels:
            i = buf.find(s)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, s)
        if first is not None:
            self._held = ""
            return buf[: first[0]], first[1]
        keep = 0
        for s in self.sentinels:
            for n in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:n]):
                    keep = n
                    break
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out
