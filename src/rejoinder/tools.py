"""Tools an agent's LLM may call: plain Python functions (sync or async) with typed parameters.

A tool's JSON Schema (what the LLM sees) is built with pydantic from the function's type hints,
and each parameter's description from its docstring (Google, reST or NumPy style, parsed with
``docstring_parser``); the docstring's summary is the tool's description. A parameter annotated
:class:`CallContext` is filled by the runtime, never by the LLM, and is left out of the schema:
the caller's identity and the call's state reach tools that way, so an LLM cannot pass someone
else's identity in an argument.

Constrain what the LLM may pass with the types pydantic turns into JSON Schema: ``Literal[…]``
(an ``enum``), ``Annotated[str, Field(pattern=r"^[0-9]{4}$")]`` (a ``pattern``), ``Field(ge=…,
le=…)`` bounds. A grammar-constrained backend (the embedded LLM) can then only produce matching
values, and :meth:`Tool.parse` rejects others. To also accept looser spellings from other
backends, put a ``BeforeValidator`` *after* the constraint
(``Annotated[str, Field(pattern=…), BeforeValidator(normalise)]``): it runs first, and the
pattern stays in the schema (placed before the constraint, pydantic leaves it out of the schema).

Each tool declares whether it is ``reversible``. A reversible tool may run early, on a tentative
transcript before the caller's turn is final (preemptive generation), and is *compensated* if the
transcript then changes: ``compensate(ctx, result, **args)`` undoes it (read-only tools need none).
An irreversible tool never runs before the turn is final. ``timeout_s`` bounds one run (on the
call clock); a timeout or an exception is reported to the LLM as ``{"error": …}`` so it can tell
the caller.

A plain (blocking) function runs in the tools' own bounded thread pool (:data:`TOOL_THREADS`
threads per process), never in the event loop's default executor that the models use: a tool
that hangs past its timeout keeps at most its own thread, and recognition and the other models
always find threads. When every tool thread is taken by hung calls, further blocking calls wait
for a free thread within their own timeout and are reported as timed out.

Example::

    @tool(reversible=True)
    def check_hours(ctx: CallContext, day: str) -> dict:
        '''Opening hours on a day.

        Args:
            day: weekday name, e.g. "Monday".
        '''
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .clock import Clock, wait_within
from .errors import ConfigError
from .ports import ToolSchema

TOOL_THREADS = 16  # threads for blocking tools, per process (hung calls included)
_pool: ThreadPoolExecutor | None = None


def tool_pool() -> ThreadPoolExecutor:
    """The process's bounded executor for blocking tools (created on first use)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="rejoinder-tool")
    return _pool


@dataclass
class CallContext:
    """What the runtime knows about the call, handed to tools and to the agent's hooks.

    ``call_id`` identifies the call; ``caller_id`` is the caller's number as the transport
    reports it (a scenario's ``caller_phone``, Twilio's ``from``), or None; ``state`` is the
    application's own per-call state (set by the agent's ``on_call_start``)."""

    call_id: str
    caller_id: str | None = None
    state: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """Raise inside a tool to report a failure the caller should hear about (the message is
    given to the LLM as the tool's error); any other exception is reported the same way."""


def _doc_parts(fn: Callable) -> tuple[str, dict[str, str]]:
    import docstring_parser

    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    summary = " ".join(x for x in (doc.short_description, doc.long_description) if x)
    return " ".join(summary.split()), {p.arg_name: " ".join((p.description or "").split())
                                       for p in doc.params}


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema without titles (fewer prompt tokens, smaller grammars)."""
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


class Tool:
    """A function the LLM may call. Build it with :func:`tool` (or pass a plain function to
    :class:`~rejoinder.agent.Agent`, which wraps it with the defaults).

    Raises:
        ConfigError: a parameter without a type hint, ``*args``/``**kwargs``, or a reversible
            tool whose ``compensate`` is not callable.
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, reversible: bool = False,
                 timeout_s: float | None = 10.0,
                 compensate: Callable[..., Any] | None = None,
                 examples: Iterable[str] = (), background: bool = False,
                 latency_ms: float | None = None, not_on_question: bool = False,
                 cue: str | None = None, filler: bool = True,
                 confirm: Callable[..., Any] | None = None) -> None:
        """``latency_ms``: how long one run is expected to take (ms), when known; else the
        median of its last runs in this process (:meth:`expected_ms`). A runtime filler
        (:class:`rejoinder.reply.FillerPolicy`) is said only when this wait is long.
        ``filler``: a runtime filler may be said before a round that calls it (False for
        call control, whose goodbye or transfer line comes next: ``end_call``).
        ``not_on_question``: the tool is not offered (``LLMRequest.allowed_tools``) for a reply
        to a caller's message that ends with a question mark (``end_call``: a caller who asks
        something wants an answer, not a hang-up).
        ``cue``: a regular expression (case-insensitive, searched anywhere) the caller's words
        must match for the tool to be offered for the reply (``end_call``: a closing such as
        "bye" or "that's all", :data:`rejoinder.calltools.CLOSING_CUE`; a thank-you alone is
        not one). None: always offered. A scoring backend still weighs a withheld tool: an
        irreversible one chosen means talk, a reversible one is set aside for the rest
        (:class:`rejoinder.ports.LLMRequest`).
        ``confirm(**args) -> str`` (given ``ctx`` too when it has a ``ctx`` parameter): for an
        irreversible tool, the yes/no question the caller must answer first ("shall I cancel
        your haircut on Tuesday at 10 AM?"). The first call does not run the tool: it is held,
        its result is the question, which the runtime says as written (source ``"confirm"``);
        the tool runs when the LLM calls it again in the caller's next turn
        (:meth:`rejoinder.conversation.Conversation.run_tool`). The question may raise
        :class:`ToolError` (e.g. "which appointment?"), which the LLM reads as usual."""
        if not callable(fn):
            raise ConfigError(f"tool {fn!r} is not callable")
        self.fn = fn
        self.name = name or fn.__name__
        self.reversible = bool(reversible)
        self.background = bool(background)
        self.timeout_s = timeout_s
        self.latency_ms = latency_ms
        self.not_on_question = bool(not_on_question)
        self.cue: re.Pattern[str] | None = None
        self.set_cue(cue)
        self.filler = bool(filler)
        self._observed: list[float] = []  # the last runs' durations (ms, call clock)
        if compensate is not None and not callable(compensate):
            raise ConfigError(f"tool {self.name!r}: compensate must be callable")
        if compensate is not None and not reversible:
            raise ConfigError(f"tool {self.name!r}: only a reversible tool can be compensated")
        self.compensate_fn = compensate
        if confirm is not None and (not callable(confirm) or reversible):
            raise ConfigError(f"tool {self.name!r}: confirm must be callable, and only an "
                              "irreversible tool asks for confirmation")
        self.confirm_fn = confirm
        if isinstance(examples, str) or not all(isinstance(e, str) and e.strip() for e in examples):
            raise ConfigError(f"tool {self.name!r}: examples are a list of caller utterances "
                              "(non-empty strings)")
        self.examples: tuple[str, ...] = tuple(e.strip() for e in examples)
        summary, param_docs = _doc_parts(fn)
        self.description = description or summary or self.name.replace("_", " ")
        self.context_param: str | None = None
        fields: dict[str, Any] = {}
        try:
            hints = get_type_hints(fn, include_extras=True)
        except Exception as exc:
            raise ConfigError(f"tool {self.name!r}: cannot read its type hints: {exc}") from exc
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ConfigError(f"tool {self.name!r}: *args/**kwargs cannot be described to an "
                                  "LLM; give each parameter a name and a type")
            hint = hints.get(p.name)
            if hint is CallContext:
                self.context_param = p.name
                continue
            if hint is None:
                raise ConfigError(f"tool {self.name!r}: parameter {p.name!r} has no type hint; "
                                  "annotate it (e.g. `order_id: str`)")
            default = ... if p.default is p.empty else p.default
            doc = param_docs.get(p.name)  # else keep a description the hint itself carries
            fields[p.name] = (hint, Field(default, description=doc) if doc else Field(default))
        self.params: type[BaseModel] = create_model(  # type: ignore[call-overload]
            f"{self.name}_args", __config__=ConfigDict(extra="forbid"), **fields)
        self.schema = ToolSchema(self.name, self.description,
                                 _clean_schema(self.params.model_json_schema()), self.examples,
                                 tells=self.filler and not self.background,
                                 irreversible=not self.reversible and self.confirm_fn is None)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, reversible={self.reversible})"

    def set_cue(self, cue: str | None) -> None:
        """Offer the tool only for caller words matching ``cue`` (a regular expression,
        case-insensitive; None or "": always). Raises ConfigError for a bad pattern."""
        try:
            self.cue = re.compile(cue, re.IGNORECASE) if cue else None
        except re.error as exc:
            raise ConfigError(f"tool {self.name!r}: cue {cue!r} is not a regular expression "
                              f"({exc}); fix it or leave it out") from exc

    def observe(self, ms: float) -> None:
        """Record one run's duration (ms); the last 32 are kept."""
        self._observed.append(float(ms))
        del self._observed[:-32]

    def expected_ms(self) -> float | None:
        """Expected duration of one run (ms): the declared ``latency_ms``, else the median of
        the last observed runs (at least 3), else None."""
        if self.latency_ms is not None:
            return self.latency_ms
        if len(self._observed) < 3:
            return None
        xs = sorted(self._observed)
        return xs[len(xs) // 2]

    def parse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validate the LLM's ``arguments``; returns them coerced to the declared types.

        Raises:
            ToolError: invalid arguments (the message names the field and what was wrong).
        """
        try:
            return self.params.model_validate(arguments or {}).model_dump()
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(x) for x in e["loc"]) or "arguments"
            raise ToolError(f"invalid argument {where!r} for {self.name}: {e['msg']}") from None

    @staticmethod
    async def _invoke(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(**kwargs)
        loop = asyncio.get_running_loop()  # one hop per call, never per frame; own pool
        return await loop.run_in_executor(tool_pool(), functools.partial(fn, **kwargs))

    async def run(self, ctx: CallContext, arguments: dict[str, Any], *,
                  clock: Clock | None = None) -> Any:
        """Validate ``arguments`` and run the tool within ``timeout_s`` (on ``clock``, the call
        clock, when given; else the event loop's).

        Raises:
            ToolError: invalid arguments, or the tool raised (its message is kept).
            TimeoutError: the tool took longer than ``timeout_s``.
        """
        kwargs = self.parse(arguments)
        if self.context_param:
            kwargs[self.context_param] = ctx
        try:
            if clock is None or self.timeout_s is None:
                return await asyncio.wait_for(self._invoke(self.fn, kwargs), self.timeout_s)
            task = asyncio.ensure_future(self._invoke(self.fn, kwargs))
            try:
                return await wait_within(clock, task, 1000.0 * self.timeout_s)
            finally:
                if not task.done():  # timed out (or we were cancelled): stop waiting for it
                    task.cancel()
        except (ToolError, TimeoutError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the LLM hears about any failure; the call goes on
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    async def question(self, ctx: CallContext, arguments: dict[str, Any]) -> str:
        """The confirmation question for ``arguments`` (see ``confirm``).

        Raises:
            ToolError: invalid arguments, no ``confirm``, or the question raised.
        """
        if self.confirm_fn is None:
            raise ToolError(f"tool {self.name!r} asks no confirmation")
        kwargs = self.parse(arguments)
        if "ctx" in inspect.signature(self.confirm_fn).parameters:
            kwargs["ctx"] = ctx
        try:
            return str(await self._invoke(self.confirm_fn, kwargs))
        except ToolError:
            raise
        except Exception as exc:  # the LLM hears about any failure; the call goes on
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    async def compensate(self, ctx: CallContext, arguments: dict[str, Any], result: Any) -> None:
        """Undo a run that returned ``result`` (reversible tools only; no-op without a
        compensate function, i.e. a read-only tool).

        Raises:
            ToolError: the tool is irreversible.
        """
        if not self.reversible:
            raise ToolError(f"tool {self.name!r} is irreversible and cannot be compensated")
        if self.compensate_fn is None:
            return
        await self._invoke(self.compensate_fn, {**self.parse(arguments), "ctx": ctx, "result": result})


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, reversible: bool = False,
         timeout_s: float | None = 10.0, compensate: Callable[..., Any] | None = None,
         examples: Iterable[str] = (), background: bool = False,
         latency_ms: float | None = None, confirm: Callable[..., Any] | None = None,
         cue: str | None = None) -> Any:
    """Declare a function as a tool: ``@tool`` or ``@tool(reversible=True, timeout_s=2)``;
    ``latency_ms`` declares how long a run is expected to take (see :class:`Tool`).

    ``compensate(ctx, result, **args)`` undoes a reversible run (see the module docstring).
    ``examples`` are a few caller utterances that should make the LLM call this tool (kept as
    :attr:`Tool.examples`, a tuple of str): the embedded LLM's tool-decision gate is calibrated
    on them. ``background``: a slow tool the reply does not wait for — the LLM is told it has
    started, the reply goes on, and when it finishes its result enters the context and the agent
    follows up on its own as soon as the line is free. ``confirm``: the question an
    irreversible tool asks before it runs (see :class:`Tool`). ``cue``: a regular expression
    the caller's words must match for the tool to be offered (see :class:`Tool`). Returns a
    :class:`Tool`.

    Raises:
        ConfigError: ``cue`` is not a regular expression.
    """
    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, reversible=reversible,
                    timeout_s=timeout_s, compensate=compensate, examples=examples,
                    background=background, latency_ms=latency_ms, confirm=confirm, cue=cue)
    return wrap(fn) if fn is not None else wrap


def result_json(value: Any) -> str:
    """A tool's result as the JSON text given to the LLM (pydantic models and dataclasses are
    dumped; anything else JSON cannot hold becomes its ``str``)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))
