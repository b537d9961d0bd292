"""Per-conversation KV-cache reuse for one llama.cpp context shared by several calls.

One ``Llama`` context holds the KV cache of one token sequence. llama-cpp-python already reuses
the longest common prefix between that sequence and the next prompt, so one conversation whose
prompt grows append-only only prefills its new tokens. With several calls served by one context,
call B's request would overwrite call A's cache. :class:`ConversationCache` keeps the context's
current owner (a ``cache_key``, i.e. a call id); when another key arrives it copies the owner's KV
state out (``llama_state_seq_get_data``, ≈23 KB per token for SmolLM2-135M in f16) into an LRU
store bounded in bytes, and restores the newcomer's state if it has one. A newcomer without a
saved state keeps the context as it is, so it reuses the shared system-prompt prefix.

Only the sequence's KV cells are copied, not llama-cpp-python's ``save_state`` (which also copies
up to ``n_batch × n_vocab`` float32 logits, ≈50 MB for SmolLM2, on every save).

:func:`reuse_shifted` also keeps the cache when a conversation's history is windowed (its oldest
turns dropped after the system prompt): the dropped span is removed from the KV cache and the rest
shifted into place (llama.cpp re-rotates the keys), as llama.cpp's server does with
``--cache-reuse``. The kept turns' KV entries were computed while the dropped turns were still in
context, so this is an approximation of prefilling the window afresh.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: buffers of dropped states kept for reuse (:meth:`ConversationCache.reserve`)
SPARE_BUFFERS = 4


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two token arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def reuse_shifted(llm: Any, tokens: list[int], min_chunk: int = 32) -> int:
    """Before ``llm`` evaluates the prompt ``tokens``: if the cached sequence is ``tokens[:p]``,
    then a dropped span, then the next ``m ≥ min_chunk`` tokens of the prompt, remove the span
    from the KV cache and shift those ``m`` tokens to follow ``tokens[:p]``, so only what comes
    after them is prefilled. Returns ``m`` (0 when nothing was moved)."""
    from llama_cpp import llama_cpp as C

    n = int(llm.n_tokens)
    cached = np.asarray(llm.input_ids[:n], dtype=np.int32)
    prompt = np.asarray(tokens, dtype=np.int32)
    p = common_prefix(cached, prompt)
    if p >= n or len(prompt) - p < min_chunk:
        return 0
    mem = llm._ctx.memory
    if mem is None or not C.llama_memory_can_shift(mem):
        return 0
    probe = prompt[p:p + min_chunk].tobytes()
    hay = cached.tobytes()
    at = hay.find(probe, (p + 1) * 4)
    while at >= 0 and at % 4:
        at = hay.find(probe, at + 1)
    if at < 0:
        return 0
    j = at // 4
    m = common_prefix(cached[j:], prompt[p:])
    C.llama_memory_seq_rm(mem, 0, j + m, -1)  # what followed the chunk no longer matches
    C.llama_memory_seq_rm(mem, 0, p, j)
    C.llama_memory_seq_add(mem, 0, j, j + m, -(j - p))
    llm.input_ids[p:p + m] = cached[j:j + m]
    llm.n_tokens = p + m
    llm._requires_eval = True
    return m


def extend(llm: Any, tokens: list[int]) -> int:
    """Bring ``llm``'s context to hold exactly ``tokens`` (a prompt's head), reusing the cached
    common prefix (and a shifted chunk: :func:`reuse_shifted`) and evaluating the rest in
    ``n_batch`` batches; what followed the common prefix is dropped. Returns the number of tokens
    evaluated. A later prompt that starts with ``tokens`` then only prefills what follows them
    (llama-cpp-python's ``generate`` reuses the longest common prefix)."""
    if not tokens:
        return 0
    reuse_shifted(llm, tokens)
    p = common_prefix(llm.input_ids[: llm.n_tokens], np.asarray(tokens, dtype=np.int32))
    if p >= len(tokens):
        return 0
    llm._ctx.kv_cache_seq_rm(-1, p, -1)
    llm.n_tokens = p
    n_batch = max(1, int(llm.n_batch))
    for i in range(p, len(tokens), n_batch):
        llm.eval(tokens[i:i + n_batch])
    return len(tokens) - p


@dataclass
class _Saved:
    tokens: np.ndarray  # token ids whose KV is in ``data`` (positions 0..n-1)
    data: bytearray  # llama_state_seq_get_data output (capacity may exceed ``size``)
    size: int


@dataclass
class CacheStats:
    """Counters of one :class:`ConversationCache` (for benchmarks and tests)."""

    saves: int = 0
    restores: int = 0
    evictions: int = 0
    saved_bytes: int = 0
    keys: list[str] = field(default_factory=list)


class ConversationCache:
    """Swaps conversations' KV state in and out of one ``llama_cpp.Llama`` context.

    Not thread-safe: the caller holds the adapter's inference lock around :meth:`activate` and
    the generation that follows.

    Args:
        llm: the ``llama_cpp.Llama`` whose context is shared.
        max_bytes: budget for saved states (least recently used ones are dropped beyond it).
    """

    def __init__(self, llm: Any, max_bytes: int) -> None:
        self._llm = llm
        self.max_bytes = max_bytes
        self.owner: str | None = None
        #: the warmed system turn's key: a conversation with no state of its own starts from it
        self.base_key: str | None = None
        self._saved: OrderedDict[str, _Saved] = OrderedDict()
        self.stats = CacheStats()
        #: keys of requests paused mid-generation: their saved states are never evicted
        self.pinned: set[str] = set()
        #: buffers of forgotten or evicted states, reused by the next save that fits (:meth:`reserve`)
        self._spare: list[bytearray] = []

    def _bytes(self) -> int:
        return sum(s.size for s in self._saved.values())

    def _save(self, key: str, old: _Saved | None) -> None:
        from llama_cpp import llama_cpp as C

        llm = self._llm
        n = int(llm.n_tokens)
        if n == 0:
            return
        ctx = llm._ctx.ctx
        size = int(C.llama_state_seq_get_size(ctx, 0))
        if old is not None and len(old.data) >= size:
            buf = old.data
        else:
            if old is not None:
                self._keep(old.data)
            buf = self._buffer(size)
        arr = (ctypes.c_uint8 * size).from_buffer(buf)
        got = int(C.llama_state_seq_get_data(ctx, arr, size, 0))
        del arr  # release the export of ``buf``
        if got == 0:
            return
        self._saved[key] = _Saved(np.array(llm.input_ids[:n], copy=True), buf, got)
        self._saved.move_to_end(key)
        self.stats.saves += 1
        while self._bytes() > self.max_bytes and len(self._saved) > 1:
            # the least recently used state that is neither the warm start of every new call
            # (kept while it fits) nor a paused request's
            oldest = next((k for k in self._saved if k != self.base_key and k not in self.pinned),
                          None)
            if oldest is None:
                break
            self._keep(self._saved.pop(oldest).data)
            self.stats.evictions += 1

    def state_size(self) -> int:
        """Bytes the context's state (sequence 0) takes when saved now."""
        from llama_cpp import llama_cpp as C

        return int(C.llama_state_seq_get_size(self._llm._ctx.ctx, 0))

    def reserve(self, nbytes: int) -> None:
        """Allocate a buffer of ``nbytes`` now, for the next save that fits (e.g. at warm-up, for
        the first call's conversation).

        Why: a state's buffer is new memory the first time, and on the 2-core Firecracker VM this
        was measured on (2026-12-05), fresh pages cost ≈ 8 ms per MB once models were loaded:
        the first save of the tool gate's state (25.8 MB, 1,121 tokens) took 220–270 ms, and the
        first call of a process paid four such saves on its turns' critical path (its "Hello."
        answered in 818 ms, later calls in ≈ 400). The same save into a kept buffer took 2 ms.
        Buffers of forgotten and evicted states are kept for reuse the same way (at most
        :data:`SPARE_BUFFERS`)."""
        self._keep(bytearray(max(0, int(nbytes))))

    def _keep(self, buf: bytearray) -> None:
        self._spare.append(buf)
        self._spare.sort(key=len)
        del self._spare[:-SPARE_BUFFERS]  # the largest few

    def _buffer(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes: the smallest spare that fits, else a new one with
        a quarter to spare (a conversation's state grows every turn)."""
        for i, buf in enumerate(self._spare):
            if len(buf) >= size:
                return self._spare.pop(i)
        return bytearray(size + size // 4)

    def _restore(self, saved: _Saved) -> bool:
        from llama_cpp import llama_cpp as C

        llm = self._llm
        arr = (ctypes.c_uint8 * saved.size).from_buffer(saved.data)
        ok = int(C.llama_state_seq_set_data(llm._ctx.ctx, arr, saved.size, 0)) == saved.size
        del arr
        n = saved.tokens.size
        if not ok:  # the context is in an unknown state: start from empty
            llm.reset()
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return False
        llm.input_ids[:n] = saved.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # logits are not part of the saved state
        self.stats.restores += 1
        return True

    def activate(self, key: str | None) -> None:
        """Make the context hold ``key``'s conversation before a request of ``key`` runs.

        The current owner's state is saved first unless it is ``key`` itself; ``key``'s saved
        state is restored, or for a key with none the warm-up's (``base_key``: the system turn
        every new call starts with — another KV state, e.g. the tool gate's, may hold the
        context in between). ``None`` (a request without a key, a warm-up) saves the owner
        and leaves the context to the request as it is."""
        if key is not None and key == self.owner:
            return
        if self.owner is not None:
            self._save(self.owner, self._saved.pop(self.owner, None))
        saved = self._saved.get(key) if key is not None else None
        if saved is None and key is not None and self.base_key is not None:
            saved = self._saved.get(self.base_key)  # a new conversation: from the warm system turn
        if saved is not None:
            self._restore(saved)
        self.owner = key
        self.stats.saved_bytes = self._bytes()
        self.stats.keys = list(self._saved)

    def rename(self, old: str | None, new: str | None) -> None:
        """The context, if ``old`` holds it now, is held under ``new`` from now on (its
        state is saved under ``new`` when another key is activated)."""
        if self.owner == old:
            self.owner = new

    def forget(self, key: str) -> None:
        """Drop ``key``'s saved state (the call ended); its buffer is kept for reuse."""
        saved = self._saved.pop(key, None)
        if saved is not None:
            self._keep(saved.data)
        if self.owner == key:
            self.owner = None
