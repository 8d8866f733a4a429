"""langchain-autocontext: keep LangChain/LangGraph agents inside a fixed context window.

The public API lives here and nowhere else.
"""

from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.engine import CompressionResult
from langchain_autocontext.errors import (
    AmbiguousOffloadRefError,
    AutoContextError,
    CommandError,
    ContextBudgetError,
    InvalidConfigError,
    InvariantViolationError,
    OffloadNotFoundError,
    ProtectedMessageError,
    UnknownMessageError,
)
from langchain_autocontext.facade import AutoContext
from langchain_autocontext.graph import AutoContextAgentState, AutoContextState, merge_autocontext
from langchain_autocontext.history import AutoContextChatMessageHistory, AutoContextRunnable
from langchain_autocontext.messages import is_pinned, pin
from langchain_autocontext.metadata import render_view, strip_message_tags, strip_tags
from langchain_autocontext.middleware import AutoContextMiddleware, AutoContextMiddlewareState
from langchain_autocontext.store import EventRecord, HistoryEntry, OffloadRecord, OffloadStore
from langchain_autocontext.summarizers import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    resolve_summarizer,
)
from langchain_autocontext.tokens import TokenCounter, resolve_counter
from langchain_autocontext.view import ModelCall

__all__ = [
    "AmbiguousOffloadRefError",
    "AutoContext",
    "AutoContextAgentState",
    "AutoContextChatMessageHistory",
    "AutoContextConfig",
    "AutoContextError",
    "AutoContextMiddleware",
    "AutoContextMiddlewareState",
    "AutoContextRunnable",
    "AutoContextState",
    "CommandError",
    "CompressionResult",
    "ContextBudgetError",
    "EventRecord",
    "ExtractiveSummarizer",
    "HistoryEntry",
    "InvalidConfigError",
    "InvariantViolationError",
    "LLMSummarizer",
    "ModelCall",
    "OffloadNotFoundError",
    "OffloadRecord",
    "OffloadStore",
    "ProtectedMessageError",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "TokenCounter",
    "UnknownMessageError",
    "is_pinned",
    "merge_autocontext",
    "pin",
    "render_view",
    "resolve_counter",
    "resolve_summarizer",
    "strip_message_tags",
    "strip_tags",
]

__version__ = "0.1.0"
