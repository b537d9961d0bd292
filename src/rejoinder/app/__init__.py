"""The reference application: a phone support assistant (orders and appointments) over SQLite.

* :mod:`rejoinder.app.db` — schema, deterministic demo data, state snapshots.
* :mod:`rejoinder.app.tools` — typed tools (reversible ones with compensation).
* :mod:`rejoinder.app.nlu` / :mod:`rejoinder.app.policy` — deterministic understanding and policy.
* :mod:`rejoinder.app.assistant` — :class:`SupportAssistant` ties them together.
* :mod:`rejoinder.app.history` — the LLM's bounded, heard-only chat context.
"""

from rejoinder.app.assistant import Reply, SupportAssistant
from rejoinder.app.db import db_state, fresh_demo_db, open_db, seed_demo
from rejoinder.app.history import ChatHistory
from rejoinder.app.policy import DialogState, Plan, ToolCall, plan
from rejoinder.app.tools import TOOLS, Tool, tool_json_schema

__all__ = [
    "TOOLS", "ChatHistory", "DialogState", "Plan", "Reply", "SupportAssistant", "Tool", "ToolCall",
    "db_state", "fresh_demo_db", "open_db", "plan", "seed_demo", "tool_json_schema",
]  # fmt: skip
