"""The public agent API: an agent is instructions plus tools; the LLM writes every reply.

Define one in Python::

    from rejoinder import Agent, CallContext, tool

    @tool(reversible=True)
    def lookup_order(ctx: CallContext, order_id: str) -> dict:
        '''Look up an order.

        Args:
            order_id: the 4-digit order number.
        '''
        ...

    agent = Agent("You are the phone assistant of …", greeting="Hi! How can I help?",
                  tools=[lookup_order], stt_vocabulary=["order number"])

or in YAML (``rejoinder call caller.wav --agent my_agent.yaml``)::

    name: shop
    instructions: You are the phone assistant of …
    greeting: Hi! How can I help?
    tools:
      - my_tools:lookup_order                 # a @tool, or a plain function (irreversible)
      - {function: my_tools:move_booking, reversible: true, timeout_s: 2,
         compensate: my_tools:undo_move}
      - {function: my_tools:cancel_booking, confirm: my_tools:ask_cancel}  # asks before it runs
    stt_vocabulary: [order number, haircut]
    llm: {temperature: 0, max_tokens: 60}
    on_call_start: my_tools:open_account      # hooks get the CallContext
    on_call_end: my_tools:close_account

Tools may list ``examples:`` (caller utterances that should call them; the tool-decision gate is
calibrated on them), and built-in call tools are ``{builtin: end_call}`` /
``{builtin: transfer_to_human, options: {target: "+15550199"}}`` (:mod:`rejoinder.calltools`).
Conversation steps (:mod:`rejoinder.flow`; the first one is where a call starts, unless
``start:`` names another)::

    steps:
      - name: identify
        instructions: Ask for the order number if the caller has not given it.
        tools: [lookup_order]
        required: false
        next: {lookup_order: report}          # or one step name for any tool of this step
      - name: report
        tools: [lookup_order, end_call]

Modules named in a YAML file are imported from the file's folder first. ``--agent`` accepts a
YAML path, ``module:attribute`` (an :class:`Agent` or a function returning one) or a bundled
name (:data:`BUNDLED`; ``support`` is the reference support assistant and the default).

Errors: :class:`~rejoinder.errors.ConfigError` naming the file, the field and the fix.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigError
from .flow import AgentStep, check_steps
from .tools import CallContext, Tool

Hook = Callable[[CallContext], Any]  # sync or async
Greeting = Union[str, Callable[[CallContext], Union[str, None]], None]

BUNDLED = {"support": "rejoinder.app.support:agent"}
DEFAULT_AGENT = "support"


class LLMSettings(BaseModel):
    """How the agent's LLM is asked: sampling ``temperature``, ``max_tokens`` per LLM request,
    ``max_steps`` LLM requests per reply (each tool round is one step; the last step may only
    speak), and how many past caller turns each request carries (``history_turns``, default 6:
    6 to 11, dropped in chunks of 6; 0 keeps the whole call; the system prompt and the tools are
    always sent). The window keeps
    time to first token flat over a long call: the embedded LLM shifts the turn that left it out
    of its KV cache (``rejoinder.conversation.window``; measured in ``bench/ttft_growth.py``).
    ``keep_tool_turns`` also keeps every earlier turn that ran a tool (its results are facts);
    it is off by default: with it, SmolLM2-135M saw tool calls in every request and called a
    tool on almost every later turn, so the prompt grew to 5,002 tokens by turn 30."""

    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(60, ge=1, le=4096)
    max_steps: int = Field(3, ge=1, le=10)
    history_turns: int = Field(6, ge=0)
    keep_tool_turns: bool = False
    #: the embedded LLM's tool-gate threshold for this agent (``rejoinder calibrate`` prints
    #: it); None: the model's shipped calibration
    tool_threshold: float | None = None
    #: caller utterances that need no tool, added to the gate's built-in small-talk examples
    talk_examples: list[str] = Field(default_factory=list)
    #: what the agent helps with, in a few words ("your orders and appointments"). Set, the
    #: embedded LLM answers a caller's request that its tool gate finds no tool for by saying
    #: so (``rejoinder.adapters._scope``: "I'm sorry, I can only help with …" and the LLM's own
    #: words after it); None: such requests get a free reply
    scope: str | None = Field(None, min_length=1, max_length=200)


class Agent:
    """A voice agent: ``instructions`` (the system prompt), ``tools`` the LLM may call, an
    optional ``greeting`` spoken when the call opens (a string, or a function of the
    :class:`~rejoinder.tools.CallContext` returning one), vocabulary that biases the speech
    recogniser, LLM settings and per-call hooks.

    Hooks (sync or async, given the CallContext): ``on_call_start`` sets up per-call state
    (``ctx.state``), ``on_call_end`` releases it, ``report_state`` returns a JSON-able snapshot
    of the application's state at the end of a call (the harness checks scenarios' ``final_db``
    against it; ``serve`` reports it to an authenticated harness).

    Raises:
        ConfigError: empty instructions, two tools with one name, a non-callable hook.
    """

    def __init__(self, instructions: str, *, name: str = "agent", greeting: Greeting = None,
                 tools: Iterable[Tool | Callable[..., Any]] = (), stt_vocabulary: Iterable[str] = (),
                 llm: LLMSettings | dict[str, Any] | None = None, on_call_start: Hook | None = None,
                 on_call_end: Hook | None = None, report_state: Hook | None = None,
                 source: str | None = None, steps: Iterable[AgentStep] = (),
                 start: str | None = None) -> None:
        if not isinstance(instructions, str) or not instructions.strip():
            raise ConfigError("an agent needs instructions: a non-empty system prompt string")
        self.name = name
        self.instructions = instructions.strip()
        self.greeting = greeting
        self.tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else Tool(t)
            if t.name in self.tools:
                raise ConfigError(f"agent {name!r}: two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.steps: dict[str, AgentStep] = {}
        for st in steps:
            if not isinstance(st, AgentStep):
                raise ConfigError(f"agent {name!r}: steps are AgentStep objects, not {st!r}")
            for t in st.tool_objects:  # a step's own Tool joins the agent's tools
                if self.tools.setdefault(t.name, t) is not t:
                    raise ConfigError(f"agent {name!r}: two tools are named {t.name!r}")
            self.steps.setdefault(st.name, st)
        check_steps(name, list(steps), self.tools, start)
        self.start = start or next(iter(self.steps), None)
        self.stt_vocabulary = tuple(stt_vocabulary)
        try:
            self.llm = llm if isinstance(llm, LLMSettings) else LLMSettings.model_validate(llm or {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "llm"
            raise ConfigError(f"agent {name!r}: llm settings: {where}: {err['msg']}") from exc
        for hook_name, hook in (("on_call_start", on_call_start), ("on_call_end", on_call_end),
                                ("report_state", report_state)):
            if hook is not None and not callable(hook):
                raise ConfigError(f"agent {name!r}: {hook_name} must be a function")
        self.on_call_start = on_call_start
        self.on_call_end = on_call_end
        self.report_state = report_state
        self.source = source

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, tools={list(self.tools)})"

    def step(self, name: str | None = None) -> AgentStep:
        """The step named ``name`` (None: the start step).

        Raises:
            ConfigError: the agent has no such step (or no steps at all).
        """
        key = name if name is not None else self.start
        if key not in self.steps:
            raise ConfigError(f"agent {self.name!r} has no step {key!r} (steps: "
                              f"{', '.join(self.steps) or 'none'})")
        return self.steps[key]

    def stt_prompt(self) -> str | None:
        """The recogniser's prompt built from ``stt_vocabulary`` (Whisper's initial prompt biases
        spelling and word choice towards these words), or None."""
        return ", ".join(self.stt_vocabulary) + "." if self.stt_vocabulary else None

    def describe(self) -> dict[str, Any]:
        """What a run records about the agent (conditions): name, source, flow, a hash of the
        instructions, the tools (reversible, timeout) and the LLM settings."""
        return {
            "name": self.name, "source": self.source, "flow": "llm",
            "instructions_sha256": hashlib.sha256(self.instructions.encode()).hexdigest()[:16],
            "instructions": self.instructions,
            "tools": [{"name": t.name, "reversible": t.reversible, "timeout_s": t.timeout_s,
                       "examples": list(t.examples)} for t in self.tools.values()],
            "steps": [st.describe() for st in self.steps.values()], "start": self.start,
            "greeting": "dynamic" if callable(self.greeting) else self.greeting,
            "llm": self.llm.model_dump(),
        }


async def call_hook(hook: Callable[..., Any] | None, *args: Any) -> Any:
    """Run a sync or async hook; returns its result (None without a hook)."""
    if hook is None:
        return None
    out = hook(*args)
    return await out if inspect.isawaitable(out) else out


# --------------------------------------------------------------------------------- loading


class _ToolEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    function: str | None = Field(None, description="module:function")
    builtin: str | None = Field(None, description="a built-in call tool (rejoinder.calltools): "
                                "end_call, transfer_to_human, go_to, handoff")
    options: dict[str, Any] = Field(default_factory=dict, description="the built-in's options, "
                                    "e.g. {target: '+15550199'}")
    name: str | None = None
    description: str | None = None
    reversible: bool | None = None
    timeout_s: float | None = Field(None, gt=0)
    compensate: str | None = None
    confirm: str | None = Field(None, description="module:function giving the yes/no question "
                                "an irreversible tool asks before it runs")
    examples: list[str] | None = Field(None, description="caller utterances that should call it")
    cue: str | None = Field(None, description="a regular expression the caller's words must match "
                            "for the tool to be offered (case-insensitive; '' for always)")

    @model_validator(mode="after")
    def _one_source(self) -> "_ToolEntry":
        if (self.function is None) == (self.builtin is None):
            raise ValueError("a tool entry needs exactly one of 'function' and 'builtin'")
        if self.builtin is not None and (self.reversible is not None or self.compensate
                                         or self.confirm):
            raise ValueError("a built-in tool's reversibility is fixed; drop "
                             "reversible/compensate/confirm")
        return self


class _StepEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    instructions: str = ""
    tools: list[str] | None = Field(None, description="names of the agent's tools this step may "
                                    "call (omitted: all)")
    required: bool = False
    next: Union[str, dict[str, str], None] = None


class AgentFile(BaseModel):
    """The YAML form of an :class:`Agent` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "agent"
    instructions: str = Field(min_length=1)
    greeting: str | None = None
    tools: list[Union[str, _ToolEntry]] = Field(default_factory=list)
    stt_vocabulary: list[str] = Field(default_factory=list)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    on_call_start: str | None = None
    on_call_end: str | None = None
    report_state: str | None = None
    steps: list[_StepEntry] = Field(default_factory=list)
    start: str | None = None


def resolve(ref: str, where: str = "") -> Any:
    """Import ``module:attribute`` (dots allowed in the attribute).

    Raises:
        ConfigError: malformed reference, module not importable, attribute missing.
    """
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(f"{where}{ref!r} is not a 'module:attribute' reference "
                          "(e.g. 'my_tools:lookup_order')")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError(f"{where}cannot import module {mod_name!r} ({exc}); put it next to the "
                          "agent file or on PYTHONPATH") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{where}module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _builtin(e: _ToolEntry, where: str) -> Tool:
    from .calltools import BUILTINS

    factory = BUILTINS.get(e.builtin or "")
    if factory is None:
        raise ConfigError(f"{where}no built-in tool {e.builtin!r}; the built-ins are "
                          f"{', '.join(BUILTINS)}")
    opts = dict(e.options)
    for key in ("name", "description", "examples"):
        if getattr(e, key) is not None:
            opts[key] = getattr(e, key)
    try:
        t = factory(**opts)
    except TypeError as exc:
        raise ConfigError(f"{where}built-in {e.builtin!r}: bad options {sorted(e.options)}: "
                          f"{exc}") from exc
    if e.timeout_s is not None:
        t.timeout_s = e.timeout_s
    if e.cue is not None:
        t.set_cue(e.cue)
    return t


def _tool_from(entry: str | _ToolEntry, where: str) -> Tool:
    e = entry if isinstance(entry, _ToolEntry) else _ToolEntry(function=entry)
    if e.builtin is not None:
        return _builtin(e, where)
    obj = resolve(e.function, where)
    if isinstance(obj, Tool):
        base, fn = obj, obj.fn
    elif callable(obj):
        base, fn = None, obj
    else:
        raise ConfigError(f"{where}{e.function!r} is neither a function nor a @tool")
    reversible = e.reversible if e.reversible is not None else (base.reversible if base else False)
    compensate = resolve(e.compensate, where) if e.compensate else (base.compensate_fn if base else None)
    timeout = e.timeout_s if e.timeout_s is not None else (base.timeout_s if base else 10.0)
    examples = e.examples if e.examples is not None else (base.examples if base else ())
    confirm = resolve(e.confirm, where) if e.confirm else (base.confirm_fn if base else None)
    return Tool(fn, name=e.name or (base.name if base else None),
                description=e.description or (base.description if base else None),
                reversible=reversible, timeout_s=timeout, compensate=compensate, examples=examples,
                confirm=confirm, not_on_question=bool(base and base.not_on_question),
                cue=e.cue if e.cue is not None else (base.cue.pattern if base and base.cue else None))


def load_agent_file(path: str | Path) -> Agent:
    """Load an :class:`Agent` from YAML; modules are imported from the file's folder first.

    Raises:
        ConfigError: unreadable file, bad YAML, an unknown/invalid field (named), or a tool or
            hook that cannot be imported.
    """
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the agent file: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: an agent file is a YAML mapping with at least 'instructions'")
    try:
        spec = AgentFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "(file)"
        raise ConfigError(f"{p}: field '{field}': {err['msg']}") from exc
    folder = str(p.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    where = f"{p}: "
    tools = [_tool_from(t, where) for t in spec.tools]
    hooks = {k: resolve(v, where) if v else None
             for k, v in (("on_call_start", spec.on_call_start), ("on_call_end", spec.on_call_end),
                          ("report_state", spec.report_state))}
    steps = [AgentStep(st.name, st.instructions, tools=st.tools, required=st.required, next=st.next)
             for st in spec.steps]
    try:
        return Agent(spec.instructions, name=spec.name, greeting=spec.greeting, tools=tools,
                     stt_vocabulary=spec.stt_vocabulary, llm=spec.llm, source=str(p), steps=steps,
                     start=spec.start, **hooks)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from exc


def load_agent(spec: str | Path | Agent | None = None) -> Agent:
    """The agent named by ``spec``: an :class:`Agent`, a YAML path, ``module:attribute`` or a
    bundled name (:data:`BUNDLED`); None gives the reference support assistant.

    Raises:
        ConfigError: the spec names nothing loadable (the message lists the accepted forms).
    """
    if isinstance(spec, Agent):
        return spec
    text = str(spec) if spec is not None else DEFAULT_AGENT
    if text in BUNDLED:
        agent = load_agent(BUNDLED[text])
        agent.source = text
        return agent
    if text.endswith((".yaml", ".yml")):
        if not Path(text).exists():
            raise ConfigError(f"{text}: no such agent file")
        return load_agent_file(text)
    if ":" in text and not Path(text).exists():
        obj = resolve(text, "--agent: ")
        if not isinstance(obj, Agent) and callable(obj) and not any(
                p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                for p in inspect.signature(obj).parameters.values()):
            obj = obj()  # a factory taking no arguments
        if not isinstance(obj, Agent):
            raise ConfigError(f"--agent {text!r} is a {type(obj).__name__}, not a rejoinder.Agent")
        obj.source = obj.source or text
        return obj
    raise ConfigError(f"--agent {text!r}: give an agent YAML file, 'module:attribute', or one of "
                      f"{', '.join(BUNDLED)}")
