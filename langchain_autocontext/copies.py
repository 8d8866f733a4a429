"""The memo of derived message copies the model's view is built from.

The input view is rebuilt before every model call from mostly the same message objects
(with the section, with tags, with short ids); returning the same derived copy while
neither the source object nor what is done to it changed keeps that cheap and lets the
token counter recognise the copy by identity. A copy is forgotten with its source.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from langchain_core.messages import BaseMessage

__all__ = ["drop_dead_copies", "memo_copy", "memo_with_id"]


def memo_copy(
    message: BaseMessage, key: Hashable, make: Callable[[BaseMessage], BaseMessage]
) -> BaseMessage:
    """``make(message)``, remembered by (message object, ``key``).

    The input view is rebuilt before every model call from mostly the same message
    objects; returning the same derived copy while neither the source object nor
    ``key`` changed keeps that cheap and lets the token counter recognise the copy
    by identity. ``key`` must determine what ``make`` does to the message.
    """
    slot = (id(message), key)
    hit = _MEMO.get(slot)
    if hit is not None and hit[0]() is message:
        return hit[1]
    copy = make(message)

    def died(
        ref: weakref.ref[BaseMessage],
        slot: tuple[int, Hashable] = slot,
        lock: Any = _MEMO_LOCK,
        forget: Callable[..., None] = _forget,
        dead: list[Any] = _MEMO_DEAD,
        memo: Any = _MEMO,
    ) -> None:
        # Forget the copy with its source. A callback may run in the middle of an
        # operation on the memo (in this thread, which holds the lock): then later.
        # (What it uses is bound here: at interpreter exit the module's names are gone.)
        if lock.acquire(blocking=False):
            try:
                forget(slot, ref, memo)
            finally:
                lock.release()
        else:
            dead.append((slot, ref))

    with _MEMO_LOCK:
        while _MEMO_DEAD:
            _forget(*_MEMO_DEAD.pop())
        _MEMO[slot] = (weakref.ref(message, died), copy)
        while len(_MEMO) > _MEMO_MAX:
            _MEMO.popitem(last=False)
    return copy


def memo_with_id(message: BaseMessage, new_id: str | None) -> BaseMessage:
    """:func:`memo_copy` of ``message`` with the id ``new_id``."""
    return memo_copy(message, ("id", new_id), lambda m: m.model_copy(update={"id": new_id}))


def _forget(slot: tuple[int, Hashable], ref: weakref.ref[BaseMessage], memo: Any = None) -> None:
    memo = _MEMO if memo is None else memo
    hit = memo.get(slot)
    if hit is not None and hit[0] is ref:
        del memo[slot]


def drop_dead_copies() -> None:
    """Forget the derived copies whose source message is gone and that could not be
    forgotten when it went (a checkpointer hands back new message objects on every
    call: their copies, with the thread's text, were kept until 100,000 newer ones
    pushed them out, hundreds of MB in a long run)."""
    with _MEMO_LOCK:
        while _MEMO_DEAD:
            _forget(*_MEMO_DEAD.pop())


#: Derived copies by (source object, key); the weak reference tells a reused ``id()``.
_MEMO: OrderedDict[tuple[int, Hashable], tuple[weakref.ref[BaseMessage], BaseMessage]] = (
    OrderedDict()
)
_MEMO_MAX = 100_000
_MEMO_LOCK = threading.Lock()
#: Slots whose source message died (appended by weak-reference callbacks).
_MEMO_DEAD: list[tuple[tuple[int, Hashable], weakref.ref[BaseMessage]]] = []
