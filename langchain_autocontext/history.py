"""Chains: a chat-message history with managed context, and a managing Runnable.

* :class:`AutoContextChatMessageHistory` — a LangChain ``BaseChatMessageHistory``
  keyed by session id and kept in the store. ``RunnableWithMessageHistory`` chains
  get managed context with no other change: every ``add_messages`` archives the
  originals and compresses the session's working messages; ``messages`` returns them.
* :class:`AutoContextRunnable` (``ac.as_runnable()``) — turns a message list (or a
  prompt value) into the managed one, for ``prompt | ac.as_runnable() | model``.

Both keep one small record per session/thread in the store, in the namespace
``(prefix, thread, "surface")`` next to the thread's history, offloads and events:
plain JSON, LangChain's own message dict format.

Over 600 lines because the design's layout puts both chain surfaces here, sharing how
new messages are named and stored, and the Runnable must recognise an input that
continues one it saw (extended, with its oldest messages dropped by a window, with
the template's messages after the history) to compress only what is new.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langgraph.store.base import BaseStore
from pydantic import field_validator

from langchain_autocontext.cache import _LRU
from langchain_autocontext.engine import ContextEngine, run_thread
from langchain_autocontext.errors import ContextBudgetError
from langchain_autocontext.messages import (
    content_hash,
    dump_messages,
    is_pinned,
    load_messages,
    new_id,
)
from langchain_autocontext.metadata import strip_message_tags
from langchain_autocontext.store import OffloadStore, encode_thread_id, plain_json, revive
from langchain_autocontext.tools import attach_tools

__all__ = [
    "SURFACE_KIND",
    "AutoContextChatMessageHistory",
    "AutoContextRunnable",
    "surface_namespace",
]

#: Third element of the namespace where the surfaces keep their per-thread records.
SURFACE_KIND = "surface"
_HISTORY_KEY = "chat_history"
_RUNNABLE_KEY = "runnable"
#: How many inputs the Runnable remembers per thread (see :meth:`AutoContextRunnable._plan`):
#: chains of different prompt templates sharing a thread (a ``RunnableParallel``) each
#: extend their own, up to this many; the least recently used goes first.
_RUNNABLE_RECORDS = 4
#: How many of an input's last non-system messages a record keeps the prints and ids of
#: (an input that drops messages from the front is recognised by them: they stand in it
#: as a run, or its first messages are the last of them).
_RUNNABLE_WINDOW = 256
#: How many template messages after the history (an instruction) the Runnable recognises.
_TRAIL = 4
_PRINT_CHARS = 16
#: How many messages' prints this process remembers (:func:`_fingerprints`), for every
#: thread and Runnable: about 5 MB. A thread's messages are found again on its next
#: call; past this many, the least recently sent are forgotten (computed again if sent).
_PRINTS_KEPT = 32_768
_PRINTS: _LRU[bytes] = _LRU(_PRINTS_KEPT)
_ID_NAMESPACE = uuid.UUID("6c1d3a52-8f0e-4f7b-9a43-3f1b8e2d7c10")


def surface_namespace(store: OffloadStore, thread_id: str) -> tuple[str, str, str]:
    """``(prefix, encoded thread id, "surface")``: the surfaces' per-thread records."""
    return (store.prefix, encode_thread_id(thread_id), SURFACE_KIND)


def _default_autocontext(autocontext: ContextEngine | None) -> ContextEngine:
    if autocontext is None:
        return attach_tools(ContextEngine())
    if not isinstance(autocontext, ContextEngine):
        raise TypeError(f"expected an AutoContext, got {type(autocontext).__name__}")
    return autocontext


def _checked(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    out = list(messages)
    for m in out:
        if not isinstance(m, BaseMessage):
            raise TypeError(f"expected LangChain messages, got {type(m).__name__}: {m!r:.80}")
    return out


def _stored_messages(value: dict[str, Any] | None) -> list[BaseMessage]:
    return load_messages(revive(value.get("messages") or [])) if value else []


def _dumped(messages: Sequence[BaseMessage]) -> Any:
    """The working messages as plain JSON every backend holds (a tool's artifact with
    ``bytes`` or ``datetime`` included; :func:`_stored_messages` brings them back)."""
    return plain_json(dump_messages(messages), "working messages")


# --- the chat-message history ---------------------------------------------------------------
class AutoContextChatMessageHistory(BaseChatMessageHistory):
    """A chat-message history whose messages are the managed (compressed) context.

    ``add_messages`` appends the new messages to the session's append-only original
    history (the store's ``history`` namespace), then compresses the working
    messages when a threshold is crossed, like the agent surfaces do before each
    model call; ``messages`` returns the working messages. Tags a model copied into
    its output are stripped before storing.

    The working messages stay under ``max_tokens * token_ratio`` between turns, so a
    turn's new input may use the rest of ``max_tokens``. When one input can be larger
    than that, put ``ac.as_runnable()`` before the model to bound every call.

    Args:
        session_id: the session (it is the thread id in the store).
        autocontext: the :class:`~langchain_autocontext.AutoContext` to use
            (default: a new one with the default configuration).
        store: where the session lives (any LangGraph ``BaseStore``); default: the
            AutoContext's store.

    ``clear()`` empties the working messages; the original history stays in the
    store (append-only by design).
    """

    def __init__(
        self,
        session_id: str,
        autocontext: ContextEngine | None = None,
        *,
        store: BaseStore | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        self.session_id = session_id
        self.autocontext = _default_autocontext(autocontext)
        self._backend = store

    @classmethod
    def factory(
        cls, autocontext: ContextEngine | None = None, *, store: BaseStore | None = None
    ) -> Callable[[str], AutoContextChatMessageHistory]:
        """``get_session_history`` for ``RunnableWithMessageHistory``: session id -> history."""
        ac = _default_autocontext(autocontext)

        def get_session_history(session_id: str) -> AutoContextChatMessageHistory:
            return cls(session_id, ac, store=store)

        return get_session_history

    @property
    def store(self) -> OffloadStore:
        """The OffloadStore holding the session (working record, history, offloads, events)."""
        return self.autocontext.resolve_store(self._backend)

    def _ns(self, store: OffloadStore) -> tuple[str, str, str]:
        return surface_namespace(store, self.session_id)

    # -- reading --------------------------------------------------------------------------
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's working messages: what the model is sent."""
        store = self.store
        item = store.get(self._ns(store), _HISTORY_KEY)
        return _stored_messages(item.value if item else None)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages`."""
        store = self.store
        item = await store.aget(self._ns(store), _HISTORY_KEY)
        return _stored_messages(item.value if item else None)

    @property
    def original_messages(self) -> list[BaseMessage]:
        """Every message ever added to the session, uncompressed, in order."""
        return [e.message for e in self.store.iter_history(self.session_id)]

    async def aoriginal_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`original_messages`."""
        return [e.message async for e in self.store.aiter_history(self.session_id)]

    # -- writing --------------------------------------------------------------------------
    @staticmethod
    def _incoming(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Chunks (a streamed reply) become messages; tags a model copied are stripped;
        a message without an id gets a fresh one (a history receives each message once:
        an id derived from its content would repeat after :meth:`clear`, and the
        repeated "hi" would be taken as already archived)."""
        out = []
        for m in _checked(messages):
            m = message_chunk_to_message(m)
            if not m.id:
                m = m.model_copy(update={"id": new_id()})
            out.append(strip_message_tags(m) if isinstance(m, AIMessage) else m)
        return out

    def _record(self, messages: Sequence[BaseMessage]) -> dict[str, Any]:
        return {"messages": _dumped(messages)}

    def _headroom(self) -> int:
        """The next turn's room: the working messages are compressed between turns and
        the chain adds the next input to them, so they stay under the configured
        trigger, however large the system prompt (for the agent surfaces a large floor
        moves the trigger up to ``max_tokens``, the new input being in the count)."""
        config = self.autocontext.config
        return config.max_tokens - config.trigger_tokens

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Archive ``messages`` and compress the working messages when over a threshold."""
        new = self._incoming(messages)
        store = self.store
        with store.working_lock(self.session_id):
            current = self.messages
            held = [store.get_history_message(self.session_id, str(m.id)) is not None for m in new]
            working = [*current, *_reissued(current, new, held)]
            try:
                kept = self.autocontext.compress(
                    working,
                    thread_id=self.session_id,
                    store=store,
                    view=False,
                    headroom=self._headroom(),
                ).messages
            except ContextBudgetError as exc:
                kept = _kept_anyway(working, exc)
            store.put(self._ns(store), _HISTORY_KEY, self._record(kept), index=False, ttl=None)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages`."""
        new = self._incoming(messages)
        store = self.store
        async with store.aworking_lock(self.session_id):
            current = await self.aget_messages()
            held = [
                await store.aget_history_message(self.session_id, str(m.id)) is not None
                for m in new
            ]
            working = [*current, *_reissued(current, new, held)]
            try:
                kept = (
                    await self.autocontext.acompress(
                        working,
                        thread_id=self.session_id,
                        store=store,
                        view=False,
                        headroom=self._headroom(),
                    )
                ).messages
            except ContextBudgetError as exc:
                kept = _kept_anyway(working, exc)
            await store.aput(
                self._ns(store), _HISTORY_KEY, self._record(kept), index=False, ttl=None
            )

    def clear(self) -> None:
        """Empty the working messages (the original history stays in the store)."""
        store = self.store
        store.put(self._ns(store), _HISTORY_KEY, self._record([]), index=False, ttl=None)

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        store = self.store
        await store.aput(self._ns(store), _HISTORY_KEY, self._record([]), index=False, ttl=None)


def _reissued(
    before: Sequence[BaseMessage], new: Sequence[BaseMessage], held: Sequence[bool]
) -> list[BaseMessage]:
    """``new`` messages (each received once, so none is an original seen before) with a
    fresh id where theirs is already taken: by a message before them or one of ``new``,
    or by an original the thread's history holds (``held``; a reply object returned
    twice, a cached reply). Kept, such a message would be taken as archived already and
    dropped as summarized once its namesake was compressed away."""
    taken: set[str | None] = {m.id for m in before if m.id}
    out = []
    for m, in_history in zip(new, held, strict=True):
        if in_history or m.id in taken:
            m = m.model_copy(update={"id": new_id()})
        taken.add(m.id)
        out.append(m)
    return out


@dataclass
class _Plan:
    """What :meth:`AutoContextRunnable._plan` made of an input: ``kept`` (its system
    messages and the previous result it continues, or the whole input), ``fresh`` (the
    messages it adds, new by construction), ``trail`` (the template's messages after
    them, as archived before), the record's fields, which record it continues, the
    prints of its non-system messages and the ids of its last ones before ``fresh`` (all
    of them, or from the record's window on), and where the others of the previous
    result stand among its non-system messages (``older``: id -> index)."""

    kept: list[BaseMessage]
    fresh: list[BaseMessage]
    trail: list[BaseMessage]
    state: dict[str, Any]
    match: int | None
    prints: list[str]
    ids: list[str | None]
    older: dict[str, int]

    def work(self, held: Sequence[bool]) -> list[BaseMessage]:
        """The messages to compress, ``fresh`` reissued where their id is taken (``held``:
        those the thread's history holds)."""
        self.fresh = _reissued([*self.kept, *self.trail], self.fresh, held)
        return [*self.kept, *self.fresh, *self.trail]

    @property
    def request_only(self) -> frozenset[str]:
        """The ids of the template's messages after the history (``trail``, not its
        system ones, which the engine merges into the first): sent with every call, not
        said by the user, so a fixed instruction after the question is never taken for the
        latest user message (the question is; see :meth:`ContextEngine.compress`). They
        were archived when they were first seen, as the input's last messages."""
        return frozenset(str(m.id) for m in self.trail if not _system(m))

    def record(self, result: Sequence[BaseMessage]) -> dict[str, Any]:
        """The record to store: the input's digests, the prints and ids of its last
        :data:`_RUNNABLE_WINDOW` non-system messages, the prints of as many of its first
        ones before those (``front``), what it was compressed to, and
        where the messages of that result from before the window stand in the input
        (``older``: an input that drops them takes them out; as many as the result
        holds, so the record does not grow with the input).

        The ids are those of the input's last messages: it is continued from the
        record's window (at least its last :data:`_RUNNABLE_WINDOW`, or all of them) or
        new, so there are as many as the window takes."""
        ids = [*self.ids, *(m.id for m in self.fresh), *(m.id for m in self.trail)]
        n = min(len(ids), len(self.prints), _RUNNABLE_WINDOW)
        window = [[p, i] for p, i in zip(self.prints[-n:], ids[len(ids) - n :], strict=True)]
        start = len(self.prints) - n
        first = len(self.prints) - len(ids)  # the index of ids[0]
        places = dict(self.older)
        places.update((i, first + j) for j, i in enumerate(ids[: len(ids) - n]) if i)
        older = [[places[str(m.id)], m.id] for m in result if places.get(str(m.id), start) < start]
        return {
            **self.state,
            "entries": len(self.prints),
            "window": window,
            "front": self.prints[: min(start, _RUNNABLE_WINDOW)],
            "older": older,
            "messages": _dumped(result),
        }


def _chain(lead: bool, prints: Sequence[bytes], wanted: set[int]) -> dict[int, str]:
    """The input's hash chain: its digest after ``n`` entries for each ``n`` in ``wanted``
    (and ``""`` after none); the entries are the leading system message (``lead``) and
    the ``prints`` of the non-system messages."""
    chain = hashlib.sha256()
    out = {0: ""}
    n = 0
    if lead:
        chain.update(b"system")
        n = 1
        if n in wanted:
            out[n] = chain.hexdigest()
    for fp in prints:
        chain.update(fp)
        n += 1
        if n in wanted:
            out[n] = chain.hexdigest()
    return out


def _continued(
    record: dict[str, Any], digests: Mapping[int, str], prints: Sequence[str], lead: bool
) -> tuple[int, int, int]:
    """How an input (its hash chain ``digests``, see :func:`_chain`, holding the digests
    at the record's end and the few before it, its non-system ``prints``, and whether it
    has a leading system message, ``lead``) continues
    ``record``: ``(overlap, dropped, trailing)``, the number of the record's non-system
    messages it keeps, drops from the front, and repeats at its end after the messages it
    adds (the template's messages after the history); overlap ``-1`` when it does not.

    Kept, the record's messages are the first of the input's; the fewest dropped and
    trailing win. Dropping keeps two of them at least (one, when it drops one: an input
    whose first message was the last of the record's may start another conversation)
    and is checked against the record's window (the prints of its last
    :data:`_RUNNABLE_WINDOW` messages): the kept ones in it are the input's, and when
    the window is not all of the record's messages and the input keeps all of it, the
    window stands in the input as a run, at the place of the record's messages it
    keeps, and the input starts with the rest of the record's ``front`` (the prints of
    as many of its first messages before the window) that it keeps: only the messages
    between the two are taken as the record's without a check (another template's
    input, whose few-shot examples are fewer, holds the conversation's last messages
    too). The trailing ones are at most :data:`_TRAIL`."""
    inputs = int(record.get("inputs", 0))
    window = [tuple(e) for e in record.get("window") or []]
    total = record.get("entries")
    cuts = record.get("cuts") or {}
    if not inputs or not isinstance(total, int):  # a record of an earlier version
        # only ever extended; its entries count the leading system message as the
        # input's do (the digests match), its messages do not
        ok = inputs > 0 and inputs in digests and digests[inputs] == record.get("digest")
        return (inputs - lead, 0, 0) if ok else (-1, 0, 0)
    old = [p for p, _ in window]
    system = inputs - total  # the record's leading system message's entry
    for t in range(min(_TRAIL, len(old), total) + 1):
        if t and (len(prints) < total or prints[len(prints) - t :] != old[len(old) - t :]):
            continue
        n = inputs - t
        expected = cuts.get(str(n)) if t else record.get("digest")
        if n in digests and digests[n] == expected and (n > system or not t):
            return total - t, 0, t
    start = total - len(old)  # the index of the window's first message in the record's
    if start and not isinstance(record.get("older"), list):
        return -1, 0, 0  # an earlier version's: the messages before its window are unknown
    front = list(record.get("front") or [])[:start]  # the prints of its first messages
    joined = ""  # the input's prints in one string, to find the window in as a run
    for t in range(min(_TRAIL, len(old)) + 1):
        if t and prints[len(prints) - t :] != old[len(old) - t :]:
            continue
        run = old[: len(old) - t]  # the window's messages an input keeping them all has
        if start and run:  # dropping d <= start: the run stands in the input at start - d
            # fewer than the front's: the input starts with the rest of the front
            for d in range(1, len(front)):
                keep = start - d + len(run)
                if (
                    keep <= len(prints) - t
                    and prints[0] == front[d]
                    and prints[: len(front) - d] == front[d:]
                    and prints[start - d : keep] == run
                ):
                    return keep, d, t
            # as many or more (the messages between the front and the window unchecked)
            last = min(start - max(1, len(front)) + len(run), len(prints) - t)
            joined = joined or "".join(prints)
            found = _last_run(joined, "".join(run), last)
            if found >= 0 and found + len(run) >= min(start - found, 2):
                return found + len(run), start - found, t
        for i in range(1, len(run)):  # dropping start + i: the input starts with run[i:]
            keep = len(run) - i
            fits = min(start + i, 2) <= keep <= len(prints) - t
            if fits and prints[0] == run[i] and prints[:keep] == run[i:]:  # first one first
                return keep, start + i, t
    return -1, 0, 0


def _last_run(joined: str, run: str, end: int) -> int:
    """The last index of the input (its prints, ``joined``) where ``run`` (prints too)
    stands ending at its ``end``-th message at the latest (``-1``: nowhere): found at C
    speed, where a check per candidate index made a call's work grow with the input."""
    width = _PRINT_CHARS
    stop = end * width
    while stop >= len(run):
        at = joined.rfind(run, 0, stop)
        if at < 0 or at % width == 0:
            return at if at < 0 else at // width
        stop = at + len(run) - 1  # a match across the prints' boundaries: look before it
    return -1


def _kept_anyway(messages: list[BaseMessage], exc: ContextBudgetError) -> list[BaseMessage]:
    """The working messages uncompressed, with a warning, when they cannot be brought
    under the budget. ``RunnableWithMessageHistory`` adds a turn from a listener whose
    errors LangChain only logs: raising would drop the turn from the working messages
    without a word (the store has archived it). Kept, the next read shows it, and the
    model call that does not fit fails where the user sees it."""
    warnings.warn(
        f"langchain-autocontext: the chat history could not be compressed under its "
        f"budget, so it is kept whole for now: {exc}",
        UserWarning,
        stacklevel=3,
    )
    return messages


# --- the Runnable ------------------------------------------------------------------------------
def _fingerprints(messages: Sequence[BaseMessage]) -> list[bytes]:
    """What identifies each message of an input: role, id, content, tool calls, name, pin
    (pinning a message already sent changes what may be compressed), and where set
    (:func:`_rare_fields`) a ``ChatMessage``'s role, a tool result's status and artifact,
    an AI message's invalid tool calls. Stored in the Runnable's records, so the same in
    every process: a SHA-256 over the message's JSON.

    Remembered in this process (:data:`_PRINTS`, least recently used out, each found
    one refreshed: a thread resending its conversation keeps it however many one-off
    messages other threads send) under :func:`_print_key`, which is
    computed from the same fields on every call: a chain sends its whole conversation
    every call, and serializing and hashing every message of it made the Runnable's
    work grow with the thread (a fifth of a second a call at 3,000 messages) where the
    engine's stays flat. The key is read afresh from the message each time, so a message
    changed in place (its content reassigned, a block appended to its content list, a
    call's arguments edited, its pin set in ``additional_kwargs``) has another key and
    is serialized again; the same content in a new object (a conversation rebuilt from
    the app's database) has the same key and is not."""
    keys = [_print_key(m) for m in messages]
    prints: list[bytes | None] = _PRINTS.get_many(keys)  # one lock for the input
    out = []
    for key, found, message in zip(keys, prints, messages, strict=True):
        if found is None:  # serialized outside the lock; another thread may do it too
            found = _serialized_print(message)
            _PRINTS.put(key, found)
        out.append(found)
    return out


def _print_key(message: BaseMessage) -> int:
    """An in-process hash of what :func:`_serialized_print` reads (:func:`content_hash`
    of the content and tool calls: a str caches its hash, so a message seen before costs
    a few lookups, not a pass over its text). Two states of a message that serialize
    differently have different keys but for a 64-bit hash collision, the same odds the
    engine's archive memo takes. A value of a content block that is neither JSON nor
    hashable by value (an object of a provider's, serialized by ``str``) is compared by
    its hash (most objects: their identity), so a change in place inside such an object
    is not seen: the input passes for the one the record saw, whose result holds what
    the store kept of the object (its description: :func:`~langchain_autocontext.store.plain_json`)."""
    fields = message.__dict__  # pydantic fields; faster than attribute access
    content = fields["content"]
    calls = fields.get("tool_calls")  # an AIMessage's
    invalid = fields.get("invalid_tool_calls")  # an AIMessage's
    artifact = fields.get("artifact")  # a ToolMessage's
    return hash(
        (
            fields["type"],
            fields["id"],
            content if type(content) is str else content_hash(content),  # the same hash
            fields.get("tool_call_id"),
            fields["name"],
            is_pinned(message),
            content_hash(calls) if calls else 0,
            fields.get("role"),  # a ChatMessage's
            fields.get("status"),  # a ToolMessage's
            content_hash(artifact) if artifact is not None else 0,
            content_hash(invalid) if invalid else 0,
        )
    )


def _serialized_print(message: BaseMessage) -> bytes:
    """A message's :func:`_fingerprints`, computed: its fields as JSON, hashed."""
    h = hashlib.sha256()
    content = message.content
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    extra: list[Any] = [getattr(message, "tool_call_id", None), message.name, is_pinned(message)]
    if isinstance(message, AIMessage) and message.tool_calls:
        extra.append(message.tool_calls)
    rare = _rare_fields(message)
    if rare:  # a str after the list above: no print of a message without them is changed
        extra.append(json.dumps(rare, sort_keys=True, default=str))
    for part in (message.type, message.id or "", text, json.dumps(extra, default=str)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.digest()


def _rare_fields(message: BaseMessage) -> dict[str, Any]:
    """The fields a print reads besides the common ones, where they are not their
    defaults: a ``ChatMessage``'s ``role``, a ``ToolMessage``'s ``status`` (not
    ``"success"``) and ``artifact`` (not None), an AI message's ``invalid_tool_calls``.
    Left out where they are defaults, so the prints of the messages that do not use them
    (the ids of id-less ones are derived from them, and records hold them) are those
    earlier versions computed."""
    rare: dict[str, Any] = {}
    if isinstance(message, ChatMessage):
        rare["role"] = message.role
    elif isinstance(message, ToolMessage):
        if message.status != "success":
            rare["status"] = message.status
        if message.artifact is not None:
            rare["artifact"] = message.artifact
    elif isinstance(message, AIMessage) and message.invalid_tool_calls:
        rare["invalid_tool_calls"] = message.invalid_tool_calls
    return rare


def _system(message: BaseMessage) -> bool:
    return isinstance(message, SystemMessage)


def _as_messages(value: Any) -> list[BaseMessage]:
    if isinstance(value, PromptValue):
        messages = value.to_messages()
    elif isinstance(value, str):
        messages = [HumanMessage(value)]
    elif isinstance(value, BaseMessage):
        messages = [value]
    elif isinstance(value, Sequence):
        messages = convert_to_messages(value)
    else:
        raise TypeError(
            "AutoContextRunnable takes a prompt value, a message, a list of messages or a "
            f"string; got {type(value).__name__}"
        )
    return [message_chunk_to_message(m) for m in messages]


class AutoContextRunnable(RunnableSerializable[Any, list[BaseMessage]]):
    """``messages -> managed messages``: compress a conversation for the next model call.

    Input: a prompt value (the output of a chat prompt template), a list of messages
    (or message-likes: tuples, dicts, strings) or one string. Output: the managed
    list, system message first, under ``max_tokens``.

    The thread is the run's ``configurable["thread_id"]`` (else its ``session_id``,
    else a thread of the call's own, ``run-<uuid4>``, with a warning: see
    :meth:`thread_of`). Chains usually send the whole conversation every call: the
    Runnable remembers, per thread in the store, the input it last saw and what it
    made of it, and when the new input continues that input (extends it, perhaps
    dropping its oldest messages or repeating the template's messages after the
    history) it compresses only the new messages onto its previous result — so work (and summarizer calls) is not
    repeated, and messages without an id get the same id every call (their
    originals are archived once). It remembers a few such inputs per thread, so that
    chains of different prompt templates sharing a thread (the branches of a
    ``RunnableParallel``) do not restart each other's compression.
    """

    autocontext: Any
    """The :class:`~langchain_autocontext.AutoContext` doing the work."""

    name: str | None = "autocontext"

    @field_validator("autocontext")
    @classmethod
    def _is_autocontext(cls, value: Any) -> Any:
        return _default_autocontext(value)

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """Not serializable: it holds an AutoContext."""
        return False

    @staticmethod
    def thread_of(config: RunnableConfig | None) -> str:
        """The thread of a call: ``thread_id``, else ``session_id``, else a thread of the
        call's own (``run-<uuid4>``, with a warning once per process): callers without
        a thread must not share one history, where one's ``search_history`` would find
        another's messages."""
        conf = (config or {}).get("configurable") or {}
        for key in ("thread_id", "session_id"):
            if conf.get(key) not in (None, ""):
                return str(conf[key])
        return run_thread(config, None)[0]

    def _plan(
        self, messages: list[BaseMessage], thread_id: str, records: Sequence[dict[str, Any]]
    ) -> _Plan:
        """What to compress for ``messages``: the previous result of the record the input
        continues (none: the input whole), the new messages, the template's trailing ones.

        An input continues a record (the input it last saw, and what it made of it) when it
        is that input with messages added, and also when, besides, it dropped messages
        from the front (a ``trim_messages`` window, a chain that drops the oldest turn)
        or repeats the template's trailing messages after the added ones (an instruction
        after the history): only the added messages are compressed onto the previous
        result, which loses the dropped ones (those not yet summarized), and the trailing
        ones keep the ids they were archived under. The check that the input extends a
        record is made from one hash chain over its messages, whatever its length; the
        others compare the prints of the messages the record keeps (its first and last
        :data:`_RUNNABLE_WINDOW`). The thread keeps several records: two chains of
        different prompt templates on one thread (the branches of a
        ``RunnableParallel``) each continue their own. The longest continued one wins.
        """
        # The system messages may change from call to call (a template with the date or
        # retrieved context in it, a reminder after the history): they are not part of
        # the prefix the Runnable recognises, or every call would compress the whole
        # conversation again. A leading one stands as one entry ("system") of the chain,
        # later ones as none (a reminder after the history stood where the next message
        # now is); the engine merges them into one, first, and the new ones take the old
        # one's place.
        lead = bool(messages) and _system(messages[0])
        prints = _fingerprints(messages)
        # where the input's system messages are (and their place among them), and the others
        places: dict[int, int] = {}
        body: list[int] = []
        for k, m in enumerate(messages):
            if isinstance(m, SystemMessage):
                places[k] = len(places)
            else:
                body.append(k)
        entries = lead + len(body)
        # the chain's digest after a number of entries: at the end, the record's cuts, and
        # where a record ends (the others are never compared: not rendered)
        wanted = set(range(max(1, entries - _TRAIL), entries + 1))
        for r in records:
            end = int(r.get("inputs", 0))
            wanted.update(range(max(0, end - _TRAIL), end + 1))
        digests = _chain(lead, [prints[k] for k in body], wanted)
        short = [prints[k][: _PRINT_CHARS // 2].hex() for k in body]
        state: dict[str, Any] = {
            "inputs": entries,
            "digest": digests[entries],
            "head": prints[body[0]].hex() if body else "",
            "cuts": {str(n): digests[n] for n in range(max(1, entries - _TRAIL), entries)},
        }

        # a later system message is named by its place among the system messages, not in
        # the input, where it moves on every call (a reminder after the history, the same
        # every call, is archived once)
        def with_id(k: int, m: BaseMessage) -> BaseMessage:
            if m.id:
                return m
            place = f"system{places[k]}" if k and k in places else str(k)
            name = f"{thread_id}:{place}:{prints[k].hex()}"
            return m.model_copy(update={"id": str(uuid.uuid5(_ID_NAMESPACE, name))})

        found = [
            (overlap, j, d, t)
            for j, r in enumerate(records)
            for overlap, d, t in [_continued(r, digests, short, lead)]
            if overlap >= 0
        ]
        if not found:
            ids = [with_id(k, m) for k, m in enumerate(messages)]
            body_ids = [m.id for m in ids if not _system(m)]
            return _Plan(ids, [], [], state, None, short, body_ids, {})
        overlap, match, d, t = max(found)
        record = records[match]
        window = [tuple(e) for e in record.get("window") or []]
        # the index of the window's first message (an earlier version's record, without
        # "entries", is only ever extended: d is 0)
        start = max(0, int(record.get("entries") or 0) - len(window))
        older = {str(i): int(k) for k, i in record.get("older") or []}
        dropped = max(0, d - start)  # of the window's messages
        gone = {i for _, i in window[:dropped]} | {i for _, i in window[len(window) - t :]}
        gone |= {i for i, k in older.items() if k < d}
        stored = [m for m in _stored_messages(record) if not (m.id and m.id in gone)]
        if stored and _system(stored[0]):
            stored = stored[1:]  # this input's system messages take its place
        systems = [with_id(k, messages[k]) for k in places]
        added = body[overlap : len(body) - t]
        trail = [
            messages[k].model_copy(update={"id": i})
            for k, (_, i) in zip(body[len(body) - t :], window[len(window) - t :], strict=True)
        ]
        fresh = [with_id(k, messages[k]) for k in added]  # new: they continue the record
        if isinstance(record.get("entries"), int):
            kept = [i for _, i in window[dropped : len(window) - t]]
        else:  # an earlier version's, extended: its messages are named as it named them
            kept = [with_id(k, messages[k]).id for k in body[:overlap]]
        moved = {i: k - d for i, k in older.items() if k >= d}
        return _Plan([*systems, *stored], fresh, trail, state, match, short, kept, moved)

    def _ns(self, store: OffloadStore, thread_id: str) -> tuple[str, str, str]:
        return surface_namespace(store, thread_id)

    @staticmethod
    def _records(item: Any) -> list[dict[str, Any]]:
        """The thread's records, least recently used first (an item holding one record,
        as earlier versions stored it, is a list of one)."""
        value = item.value if item is not None else None
        if not value:
            return []
        if "records" not in value:
            return [value]
        return [r for r in value["records"] if isinstance(r, dict)]

    @staticmethod
    def _kept(
        records: list[dict[str, Any]], match: int | None, record: dict[str, Any]
    ) -> dict[str, Any]:
        """The item to store: ``record`` last, in place of the one it extended, else of
        one with the same start (the same conversation, its past edited), at most
        :data:`_RUNNABLE_RECORDS` in all."""
        if match is None:
            same = [j for j, r in enumerate(records) if r.get("head") == record["head"]]
            match = same[-1] if same else None
        others = [r for j, r in enumerate(records) if j != match]
        return {"records": [*others, record][-_RUNNABLE_RECORDS:]}

    def _managed(self, value: Any, config: RunnableConfig) -> list[BaseMessage]:
        ac = self.autocontext
        thread_id = self.thread_of(config)
        messages = _checked(_as_messages(value))
        store = ac.resolve_store()
        with store.working_lock(thread_id):
            records = self._records(store.get(self._ns(store, thread_id), _RUNNABLE_KEY))
            plan = self._plan(messages, thread_id, records)
            held = [store.get_history_message(thread_id, str(m.id)) is not None for m in plan.fresh]
            work = plan.work(held)
            result = ac.compress(
                work,
                thread_id=thread_id,
                store=store,
                view=False,
                request_only=plan.request_only,
            )
            value = self._kept(records, plan.match, plan.record(result.messages))
            store.put(self._ns(store, thread_id), _RUNNABLE_KEY, value, index=False, ttl=None)
        return result.messages

    async def _amanaged(self, value: Any, config: RunnableConfig) -> list[BaseMessage]:
        ac = self.autocontext
        thread_id = self.thread_of(config)
        messages = _checked(_as_messages(value))
        store = ac.resolve_store()
        async with store.aworking_lock(thread_id):
            records = self._records(await store.aget(self._ns(store, thread_id), _RUNNABLE_KEY))
            plan = self._plan(messages, thread_id, records)
            held = [
                await store.aget_history_message(thread_id, str(m.id)) is not None
                for m in plan.fresh
            ]
            work = plan.work(held)
            result = await ac.acompress(
                work,
                thread_id=thread_id,
                store=store,
                view=False,
                request_only=plan.request_only,
            )
            value = self._kept(records, plan.match, plan.record(result.messages))
            await store.aput(
                self._ns(store, thread_id), _RUNNABLE_KEY, value, index=False, ttl=None
            )
        return result.messages

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Compress ``input`` for the next model call of the thread."""
        # langchain-core passes config= to a function that takes it (its annotation omits that)
        return self._call_with_config(self._managed, input, config, **kwargs)  # type: ignore[arg-type]

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Async twin of :meth:`invoke`."""
        # langchain-core passes config= to a function that takes it (its annotation omits that)
        return await self._acall_with_config(self._amanaged, input, config, **kwargs)  # type: ignore[arg-type]
