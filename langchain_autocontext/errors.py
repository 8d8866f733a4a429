"""The error types of langchain-autocontext.

The package's own errors derive from :class:`AutoContextError` (a bad argument of
the ordinary kind is Python's ``TypeError`` or ``ValueError``; a bad configuration
value is :class:`InvalidConfigError`, a ``ValueError`` too), and each message tells
the user (or the model, when a tool reports it) what to do next.
"""

from __future__ import annotations

import re
import sys

__all__ = [
    "AmbiguousOffloadRefError",
    "AutoContextError",
    "CommandError",
    "ContextBudgetError",
    "InvalidConfigError",
    "InvariantViolationError",
    "OffloadNotFoundError",
    "ProtectedMessageError",
    "UnknownMessageError",
    "is_context_overflow",
]

#: What providers say when a request is longer than the model's window: OpenAI's
#: code and "maximum context length", Anthropic's "prompt is too long" and "input length
#: and `max_tokens` exceed context limit", Gemini's "exceeds the maximum number of tokens
#: allowed", "too many input tokens", "reduce the length of the messages" …
_OVERFLOW_RE = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|prompt is too long|"
    r"input is too long|too many (?:input )?tokens|reduce the length of the messages|"
    r"exceeds? the (?:model's )?(?:maximum )?(?:context|input)|"
    r"exceeds the maximum number of tokens allowed|exceed context limit",
    re.IGNORECASE,
)
#: Rate limits that speak of tokens ("Too many tokens, please wait before trying
#: again.": Bedrock's ThrottlingException): never an overflow, whatever else they say.
_RATE_LIMIT_PHRASES = (
    "throttl",
    "rate limit",
    "rate_limit",
    "please wait",
    "try again later",
    "too many requests",
)


#: Code between a user's call and a warning: the package, LangChain, LangGraph, and
#: LangSmith's tracing wrappers, and the standard library's threads, pools and event loop.
_NOT_USER_CODE = re.compile(
    r"[/\\](?:langchain_autocontext|langchain_core|langchain|langgraph|langsmith|concurrent|asyncio|"
    r"threading\.py|contextvars|tenacity)(?:[/\\.]|$)"
)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the user's code, for the function
    that calls this and then warns: the first frame outside the package, LangChain,
    LangGraph and the standard library's threads and event loop, whatever public entry
    point (sync or async) led there; that function's caller when there is none (a
    summary written in a worker thread has no user code on its stack)."""
    frame = sys._getframe(1)  # the function that warns
    level = 1
    while frame is not None:
        if not _NOT_USER_CODE.search(frame.f_code.co_filename):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 2


def says_rate_limit(error: BaseException) -> bool:
    """Whether ``error`` reads as a rate limit: HTTP 429, or a message that says so
    ("throttling", "rate limit", "please wait" …), whatever else it says: a throttled
    request succeeds on a later attempt, even one that speaks of too many tokens."""
    text = str(error).lower()
    return getattr(error, "status_code", None) == 429 or any(p in text for p in _RATE_LIMIT_PHRASES)


def shown_value(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, shortened past ``limit`` characters to its
    start and its length: a model's runaway argument (a whole message pasted as an id)
    must not come back whole in the error that answers it."""
    text = str(value)
    if len(text) <= limit:
        return repr(value)
    return f"{text[: limit * 3 // 4]!r}… ({len(text):,} characters)"


def is_context_overflow(error: BaseException) -> bool:
    """Whether a model call failed because the request was too long for the model.

    LangChain's ``ContextOverflowError`` (what ``langchain-openai`` and
    ``langchain-anthropic`` raise), an error whose ``code`` is
    ``context_length_exceeded`` (OpenAI's), or a message providers use for it
    (Anthropic's "prompt is too long" and "input length and `max_tokens` exceed context
    limit", Gemini's "exceeds the maximum number of tokens allowed", "maximum context
    length" …); never a rate limit (HTTP 429, "throttling", "please wait"), even one
    that speaks of too many tokens.
    """
    overflow_types: tuple[type[BaseException], ...] = ()
    try:
        from langchain_core.exceptions import ContextOverflowError

        overflow_types = (ContextOverflowError,)
    except ImportError:  # an older langchain-core
        pass
    if isinstance(error, overflow_types):
        return True
    code = getattr(error, "code", None)
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        nested = body.get("error")
        inner = nested if isinstance(nested, dict) else body
        code = code or inner.get("code") or inner.get("type")
    if code == "context_length_exceeded":
        return True
    return says_context_overflow(error)


def says_context_overflow(error: BaseException) -> bool:
    """Whether the message of ``error`` says the request was too long for the model's
    window, and not that it was rate limited (:func:`says_rate_limit`): the one
    vocabulary of the agent's overflow recovery and of the summarizer's retries."""
    return not says_rate_limit(error) and bool(_OVERFLOW_RE.search(str(error)))


class AutoContextError(Exception):
    """Base class of every error raised by langchain-autocontext."""


class InvalidConfigError(AutoContextError, ValueError):
    """An :class:`~langchain_autocontext.AutoContextConfig` value is out of range."""


class ContextBudgetError(AutoContextError):
    """The budget cannot hold even the system prompt and the latest user message.

    Nothing is sent to the model when this is raised.
    """

    def __init__(self, message: str, *, required_tokens: int, max_tokens: int) -> None:
        super().__init__(message)
        self.required_tokens = required_tokens
        self.max_tokens = max_tokens


class UnknownMessageError(AutoContextError, KeyError):
    """No working message (or history entry) has the given id.

    Not raised by the package: the model's edits by an unknown id are answered to it as
    error results (see the API reference's note on these errors)."""

    def __init__(self, message_id: str, hint: str = "") -> None:
        self.message_id = message_id
        text = f"No message with id {message_id!r} in this thread's context."
        if hint:
            text = f"{text} {hint}"
        super().__init__(text)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ProtectedMessageError(AutoContextError):
    """The message may not be edited or deleted (system message, pending call, …).

    Not raised by the package: the model's edits of such a message are answered to it as
    error results (see the API reference's note on these errors)."""


#: What a developer who looked an offload up (``OffloadStore.reload``) can do instead.
_DEVELOPER_ADVICE = (
    "Pass an offload id a compression wrote (OffloadRecord.offload_id, or the id in an "
    "'[Offloaded …]' note, whole or its first 8 characters); OffloadStore.list_offloads("
    "thread_id) lists the thread's offloads, and OffloadStore.get_history_message("
    "thread_id, message_id) returns a message's original."
)


class OffloadNotFoundError(AutoContextError, KeyError):
    """No offload with the given id exists in the calling thread's namespace.

    ``advice`` says what to do instead: by default to a developer; the
    ``reload_offloaded`` tool passes its own, for the model."""

    def __init__(self, offload_id: str, hint: str = "", *, advice: str = _DEVELOPER_ADVICE) -> None:
        self.offload_id = offload_id
        shown = shown_value(offload_id)  # a model's runaway argument: the error stays short
        text = f"No offloaded content with id {shown} in this thread. {advice}"
        if hint:
            text = f"{text} {hint}"
        super().__init__(text)

    def __str__(self) -> str:
        return str(self.args[0])


class AmbiguousOffloadRefError(OffloadNotFoundError):
    """A shortened offload id (as a note in the context shows it) that starts more than
    one offload of the thread: the whole id says which (``offload_ids`` lists them)."""

    def __init__(self, ref: str, offload_ids: tuple[str, ...] | list[str]) -> None:
        super().__init__(ref)
        self.offload_ids = tuple(offload_ids)
        self.args = (
            f"The offload id {ref!r} matches {len(self.offload_ids)} offloads of this thread "
            f"(their ids start with it): {', '.join(self.offload_ids)}. Pass the whole id of "
            "the one you mean.",
        )


class CommandError(AutoContextError):
    """A context-editing command (tool call or XML command) could not be applied.

    Not raised by the package: a command it cannot apply is answered to the model as an
    error result (see the API reference's note on these errors)."""


class InvariantViolationError(AutoContextError):
    """A message sequence breaks one of the package's invariants.

    Raised by :func:`~langchain_autocontext.messages.assert_valid_sequence`; it
    signals a bug in a strategy, never expected input.
    """
