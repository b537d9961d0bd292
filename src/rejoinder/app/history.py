"""The LLM's view of the conversation: what the caller said and what they actually heard.

When the caller barges in, the rest of the agent's reply was never heard, so it must not enter
the context — the runtime reports only the heard prefix via :meth:`ChatHistory.add_assistant_heard`.
Consecutive messages of one role (a reply cut before any word was heard, two caller turns in a
row) are merged so the chat template always alternates user / assistant.
"""

from __future__ import annotations

from rejoinder.ports import ChatMessage


class ChatHistory:
    """Bounded chat context. ``max_turns`` counts user+assistant exchanges kept (≥ 1)."""

    def __init__(self, max_turns: int = 6) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._msgs: list[ChatMessage] = []

    def __len__(self) -> int:
        return len(self._msgs)

    def _add(self, role: str, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        if self._msgs and self._msgs[-1].role == role:
            prev = self._msgs.pop()
            text = f"{prev.content} {text}"
        self._msgs.append(ChatMessage(role, text))  # type: ignore[arg-type]
        del self._msgs[: max(0, len(self._msgs) - 2 * self.max_turns - 1)]

    def add_user(self, text: str) -> None:
        """Record the caller's final transcript (blank text is ignored)."""
        self._add("user", text)

    def add_assistant_heard(self, text: str) -> None:
        """Record the part of the agent's reply the caller heard; empty → nothing is stored."""
        self._add("assistant", text)

    def messages(self, system: str) -> tuple[ChatMessage, ...]:
        """``system`` followed by the last ``max_turns`` exchanges, starting at a user message."""
        msgs = self._msgs[-(2 * self.max_turns) :]
        while msgs and msgs[0].role != "user":
            msgs = msgs[1:]
        return (ChatMessage("system", system), *msgs)

    def clear(self) -> None:
        self._msgs.clear()
