"""A calibrated talk-or-call decision for small chat models on llama.cpp: the tool *gate*.

Why: a 135M–1.5B model asked to choose freely between speaking and opening a tool call almost
never opens one (``bench/tool_choice.py``: right tool 0 % in the lazy mode), and forced to
decide (eager mode) it calls on every "thank you". Its *likelihoods* still carry the decision.
Two scorings were measured on SmolLM2-135M over the 38 utterances of ``bench/tool_choice.py``:

- the call-opener likelihood ``P(<tool_call>[{"name": "t"…)`` vs ``P(no call)`` in the chat
  prompt itself: margins for calls and small talk overlap (right tool ≈ 44 % at the best
  threshold);
- **label likelihoods in a narrow few-shot prompt** (this module): right tool 73 % with 1 of 12
  small-talk items calling (4 tools); with the support agent's 6 tools (transfer and end call
  added) 59 % at most 1 of 9, tool examples written apart from the items.

So the gate asks the model one narrow question in a prompt of its own, rendered as plain text so
that it works with any GGUF whatever its chat format::

    Each caller message is labelled with what the assistant must do: lookup_order (Look up …),
    …, or none (just talk: …).

    Assistant: How can I help?
    Caller: <a tool example>
    Label: lookup_order
    …
    Assistant: <the agent's last words>
    Caller: <the caller's transcript>
    Label:

and reads ``log P(label)`` for every allowed tool and for ``none`` in one pass. Scores are
corrected by *contextual calibration* (Zhao et al., "Calibrate Before Use: Improving Few-Shot
Performance of Language Models", ICML 2021): the mean log-probabilities the same prompt gives
content-free messages (``N/A``, an empty one, ``...``) are subtracted, which removes the labels' prior bias. The model
then calls ``argmax_t`` when ``log Σ_t P(t) − log P(none)`` (corrected) reaches a threshold
calibrated on labelled utterances (:mod:`rejoinder.calibrate`; a likelihood-ratio decision).

Cost: the few-shot prompt is evaluated once and kept (its own KV state); a decision evaluates
the query (≈ 20–40 tokens) and only as many label tokens as tell the labels apart (usually none
beyond the first, which the query's last logits already give).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..ports import ChatMessage, ToolSchema
from ._kvcache import extend

NONE_LABEL = "none"

#: Small talk the gate's prompt shows as ``none`` when an agent gives no examples of its own
#: (``Agent(talk_examples=…)`` adds to them). Written apart from every benchmark item.
#: No goodbyes or requests for a person among them: an agent with ``end_call`` or
#: ``transfer_to_human`` tools calls those (one without adds such examples as talk).
DEFAULT_TALK_EXAMPLES: tuple[str, ...] = (
    "Hi there.", "Good morning!", "Thanks a lot.", "Okay.", "Yes please.",
    "How's your day going?", "Do you sell gift cards?", "Never mind.", "Sounds good to me.",
    "Hang on a second.",
)

#: Thresholds calibrated for models that ship with rejoinder (model file stem → threshold), on
#: the reference support agent's tool examples and its talk examples (``rejoinder calibrate``);
#: other models and agents re-calibrate with that command.
#: SmolLM2-135M: 4.16, fitted on 2026-12-06 on the support agent's 104 tool examples and 46 talk
#: examples (:mod:`rejoinder.app.examples`; before, 4.5 on 20 and 16): right tool 44 % leave-one-
#: out, 2 of 46 talk examples calling (4.3 %).
#: Qwen2.5-Coder-1.5B-Instruct Q4_K_M is the file ``bench/qwen_gguf.py 1.5b`` assembles (pinned by
#: its sha256 there): 2.47, fitted on 2026-12-07 on the same 104 tool and 46 talk examples
#: (``rejoinder calibrate --llm-model …``, 9 min on 2 cores): right tool 75 % leave-one-out, 2 of
#: 46 talk examples calling (4.3 %). Before, 4.77, fitted on 2026-12-02 on the 20 and 13 examples
#: of then; on today's examples 4.77 calls the right tool for 71 % and no talk example.
CALIBRATED: dict[str, float] = {"SmolLM2-135M-Instruct.Q4_1": 4.16,
                                "qwen2.5-coder-1.5b-instruct-q4_k_m": 2.47}
#: :func:`rejoinder.calibrate.fingerprint` of the reference support agent that every threshold in
#: :data:`CALIBRATED` was fitted on (its examples and this gate's prompt for it). A test compares
#: it with today's agent: when they differ, re-fit each model (``rejoinder calibrate [--llm-model
#: …]``) and update both. The 1.5B's 4.77 had outlived the examples it was fitted on for a day.
CALIBRATED_ON = "f6711ae0ef95e2c0"

#: The most examples per tool, and of talk, that the few-shot prompt shows (the first ones
#: given); the nearest-example matcher (:mod:`._which`) uses them all. Every shot lengthens the
#: prompt whose KV state a decision swaps in (≈ 23 KB a token for SmolLM2-135M).
TOOL_SHOTS, TALK_SHOTS = 6, 16

_HEAD = ("Each caller message is labelled with what the assistant must do: {labels}, or none "
         "(just talk: greetings, thanks, goodbyes, and questions no tool answers).\n\n")
_OPENING = "How can I help?"
#: content-free messages whose mean label log-probabilities are the labels' prior bias (Zhao et
#: al. 2021 average several such inputs)
_CONTENT_FREE = ("N/A", "", "...")


@dataclass(frozen=True)
class GateScores:
    """One decision's scores: corrected log-probabilities (nats) of each tool's label in
    ``tools`` and of ``none``.

    ``margin`` = ``log Σ_t exp(tools[t]) − none``: what the threshold is compared with."""

    tools: dict[str, float] = field(default_factory=dict)
    none: float = 0.0

    @property
    def margin(self) -> float:
        if not self.tools:
            return -math.inf
        vals = np.fromiter(self.tools.values(), dtype=np.float64)
        top = float(vals.max())
        return top + math.log(float(np.exp(vals - top).sum())) - self.none

    @property
    def best(self) -> str | None:
        return max(self.tools, key=self.tools.__getitem__) if self.tools else None

    def chosen(self, threshold: float) -> str | None:
        """The tool to call at ``threshold``, or None (talk)."""
        return self.best if self.margin >= threshold else None


def label_of(name: str) -> str:
    """A tool's label in the gate's prompt: its name in words (``lookup_order`` → ``lookup
    order``), which small models read better than identifiers."""
    return " ".join(name.replace("_", " ").replace("-", " ").split()) or name


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def _log_softmax(row: np.ndarray) -> np.ndarray:
    top = float(row.max())
    return row - top - math.log(float(np.exp(row - top).sum()))


def _decode(llm: Any, tokens: Sequence[int], want: Sequence[int]) -> list[np.ndarray]:
    """Evaluate ``tokens`` (≤ ``n_batch``) at the end of ``llm``'s context in one batch; return
    the log-softmax rows of the batch positions ``want``."""
    from llama_cpp import llama_cpp as C

    n_past = llm.n_tokens
    llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
    llm._batch.set_batch(batch=list(tokens), n_past=n_past, logits_all=False)
    wanted = set(want)
    for i in range(len(tokens)):
        llm._batch.batch.logits[i] = i in wanted
    llm._ctx.decode(llm._batch)
    llm.input_ids[n_past:n_past + len(tokens)] = tokens
    llm.n_tokens = n_past + len(tokens)
    n_vocab = llm.n_vocab()
    return [_log_softmax(np.ctypeslib.as_array(C.llama_get_logits_ith(llm._ctx.ctx, i),
                                               shape=(n_vocab,)).astype(np.float64))
            for i in want]


def _truncate(llm: Any, n: int) -> None:
    llm._ctx.kv_cache_seq_rm(-1, n, -1)
    llm.n_tokens = n
    llm._requires_eval = True


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LabelGate:
    """The few-shot label prompt for one set of tools (see the module docstring).

    Args:
        tools: the tools the agent declares (name, description, ``examples``); a tool without
            examples is still a label, described only by its description.
        talk_examples: utterances labelled ``none`` (default :data:`DEFAULT_TALK_EXAMPLES`).
        max_shots: the most examples the prompt shows per tool and of talk (the first ones given;
            default :data:`TOOL_SHOTS`, :data:`TALK_SHOTS`).

    Raises:
        ValueError: no tools.
    """

    def __init__(self, tools: Sequence[ToolSchema],
                 talk_examples: Sequence[str] = DEFAULT_TALK_EXAMPLES,
                 max_shots: tuple[int, int] = (TOOL_SHOTS, TALK_SHOTS)) -> None:
        if not tools:
            raise ValueError("the tool gate needs at least one tool")
        self.tools = tuple(tools)
        self.label = {t.name: label_of(t.name) for t in tools}
        labels = ", ".join(f"{self.label[t.name]} ({_one_line(t.description).rstrip('.')})"
                           for t in tools)
        # round robin over the labels (tools, then talk): no label's examples sit together at the
        # end, where a small model's recency bias would favour it
        groups = [[(x, self.label[t.name]) for x in t.examples[:max_shots[0]]] for t in tools]
        groups.append([(x, NONE_LABEL) for x in tuple(talk_examples)[:max_shots[1]]])
        shots: list[tuple[str, str]] = []
        for rnd in range(max(map(len, groups))):
            shots += [g[rnd] for g in groups if rnd < len(g)]
        self.prefix = _HEAD.format(labels=labels) + "".join(
            self._block(_OPENING, say) + f" {label}\n\n" for say, label in shots)
        self.key = "gate:" + hashlib.sha256(self.prefix.encode("utf-8")).hexdigest()[:16]
        self._bias: dict[str, float] | None = None

    @staticmethod
    def _block(assistant: str, caller: str) -> str:
        return f"Assistant: {_one_line(assistant) or _OPENING}\nCaller: {_one_line(caller)}\nLabel:"

    @staticmethod
    def context(messages: Sequence[ChatMessage]) -> tuple[str, str]:
        """(the assistant's last words before the caller's message, the caller's message) of a
        request whose last message is the caller's."""
        said = ""
        for m in reversed(messages[:-1]):
            if m.role == "assistant" and m.content.strip():
                said = m.content
                break
            if m.role == "user":
                break
        return said, messages[-1].content if messages else ""

    def _raw(self, llm: Any, query: str, labels: Sequence[str]) -> dict[str, float]:
        """Uncorrected log P(label | prefix + query) for ``labels``, scoring each label's tokens
        up to the first one that no other label shares (the rest is all but certain)."""
        text = self.prefix + query
        base = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        seqs = {lab: llm.tokenize((text + " " + lab).encode("utf-8"), add_bos=True,
                                  special=True) for lab in labels}
        start = min(_common(base, s) for s in seqs.values())
        if start == 0:
            raise ValueError("a label does not extend the gate's prompt")
        # bring the cache to base[:start - 1] (reusing what it holds), then decode the rest
        have = llm.input_ids[: llm.n_tokens].tolist()
        keep = min(_common(have, base[: start - 1]), start - 1)
        _truncate(llm, keep)
        head = base[keep:start - 1]
        n_batch = max(1, int(llm.n_batch))
        for i in range(0, len(head), n_batch):
            llm.eval(head[i:i + n_batch])
        last = _decode(llm, [base[start - 1]], [0])[0]  # predicts token ``start``
        out: dict[str, float] = {}
        tails = {lab: s[start:] for lab, s in seqs.items()}
        for lab, tail in tails.items():
            depth = 1 + max((_common(tail, o) for k, o in tails.items() if k != lab), default=0)
            depth = min(depth, len(tail))
            lp = float(last[tail[0]])
            if depth > 1:
                _truncate(llm, start)
                rows = _decode(llm, tail[: depth - 1], list(range(depth - 1)))
                lp += sum(float(rows[j - 1][tail[j]]) for j in range(1, depth))
            out[lab] = lp
        _truncate(llm, start)
        return out

    def prime(self, llm: Any, messages: Sequence[ChatMessage]) -> int:
        """Evaluate the query of the next decision up to the caller's words, while the caller
        speaks: the few-shot prompt, then ``Assistant: <the agent's last words>`` and
        ``Caller:`` (``messages``: the coming request, its last message the caller's, still
        empty). The decision then evaluates only the caller's words and ``Label:``. Returns
        the tokens evaluated (blocking; the caller holds the model's lock with the gate's cache
        key active)."""
        said, _ = self.context(messages)
        text = self.prefix + self._block(said, "\x00").split("\x00", 1)[0].rstrip()
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        return extend(llm, tokens[:-1])  # the last token may merge with the caller's words

    def warm(self, llm: Any) -> None:
        """Evaluate the few-shot prompt and the content-free bias on ``llm`` (blocking; the
        caller holds the model's lock and the gate's cache key is active)."""
        if self._bias is None:
            labels = [*self.label.values(), NONE_LABEL]
            rows = [self._raw(llm, self._block(_OPENING, x), labels) for x in _CONTENT_FREE]
            self._bias = {lab: sum(r[lab] for r in rows) / len(rows) for lab in labels}

    def score(self, llm: Any, messages: Sequence[ChatMessage],
              allowed: Sequence[str] | None = None) -> GateScores:
        """Score the request ``messages`` (last: the caller's) on ``llm`` (a
        ``llama_cpp.Llama`` whose context may be used freely: the caller swaps the
        conversation's KV state out and back). ``allowed``: the tools that may be called (None:
        all).

        Raises:
            ValueError: ``allowed`` names no declared tool.
        """
        names = [t.name for t in self.tools if allowed is None or t.name in allowed]
        if not names:
            raise ValueError(f"none of the allowed tools {list(allowed or [])} is declared")
        labels = [*self.label.values(), NONE_LABEL]
        self.warm(llm)
        assert self._bias is not None
        raw = self._raw(llm, self._block(*self.context(messages)), labels)
        fixed = {lab: raw[lab] - self._bias[lab] for lab in labels}
        return GateScores({n: fixed[self.label[n]] for n in names}, fixed[NONE_LABEL])
