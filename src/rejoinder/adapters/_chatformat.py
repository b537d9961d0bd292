"""Chat and tool-call formats of GGUF models: how a conversation is written for the model, how a
tool call opens and closes, and how the call the model wrote is read back.

Three formats, chosen from a GGUF's own metadata (:func:`detect_format`):

- ``smollm2``: SmolLM2-Instruct's ChatML with ``<tool_call>[{"name": …, "arguments": …}]</tool_call>``
  calls, tools listed in the system prompt, results as a system turn (:mod:`._toolcall`, rendered
  in Python). Any ChatML template without tool markup gets it (that is SmolLM2's own template).
- ``hermes``: ChatML with Hermes-style calls ``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>``
  and results in ``<tool_response>`` (Qwen2.5's template; NousResearch's Hermes function-calling
  format). Rendered from the GGUF's ``tokenizer.chat_template``.
- ``llama3``: Llama 3.1/3.2's header format with JSON calls ``{"name": …, "parameters": …}`` ended by
  ``<|eot_id|>`` and results in an ``ipython`` turn (Meta's Llama 3.1 model card). Rendered from the
  GGUF's template.

A template is rendered in jinja2's ``ImmutableSandboxedEnvironment`` (as llama-cpp-python's
``Jinja2ChatFormatter`` and Hugging Face transformers do): it cannot reach Python attributes
that start with ``_``, call unsafe methods, or mutate lists and dicts, and it is never imported
or executed as code. A GGUF without a template may name its format (``chat_format``); then the
format's own template (:data:`BUILTIN_TEMPLATES`, written for rejoinder) is used.

Pure: no model is loaded here (:func:`read_gguf_metadata` reads the header only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from ..ports import ChatMessage, PortError, ToolCall, ToolSchema
from ._toolcall import (DECIDE_GRAMMAR, DEFAULT_TOOL_PROMPT, DEFAULT_TOOL_RESULT_PROMPT,
                        TOOL_CALL_CLOSE, TOOL_CALL_OPEN, _clean, parse_calls, render_prompt)

FORMATS = ("smollm2", "hermes", "llama3")
_FIX = (f"set the format by hand: llama.chat_format in the runtime config (one of "
        f"{', '.join(FORMATS)}), or use a GGUF converted with its chat template "
        f"(llama.cpp's convert_hf_to_gguf.py copies tokenizer.chat_template)")


@dataclass(frozen=True)
class ChatFormat:
    """One chat and tool-call format.

    The call the engine writes after ``call_open`` is ``name_prefix`` + tool name +
    ``'", "' + args_key + '": '`` + the arguments object + ``"}"`` + ``call_tail``; ``call_close``
    is the closing marker inside ``call_tail`` ("" where the end of turn closes a call).
    ``empty_call`` says whether the format has a "no call" written after the opener (SmolLM2's
    ``[]``): only then can eager mode decide inside the call (:data:`empty_body`).

    Attributes:
        name: ``"smollm2"``, ``"hermes"`` or ``"llama3"``.
        call_open: text that opens a call (``"<tool_call>"``; Llama 3: ``'{"name": "'``).
        call_close: text that closes one (``"</tool_call>"``; Llama 3: ``""``).
        name_prefix: exact text after ``call_open`` and before the first tool's name
            (SmolLM2 ``'[{"name": "'``, Hermes ``'\\n{"name": "'``, Llama 3 ``""``).
        empty_call: an empty call list exists.
        args_key: the arguments' key (``"arguments"``; Llama 3: ``"parameters"``).
        call_tail: text after the call object's ``}`` (SmolLM2 ``"]</tool_call>"``).
        template: Jinja chat template (None: SmolLM2's Python renderer).
        bos_token: BOS text the template may write; removed from the start of a rendered
            prompt, because the tokenizer adds BOS itself.
        alt_opens: other text a model of this format writes to open a call, read as
            ``call_open`` (Hermes: a bare ``{"name": "``, which Qwen2.5-Coder-0.5B writes
            without the tags); the call is then written and kept in the canonical layout.
    """

    name: str
    call_open: str
    call_close: str
    name_prefix: str
    empty_call: bool
    args_key: str = "arguments"
    call_tail: str = ""
    template: str | None = None
    bos_token: str = ""
    eos_token: str = ""
    alt_opens: tuple[str, ...] = ()
    _compiled: Any = field(default=None, compare=False, repr=False)

    #: with ``empty_call``: the text sampled under :data:`decide_grammar` right after the opener,
    #: and the whole body of a call list that calls nothing
    decide_text = "["
    decide_grammar = DECIDE_GRAMMAR
    empty_body = "[]" + TOOL_CALL_CLOSE

    def __post_init__(self) -> None:
        if self.template is not None and self._compiled is None:
            object.__setattr__(self, "_compiled", compile_template(self.template))

    # -- rendering ----------------------------------------------------------------------------
    def render(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema] = (), *,
               tool_prompt: str = DEFAULT_TOOL_PROMPT,
               tool_result_prompt: str = DEFAULT_TOOL_RESULT_PROMPT,
               raw_calls: Mapping[tuple[str, ...], str] | None = None,
               generation: bool = True) -> str:
        """The prompt of ``messages`` (ending with an open assistant turn when ``generation``).

        ``tool_prompt``, ``tool_result_prompt`` and ``raw_calls`` (exact call text by call ids)
        shape the ``smollm2`` format only; a template writes tools, calls and results its way
        (arguments as ``json.dumps`` text, the layout the engine writes, so a history renders as
        the tokens already in the KV cache).

        Raises:
            PortError: the template failed (a ``raise_exception`` in it, or a sandbox violation).
        """
        if self.template is None:
            text = render_prompt(messages, tools, tool_prompt=tool_prompt,
                                 tool_result_prompt=tool_result_prompt, raw_calls=raw_calls)
            return text if generation else text[: text.rindex("<|im_start|>assistant\n")]
        return self._render_template(messages, tools, generation)

    def system_prefix(self, system: str, tools: Sequence[ToolSchema] = (), *,
                      tool_prompt: str = DEFAULT_TOOL_PROMPT) -> str:
        """The text of a conversation's system turn (with its tools), a prefix of every prompt
        of that conversation: what a warm-up evaluates into the KV cache."""
        return self.render([ChatMessage("system", system)], tools, tool_prompt=tool_prompt,
                           generation=False)

    def _render_template(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema],
                         generation: bool) -> str:
        names: dict[str, str] = {}
        msgs: list[dict[str, Any]] = []
        for m in messages:
            d: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                names.update((c.id, c.name) for c in m.tool_calls)
                d["tool_calls"] = [{"id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": c.arguments}}
                                   for c in m.tool_calls]
            if m.role == "tool":
                d["tool_call_id"] = m.tool_call_id
                d["name"] = m.name or names.get(m.tool_call_id or "", "tool")
            msgs.append(d)
        specs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": _clean(t.parameters)}}
                 for t in tools]
        try:
            text = self._compiled.render(
                messages=msgs, tools=specs or None, add_generation_prompt=generation,
                bos_token=self.bos_token, eos_token=self.eos_token,
                tools_in_user_message=False,  # Llama 3.1: tools in the system turn (cacheable)
                raise_exception=_raise, strftime_now=_strftime_now)
        except PortError:
            raise
        except Exception as exc:  # jinja2 errors, SecurityError
            raise PortError(f"the model's chat template ({self.name}) failed: "
                            f"{type(exc).__name__}: {exc}; {_FIX}") from exc
        if self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
        return text

    # -- parsing ------------------------------------------------------------------------------
    def parse(self, body: str, tools: Sequence[ToolSchema]) -> list[ToolCall]:
        """The calls in ``body`` (what followed ``call_open``).

        Raises:
            PortError: not the format's JSON, an undeclared tool, arguments not an object.
        """
        if self.name == "smollm2":
            return parse_calls(body, tools)
        text = (self.call_open + body) if self.name == "llama3" else body
        text = text.strip()
        if self.call_close and text.endswith(self.call_close):
            text = text[: -len(self.call_close)].strip()
        try:
            item = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PortError(f"the model's tool call is not valid JSON ({exc}): {text[:200]!r}") from exc
        if isinstance(item, dict) and self.args_key in item:
            item = {"name": item.get("name"), "arguments": item[self.args_key]}
        return parse_calls(json.dumps(item), tools)

    def call_text(self, call: ToolCall) -> str:
        """Canonical text of one call after ``call_open`` (what :meth:`parse` reads)."""
        return (f"{self.name_prefix}{call.name}\", \"{self.args_key}\": "
                f"{json.dumps(call.arguments)}}}{self.call_tail}") if self.name != "smollm2" else \
            json.dumps([{"name": call.name, "arguments": call.arguments}]) + TOOL_CALL_CLOSE


def _raise(message: str) -> None:
    raise PortError(f"the model's chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """``tojson`` as Hugging Face chat templates expect it: plain ``json.dumps`` (jinja2's own
    HTML-escapes and sorts keys, which would not match the call text the model wrote)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def compile_template(source: str) -> Any:
    """A Jinja chat template compiled in the immutable sandbox (``trim_blocks``, ``lstrip_blocks``
    and loop controls, as Hugging Face's chat templates assume).

    Raises:
        ConfigError: the template does not parse.
    """
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True,
                                        lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"the model's chat template does not parse: {exc}; {_FIX}") from exc


def newline_safe(source: str) -> str:
    """``source`` with each newline that follows a block tag (``%}``) written as ``{{ '\\n' }}``,
    so it survives ``trim_blocks`` (which drops the first newline after a block)."""
    return source.replace("%}\n", "%}{{ '\\n' }}")


#: Templates used when a GGUF names no template of its own (``chat_format`` set by hand); written
#: for rejoinder after the formats' documentation, not copied from any model's files.
BUILTIN_TEMPLATES = {name: newline_safe(src) for name, src in {
    "hermes": (
        "{% if messages and messages[0].role == 'system' %}{% set sys = messages[0].content %}"
        "{% else %}{% set sys = 'You are a helpful assistant.' %}{% endif %}"
        "<|im_start|>system\n{{ sys }}"
        "{% if tools %}\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> "
        "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call>{% endif %}<|im_end|>\n"
        "{% for m in messages %}{% if m.role == 'system' and loop.first %}{% continue %}{% endif %}"
        "{% if m.role == 'tool' %}"
        "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
        "\n<tool_response>\n{{ m.content }}\n</tool_response>"
        "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
        "{% elif m.tool_calls %}<|im_start|>assistant{% if m.content %}\n{{ m.content }}{% endif %}"
        "{% for c in m.tool_calls %}\n<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
        "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "llama3": (
        "{{ bos_token }}<|start_header_id|>system<|end_header_id|>\n\n"
        "{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
        "{% if tools %}\n\nYou have access to the following functions. To call one, respond "
        "only with JSON in the format {\"name\": function name, \"parameters\": dictionary of "
        "argument name and its value}.\n{% for t in tools %}\n{{ t | tojson }}{% endfor %}"
        "{% endif %}<|eot_id|>"
        "{% for m in messages %}{% if m.role == 'system' and loop.first %}{% continue %}{% endif %}"
        "{% if m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}"
        "<|eot_id|>"
        "{% elif m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
        "{% set c = m.tool_calls[0].function %}{\"name\": \"{{ c.name }}\", \"parameters\": "
        "{{ c.arguments | tojson }}}<|eot_id|>"
        "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"),
}.items()}


def make_format(name: str, template: str | None = None, *, bos_token: str = "",
                eos_token: str = "") -> ChatFormat:
    """The :class:`ChatFormat` called ``name`` (``template``: the GGUF's chat template, None for
    the format's own).

    Raises:
        ConfigError: an unknown name, or a template that does not parse.
    """
    if name == "smollm2":
        return ChatFormat("smollm2", TOOL_CALL_OPEN, TOOL_CALL_CLOSE, '[{"name": "', True,
                          call_tail="]" + TOOL_CALL_CLOSE)
    src = template or BUILTIN_TEMPLATES.get(name)
    if name == "hermes":
        return ChatFormat("hermes", TOOL_CALL_OPEN, TOOL_CALL_CLOSE, '\n{"name": "', False,
                          call_tail="\n" + TOOL_CALL_CLOSE, template=src, bos_token=bos_token,
                          eos_token=eos_token, alt_opens=('{"name": "',))
    if name == "llama3":
        return ChatFormat("llama3", '{"name": "', "", "", False, args_key="parameters",
                          template=src, bos_token=bos_token, eos_token=eos_token)
    raise ConfigError(f"unknown chat format {name!r}; valid: {', '.join(FORMATS)}")


def detect_format(metadata: Mapping[str, Any], source: str = "the model") -> str:
    """The format name of a GGUF from its metadata (``tokenizer.chat_template``,
    ``general.name``, ``general.basename``, ``general.architecture``).

    A ChatML template (``<|im_start|>``) that writes ``<tool_call>`` is ``hermes``; one without
    tool markup is ``smollm2`` (SmolLM2's own template is plain ChatML); a template with
    ``<|start_header_id|>`` is ``llama3``. Without a template, a SmolLM name is ``smollm2``.

    Raises:
        ConfigError: no rule matches (the message names the template's family if any, and the fix).
    """
    template = str(metadata.get("tokenizer.chat_template") or "")
    name = " ".join(str(metadata.get(k) or "") for k in ("general.name", "general.basename"))
    arch = str(metadata.get("general.architecture") or "?")
    if "<|im_start|>" in template:
        return "hermes" if "<tool_call>" in template else "smollm2"
    if "<|start_header_id|>" in template:
        return "llama3"
    if not template and "smollm" in name.lower():
        return "smollm2"
    what = ("has no tokenizer.chat_template" if not template
            else f"has a chat template of no known family ({template[:80]!r}…)")
    raise ConfigError(f"cannot tell the chat format of {source} (general.name {name.strip()!r}, "
                      f"architecture {arch!r}): it {what}; {_FIX}")


def format_for(metadata: Mapping[str, Any], chat_format: str | None = None, *,
               source: str = "the model", bos_token: str = "", eos_token: str = "") -> ChatFormat:
    """The :class:`ChatFormat` of a GGUF: ``chat_format`` when given (``None``/``"auto"``:
    :func:`detect_format`), with the GGUF's template when it has one of that family.

    Raises:
        ConfigError: the format cannot be determined, or the template does not parse.
    """
    name = detect_format(metadata, source) if chat_format in (None, "auto") else chat_format
    template = metadata.get("tokenizer.chat_template") or None
    if template is not None and chat_format not in (None, "auto"):
        try:
            if detect_format(metadata, source) != name:
                template = None  # the file's template is another family: use the format's own
        except ConfigError:
            template = None
    return make_format(name, template, bos_token=bos_token, eos_token=eos_token)


_META_KEYS = ("general.architecture", "general.name", "general.basename", "general.license",
              "tokenizer.chat_template")


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata keys rejoinder reads (architecture, name, basename, license, chat template)
    of a GGUF file, from its header (the weights are memory-mapped, not read).

    Raises:
        ConfigError: the file is missing, unreadable or not a GGUF (the message names the fix).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"LLM model file {p} does not exist; pass the path of a local .gguf "
                          f"file (--llm-model PATH or llama.model_path in the runtime config)")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ConfigError(f"cannot read LLM model file {p}: {exc}") from exc
    if magic != b"GGUF":
        raise ConfigError(f"{p} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); pass a "
                          f"llama.cpp GGUF model (convert others with llama.cpp's "
                          f"convert_hf_to_gguf.py)")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(p))
        out: dict[str, Any] = {}
        for key in _META_KEYS:
            fld = reader.fields.get(key)
            if fld is not None:
                out[key] = fld.contents()
    except Exception as exc:  # noqa: BLE001 — a truncated or corrupt header
        raise ConfigError(f"{p} is a corrupt or truncated GGUF file ({type(exc).__name__}: "
                          f"{exc}); download or convert it again") from exc
    return out
