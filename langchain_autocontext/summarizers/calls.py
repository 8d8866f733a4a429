"""Running one summarizer model call: in a thread of its own, with a timeout.

Python cannot stop a blocking network call from outside, so a timed-out call is
abandoned in a daemon thread of its own, on the sync and the async path alike: under
``ainvoke`` LangChain would run a model without its own async implementation in the
event loop's default executor, where a hung call outlives ``asyncio.wait_for`` and a few
of them starve every other worker (a store's writes, LangGraph's sync nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableBinding

__all__ = ["athread", "native_async", "timed_out", "within"]


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
