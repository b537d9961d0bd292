"""Fault injection for any port: wrap it once, from tests or ``rejoinder bench --faults``.

A fault spec is ``stage:kind[=value][@after]`` joined by commas, e.g.
``tts:drop@2`` (the TTS stream dies after 2 pieces), ``llm:stall=3000@4`` (the LLM goes silent
for 3 s after 4 tokens), ``llm:error`` (fails before the first token), ``tts:slow=800`` (first
byte 800 ms late), ``stt:error``. Add ``%p`` to fire with probability p per request
(``tts:drop@1%0.3``), seeded for reproducibility. ``default`` expands to :data:`DEFAULT_SWEEP`.

Kinds: ``drop`` (raise :class:`~rejoinder.ports.PortError` after ``after`` items; for TTS, after
yielding the first half of piece ``after`` — the audio dies mid-sentence), ``stall``
(pause ``value`` ms after ``after`` items), ``error`` (raise before the first item), ``slow``
(delay the first item by ``value`` ms).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, AsyncIterator

from ..clock import Clock
from ..errors import ConfigError
from ..ports import PortError, ServerTiming, TTSAudio

DEFAULT_SWEEP = "tts:drop@2%0.25,tts:slow=700%0.15,llm:stall=2500@3%0.2,llm:error%0.1,llm:drop@5%0.15"
KINDS = ("drop", "stall", "error", "slow")
STAGES = ("llm", "tts", "stt")


@dataclass(frozen=True)
class Fault:
    stage: str
    kind: str
    value_ms: float = 0.0
    after: int = 0
    probability: float = 1.0


def parse_faults(spec: str) -> list[Fault]:
    """Parse a fault spec (see module doc).

    Raises:
        ConfigError: unknown stage or kind, or a malformed number.
    """
    if spec.strip() == "default":
        spec = DEFAULT_SWEEP
    out: list[Fault] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            stage, rest = part.split(":", 1)
            prob = 1.0
            if "%" in rest:
                rest, p = rest.split("%", 1)
                prob = float(p)
            after = 0
            if "@" in rest:
                rest, a = rest.split("@", 1)
                after = int(a)
            value = 0.0
            if "=" in rest:
                rest, v = rest.split("=", 1)
                value = float(v)
            kind = rest
        except ValueError as exc:
            raise ConfigError(f"fault '{part}': expected stage:kind[=ms][@after][%p], e.g. tts:drop@2") from exc
        if stage not in STAGES or kind not in KINDS:
            raise ConfigError(f"fault '{part}': stage must be one of {STAGES} and kind one of {KINDS}")
        if not 0 <= prob <= 1:
            raise ConfigError(f"fault '{part}': probability must be within 0..1")
        out.append(Fault(stage, kind, value, after, prob))
    return out


def _first_half(piece: TTSAudio) -> TTSAudio:
    half = len(piece.pcm) // 2
    return TTSAudio(piece.pcm[:half], piece.words[: len(piece.words) // 2])


class _Injector:
    """Decides per request which faults fire, and applies them to a stream of items."""

    def __init__(self, faults: list[Fault], clock: Clock, rng: random.Random) -> None:
        self.faults = faults
        self.clock = clock
        self.rng = rng
        self.fired: list[Fault] = []

    async def apply(self, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        active = [f for f in self.faults if self.rng.random() < f.probability]
        self.fired.extend(active)
        n = 0
        try:
            for f in active:
                if f.kind == "error":
                    raise PortError(f"injected fault: {f.stage} error before first item")
            async for item in stream:
                if isinstance(item, ServerTiming):  # the server's report, not an item of output
                    yield item
                    continue
                for f in active:
                    if f.after == n:
                        if f.kind == "drop" and isinstance(item, TTSAudio):
                            yield _first_half(item)  # the stream dies halfway through a sentence
                            raise PortError(f"injected fault: tts stream dropped in piece {n}")
                        if f.kind == "drop" and n > 0:
                            raise PortError(f"injected fault: {f.stage} stream dropped after {n} items")
                        if f.kind == "stall":
                            await self.clock.sleep_until(self.clock.now_ms() + f.value_ms)
                        if f.kind == "slow" and n == 0:
                            await self.clock.sleep_until(self.clock.now_ms() + f.value_ms)
                n += 1
                yield item
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


class _FaultyPort:
    """Wraps one port: its ``stream`` goes through the injector of this stage's faults; every
    other attribute (``model_name``, ``sample_rate``, ``voice_name``, ``warmup``…) is the inner
    port's."""

    stage = ""
    #: the faults are a remote service's (a stall, a dropped stream), so a wrapped LLM is
    #: watched as one, even when the inner port runs in this process
    in_process = False

    def __init__(self, inner: Any, faults: list[Fault], clock: Clock, seed: int = 0) -> None:
        self.inner = inner
        self.injector = _Injector([f for f in faults if f.stage == self.stage], clock,
                                  random.Random(seed))

    def stream(self, arg: Any) -> AsyncIterator[Any]:
        return self.injector.apply(self.inner.stream(arg))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FaultyLLM(_FaultyPort):
    """An LLM port with faults injected into its token stream (``stream(LLMRequest)``)."""

    stage = "llm"


class FaultyTTS(_FaultyPort):
    """A TTS port with faults injected into its audio stream (``stream(text)``)."""

    stage = "tts"


class FaultySTT(_FaultyPort):
    """An STT port with faults injected into its transcript stream (``stream(audio chunks)``)."""

    stage = "stt"
