"""The records the store returns: :class:`HistoryEntry`, :class:`OffloadRecord`,
:class:`EventRecord`.

Plain frozen dataclasses, read by attribute. :class:`~langchain_autocontext.store.OffloadStore`
builds them from the items it keeps (history, offloads, events); they are importable
from the package (``from langchain_autocontext import EventRecord``) and from
:mod:`langchain_autocontext.store`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from typing_extensions import deprecated

__all__ = ["EventRecord", "HistoryEntry", "OffloadRecord"]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One original message of a thread's append-only history."""

    seq: int
    """Position in the thread's history (strictly increasing in append order)."""
    id: str
    """The item's key: the message id, or for a later version of a message edited
    under its id, ``<id>~<digest>`` (see :attr:`version_of`). ``message.id`` is the
    same key, so a thread's history never lists two messages with one id (LangGraph's
    ``add_messages`` would merge them), and the id a search hit names is the one
    :meth:`~langchain_autocontext.store.OffloadStore.get_history_message` and
    ``reload_offloaded`` take."""
    message: BaseMessage
    """The message exactly as appended, its id set to :attr:`id`."""
    ts: float
    """Unix time of the append."""
    agent: str | None = None
    """The agent whose run archived the message (``create_agent``'s ``name``; a subagent
    sharing its caller's thread has its own), or ``None`` outside a named agent."""
    version_of: str | None = None
    """For a later version (an edit that reused a message id): that message id (the
    working copy's id), whose entry holds the first version; ``None`` otherwise."""

    def __repr__(self) -> str:  # the default would print the whole message (a 10 KB log)
        content = self.message.content
        text = content if isinstance(content, str) else str(content)
        text = text if len(text) <= 60 else text[:57] + "..."
        agent = f", agent={self.agent!r}" if self.agent is not None else ""
        return (
            f"HistoryEntry(seq={self.seq}, id={self.id!r}, type={self.message.type!r}, "
            f"content={text!r}{agent})"
        )


@dataclass(frozen=True, slots=True)
class OffloadRecord:
    """Original messages moved out of the working context, reloadable by ``offload_id``."""

    offload_id: str
    """The offload id (uuid4) shown in the context: what ``reload_offloaded`` takes."""
    thread_id: str
    seq: int
    """Position among the thread's offloads (creation order)."""
    strategy: str
    """Name of the strategy that offloaded the messages."""
    preview: str
    """The preview left in the working context."""
    tokens: int
    """Tokens of the original messages."""
    replacement_tokens: int | None
    """Tokens of what replaced them in the context, when known."""
    message_ids: tuple[str | None, ...]
    messages: tuple[BaseMessage, ...]
    """The original messages, deserialized."""
    ts: float
    """Unix time of the offload."""
    extra: dict[str, Any]
    """Caller-supplied JSON data."""

    @property
    @deprecated("OffloadRecord.id is deprecated; use OffloadRecord.offload_id", category=None)
    def id(self) -> str:
        """Deprecated alias of :attr:`offload_id` (one name for one concept: ``id`` is a
        message's id elsewhere, as in :attr:`HistoryEntry.id`)."""
        warnings.warn(
            "OffloadRecord.id is deprecated; use OffloadRecord.offload_id (the same value)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.offload_id

    def __repr__(self) -> str:  # the default would print every original message
        preview = self.preview if len(self.preview) <= 60 else self.preview[:57] + "..."
        return (
            f"OffloadRecord(offload_id={self.offload_id!r}, thread_id={self.thread_id!r}, "
            f"strategy={self.strategy!r}, messages={len(self.messages)}, "
            f"tokens={self.tokens:,}, preview={preview!r})"
        )


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One recorded event of a thread: a compression step, an edit of the context by
    the model, a calibration, an overflow retry.

    The fields every event has are attributes; the rest of what was recorded (a
    compression's ``summarizer_calls``, ``offload_ids``, ``seconds``…; an edit's
    ``op`` and ``via``) is in :attr:`data`, and readable as attributes too
    (``event.summarizer_calls``). :meth:`to_dict` gives the flat dict (for a pandas
    ``DataFrame``, or JSON). ``event["strategy"]`` still works and warns: it is
    deprecated.
    """

    key: str
    """The event's key in the store."""
    seq: int
    """Position among the thread's events (recording order)."""
    ts: float
    """Unix time of the recording."""
    strategy: str
    """What ran: a strategy's name, ``"calibration"``, ``"overflow_retry"``, or an edit
    such as ``"tool:delete"`` (``""`` when the event did not say)."""
    kind: str
    """``"compression"`` for a strategy's pass (the default), else what the event
    says: ``"context_edit"``, ``"calibration"``, ``"overflow"``."""
    tokens_before: int | None
    """Counted tokens of the context before (``None`` when the event has none)."""
    tokens_after: int | None
    """Counted tokens of the context after (``None`` when the event has none)."""
    data: dict[str, Any]
    """Every field of the event as recorded (``strategy`` and the token counts
    included; ``seq`` and ``ts`` excluded)."""
    agent: str | None = None
    """The agent whose run recorded the event (``create_agent``'s ``name``; a subagent
    sharing its caller's thread has its own), or ``None`` outside a named agent."""

    def to_dict(self) -> dict[str, Any]:
        """The event as a flat dict: :attr:`data` plus ``seq`` and ``ts``."""
        return {**self.data, "seq": self.seq, "ts": self.ts}

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: the event's other recorded fields
        if name.startswith("_") or name == "data":
            raise AttributeError(name)
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(
                f"this {self.kind!r} event has no field {name!r}; it has {sorted(self.data)}"
            ) from None

    # --- deprecated: events used to be dicts ---------------------------------------------
    # @deprecated(category=None) tells type checkers and IDEs (PEP 702); the warning at run
    # time is _dict_access's own, as before.
    def _dict_access(self, how: str) -> dict[str, Any]:
        warnings.warn(
            f"OffloadStore.list_events returns EventRecord objects now; {how} on an event "
            "is deprecated: read attributes (event.strategy, event.tokens_after), "
            "event.data, or event.to_dict()",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.to_dict()

    @deprecated("event[name] is deprecated; use event.strategy, event.data", category=None)
    def __getitem__(self, name: str) -> Any:
        """Deprecated: ``event["strategy"]``; use ``event.strategy``."""
        return self._dict_access(f"event[{name!r}]")[name]

    @deprecated("event.get(name) is deprecated; use event.data.get(name)", category=None)
    def get(self, name: str, default: Any = None) -> Any:
        """Deprecated: ``event.get("strategy")``; use ``event.data.get("strategy")``."""
        return self._dict_access(f"event.get({name!r})").get(name, default)

    @deprecated("name in event is deprecated; use name in event.data", category=None)
    def __contains__(self, name: object) -> bool:
        """Deprecated: ``"strategy" in event``; use ``"strategy" in event.data``."""
        return name in self._dict_access(f"{name!r} in event")

    @deprecated("event.keys() is deprecated; use event.to_dict().keys()", category=None)
    def keys(self) -> Any:
        """Deprecated: ``event.keys()``; use ``event.to_dict().keys()``."""
        return self._dict_access("event.keys()").keys()

    @deprecated("event.items() is deprecated; use event.to_dict().items()", category=None)
    def items(self) -> Any:
        """Deprecated: ``event.items()``; use ``event.to_dict().items()``."""
        return self._dict_access("event.items()").items()


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
