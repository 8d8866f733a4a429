"""Running one summarizer model call: in a thread of its own, with a timeout.

Python cannot stop a blocking network call from outside, so a timed-out call is
abandoned in a daemon thread of its own, on the sync and the async path alike: under
``ainvoke`` LangChain would run a model without its own async implementation in the
event loop's default executor, where a hung call outlives ``asyncio.wait_for`` and a few
of them starve every other worker (a store's writes, LangGraph's sync nodes).

Also here: what a failed call says about the next attempt (:func:`cannot_succeed`,
:func:`rate_limited`, :func:`retry_after`), and what the model is (its name, and
whether it reasons before it answers, so a summary-sized ``max_tokens`` would starve
its reply).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core import exceptions as lc_exceptions
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableBinding

from langchain_autocontext.errors import says_context_overflow

__all__ = [
    "athread",
    "awithin",
    "cannot_succeed",
    "native_async",
    "rate_limited",
    "retry_after",
    "timed_out",
    "within",
]

# langchain-core >= 1.7 maps provider errors onto these (with ``is_retryable``)
_MODEL_ERROR: type[BaseException] | None = getattr(lc_exceptions, "ModelError", None)
_CONTEXT_OVERFLOW: type[BaseException] | None = getattr(lc_exceptions, "ContextOverflowError", None)
#: HTTP statuses whose request fails the same way again (bad request, auth, not found,
#: too large, unprocessable).
_FINAL_STATUSES = frozenset({400, 401, 403, 404, 413, 422})
_TRY_AGAIN_IN = re.compile(r"try again in (\d+(?:\.\d+)?)\s*(ms|s)\b", re.IGNORECASE)


def timed_out(timeout: float | None) -> TimeoutError:
    """The error of an attempt that did not answer within ``timeout`` seconds."""
    return TimeoutError(f"the summarizer model did not answer within {timeout} s")


def native_async(model: Any) -> bool:
    """Whether ``model`` answers ``ainvoke`` on the event loop. A chat model without its
    own ``_agenerate`` runs its sync call in the loop's default executor: a hung call
    there outlives ``asyncio.wait_for`` and, a few of them, starve every other
    ``to_thread`` user (LangGraph's sync nodes and tools among them)."""
    while isinstance(model, RunnableBinding):
        model = model.bound
    if isinstance(model, BaseChatModel):
        return type(model)._agenerate is not BaseChatModel._agenerate
    return True


async def athread(call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread of its own (with the caller's context variables),
    awaited: on a timeout or cancellation the thread is abandoned, as on the sync path
    (:func:`within`), and takes no shared worker with it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # abandoned meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def run() -> None:
        try:
            value, error = ctx.run(call), None
        except BaseException as exc:  # handed to the awaiting caller
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, daemon=True, name="autocontext-summarizer").start()
    return await future


def within(timeout: float | None, call: Callable[[], Any]) -> Any:
    """``call()``, or :class:`TimeoutError` after ``timeout`` seconds (``None``: wait).

    The call runs in a daemon thread (with the caller's context variables) that is
    abandoned on timeout: Python cannot stop a blocking network call from outside.
    """
    if timeout is None:
        return call()
    box: dict[str, Any] = {}
    done = threading.Event()
    ctx = contextvars.copy_context()

    def run() -> None:
        try:
            box["value"] = ctx.run(call)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="autocontext-summarizer").start()
    if not done.wait(timeout):
        raise timed_out(timeout)
    if "error" in box:
        raise box["error"]
    return box["value"]


async def awithin(timeout: float | None, pending: Awaitable[Any]) -> Any:
    """Async twin of :func:`within`: ``await pending``, or :class:`TimeoutError` after
    ``timeout`` seconds (``None``: wait).

    Only the deadline's own expiry becomes :func:`timed_out`'s error: a ``TimeoutError``
    the call raises itself (a provider's read timeout) is passed on unchanged, as the
    sync path does, so its message and what it says about a retry are kept."""
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await pending
    except TimeoutError as exc:
        if scope.expired():
            raise timed_out(timeout) from exc
        raise


# --- what a failed call says about the next attempt ----------------------------------
def _status(exc: BaseException) -> int | None:
    for owner in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status", "code"):
            value = getattr(owner, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
                return value
    return None


def cannot_succeed(exc: BaseException) -> bool:
    """Whether the same request fails again, so retrying it only costs: a context
    overflow (``ContextOverflowError`` or a provider's "maximum context length"
    message), ``NotImplementedError``, a LangChain model error that says it is not
    retryable, or an HTTP 400/401/403/404/413/422."""
    if isinstance(exc, NotImplementedError):
        return True
    if _CONTEXT_OVERFLOW is not None and isinstance(exc, _CONTEXT_OVERFLOW):
        return True
    if (
        _MODEL_ERROR is not None
        and isinstance(exc, _MODEL_ERROR)
        and getattr(exc, "is_retryable", None) is False
    ):
        return True
    if says_context_overflow(exc) and not rate_limited(exc):
        # a rate limit that speaks of tokens (Bedrock's "Too many tokens, please wait
        # before trying again.") is no overflow: a later attempt succeeds
        return True
    return _status(exc) in _FINAL_STATUSES


def rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is a rate limit (HTTP 429, a ``RateLimitError``, a
    ``ResourceExhausted``)."""
    if _status(exc) == 429:
        return True
    names = {cls.__name__.lower() for cls in type(exc).__mro__}
    return any(
        "ratelimit" in n or "resourceexhausted" in n or "toomanyrequests" in n for n in names
    )


def _seconds(value: Any, *, millis: bool = False) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value) / (1000 if millis else 1))
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return max(0.0, float(value) / (1000 if millis else 1))
    except ValueError:
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after(exc: BaseException) -> float | None:
    """The seconds a failed call says to wait before the next (``retry-after-ms`` or
    ``retry-after`` in the response headers, a ``retry_after`` attribute, or "try
    again in 20s" in the message), or ``None``."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is not None and callable(getattr(headers, "get", None)):
        for name, millis in (("retry-after-ms", True), ("retry-after", False)):
            value = headers.get(name)
            if value is None:
                value = headers.get(name.title())
            seconds = _seconds(value, millis=millis)
            if seconds is not None:
                return seconds
    seconds = _seconds(getattr(exc, "retry_after", None))
    if seconds is not None:
        return seconds
    match = _TRY_AGAIN_IN.search(str(exc))
    if match:
        return float(match.group(1)) / (1000 if match.group(2).lower() == "ms" else 1)
    return None


# --- the model ----------------------------------------------------------------------------
#: OpenAI-style model names that always reason (o1, o3, o4-mini, gpt-5 but not its
#: ``-chat`` variants, gpt-oss) or whose reply budget includes the reasoning
#: (deepseek-reasoner, DeepSeek-R1): a small ``max_tokens`` is spent on reasoning and
#: the visible reply comes back empty. A ``provider/`` or ``provider:`` prefix is allowed.
_REASONING_NAMES = re.compile(
    r"(?:^|[/:])(?:o\d(?:$|[-.])|gpt-5(?!.*chat)|gpt-oss|deepseek-reasoner|deepseek-r1|qwq)",
    re.IGNORECASE,
)
#: Gemini models that think unless told not to (``thinking_budget=0``).
_THINKING_BY_DEFAULT = re.compile(r"gemini-(?:2\.5-(?!flash-lite)|[3-9])", re.IGNORECASE)
_OFF = (None, False, 0, "", "none", "disabled", "off")


def _is_on(value: Any) -> bool:
    """Whether a reasoning/thinking setting turns it on (``None``, ``0``, ``"none"``,
    ``{"type": "disabled"}`` and the like do not)."""
    if isinstance(value, dict):
        if not value:
            return False
        for key in ("type", "effort", "mode"):
            if key in value:
                return _is_on(value[key])
        return True
    if isinstance(value, str):
        return value.strip().lower() not in _OFF
    return value not in _OFF


def _reasons(model: Any) -> bool:
    """Whether ``model`` reasons (thinks) before it answers, with the reasoning paid
    out of the same reply budget: Anthropic with ``thinking`` enabled (which needs
    ``max_tokens`` above its budget), OpenAI reasoning models (by name, or with
    ``reasoning_effort``/``reasoning`` set), Gemini with a thinking budget or level
    (or a 2.5/3 model that thinks by default), Bedrock with ``thinking`` in its
    request fields, Ollama with ``reasoning`` on."""
    for attr in ("thinking", "reasoning_effort", "reasoning", "thinking_level"):
        if _is_on(getattr(model, attr, None)):
            return True
    budget = getattr(model, "thinking_budget", None)
    if isinstance(budget, int) and not isinstance(budget, bool):
        if budget != 0:
            return True
    elif _THINKING_BY_DEFAULT.search(_model_name(model)):
        return True
    for attr in ("additional_model_request_fields", "model_kwargs"):
        extra = getattr(model, attr, None)
        if isinstance(extra, dict) and any(
            _is_on(extra.get(key))
            for key in ("thinking", "reasoning_config", "reasoning_effort", "reasoning")
        ):
            return True
    return bool(_REASONING_NAMES.search(_model_name(model)))


def _model_name(model: Any) -> str:
    if isinstance(model, str):
        return model
    if isinstance(model, RunnableBinding):
        return _model_name(model.bound)
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    llm_type = getattr(model, "_llm_type", None)
    if isinstance(llm_type, str):
        return llm_type
    return type(model).__name__
