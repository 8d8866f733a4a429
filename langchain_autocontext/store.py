"""`OffloadStore`: a LangGraph ``BaseStore`` holding history, offloads and events.

``OffloadStore`` wraps any backend store (``InMemoryStore`` by default,
``SqliteStore``/``AsyncSqliteStore``, ``PostgresStore``…) and is itself a
:class:`~langgraph.store.base.BaseStore`: every generic operation is delegated to
the backend, so it can be passed to ``graph.compile(store=…)`` and read back in a
node with ``get_store()``. On top it adds typed, thread-scoped helpers, each with
an ``a``-prefixed async twin of identical semantics.

Layout (``prefix`` defaults to ``"autocontext"``; the thread id is encoded with
:func:`encode_thread_id` because LangGraph namespace labels may not contain
``"."``)::

    (prefix, thread, "history")  key = message id   one item per original message
    (prefix, thread, "offload")  key = uuid4        offloaded originals + preview
                                                    (+ "ref": what the context shows)
    (prefix, thread, "events")   key = seq-uuid     compression events
    (prefix, thread, "meta")     key = kind         {"next_seq": n} per kind

Every value is plain JSON. Sequence numbers are allocated from the ``meta``
counters, so ordering never depends on the backend's result order (SQLite and
Postgres sort by update time); reads select ``seq`` ranges with the store's
``$gte``/``$lt`` filters and sort. The filters run on ``seq_key``, a fixed-width
digit string copy of ``seq``, because backends compare filter values differently
(``PostgresStore`` compares them as text, so ``"9" >= "10"``).

Concurrency: the counters are read-modify-write. Writers of one thread of one
backend inside one process are serialized by lock striping (sync and async callers,
and every wrapper of the backend, share the locks, which an async caller awaits
without blocking its event loop; a cancelled async writer keeps its
lock until its write has landed); LangGraph runs one run per thread at a time, so several processes
writing the same thread at once are not expected. If that happens anyway, the
worst case is two items with the same ``seq`` (ordered by key then): history
items are keyed by message id and offloads/events by fresh uuids, so nothing
is overwritten.

Over 600 lines because :class:`OffloadStore` offers every operation twice, sync and
async, each pair driven from one plan (history, offloads, events, sequence counters,
thread deletion), and delegates the whole ``BaseStore`` interface to its backend: the
layout above stays consistent when it is written in one place.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Callable,
    Generator,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.memory import InMemoryStore

from langchain_autocontext.errors import AmbiguousOffloadRefError, OffloadNotFoundError
from langchain_autocontext.messages import (
    UUID4_RE,
    dump_message,
    is_context_edit,
    is_rewrite,
    load_message,
    new_id,
    new_uuid,
    sent_calls,
    text_of,
)
from langchain_autocontext.records import EventRecord, HistoryEntry, OffloadRecord, _int_or_none

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = [
    "OFFLOAD_REF_LENGTH",
    "EventRecord",
    "HistoryEntry",
    "OffloadRecord",
    "OffloadStore",
    "decode_thread_id",
    "encode_thread_id",
    "offload_ref",
]

_log = logging.getLogger(__name__)

Kind = Literal["history", "offload", "events", "meta"]
HISTORY: Kind = "history"
OFFLOAD: Kind = "offload"
EVENTS: Kind = "events"
META: Kind = "meta"

_T = TypeVar("_T")
_M = TypeVar("_M", bound=BaseMessage)
#: A "sans-I/O" plan: yields lists of store ops, receives their results, returns a value.
#: The same plan runs synchronously (``batch``) or asynchronously (``abatch``), which
#: is how the ``a``-prefixed twins keep identical semantics.
_Plan = Generator[list[Op], list[Result], _T]


def _searched(result: Result) -> list[SearchItem]:
    """The result of a ``SearchOp`` (a plan receives each op's result as a ``Result``)."""
    return cast("list[SearchItem]", result)


#: Zero-padded copy of ``seq`` used in range filters. Backends compare filter values
#: differently (InMemoryStore as floats, SqliteStore as numbers or text, PostgresStore
#: as *text*: ``value->>'seq' >= '10'``); fixed-width digit strings order the same way
#: under all three.
_SEQ_KEY = "seq_key"
_SEQ_WIDTH = 15
_RESERVED_EVENT_KEYS = frozenset({"seq", _SEQ_KEY, "ts"})

#: Characters of an offload's id that the context shows in its note: the first eight of
#: the uuid4, 32 random bits. The whole id is about 24 tokens, these about 6, and every
#: masked tool result carries a note (on the coding runs of ``../shared/data`` at 16k,
#: the notes took 300 of a call's tokens with whole ids, 185 with these). :meth:`OffloadStore.reload`
#: takes either: the id, else the one offload of the thread whose id starts with it.
OFFLOAD_REF_LENGTH = 8
_OFFLOAD_REF_RE = re.compile(r"^[0-9a-f]{8}[0-9a-f-]{0,27}$")


def offload_ref(offload_id: str) -> str:
    """How the context names an offload: the first :data:`OFFLOAD_REF_LENGTH` characters
    of its uuid4 id (an id of another form, whole). Unique enough to name it (an
    ambiguous one is an :class:`~langchain_autocontext.errors.AmbiguousOffloadRefError`
    naming every candidate, never a wrong reload)."""
    if UUID4_RE.match(offload_id):
        return offload_id[:OFFLOAD_REF_LENGTH]
    return offload_id


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _SharedLock:
    """A lock that threads and coroutines share. A thread takes it with ``with lock:``
    (blocking, as a ``threading.Lock``); a coroutine with ``async with lock.ahold()``,
    which waits on its event loop without blocking it: woken by the release, not polled,
    and never holding the lock once cancelled. Not reentrant."""

    __slots__ = ("_guard", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard = threading.Lock()  # guards _waiters
        #: the coroutines waiting: each one's loop and the future it awaits
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    def locked(self) -> bool:
        return self._lock.locked()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """Release, and wake every waiting coroutine: each tries again (threads waiting
        in :meth:`acquire` are woken by the lock itself)."""
        self._lock.release()
        with self._guard:
            waiters, self._waiters = self._waiters, set()
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                loop.call_soon_threadsafe(_wake, waiter)

    def __enter__(self) -> _SharedLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def aacquire(self) -> None:
        """Take the lock from a coroutine (see the class)."""
        loop = asyncio.get_running_loop()
        while not self._lock.acquire(blocking=False):
            entry = (loop, loop.create_future())
            with self._guard:
                self._waiters.add(entry)
            try:
                # released between the try above and the registration: no wake comes
                if self._lock.acquire(blocking=False):
                    return
                await entry[1]
            finally:
                with self._guard:
                    self._waiters.discard(entry)

    @asynccontextmanager
    async def ahold(self) -> AsyncIterator[None]:
        """Hold the lock from a coroutine (see the class)."""
        await self.aacquire()
        try:
            yield
        finally:
            self.release()


class _KeyedLocks:
    """One lock per key, alive while someone holds or waits for it.

    Two different keys never share a lock: a thread that holds its lock across a slow
    summarizer call keeps no other thread waiting, which a fixed set of hash-striped
    locks cannot promise (two threads in one stripe, about 1 in 64, ran one after the
    other). The entry of a key goes when its last user leaves, so the registry holds
    only the keys in use. A key may name a backend by ``id()``: its users hold the
    backend, so the id is not reused while the entry lives.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[Hashable, tuple[_SharedLock, int]] = {}  # key -> lock, users

    def _checkout(self, key: Hashable) -> _SharedLock:
        with self._guard:
            lock, users = self._entries.get(key) or (_SharedLock(), 0)
            self._entries[key] = (lock, users + 1)
            return lock

    def _checkin(self, key: Hashable) -> None:
        with self._guard:
            lock, users = self._entries[key]
            if users > 1:
                self._entries[key] = (lock, users - 1)
            else:
                del self._entries[key]

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        lock = self._checkout(key)
        try:
            with lock:
                yield
        finally:
            self._checkin(key)

    @asynccontextmanager
    async def ahold(self, key: Hashable) -> AsyncIterator[None]:
        lock = self._checkout(key)
        try:
            async with lock.ahold():
                yield
        finally:
            self._checkin(key)


#: Locks of the read-modify-write of a thread's counters, by backend, prefix, thread
#: and kind, module-wide: two wrappers of one backend (two AutoContexts sharing a
#: store, an agent and its subagent) must exclude each other, or both hand out a seq.
_STORE_LOCKS = _KeyedLocks()
#: Locks of the surfaces that keep a thread's working messages in the store (see
#: :meth:`OffloadStore.working_lock`), by backend and thread.
_SURFACE_LOCKS = _KeyedLocks()
#: Worker threads of the async calls of a backend without async support (SqliteStore):
#: their own, not the event loop's default executor, which a hung sync model call or
#: LangGraph's sync nodes can fill, leaving every store write queued behind them.
_SYNC_BACKEND_POOL = concurrent.futures.ThreadPoolExecutor(
    max_workers=8, thread_name_prefix="autocontext-store"
)


# --- thread ids ---------------------------------------------------------------------
_ESCAPES = {"%": "%25", ".": "%2E", "\x00": "%00"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
_UNESCAPE_RE = re.compile("|".join(re.escape(v) for v in _UNESCAPES))


def encode_thread_id(thread_id: str) -> str:
    """Encode a thread id into a valid LangGraph namespace label (reversibly).

    Labels may not contain ``"."`` or NUL and may not be empty; ``"%"``, ``"."`` and
    NUL are percent-encoded, everything else (``"/"``, unicode, …) is kept.

    Raises:
        ValueError: the thread id is empty or not a string.
    """
    if not isinstance(thread_id, str):
        raise ValueError(
            f"thread_id must be a non-empty string, got {type(thread_id).__name__}: "
            f"{thread_id!r} (LangGraph's config['configurable']['thread_id'])"
        )
    if not thread_id:
        raise ValueError(
            "thread_id must be a non-empty string: the history, offloads and events "
            "of a run are stored per thread (config['configurable']['thread_id'])"
        )
    return thread_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")


def decode_thread_id(label: str) -> str:
    """Inverse of :func:`encode_thread_id`."""
    return _UNESCAPE_RE.sub(lambda m: _UNESCAPES[m.group(0)], label)


# --- helpers --------------------------------------------------------------------------
#: Key of the plain-JSON stand-in of a value JSON cannot hold (see :func:`plain_json`).
SERIALIZED_KEY = "__autocontext_serde__"
_SERDE: Any = None


def _serde() -> Any:
    global _SERDE
    if _SERDE is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        _SERDE = JsonPlusSerializer()
    return _SERDE


def _encode(obj: Any) -> dict[str, Any]:
    """A value JSON cannot hold (``datetime``, ``Decimal``, ``bytes``, sets, pydantic
    models… in a tool's artifact or a message's ``additional_kwargs``), encoded by
    LangGraph's own checkpoint serializer; what even that cannot encode is kept as a
    marker with its type and ``repr`` (never an error that stops the thread)."""
    try:
        typ, data = _serde().dumps_typed(obj)
        return {SERIALIZED_KEY: typ, "data": base64.b64encode(data).decode("ascii")}
    except Exception:
        return {
            SERIALIZED_KEY: "unserializable",
            "type": type(obj).__name__,
            "repr": repr(obj)[:2_000],
        }


def _batch(batch_size: int | None, start: int, end: int) -> int:
    """The read size of :meth:`OffloadStore.iter_history`: the whole range by default."""
    if batch_size is None:
        return max(1, end - start)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return batch_size


def revive(value: Any) -> Any:
    """Inverse of the encoding in :func:`plain_json`: stand-ins back to their values (a
    marker of an unserializable value stays a marker)."""
    if isinstance(value, dict):
        typ = value.get(SERIALIZED_KEY)
        if isinstance(typ, str) and typ != "unserializable" and isinstance(value.get("data"), str):
            try:
                return _serde().loads_typed((typ, base64.b64decode(value["data"])))
            except Exception:
                return value
        return {k: revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [revive(v) for v in value]
    return value


#: The integers every backend's JSON holds: SQLite's (orjson) stops at 64 bits.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def _json_standin(text: str) -> dict[str, Any]:
    """The stand-in of a JSON number not every backend holds: its text, which
    :func:`revive` reads back with Python's ``json`` (as LangGraph's serializer does)."""
    return {SERIALIZED_KEY: "json", "data": base64.b64encode(text.encode("ascii")).decode("ascii")}


def _portable_int(text: str) -> Any:
    """A JSON integer as :func:`plain_json` keeps it: beyond 64 bits, a stand-in."""
    n = int(text)
    return n if _INT_MIN <= n <= _INT_MAX else _json_standin(text)


def plain_json(value: Any, what: str) -> Any:
    """Return ``value`` as plain JSON (lists, dicts, str, numbers).

    Normalizing here makes every backend behave alike (``InMemoryStore`` would keep
    tuples and arbitrary objects that SQLite and Postgres cannot hold). Values JSON
    cannot hold are encoded (:func:`_encode`) and come back with :func:`revive`: so
    are the numbers a backend would refuse or change, ``NaN`` and ``±Infinity``
    (SQLite stored ``null``, Postgres refused them) and integers beyond 64 bits
    (SQLite refused them).
    """
    try:
        return json.loads(
            json.dumps(value, ensure_ascii=False, default=_encode),
            parse_int=_portable_int,
            parse_constant=_json_standin,  # NaN, Infinity, -Infinity
        )
    except (TypeError, ValueError) as exc:  # e.g. a circular structure
        raise TypeError(f"{what} cannot be stored as JSON ({exc})") from exc


def _check_message(message: Any, where: str) -> BaseMessage:
    if isinstance(message, RemoveMessage):
        raise ValueError(
            f"{where}: RemoveMessage (id={message.id!r}) is an instruction to delete a "
            "working message, not a message: it is never stored as history or offloaded"
        )
    if not isinstance(message, BaseMessage):
        raise TypeError(f"{where}: expected a LangChain BaseMessage, got {type(message).__name__}")
    return message


#: In-process caches of a thread's data, dropped when the thread is deleted: callables
#: ``(store, thread_id)`` registered by the modules that keep them.
_THREAD_CACHES: list[Callable[[OffloadStore, str], None]] = []


def on_thread_deleted(drop: Callable[[OffloadStore, str], None]) -> None:
    """Register ``drop(store, thread_id)``, called by :meth:`OffloadStore.delete_thread`."""
    _THREAD_CACHES.append(drop)


def _drop_thread_caches(store: OffloadStore, thread_id: str) -> None:
    for drop in list(_THREAD_CACHES):
        drop(store, thread_id)


def _search_text(message: BaseMessage) -> str:
    """Flattened text of a message for search: content plus tool-call names and args."""
    text = text_of(message)
    sent = sent_calls(message)  # the calls whose arguments did not parse too
    if sent:
        calls = [
            f"{tc.get('name') or ''}({json.dumps(tc.get('args', {}), ensure_ascii=False, default=str)})"
            for tc in sent
        ]
        text = "\n".join([text, *calls]) if text else "\n".join(calls)
    return text


def _version_digest(dumped: Any) -> str | None:
    """What makes two stored versions of one message differ (its type, content and tool
    calls, as :func:`plain_json` stores them), as a short digest; None for a value not
    written by this module."""
    data = dumped.get("data") if isinstance(dumped, dict) else None
    if not isinstance(data, dict):
        return None
    held = [dumped.get("type"), data.get("content"), data.get("tool_calls") or []]
    text = json.dumps(held, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _content_id(dumped: list[Any], *fields: Any) -> str:
    """The offload id of :meth:`OffloadStore.offload` with ``reuse=True``: a uuid of the
    messages' :func:`_version_digest` s (their ids aside) and the record's other
    ``fields``, unguessable without the content."""
    held = [[_version_digest(d) for d in dumped], *fields]
    text = json.dumps(held, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _holds(dumped: Any, message: BaseMessage) -> bool:
    """Whether ``dumped`` (a stored version, as :func:`plain_json` wrote it) holds what
    :func:`_version_digest` compares of ``message`` (type, content, tool calls), read
    without serializing ``message``: most messages an archive call is handed unchanged
    are compared here. False when in doubt (the digests decide)."""
    data = dumped.get("data") if isinstance(dumped, dict) else None
    if not isinstance(data, dict) or dumped.get("type") != message.type:
        return False
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return data.get("content") == message.content and (data.get("tool_calls") or []) == calls


def version_key(message_id: str, digest: str) -> str:
    """The history key of a later version of the message ``message_id`` (an edit that
    reused its id): the id, ``~`` and a digest of what that version holds."""
    return f"{message_id}~{digest}"


def message_version_key(message: BaseMessage) -> str:
    """The history key ``message`` (an id and a content) is held under when the history
    keeps it as a later version of its id (:meth:`OffloadStore.append_history`); a
    content that is the first version is held under the id itself."""
    dumped = plain_json(dump_message(message), f"message {message.id!r}")
    digest = _version_digest(dumped)
    assert digest is not None  # pragma: no cover - dump_message writes type and data
    return version_key(str(message.id), digest)


#: Key in ``additional_kwargs`` of this package's rewrite of a working copy under its id
#: (:func:`~langchain_autocontext.messages.is_rewrite`): the history key of the version
#: it was made of (:func:`made_of`), which search says is in the context "shortened".
MADE_OF_KEY = "autocontext_made_of"


def made_of(rewrite: _M, source: BaseMessage) -> _M:
    """``rewrite`` (this package's rewrite of the working copy ``source``, same id)
    naming the version it was made of under :data:`MADE_OF_KEY`: the one ``source``
    names when it is a rewrite itself, else :func:`message_version_key` of ``source``
    (a key the history holds when the content is a later version; the first version's
    content is held under the id). The working copy is archived before it is
    rewritten, so the version is in the history; which one it is cannot be told from
    the history alone (a message edited back to an earlier content adds nothing)."""
    if is_rewrite(source):
        key = source.additional_kwargs.get(MADE_OF_KEY)
        if not isinstance(key, str):
            return rewrite
    else:
        key = message_version_key(source)
    if rewrite.additional_kwargs.get(MADE_OF_KEY) == key:
        return rewrite
    return rewrite.model_copy(
        update={"additional_kwargs": {**rewrite.additional_kwargs, MADE_OF_KEY: key}}
    )


def _chunks(seq: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _next_seq_of(meta: Result) -> int | None:
    if isinstance(meta, Item):
        value = meta.value.get("next_seq")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _check_range(start: Any, end: Any) -> None:
    """A history range's bounds: non-negative ints (``end`` may be ``None``). Checked
    here, before any read, so every backend answers a bad one alike (a float ``end``
    was a slicing TypeError in memory and "datatype mismatch" from SQLite)."""
    for name, value in (("start", start), ("end", end)):
        if value is None and name == "end":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"history range bounds must be ints, got {name}={value!r}")
    if start < 0 or (end is not None and end < 0):
        raise ValueError(f"history range must be non-negative, got start={start}, end={end}")


def _seq_key(seq: int) -> str:
    return f"{seq:0{_SEQ_WIDTH}d}"


def _seq_fields(seq: int) -> dict[str, Any]:
    return {"seq": seq, _SEQ_KEY: _seq_key(seq)}


def _seq_range(start: int, end: int | None = None) -> dict[str, Any]:
    cond = {"$gte": _seq_key(start)}
    if end is not None:
        cond["$lt"] = _seq_key(end)
    return {_SEQ_KEY: cond}


def _sorted_items(items: Iterable[Item]) -> list[Item]:
    return sorted(items, key=lambda it: (int(it.value["seq"]), it.key))


# --- the store ------------------------------------------------------------------------
async def _finished(pending: asyncio.Future[_T]) -> _T:
    """The result of ``pending``; a caller cancelled meanwhile waits for the write to
    land before the cancellation goes on, so the thread's lock is not released while
    the write still runs (a retry would then hand out the same seq)."""
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait({pending})
        raise


def prefix_problem(prefix: Any) -> str | None:
    """What is wrong with ``prefix`` as the first element of the package's namespaces
    (``None``: nothing). LangGraph's stores reject a '.' in a namespace label and
    reserve ``langgraph``; '/' and NUL would break the thread-id encoding."""
    if (
        not isinstance(prefix, str)
        or not prefix.strip()
        or any(c in prefix for c in "./\x00")
        or prefix == "langgraph"
    ):
        return (
            "must be a non-blank string without '.', '/' or NUL and not 'langgraph', "
            f"got {prefix!r}"
        )
    return None


def run_config() -> RunnableConfig | None:
    """The config of the LangGraph run (any Runnable) this is called in; ``None``
    outside one."""
    try:
        return get_config()
    except RuntimeError:  # not inside a runnable
        return None


def stream_writer() -> Callable[[Any], None] | None:
    """The custom stream writer of the LangGraph run this is called in (what a caller
    streaming with ``stream_mode="custom"`` receives; LangGraph's no-op when it does not
    stream that mode), wrapped so that writing never raises into the run; ``None``
    outside a graph run (no run, or a plain Runnable chain outside any graph)."""
    if run_config() is None:
        return None
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError, AttributeError):  # a Runnable outside a graph
        return None

    def write(chunk: Any) -> None:
        try:
            writer(chunk)
        except Exception:  # progress is a courtesy: never the reason a run fails
            _log.debug("langchain-autocontext: the custom stream refused a chunk", exc_info=True)

    return write


def running_agent() -> str | None:
    """The name of the LangChain agent whose run is executing here: ``create_agent``'s
    ``name``, which LangChain puts in the run's ``metadata["lc_agent_name"]`` (a
    named subagent run inside a tool has its own; an unnamed one inherits its caller's).
    None outside a run, or in an unnamed agent that no named one runs.
    A subagent usually shares its caller's thread, so its events join the caller's:
    this tells them apart."""
    config = run_config()
    if config is None:
        return None
    name = (config.get("metadata") or {}).get("lc_agent_name")
    return name if isinstance(name, str) and name else None


def stored_agent(value: Mapping[str, Any]) -> str | None:
    """The agent a stored history item or event names (``None`` for what was written
    outside a named agent, or before the store recorded agents)."""
    agent = value.get("agent")
    return agent if isinstance(agent, str) else None


class OffloadStore(BaseStore):
    """A ``BaseStore`` wrapping any backend, with typed per-thread helpers.

    The one way to get it: ``store = OffloadStore(backend)``, passed to
    ``AutoContext(store=store)`` and to the graph (``graph.compile(store=store)``,
    ``create_agent(..., store=store)``), and read from directly. Its helpers return
    records: :class:`EventRecord`, :class:`OffloadRecord`, :class:`HistoryEntry`. Code
    that only has a backend can ask ``ac.resolve_store(backend)`` for the store an
    ``AutoContext`` uses (its prefix included); :meth:`wrap` stays for the same job.

    Args:
        backend: the store that holds the data; a new ``InMemoryStore`` when omitted.
        prefix: first label of every namespace this class writes (lets several apps
            share one backend). Must be non-empty, without ``"."``, ``"/"`` or NUL,
            and not ``"langgraph"``.

    Generic ``BaseStore`` operations (``get``/``put``/``search``/``batch``…) go to the
    backend unchanged, as do ``supports_ttl``, ``ttl_config`` and ``index_config``.
    Items written by the helpers never expire (``ttl=None``): the package promises
    that originals stay reachable. When the backend only implements sync
    ``batch`` (``SqliteStore``), async calls run it in a worker thread.
    """

    #: Maximum ops per backend ``batch`` call (SQLite caps the parameters of a query).
    max_batch_ops: int = 500

    def __init__(self, backend: BaseStore | None = None, *, prefix: str = "autocontext") -> None:
        if backend is None:
            backend = InMemoryStore()
        if not isinstance(backend, BaseStore):
            raise TypeError(f"backend must be a langgraph BaseStore, got {type(backend).__name__}")
        problem = prefix_problem(prefix)
        if problem:
            raise ValueError(f"prefix {problem}")
        self._backend = backend
        self._prefix = prefix
        self._async_via_thread = False

    @classmethod
    def wrap(cls, store: BaseStore | None = None, *, prefix: str = "autocontext") -> OffloadStore:
        """Return ``store`` itself if it is an ``OffloadStore`` with ``prefix``, else wrap it.

        An ``OffloadStore`` with another prefix is re-wrapped around its backend (no
        double delegation); ``None`` gives a new in-memory store.
        """
        if isinstance(store, OffloadStore):
            if store.prefix == prefix:
                return store
            return cls(store.backend, prefix=prefix)
        return cls(store, prefix=prefix)

    # --- properties passed through ------------------------------------------------------
    @property
    def backend(self) -> BaseStore:
        """The wrapped store."""
        return self._backend

    @property
    def prefix(self) -> str:
        """First label of every namespace written by the helpers."""
        return self._prefix

    @property
    def supports_ttl(self) -> bool:  # type: ignore[override]  # read-only: the backend's
        """Whether the backend supports TTLs (passed through)."""
        return bool(getattr(self._backend, "supports_ttl", False))

    @property
    def ttl_config(self) -> TTLConfig | None:
        """The backend's TTL configuration (passed through)."""
        return getattr(self._backend, "ttl_config", None)

    @ttl_config.setter
    def ttl_config(self, value: TTLConfig | None) -> None:
        # BaseStore declares ttl_config beside its __slots__: the stores with TTLs
        # (PostgresStore, SqliteStore) keep it per instance, InMemoryStore refuses it
        self._backend.ttl_config = value  # type: ignore[misc]

    @property
    def index_config(self) -> Any:
        """The backend's semantic-index configuration, or ``None``."""
        return getattr(self._backend, "index_config", None)

    def __repr__(self) -> str:
        return f"OffloadStore({self._backend!r}, prefix={self._prefix!r})"

    # --- BaseStore ------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Execute ops on the backend (see :meth:`BaseStore.batch`)."""
        return self._backend.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Execute ops on the backend asynchronously (see :meth:`BaseStore.abatch`).

        A backend without async support (``SqliteStore.abatch`` raises
        ``NotImplementedError``) runs its sync ``batch`` in a worker thread.
        """
        ops = list(ops)
        if not self._async_via_thread:
            try:
                return await _finished(asyncio.ensure_future(self._backend.abatch(ops)))
            except NotImplementedError:
                self._async_via_thread = True
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, self._backend.batch, ops)
        return await _finished(loop.run_in_executor(_SYNC_BACKEND_POOL, call))

    # --- deleting a thread ------------------------------------------------------------------
    def thread_namespace(self, thread_id: str) -> tuple[str, str]:
        """``(prefix, encoded thread id)``: the namespace prefix of everything this package
        keeps for the thread (history, offloads, events, surface records)."""
        return (self._prefix, encode_thread_id(thread_id))

    def delete_thread(self, thread_id: str) -> int:
        """Delete everything this package keeps for ``thread_id`` and drop every
        in-process cache of it (search index, archived-ids memo, request shapes), so a
        thread id used again starts empty. Returns how many items were deleted. The
        graph's checkpoints are the checkpointer's: delete them with it
        (``checkpointer.delete_thread(thread_id)``)."""
        deleted = self._run(self._delete_plan(thread_id))
        _drop_thread_caches(self, thread_id)
        return deleted

    async def adelete_thread(self, thread_id: str) -> int:
        """Async twin of :meth:`delete_thread` (a backend without async support, such as
        ``SqliteStore``, runs in a worker thread, as every async call here does)."""
        deleted = await self._arun(self._delete_plan(thread_id))
        _drop_thread_caches(self, thread_id)
        return deleted

    def _delete_plan(self, thread_id: str) -> _Plan[int]:
        """Pages of the thread's items, each deleted in one batch (one round trip per
        page, not one per item: a 60,000-message thread on a remote Postgres)."""
        prefix = self.thread_namespace(thread_id)
        deleted = 0
        while True:
            found = yield [SearchOp(prefix, None, self.max_batch_ops, 0, None, False)]
            items = _searched(found[0])
            if not items:
                return deleted
            yield [PutOp(item.namespace, item.key, None) for item in items]
            deleted += len(items)

    # --- namespaces ----------------------------------------------------------------------
    def namespace(self, thread_id: str, kind: Kind) -> tuple[str, str, str]:
        """The namespace of one kind of data of a thread, e.g. ``(prefix, tid, "history")``.

        Useful for direct ``search`` (e.g. semantic search of ``"text"``) by other modules.
        """
        if kind not in (HISTORY, OFFLOAD, EVENTS, META):
            raise ValueError(f"unknown namespace kind {kind!r}")
        return (self._prefix, encode_thread_id(thread_id), kind)

    @property
    def _text_index(self) -> Literal[False] | list[str]:
        return ["text"] if self.index_config else False

    # --- drivers: run a plan sync or async ------------------------------------------------
    def _run(self, plan: _Plan[_T]) -> _T:
        try:
            ops = next(plan)
            while True:
                ops = plan.send(self.batch(ops))
        except StopIteration as stop:
            return stop.value
        finally:
            plan.close()

    async def _arun(self, plan: _Plan[_T]) -> _T:
        try:
            ops = next(plan)
            while True:
                ops = plan.send(await self.abatch(ops))
        except StopIteration as stop:
            return stop.value
        finally:
            plan.close()

    def _lock_key(self, thread_id: str, kind: Kind) -> Hashable:
        return (id(self._backend), self._prefix, encode_thread_id(thread_id), kind)

    @contextmanager
    def _locked(self, thread_id: str, kind: Kind) -> Iterator[None]:
        with _STORE_LOCKS.hold(self._lock_key(thread_id, kind)):
            yield

    def _surface_key(self, thread_id: str) -> Hashable:
        # keyed by the backend, not this wrapper: two wrappers of one backend (two
        # AutoContexts, a store passed unwrapped) share the lock
        return (id(self._backend), encode_thread_id(thread_id))

    @contextmanager
    def working_lock(self, thread_id: str) -> Iterator[None]:
        """Hold while reading, compressing and writing back a thread's working messages
        kept in this store (the chat history, the Runnable): two writers of one session
        in this process would otherwise both read the same record and the second write
        would drop the first one's turns from the working messages (the history keeps
        them). Not reentrant; separate from the locks of the store's own writes."""
        with _SURFACE_LOCKS.hold(self._surface_key(thread_id)):
            yield

    @asynccontextmanager
    async def aworking_lock(self, thread_id: str) -> AsyncIterator[None]:
        """Async twin of :meth:`working_lock` (the same locks, awaited so the event loop
        never blocks and a cancelled waiter never holds one)."""
        async with _SURFACE_LOCKS.ahold(self._surface_key(thread_id)):
            yield

    @contextmanager
    def archive_lock(self, thread_id: str) -> Iterator[None]:
        """Hold while comparing a thread's messages with what an engine remembers
        archiving and appending the rest (:meth:`AutoContext.archive`): the parallel tool
        calls of one reply each archive it before their tool runs, and would otherwise
        all find it new, each reading the store and planning an append; one that waits
        finds it remembered. Not reentrant; separate from the locks of the store's own
        writes and from :meth:`working_lock`."""
        with _STORE_LOCKS.hold(("archive", self._lock_key(thread_id, HISTORY))):
            yield

    @asynccontextmanager
    async def aarchive_lock(self, thread_id: str) -> AsyncIterator[None]:
        """Async twin of :meth:`archive_lock` (the same locks, awaited)."""
        async with _STORE_LOCKS.ahold(("archive", self._lock_key(thread_id, HISTORY))):
            yield

    @asynccontextmanager
    async def _alocked(self, thread_id: str, kind: Kind) -> AsyncIterator[None]:
        async with _STORE_LOCKS.ahold(self._lock_key(thread_id, kind)):
            yield

    # --- plans: shared building blocks ------------------------------------------------------
    def _exists_from(self, ns: tuple[str, ...], seq: int) -> _Plan[bool]:
        found = yield [SearchOp(ns, _seq_range(seq), 1, 0, None, False)]
        return bool(found[0])

    def _recover_next_seq(self, ns: tuple[str, ...]) -> _Plan[int]:
        """1 + the largest ``seq`` in ``ns`` (0 when empty), by exponential+binary search.

        Only used when the counter item is missing (new thread, or data written
        without it); a new thread costs one empty search.
        """
        if not (yield from self._exists_from(ns, 0)):
            return 0
        lo, hi = 0, 1  # invariant: an item with seq >= lo exists, none with seq >= hi
        while (yield from self._exists_from(ns, hi)):
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (yield from self._exists_from(ns, mid)):
                lo = mid
            else:
                hi = mid
        return hi

    def _next_seq_plan(self, thread_id: str, kind: Kind, meta: Result) -> _Plan[int]:
        known = _next_seq_of(meta)
        if known is not None:
            return known
        return (yield from self._recover_next_seq(self.namespace(thread_id, kind)))

    def _end_plan(self, thread_id: str, kind: Kind) -> _Plan[int]:
        meta = yield [GetOp(self.namespace(thread_id, META), kind, False)]
        return (yield from self._next_seq_plan(thread_id, kind, meta[0]))

    def _range_plan(
        self, ns: tuple[str, ...], start: int, end: int, whole: bool = False
    ) -> _Plan[list[Item]]:
        """Items with ``start <= seq < end``, sorted by seq (never by backend order).

        ``whole``: the range is (about) the whole namespace, so it is read without a
        filter and cut here (a backend's filter costs more than the cut when every item
        matches, e.g. ``InMemoryStore`` compares each item's ``seq_key`` in Python)."""
        if end <= start:
            return []
        # seqs are unique, so at most end - start items match; a full page means
        # duplicated seqs (concurrent writers), or items past ``end`` in an unfiltered
        # read: ask again for more.
        limit = end - start + 1
        where = None if whole else _seq_range(start, end)
        while True:
            found = yield [SearchOp(ns, where, limit, 0, None, False)]
            items = _searched(found[0])
            if len(items) < limit:
                if whole:
                    items = [it for it in items if start <= int(it.value["seq"]) < end]
                return _sorted_items(items)
            limit *= 2

    def _all_plan(self, thread_id: str, kind: Kind) -> _Plan[list[Item]]:
        end = yield from self._end_plan(thread_id, kind)
        return (yield from self._range_plan(self.namespace(thread_id, kind), 0, end))

    def _write_plan(self, ops: list[Op]) -> _Plan[None]:
        for chunk in _chunks(ops, self.max_batch_ops):
            yield list(chunk)

    # --- history ----------------------------------------------------------------------------
    def _append_plan(
        self, thread_id: str, messages: Sequence[BaseMessage], agent: str | None = None
    ) -> _Plan[list[str]]:
        ns = self.namespace(thread_id, HISTORY)
        meta_ns = self.namespace(thread_id, META)
        # Validate everything before any I/O: a bad message writes nothing.
        unique: dict[str, BaseMessage] = {}
        for i, m in enumerate(messages):
            m = _check_message(m, f"append_history: message {i}")
            if not isinstance(m.id, str) or not m.id:
                raise ValueError(
                    f"append_history: message {i} ({m.type}) has no id; history items "
                    "are keyed by message id (LangGraph's add_messages assigns uuid4 ids; "
                    "or use langchain_autocontext.messages.ensure_ids)"
                )
            unique.setdefault(m.id, m)  # first occurrence wins, as across calls
        if not unique:
            return []
        ids = list(unique)
        dumped: dict[str, Any] = {}

        def dump(mid: str) -> Any:  # serialized once, and only when compared or written
            if mid not in dumped:
                dumped[mid] = plain_json(dump_message(unique[mid]), f"message {mid!r}")
            return dumped[mid]

        held: dict[str, Item] = {}
        meta: Result = None
        for n, chunk in enumerate(_chunks(ids, self.max_batch_ops)):
            ops: list[Op] = [GetOp(ns, key, False) for key in chunk]
            if n == 0:
                ops.append(GetOp(meta_ns, HISTORY, False))
            results = yield ops
            if n == 0:
                meta = results.pop()
            held.update(
                (key, item)
                for key, item in zip(chunk, results, strict=True)
                if isinstance(item, Item)
            )
        # An id held with other content: a later version (an edit that reused the id),
        # kept under its own key unless that version is held already.
        versions: dict[str, str] = {}
        for mid in ids:
            if mid in held and not is_context_edit(unique[mid]):  # not this package's edit
                stored = held[mid].value.get("message")
                if _holds(stored, unique[mid]):
                    continue
                digest = _version_digest(dump(mid))
                if digest is not None and digest != _version_digest(stored):
                    versions[mid] = version_key(mid, digest)
        for chunk in _chunks(list(versions.values()), self.max_batch_ops):
            results = yield [GetOp(ns, key, False) for key in chunk]
            known = {key for key, item in zip(chunk, results, strict=True) if item}
            versions = {mid: key for mid, key in versions.items() if key not in known}
        new_keys = [
            (mid, versions[mid] if mid in held else mid)
            for mid in ids
            if mid not in held or mid in versions
        ]
        if not new_keys:
            return []
        values = [
            {
                "message": dump(mid),
                "type": unique[mid].type,
                "text": _search_text(unique[mid]),
                **({"version_of": mid} if key != mid else {}),
                **({"agent": agent} if agent else {}),
            }
            for mid, key in new_keys
        ]
        new_ids = [key for _, key in new_keys]
        seq = yield from self._next_seq_plan(thread_id, HISTORY, meta)
        now = time.time()
        # The counter goes first: should a multi-chunk write stop half-way, seqs are
        # skipped (harmless gaps), never handed out twice.
        writes: list[Op] = [
            PutOp(meta_ns, HISTORY, {"next_seq": seq + len(new_ids)}, index=False, ttl=None)
        ]
        index = self._text_index
        for i, (mid, value) in enumerate(zip(new_ids, values, strict=True)):
            writes.append(
                PutOp(ns, mid, {**_seq_fields(seq + i), **value, "ts": now}, index=index, ttl=None)
            )
        yield from self._write_plan(writes)
        return new_ids

    @staticmethod
    def _entry(item: Item) -> HistoryEntry:
        """The entry of a stored history item: the one place history messages are
        loaded, so every reader (``get_history``, ``iter_history``,
        ``get_history_message``, the chat history's ``original_messages``) agrees that a
        later version's message has its version key as its id."""
        value = item.value
        message = load_message(revive(value["message"]))
        of = value.get("version_of")
        if message.id != item.key:  # a later version: two messages would share one id
            message = message.model_copy(update={"id": item.key})
        return HistoryEntry(
            seq=int(value["seq"]),
            id=item.key,
            message=message,
            ts=float(value["ts"]),
            agent=stored_agent(value),
            version_of=of if isinstance(of, str) else None,
        )

    def _history_plan(
        self, thread_id: str, start: int, end: int | None
    ) -> _Plan[list[HistoryEntry]]:
        _check_range(start, end)
        if end is None:
            end = yield from self._end_plan(thread_id, HISTORY)
        items = yield from self._range_plan(self.namespace(thread_id, HISTORY), start, end)
        return [self._entry(item) for item in items]

    def _history_items_plan(self, thread_id: str, start: int, end: int) -> _Plan[list[Item]]:
        _check_range(start, end)
        ns = self.namespace(thread_id, HISTORY)
        return (yield from self._range_plan(ns, start, end, whole=start == 0))

    def _history_message_plan(self, thread_id: str, message_id: str) -> _Plan[HistoryEntry | None]:
        found = yield [GetOp(self.namespace(thread_id, HISTORY), str(message_id), False)]
        item = found[0]
        return self._entry(item) if isinstance(item, Item) else None

    def append_history(self, thread_id: str, messages: Sequence[BaseMessage]) -> list[str]:
        """Append original messages to the thread's history, one item per message.

        Idempotent by message id and content: an id already in the history (or
        repeated in ``messages``: the first occurrence counts) keeps its first content
        and seq under its id. A message that reuses a held id with other content (an
        edit, as LangGraph's ``add_messages`` makes one) is a later version: it is
        appended under its own key (:func:`version_key`: the id, ``~`` and a digest of
        the version; its item's ``version_of`` names the id), once per distinct
        content, so every content a message had stays readable and searchable. New
        items get strictly increasing seqs in the given order.

        Cost: one batched read of the candidate keys (+ the counter) and one batched
        write of the new items (+ the counter); an edited message costs one more read
        (of its version's key); nothing else is read or rewritten (batches are split
        every :attr:`max_batch_ops` ops).

        Appended inside a named agent's run, the entries name that agent
        (:attr:`HistoryEntry.agent`, from :func:`running_agent`): a subagent that shares
        its caller's thread archives into the same history.

        Returns:
            The keys newly written, in order: message ids, and the
            :func:`version_key` of each later version.

        Raises:
            ValueError: a message has no id, or is a ``RemoveMessage`` (nothing is written).
            TypeError: a message is not JSON-serializable (e.g. a ToolMessage artifact).
        """
        agent = running_agent()  # read here: the plan may run in another thread
        with self._locked(thread_id, HISTORY):
            return self._run(self._append_plan(thread_id, messages, agent))

    async def aappend_history(self, thread_id: str, messages: Sequence[BaseMessage]) -> list[str]:
        """Async twin of :meth:`append_history`."""
        agent = running_agent()
        async with self._alocked(thread_id, HISTORY):
            return await self._arun(self._append_plan(thread_id, messages, agent))

    def get_history(
        self, thread_id: str, *, start: int = 0, end: int | None = None
    ) -> list[HistoryEntry]:
        """History entries with ``start <= seq < end`` (all from ``start`` when ``end`` is None),
        ordered by seq."""
        return self._run(self._history_plan(thread_id, start, end))

    async def aget_history(
        self, thread_id: str, *, start: int = 0, end: int | None = None
    ) -> list[HistoryEntry]:
        """Async twin of :meth:`get_history`."""
        return await self._arun(self._history_plan(thread_id, start, end))

    def get_history_message(self, thread_id: str, message_id: str) -> HistoryEntry | None:
        """The history entry of one message id, or ``None``."""
        return self._run(self._history_message_plan(thread_id, message_id))

    async def aget_history_message(self, thread_id: str, message_id: str) -> HistoryEntry | None:
        """Async twin of :meth:`get_history_message`."""
        return await self._arun(self._history_message_plan(thread_id, message_id))

    def get_history_items(self, thread_id: str, *, start: int, end: int) -> list[Item]:
        """The stored items of the history entries with ``start <= seq < end``, by seq, as
        the backend returns them: ``value`` holds ``seq``, ``ts``, ``type``, ``text`` (the
        message's searchable text) and ``message`` (LangChain's message dict, its values
        JSON-encoded, see :func:`revive`).

        For readers that need a few fields of many messages (the search index) without
        building message objects. With ``start=0`` the namespace is read whole and cut
        to the range, so pass the thread's :meth:`history_count` as ``end`` there."""
        return self._run(self._history_items_plan(thread_id, start, end))

    async def aget_history_items(self, thread_id: str, *, start: int, end: int) -> list[Item]:
        """Async twin of :meth:`get_history_items`."""
        return await self._arun(self._history_items_plan(thread_id, start, end))

    def history_count(self, thread_id: str) -> int:
        """Number of items appended to the thread's history, later versions of edited
        messages included (read from the counter)."""
        return self._run(self._end_plan(thread_id, HISTORY))

    async def ahistory_count(self, thread_id: str) -> int:
        """Async twin of :meth:`history_count`."""
        return await self._arun(self._end_plan(thread_id, HISTORY))

    def iter_history(
        self,
        thread_id: str,
        *,
        start: int = 0,
        end: int | None = None,
        batch_size: int | None = None,
    ) -> Iterator[HistoryEntry]:
        """Yield history entries by seq, reading ``batch_size`` at a time (default: the
        whole range in one read).

        A range read filters on the ``seq_key`` field, which no LangGraph backend
        indexes: every read scans the thread's history namespace, so reading 60,000
        messages 500 at a time scans it 120 times. One read is linear in the history;
        pass ``batch_size`` to bound what one read holds instead. The end is fixed when
        iteration starts (messages appended meanwhile are not yielded).
        """
        if end is None:
            end = self.history_count(thread_id)
        step = _batch(batch_size, start, end)
        for lo in range(start, end, step):
            yield from self.get_history(thread_id, start=lo, end=min(lo + step, end))

    async def aiter_history(
        self,
        thread_id: str,
        *,
        start: int = 0,
        end: int | None = None,
        batch_size: int | None = None,
    ) -> AsyncIterator[HistoryEntry]:
        """Async twin of :meth:`iter_history`."""
        if end is None:
            end = await self.ahistory_count(thread_id)
        step = _batch(batch_size, start, end)
        for lo in range(start, end, step):
            for entry in await self.aget_history(thread_id, start=lo, end=min(lo + step, end)):
                yield entry

    # --- offloads ----------------------------------------------------------------------------
    def _offload_plan(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        strategy: str,
        preview: str,
        tokens: int,
        replacement_tokens: int | None,
        extra: Mapping[str, Any] | None,
        reuse: bool = False,
    ) -> _Plan[OffloadRecord]:
        ns = self.namespace(thread_id, OFFLOAD)
        meta_ns = self.namespace(thread_id, META)
        if not messages:
            raise ValueError("offload: nothing to offload (no messages)")
        if not isinstance(strategy, str) or not strategy:
            raise ValueError("offload: strategy must be a non-empty string")
        if not isinstance(preview, str):
            raise TypeError("offload: preview must be a string")
        for name, n in (("tokens", tokens), ("replacement_tokens", replacement_tokens)):
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
                raise ValueError(f"offload: {name} must be a non-negative int, got {n!r}")
        dumped = [
            plain_json(dump_message(_check_message(m, f"offload: message {i}")), f"message {i}")
            for i, m in enumerate(messages)
        ]
        extra_plain = plain_json(dict(extra or {}), "offload extra")
        if not reuse:
            offload_id = new_id()
            meta = yield [GetOp(meta_ns, OFFLOAD, False), GetOp(ns, offload_id, False)]
            # Never over another offload: a random uuid4 does not repeat, but a seeded
            # sequence (messages.seeded_ids: the replay) replayed into the same thread does,
            # and would overwrite the offloads its first run's events name.
            while isinstance(meta[1], Item):
                offload_id = new_id()
                meta = [meta[0], *(yield [GetOp(ns, offload_id, False)])]
        else:
            offload_id = _content_id(dumped, strategy, preview, tokens, extra_plain)
            meta = yield [GetOp(meta_ns, OFFLOAD, False), GetOp(ns, offload_id, False)]
            if isinstance(meta[1], Item):  # the same content, offloaded before: its record
                return self._record(thread_id, offload_id, meta[1].value)
        seq = yield from self._next_seq_plan(thread_id, OFFLOAD, meta[0])
        value = {
            **_seq_fields(seq),
            "ref": offload_ref(offload_id),
            "strategy": strategy,
            "preview": preview,
            "tokens": tokens,
            "replacement_tokens": replacement_tokens,
            "message_ids": [m.id for m in messages],
            "messages": dumped,
            "ts": time.time(),
            "extra": extra_plain,
        }
        yield [
            PutOp(meta_ns, OFFLOAD, {"next_seq": seq + 1}, index=False, ttl=None),
            PutOp(ns, offload_id, value, index=False, ttl=None),
        ]
        return self._record(thread_id, offload_id, value)

    @staticmethod
    def _record(thread_id: str, offload_id: str, value: Mapping[str, Any]) -> OffloadRecord:
        return OffloadRecord(
            offload_id=offload_id,
            thread_id=thread_id,
            seq=int(value["seq"]),
            strategy=value["strategy"],
            preview=value["preview"],
            tokens=value["tokens"],
            replacement_tokens=value.get("replacement_tokens"),
            message_ids=tuple(value["message_ids"]),
            messages=tuple(load_message(revive(d)) for d in value["messages"]),
            ts=float(value["ts"]),
            extra=dict(revive(value.get("extra") or {})),
        )

    def _reload_plan(self, thread_id: str, offload_id: str) -> _Plan[OffloadRecord]:
        ns = self.namespace(thread_id, OFFLOAD)
        where = (
            f"(Searched thread {thread_id!r} under the store prefix {self._prefix!r}: an "
            "offload belongs to the thread, and the prefix, of the compression that wrote it.)"
        )
        if not isinstance(offload_id, str) or not offload_id.strip():
            raise OffloadNotFoundError(str(offload_id), where)
        ref = offload_id.strip()
        found = yield [GetOp(ns, ref, False)]
        item = found[0]
        if isinstance(item, Item):
            return self._record(thread_id, item.key, item.value)
        ref = ref.lower()
        if _OFFLOAD_REF_RE.match(ref):  # the shortened id a note shows (offload_ref)
            short = ref[:OFFLOAD_REF_LENGTH]
            hits = yield [SearchOp(ns, {"ref": short}, 10, 0, None, False)]
            matches = sorted(
                (i for i in _searched(hits[0]) if i.key.startswith(ref)),
                key=lambda i: i.value["seq"],
            )
            if len(matches) == 1:
                return self._record(thread_id, matches[0].key, matches[0].value)
            if matches:
                raise AmbiguousOffloadRefError(offload_id.strip(), [i.key for i in matches])
        raise OffloadNotFoundError(offload_id, where)

    def _list_offloads_plan(self, thread_id: str) -> _Plan[list[OffloadRecord]]:
        items = yield from self._all_plan(thread_id, OFFLOAD)
        return [self._record(thread_id, item.key, item.value) for item in items]

    def offload(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        strategy: str,
        preview: str,
        tokens: int,
        replacement_tokens: int | None = None,
        extra: Mapping[str, Any] | None = None,
        reuse: bool = False,
    ) -> OffloadRecord:
        """Store original messages under a new, unguessable offload id (uuid4).

        ``reuse=True``: the id is derived from what is stored (the messages' content and
        kind, their ids aside, and the other fields): the same content offloaded again
        returns the record stored the first time, unchanged, instead of a new one (for
        messages sent with one model call only, which every call offloads anew).

        Cost: one read (the counter) and one batched write (the item + the counter).

        Returns:
            The stored record (messages as they will be reloaded).
        """
        with self._locked(thread_id, OFFLOAD):
            return self._run(
                self._offload_plan(
                    thread_id, messages, strategy, preview, tokens, replacement_tokens, extra, reuse
                )
            )

    async def aoffload(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        strategy: str,
        preview: str,
        tokens: int,
        replacement_tokens: int | None = None,
        extra: Mapping[str, Any] | None = None,
        reuse: bool = False,
    ) -> OffloadRecord:
        """Async twin of :meth:`offload`."""
        async with self._alocked(thread_id, OFFLOAD):
            return await self._arun(
                self._offload_plan(
                    thread_id, messages, strategy, preview, tokens, replacement_tokens, extra, reuse
                )
            )

    def reload(self, thread_id: str, offload_id: str) -> OffloadRecord:
        """The offload with this id in this thread: its whole id, or the shortened one
        its note in the context shows (:func:`offload_ref`, or any longer prefix).

        Raises:
            OffloadNotFoundError: no such offload in this thread (ids of other
                threads are not visible: the namespace is per thread).
            AmbiguousOffloadRefError: a shortened id that starts several of the
                thread's offloads (it lists them; an ``OffloadNotFoundError`` too).
        """
        return self._run(self._reload_plan(thread_id, offload_id))

    async def areload(self, thread_id: str, offload_id: str) -> OffloadRecord:
        """Async twin of :meth:`reload`."""
        return await self._arun(self._reload_plan(thread_id, offload_id))

    def list_offloads(self, thread_id: str) -> list[OffloadRecord]:
        """All offloads of the thread, in creation order."""
        return self._run(self._list_offloads_plan(thread_id))

    async def alist_offloads(self, thread_id: str) -> list[OffloadRecord]:
        """Async twin of :meth:`list_offloads`."""
        return await self._arun(self._list_offloads_plan(thread_id))

    # --- events ------------------------------------------------------------------------------
    def _record_event_plan(
        self, thread_id: str, event: Mapping[str, Any], agent: str | None
    ) -> _Plan[str]:
        if not isinstance(event, Mapping):
            raise TypeError(f"record_event: event must be a dict, got {type(event).__name__}")
        clash = _RESERVED_EVENT_KEYS.intersection(event)
        if clash:
            raise ValueError(
                f"record_event: keys {sorted(clash)} are set by the store; rename them"
            )
        if agent is not None and "agent" not in event:
            event = {**event, "agent": agent}
        plain = plain_json(dict(event), "event")
        meta_ns = self.namespace(thread_id, META)
        meta = yield [GetOp(meta_ns, EVENTS, False)]
        seq = yield from self._next_seq_plan(thread_id, EVENTS, meta[0])
        key = f"{seq:012d}-{new_uuid().hex[:12]}"
        yield [
            PutOp(meta_ns, EVENTS, {"next_seq": seq + 1}, index=False, ttl=None),
            PutOp(
                self.namespace(thread_id, EVENTS),
                key,
                {**plain, **_seq_fields(seq), "ts": time.time()},
                index=False,
                ttl=None,
            ),
        ]
        return key

    @staticmethod
    def _event(item: Item) -> EventRecord:
        value = item.value
        data = {k: revive(v) for k, v in value.items() if k not in _RESERVED_EVENT_KEYS}
        return EventRecord(
            key=item.key,
            seq=int(value["seq"]),
            ts=float(value.get("ts") or 0.0),
            strategy=str(data.get("strategy") or ""),
            kind=str(data.get("kind") or "compression"),
            tokens_before=_int_or_none(data.get("tokens_before")),
            tokens_after=_int_or_none(data.get("tokens_after")),
            data=data,
            agent=stored_agent(data),
        )

    def _list_events_plan(self, thread_id: str) -> _Plan[list[EventRecord]]:
        items = yield from self._all_plan(thread_id, EVENTS)
        return [self._event(item) for item in items]

    def record_event(self, thread_id: str, event: Mapping[str, Any]) -> str:
        """Record a JSON-serializable event; the store adds ``seq`` and ``ts``, and
        ``agent`` when the event has none and is recorded inside a named agent's run
        (:func:`running_agent`).

        Returns:
            The event's key.
        """
        agent = running_agent()  # read here: the plan may run in another thread
        with self._locked(thread_id, EVENTS):
            return self._run(self._record_event_plan(thread_id, event, agent))

    async def arecord_event(self, thread_id: str, event: Mapping[str, Any]) -> str:
        """Async twin of :meth:`record_event`."""
        agent = running_agent()
        async with self._alocked(thread_id, EVENTS):
            return await self._arun(self._record_event_plan(thread_id, event, agent))

    def list_events(self, thread_id: str) -> list[EventRecord]:
        """The thread's events as :class:`EventRecord` s, in recording order.

        ``pandas.DataFrame([e.to_dict() for e in store.list_events(thread)])`` makes a
        table of them."""
        return self._run(self._list_events_plan(thread_id))

    async def alist_events(self, thread_id: str) -> list[EventRecord]:
        """Async twin of :meth:`list_events`."""
        return await self._arun(self._list_events_plan(thread_id))
