"""langchain-autocontext: keep LangChain/LangGraph agents inside a fixed context window.

The public API lives here and nowhere else.
"""

from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.errors import (
    AutoContextError,
    CommandError,
    ContextBudgetError,
    InvalidConfigError,
    InvariantViolationError,
    OffloadNotFoundError,
    ProtectedMessageError,
    UnknownMessageError,
)

__all__ = [
    "AutoContextConfig",
    "AutoContextError",
    "CommandError",
    "ContextBudgetError",
    "InvalidConfigError",
    "InvariantViolationError",
    "OffloadNotFoundError",
    "ProtectedMessageError",
    "UnknownMessageError",
]

__version__ = "0.1.0"
