"""Tool choice by a linear probe: a logistic regression over sentence embeddings of the examples.

:class:`._which.ExampleMatcher` picks the tool whose single example lies nearest the caller's
words. In all-MiniLM-L6-v2's space the nearest example is often the one that shares the
*topic* rather than the *request*: "And the second thing, when's my consultation again?" lay
nearest "Something came up, I need to change my consultation." (0.66, a reschedule) and only
then "Have I got a consultation scheduled or not?" (0.60, the listing), so the agent asked for
a new day and time instead of reading the booking (the read suites, run
``20261207-001617-eb14``, four of four calls of two scenarios).

A probe weighs every example of every class at once: a multinomial logistic regression
(scikit-learn's ``LogisticRegression``, L2, lbfgs) fitted on the unit embeddings of each tool's
``examples`` (label: the tool) and of the talk examples (label: :data:`._which.TALK`). This is
SetFit's classification head without its contrastive fine-tuning (Tunstall et al., "Efficient
Few-Shot Learning Without Prompts", 2022: a logistic regression on sentence-transformer
embeddings). Its output is a probability per class, so small talk competes as a class of its
own rather than as one more nearest neighbour.

Measured 2026-12-07 on ``bench/data/decisions_blind.tsv`` (185 utterances written blind: 123
want a tool, 62 none), the support agent's 104 tool and 46 talk examples, MiniLM, the choice
alone (no gate): nearest example 103 / 33 (right tool / kept as talk), the probe
(``C`` 10) 105 / 46; with ``rejoinder/app/examples_second_set.tsv`` (206 more, written blind by two
other writers) in the training data, nearest 110 / 44, the probe **118 / 50**. ``C`` from 1 to
100 moved the probe by at most 4 on either count (``C`` 10 kept: the middle of that flat range).

**Not the default** (``tool_which: examples`` is): in calls the gain did not show. On the
unread suites at 4 calls (2026-12-07, aggregate only) the nearest example with the agent's own
examples passed 79 of 112 calls, the probe with the second set 79 and 78 (with its own
small-talk verdict; with the nearest examples judging small talk, the design here), with more
requests left without their tool (failed checks ``no tool`` 16 against 31 and 34) and small
talk called on 9 and 10 of 64 turns against 6 (README, "Figures measured").

:func:`tool_chooser` (``kind="probe"``) pairs it with the nearest examples: the probe
ranks the tools, and the call is talk when a small-talk example lies nearest in MiniLM's or the
check space (:class:`._which.TalkCheckedMatcher` without the probe's own talk verdict): with
that verdict the blind set's no-call rate fell from 93.5 to 85.5 %.
Its probabilities are the similarities the lead rules read (:func:`._which.clear_pick`,
:func:`._which.said_pick`), whose margins were set on cosine similarities.

Cost (2-core x86-64, quiet, 2026-12-07): at warm-up
(:meth:`rejoinder.adapters.llama_llm.LlamaLLM.warm_gate`), importing scikit-learn 1.4 s once
per process, embedding the examples ≈ 8 ms each (150: 1.2 s; 356: 2.5 s; each once per process,
:meth:`.minilm_embed.MiniLMEmbedding.examples`) and the fit 22 ms (150) to 29 ms (356); a
choice, 5.1–5.7 ms (one MiniLM embedding, then a 384 × classes product).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..ports import ToolSchema
from ._which import (EMBED_TEMPLATE, TALK, ExampleMatcher, TalkCheckedMatcher, _templated,
                     paired_matcher)

#: the inverse L2 strength of the probe (scikit-learn's ``C``; see the module docstring)
PROBE_C = 10.0


class ProbeMatcher:
    """Tool choice by a logistic regression on sentence embeddings; the interface of
    :class:`._which.ExampleMatcher` (``covers``, ``similarities``, ``choose``, ``tools``), with
    probabilities (0…1) where that one has cosine similarities.

    Args:
        embed: ``text -> 1-D float vector`` (blocking), as for :class:`._which.ExampleMatcher`
            (its ``template`` attribute, None: the words alone; an ``examples(texts)`` method
            embeds the examples in one go).
        tools: the agent's tools with their ``examples``.
        talk_examples: small talk: the class :data:`._which.TALK` (none: no talk class, and
            ``choose(…, talk=True)`` never returns None).
        c: scikit-learn's ``C`` (:data:`PROBE_C`).

    Raises:
        ValueError: no tool has examples.
    """

    def __init__(self, embed: Callable[[str], Any], tools: Sequence[ToolSchema],
                 talk_examples: Sequence[str] = (), c: float = PROBE_C) -> None:
        from sklearn.linear_model import LogisticRegression  # imported when first fitted

        self._embed = embed
        self._template: str | None = getattr(embed, "template", EMBED_TEMPLATE)
        self.tools = {t.name: tuple(t.examples) for t in tools}
        names = [n for n, ex in self.tools.items() if ex]
        if not names:
            raise ValueError("no tool has examples to fit the tool probe on")
        texts = [x for n in names for x in self.tools[n]] + list(talk_examples)
        labels = [n for n in names for _ in self.tools[n]] + [TALK] * len(talk_examples)
        x = np.vstack(self._units(texts))
        if len(set(labels)) == 1:  # one tool and no talk: nothing to tell apart
            self._model, self._classes = None, [labels[0]]
        else:
            self._model = LogisticRegression(C=c, max_iter=2000).fit(x, labels)
            self._classes = [str(k) for k in self._model.classes_]
        self._has_talk = bool(talk_examples)

    def _units(self, texts: Sequence[str]) -> list[np.ndarray]:
        many = getattr(self._embed, "examples", None)
        given = [_templated(x, self._template) for x in texts]
        vecs = many(given) if many is not None else [self._embed(x) for x in given]
        return [_unit(v) for v in vecs]

    def covers(self, names: Sequence[str]) -> bool:
        """Whether every tool in ``names`` has examples (only then may the probe choose)."""
        return bool(names) and all(self.tools.get(n) for n in names)

    def probabilities(self, text: str) -> dict[str, float]:
        """P(class | ``text``) for every tool with examples and, with talk examples, TALK."""
        q = _unit(self._embed(_templated(text, self._template)))[None, :]
        if self._model is None:
            return {self._classes[0]: 1.0}
        p = self._model.predict_proba(q)[0]
        return {k: float(v) for k, v in zip(self._classes, p)}

    def similarities(self, text: str, names: Sequence[str]) -> dict[str, float]:
        """The probabilities of the tools in ``names``, renormalised over them (0…1)."""
        return _over(self.probabilities(text), names)

    def choose(self, text: str, names: Sequence[str],
               talk: bool = False) -> tuple[str | None, dict[str, float]]:
        """The most probable tool of ``names`` and the probabilities, renormalised over
        ``names`` (and TALK with ``talk``). With ``talk`` and small talk the most probable
        class, the choice is None (no call)."""
        probs = self.probabilities(text)
        keep = list(names) + ([TALK] if talk and self._has_talk else [])
        sims = _over(probs, keep)
        tools = [n for n in names if n in sims]
        best = max(tools, key=sims.__getitem__) if tools else None
        if best is not None and TALK in sims and sims[TALK] > sims[best]:
            return None, sims
        return best, sims


def tool_chooser(kind: str, embed: Callable[[str], Any], check_embed: Callable[[str], Any] | None,
                 tools: Sequence[ToolSchema], talk_examples: Sequence[str]) -> Any:
    """The tool chooser of ``tools`` for ``tool_which`` ``kind``: ``"probe"`` — this module's
    probe ranks the tools, and the call is talk when a small-talk example lies nearest in
    ``embed``'s space or ``check_embed``'s (:class:`._which.TalkCheckedMatcher` without the
    probe's own talk verdict); else the nearest example (:func:`._which.paired_matcher`)."""
    if kind != "probe":
        return paired_matcher(embed, check_embed, tools, talk_examples)
    checks = [ExampleMatcher(embed, tools, talk_examples)]
    if check_embed is not None:
        checks.append(ExampleMatcher(check_embed, tools, talk_examples))
    return TalkCheckedMatcher(ProbeMatcher(embed, tools, talk_examples), *checks, own_talk=False)


_unit = ExampleMatcher._norm  # a unit vector (per-token rows mean-pooled first)


def _over(probs: dict[str, float], keep: Sequence[str]) -> dict[str, float]:
    sub = {k: probs[k] for k in keep if k in probs}
    total = sum(sub.values())
    return {k: v / total for k, v in sub.items()} if total > 0 else sub
