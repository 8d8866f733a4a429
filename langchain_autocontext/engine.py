"""The engine: :class:`ContextEngine` archives, counts, compresses and builds the model's view.

Data flows one way: the facade (:class:`~langchain_autocontext.AutoContext`) builds the
surfaces (the graph node and hooks of :mod:`~langchain_autocontext.graph`, the
middleware, the tools, the chat history); the surfaces call this engine; the engine
runs the strategies, which use the summarizer, the store and the token counter. The
engine imports none of the surfaces: the model's tools, which it counts in the budget,
are built by :attr:`ContextEngine.tool_factory`, which the facade sets.

Over 600 lines because :class:`ContextEngine` is the one object every surface calls:
compressing (sync and async), archiving, the budget (given, derived from the model's
window, calibrated), preparing a model call and applying the reply. Splitting it would
spread one object's methods over modules; what they delegate to (strategies, view,
store, commands) lives elsewhere, and the surfaces live in their own modules.
"""

from __future__ import annotations

import threading
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    MessageLikeRepresentation,
    SystemMessage,
    ToolCall,
    convert_to_messages,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from typing_extensions import Unpack

from langchain_autocontext.budget import BudgetSpec, ModelWindow, model_window, sent_settings
from langchain_autocontext.cache import _LRU
from langchain_autocontext.commands import ReplyOutcome, process_reply
from langchain_autocontext.config import AutoContextConfig, AutoContextConfigFields
from langchain_autocontext.copies import drop_dead_copies
from langchain_autocontext.errors import (
    ContextBudgetError,
    InvalidConfigError,
    OffloadNotFoundError,
    caller_stacklevel,
)
from langchain_autocontext.messages import (
    carries_compaction,
    content_hash,
    ensure_ids,
    is_context_edit,
    is_pinned,
    latest_user_index,
    marker,
    new_uuid,
    pinned_tokens,
    repair_tool_pairs,
    sanitize_message,
    text_of,
)
from langchain_autocontext.records import HistoryEntry, OffloadRecord
from langchain_autocontext.store import (
    OffloadStore,
    message_version_key,
    on_thread_deleted,
    run_config,
    running_agent,
    stream_writer,
)
from langchain_autocontext.strategies.base import (
    Strategy,
    conversation_origin,
    markers,
    place_summaries,
    summary_offload_ids,
)
from langchain_autocontext.strategies.pipeline import (
    Pipeline,
    PipelineResult,
    Progress,
    adrive,
    applied,
    developer_pin_tokens,
    drive,
    floor_tokens,
    run_pipeline,
)
from langchain_autocontext.summarizers import LLMSummarizer, Summarizer, resolve_summarizer
from langchain_autocontext.tokens import TokenCounter, resolve_counter
from langchain_autocontext.view import (
    ModelCall,
    augment_system,
    build_view,
    instructions_text,
    normalize_state,
    opens_with_assistant,
    pressure_slack,
    view_reserve,
    view_reserve_and_slack,
    warn_bound_chain,
)

__all__ = ["AutoContextArgs", "CompressionResult", "ContextEngine"]

_SYSTEM_PLACEHOLDER_ID = "autocontext-system-prompt"


@dataclass
class CompressionResult:
    """What :meth:`AutoContext.compress` returns."""

    messages: list[BaseMessage]
    tokens_before: int
    tokens_after: int
    triggered: bool
    events: list[dict[str, Any]] = field(default_factory=list)
    archived: int = 0
    ids_assigned: bool = False

    @property
    def changed(self) -> bool:
        """True when the working messages differ from the input (a pass that was
        dropped, its event saying ``dropped``, changed nothing)."""
        return bool(applied(self.events)) or self.ids_assigned

    @property
    def offload_ids(self) -> list[str]:
        """The offloads behind this compression's replacements, in order:
        ``store.reload(thread, id)`` returns what each replaced. A dropped pass's
        offloads, which replaced nothing, are named by its event alone."""
        return [oid for e in applied(self.events) for oid in e.get("offload_ids") or ()]

    def __repr__(self) -> str:  # the default would print every message
        steps = ", ".join(
            f"{e['strategy']} {e['tokens_before']:,}->{e['tokens_after']:,}" for e in self.events
        )
        return (
            f"CompressionResult({len(self.messages)} messages, tokens {self.tokens_before:,} -> "
            f"{self.tokens_after:,}, triggered={self.triggered}, steps=[{steps}], "
            f"archived={self.archived}, offloads={len(self.offload_ids)})"
        )


@dataclass
class _Call:
    """One :meth:`ContextEngine.compress` call, prepared once (:meth:`ContextEngine._intake`):
    what its archive, repair, view and pipeline share."""

    given: list[BaseMessage]  #: the input as messages
    msgs: list[BaseMessage]  #: the working messages (:meth:`ContextEngine._prepare_all`)
    ids_assigned: bool
    virtual: bool  #: ``msgs[0]`` is a system message the engine added
    originals: list[BaseMessage]  #: what the archive step writes
    store: OffloadStore
    thread_id: str
    state: Mapping[str, Any] | None
    tools: Sequence[Any] | None
    view: bool
    system: SystemMessage | None = None  #: the system message to put back after the view
    #: the package's markers in ``msgs`` (:func:`markers`), found once for every step
    marks: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: ids of the messages sent with this call only (see :meth:`ContextEngine.compress`)
    request_only: frozenset[str] = frozenset()

    @property
    def summaries(self) -> list[str]:
        """The offload ids of the summaries in ``msgs`` (:func:`summary_offload_ids`)."""
        return summary_offload_ids(self.msgs, self.marks)


def checked_state(state: Any) -> Mapping[str, Any] | None:
    """``state`` as the engine's calls take it (the graph state's ``autocontext``
    dict, or ``None``).

    Raises:
        TypeError: anything else (the graph surfaces read a foreign value as ``None``
            with a warning: :func:`~langchain_autocontext.view.state_in`).
    """
    if state is None or isinstance(state, Mapping):
        return state
    raise TypeError(
        "state must be the graph state's 'autocontext' dict (a Mapping) or None, "
        f"got {type(state).__name__}"
    )


def as_messages(messages: Any) -> list[BaseMessage]:
    """``messages`` as LangChain messages: message-likes (``("user", "hi")``, dicts,
    strings) converted as the rest of LangChain converts them."""
    msgs: list[Any] = list(messages) if not isinstance(messages, (str, dict, tuple)) else [messages]
    if all(isinstance(m, BaseMessage) for m in msgs):
        return msgs
    return list(convert_to_messages(msgs))


def config_with(config: AutoContextConfig | None, fields: Mapping[str, Any]) -> AutoContextConfig:
    """``config`` (default: the defaults) with ``fields`` set, validated as a whole.

    An unknown name is a ``TypeError`` that lists the known ones, as for any keyword
    argument; a bad value is the config's own
    :class:`~langchain_autocontext.errors.InvalidConfigError`.
    """
    unknown = sorted(set(fields) - set(AutoContextConfig.model_fields))
    if unknown:
        raise TypeError(
            f"unknown argument(s) {', '.join(map(repr, unknown))}: not an AutoContextConfig "
            f"field; the fields are {', '.join(AutoContextConfig.model_fields)}"
        )
    if not fields:
        return config or AutoContextConfig()
    return (config or AutoContextConfig()).derive(**fields)


def _checked_tools(tools: Any) -> list[Any]:
    """``tools=`` as a list; a single tool (or a string) is refused by name here, not
    with LangChain's "Unsupported function" at the first count."""
    if tools is None:
        return []
    if isinstance(tools, BaseTool | str | Mapping) or callable(tools):
        name = getattr(tools, "name", None) or getattr(tools, "__name__", None) or tools
        raise TypeError(
            f"tools must be a list of the agent's tools, got a single {type(tools).__name__} "
            f"({name!r:.80}): pass tools=[{name if isinstance(name, str) else '…'}]"
        )
    return list(tools)


def _prompt_text(system_prompt: Any) -> str | None:
    """``system_prompt=`` as text: a string, or a ``SystemMessage`` (what
    ``create_agent(system_prompt=…)`` and ``create_react_agent(prompt=…)`` also take)."""
    if system_prompt is None or isinstance(system_prompt, str):
        return system_prompt
    if isinstance(system_prompt, SystemMessage):
        return text_of(system_prompt)
    raise TypeError(
        "system_prompt must be the text of the system prompt your agent adds (a string or "
        f"a SystemMessage), got {type(system_prompt).__name__}: {system_prompt!r:.80}"
    )


def _checked_strategies(strategies: Any) -> list[Strategy] | None:
    """``strategies=`` as a list, each a :class:`Strategy` (a ``name`` and a ``plan``
    method): a strategy's name or class is refused here, not at the first compaction."""
    if strategies is None:
        return None
    if isinstance(strategies, str) or not isinstance(strategies, Iterable):
        strategies = [strategies]
    out = list(strategies)
    for strategy in out:
        if isinstance(strategy, type) or not callable(getattr(strategy, "plan", None)):
            raise TypeError(
                f"strategies must be Strategy objects (a name and a plan(ctx) method), got "
                f"{type(strategy).__name__}: {strategy!r:.80}. Build them, e.g. "
                "default_strategies() from langchain_autocontext.strategies.pipeline, or "
                "FifoEviction() from langchain_autocontext.strategies."
            )
    return out


#: Threads an engine remembers (:class:`_ThreadMemo`), the least recently used dropped
#: first: one forgotten costs a read of every id of its next input.
_MEMO_THREADS = 4096
#: Inputs of a thread whose ids its memo keeps (:meth:`_ThreadMemo.settle`): up to this
#: many branches of a fan-out of one thread, each calling in turn, keep each other's.
_SETTLED_INPUTS = 32


@dataclass
class _ThreadMemo:
    """What an engine knows of one thread in one store."""

    #: ids it archived there -> what it archived last under each (:class:`_Archived`:
    #: an edit that reuses an id is archived as a later version)
    archived: dict[str, _Archived] = field(default_factory=dict)
    #: offload id of a summary -> ids of the messages it replaced (records never change)
    spans: dict[str, frozenset[str]] = field(default_factory=dict)
    #: offload id of a summary -> offload ids of the summaries among those messages
    nested: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: offload id of a summary in the last list repaired -> every id it stands for,
    #: through the summaries it absorbed (kept for those only: the next summary, which
    #: absorbs one of them, builds on it instead of walking the whole chain again)
    closures: dict[str, frozenset[str]] = field(default_factory=dict)
    #: id in ``archived`` -> the number of the last settle (:meth:`settle`) that kept it
    settled: dict[str, int] = field(default_factory=dict)
    settles: int = 0  # the settles so far

    def settle(self, ids: Iterable[str]) -> None:
        """After archiving a call's whole input (``ids``): forget what is archived under
        an id that none of the thread's last :data:`_SETTLED_INPUTS` inputs held (one
        archived since the previous settle counts as held by this one). The next input is
        this one compressed plus what arrives, so ids summarized away would only pile up
        over a long thread; the inputs before count too, as the branches of a fan-out
        (``Send``) of one thread take turns here, each with its own messages."""
        self.settles += 1
        now, seen = self.settles, self.settled
        seen.update((i, now) for i in ids)
        for i in self.archived:
            seen.setdefault(i, now)
        oldest = now - _SETTLED_INPUTS
        self.settled = {i: n for i, n in seen.items() if n > oldest and i in self.archived}
        self.archived = {i: fp for i, fp in self.archived.items() if i in self.settled}

    def closure(self, root: str) -> frozenset[str]:
        """Every message id the summary ``root`` stands for: those it replaced, and
        those each summary among them replaced, at any depth."""
        cached = self.closures.get(root)
        if cached is not None:
            return cached
        full: set[str] = set()
        todo, seen = [root], set()
        while todo:
            oid = todo.pop()
            if oid in seen:
                continue
            seen.add(oid)
            known = self.closures.get(oid)
            if known is not None:
                full |= known
                continue
            full |= self.spans.get(oid, frozenset())
            todo.extend(self.nested.get(oid, ()))
        return frozenset(full)

    def forget_absorbed(self, present: Iterable[str]) -> None:
        """Drop what is known of the summaries that ``present`` ones absorbed, at any
        depth: their ids are in their absorbers' closures now, and kept they would hold
        each id of a long thread once per level of the recursive summary. (One that
        comes back, from an older checkpoint, is read from its record again.)"""
        keep = set(present)
        todo = [child for oid in keep for child in self.nested.get(oid, ())]
        while todo:
            oid = todo.pop()
            if oid in keep:
                continue
            keep.add(oid)  # visited
            todo.extend(self.nested.pop(oid, ()))
            self.spans.pop(oid, None)
            self.closures.pop(oid, None)


#: Every live engine: a thread deleted from a store is forgotten by each.
_ENGINES: weakref.WeakSet[ContextEngine] = weakref.WeakSet()


def _forget_thread(store: OffloadStore, thread_id: str) -> None:
    drop_dead_copies()
    for engine in list(_ENGINES):
        engine._forget(store, thread_id)


on_thread_deleted(_forget_thread)


def merge_system_messages(messages: list[BaseMessage]) -> list[BaseMessage]:
    """One system message, first: every system message's content, in order, merged into
    the first one (its id kept). Some providers reject a second system message or one
    that is not first; a prompt template with instructions and a knowledge block, or an
    input system message next to ``create_agent(system_prompt=…)``, makes two.

    Returns ``messages`` itself when it already has at most one system message, first.
    """
    systems = [m for m in messages if isinstance(m, SystemMessage)]
    if not systems or (len(systems) == 1 and messages[0] is systems[0]):
        return messages
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    if len(systems) == 1:
        return [systems[0], *rest]
    if all(isinstance(m.content, str) for m in systems):
        content: Any = "\n\n".join(str(m.content) for m in systems if m.content)
    else:
        # an empty one adds nothing (Anthropic rejects an empty text block)
        content = [
            block
            for m in systems
            if m.content
            for block in (
                [{"type": "text", "text": m.content}] if isinstance(m.content, str) else m.content
            )
        ]
    return [systems[0].model_copy(update={"content": content}), *rest]


class AutoContextArgs(AutoContextConfigFields, total=False):
    """The keyword arguments of :class:`ContextEngine` (and so of
    :class:`~langchain_autocontext.AutoContext`) besides ``config``: the config's fields
    and the engine's own. What ``AutoContextMiddleware(**kwargs)`` takes to build one."""

    summarizer: Summarizer | Any
    store: BaseStore | None
    token_counter: Any
    tools: Sequence[Any] | None
    system_prompt: str | None
    strategies: Sequence[Strategy] | None
    trigger: Any
    keep: Any
    model: Any


class ContextEngine:
    """Keeps an agent's context under budget: the engine under
    :class:`~langchain_autocontext.AutoContext` (use that one; it adds the surfaces).

    Its arguments are :class:`~langchain_autocontext.AutoContext`'s, documented there.
    """

    def __init__(
        self,
        config: AutoContextConfig | None = None,
        summarizer: Summarizer | Any = None,
        *,
        store: BaseStore | None = None,
        token_counter: Any = None,
        tools: Sequence[Any] | None = None,
        system_prompt: str | None = None,
        strategies: Sequence[Strategy] | None = None,
        trigger: Any = None,
        keep: Any = None,
        model: Any = None,
        **fields: Unpack[AutoContextConfigFields],
    ) -> None:
        """``fields`` are :class:`AutoContextConfig` fields (``AutoContext(max_tokens=8_000)``),
        applied over ``config`` when both are given, and validated like it.

        ``trigger=``/``keep=`` take LangChain's ``("tokens", n)``, ``("fraction", x)``
        and (trigger only) ``("messages", n)`` forms (see
        :class:`~langchain_autocontext.budget.BudgetSpec`). ``model=``: a chat model
        whose ``profile["max_input_tokens"]`` sets the budget when ``max_tokens`` is not
        given (see :meth:`use_model`)."""
        if config is not None and not isinstance(config, AutoContextConfig):
            raise TypeError(f"config must be an AutoContextConfig, not {type(config).__name__}")
        self._spec = BudgetSpec.parse(trigger, keep, fields)
        self.config = config_with(config, fields)
        #: max_tokens was given (in ``config`` or as a keyword): no model changes it.
        self._explicit_max = "max_tokens" in self.config.model_fields_set
        self._window: ModelWindow | None = None
        self._window_deferred = False  # a middleware reads the window at the first call
        self._budget_warned = self._explicit_max  # the default-budget warning: once
        self._windows_seen: set[Any] = set()  # to warn when agents of two windows share it
        self._shared_warned = False
        self._budget_lock = threading.Lock()
        self.counter: TokenCounter = resolve_counter(token_counter)
        self.summarizer: Summarizer = resolve_summarizer(
            summarizer,
            retries=self.config.summarizer_retries,
            timeout=self.config.summarizer_timeout,
            concurrency=self.config.summarizer_concurrency,
        )
        if isinstance(self.summarizer, LLMSummarizer):
            self._check_summarizer_settings(self.summarizer)
        if getattr(self.summarizer, "token_counter", None) is None:
            self.summarizer.token_counter = self.counter
        if isinstance(store, OffloadStore) and store.prefix != self.config.store_prefix:
            # An OffloadStore names its namespace: adopt it, unless the config names another.
            if "store_prefix" in self.config.model_fields_set:
                raise InvalidConfigError(
                    f"store is OffloadStore(prefix={store.prefix!r}) but config.store_prefix is "
                    f"{self.config.store_prefix!r}: set one of them, or make them equal"
                )
            self.config = self.config.model_copy(update={"store_prefix": store.prefix})
        #: the config as given: the budget-derived fields are computed from it (again
        #: when the model's window changes), so ``self.config`` stays the one source.
        self._base_config = self.config
        if model is not None:
            warn_bound_chain(model)
            self._window = model_window(model)
            if self._window is None:
                self._warn_default_budget()
        self.config = self._derive_config(self._window)
        self.store: OffloadStore | None = (
            OffloadStore.wrap(store, prefix=self.config.store_prefix) if store is not None else None
        )
        self.agent_tools: list[Any] = _checked_tools(tools)
        self.system_prompt = _prompt_text(system_prompt)
        self.strategies = _checked_strategies(strategies)
        self._lock = threading.Lock()
        self._wrapped: dict[int, OffloadStore] = {}
        self._own_store: OffloadStore | None = None
        self._store_clash_warned = False  # the graph's store is not AutoContext's: once
        #: (id of the store's backend, its prefix, thread) -> (a weak reference to that
        #: backend, what this engine knows of the thread there): the reference tells a new
        #: store that got a freed one's address from the old one, whose memo would
        #: otherwise skip its archiving. The least recently used thread goes first.
        self._archived: _LRU[tuple[weakref.ref[Any], _ThreadMemo]] = _LRU(_MEMO_THREADS)
        self._tools: list[BaseTool] | None = None
        #: The surface tells the engine which tools each request sends (the middleware);
        #: else a tool the agent calls but this engine does not count is warned about once.
        self.tools_from_requests = False
        self._uncounted_warned = False
        # latest user messages pinned past the limit, warned about (the newest 4,096)
        self._pin_warned: OrderedDict[str, None] = OrderedDict()
        # A budget that can never hold what every call sends once the package shows
        # itself (the system prompt, the section, the tool schemas): say so now, not at
        # every call (max_tokens=256 held none of the package's 306 tokens of tools, which
        # it sends with the metadata tags).
        shown = "\n\n".join(
            p for p in (self.system_prompt, instructions_text(self.config, None)) if p
        )
        floor = self.counter.count(
            [SystemMessage(shown)] if shown else [], self.count_tools, tags=self.config.tags_mode
        )
        if floor > self.config.max_tokens:
            raise ContextBudgetError(
                f"The system prompt, the package's section and the tool schemas alone count "
                f"{floor} tokens, more than max_tokens={self.config.max_tokens}: no call could "
                "ever be sent once the package shows itself. Raise max_tokens, shorten the "
                "system prompt, or turn off self_management_tools and metadata_tags.",
                required_tokens=floor,
                max_tokens=self.config.max_tokens,
            )
        _ENGINES.add(self)  # a deleted thread's archived-ids memo is dropped (delete_thread)

    # --- store and thread resolution ---------------------------------------------------
    def __repr__(self) -> str:  # the default named only the class and an address
        cfg = self.config
        budget = f"max_tokens={cfg.max_tokens:,}"
        if not self._explicit_max:
            if self._window:
                budget += " (from the model's window)"
            elif self._window_deferred:
                budget += " until the agent's model gives its window"
            else:
                budget += " (the default)"
        store = (
            "None (the graph's, else in memory)"
            if self.store is None
            else type(self.store.backend).__name__
        )
        return (
            f"{type(self).__name__}({budget}, metadata_tags={cfg.metadata_tags}, "
            f"tools={len(self.tools)}, summarizer={type(self.summarizer).__name__}, "
            f"store={store})"
        )

    def resolve_store(
        self, store: BaseStore | None = None, *, graph_store: BaseStore | None = None
    ) -> OffloadStore:
        """The OffloadStore to use: explicit, this object's, the graph's, or our own.

        For code that only has a backend: the store this engine writes to for it (its
        ``store_prefix`` included). Where you create the store, create it as
        ``OffloadStore(backend)`` and pass it around instead. ``graph_store`` is the
        running graph's store as a caller was handed it (a tool's ``runtime.store``):
        it ranks where the graph's does, after this object's, so that a tool reads the
        store the surfaces archived to."""
        if store is not None:
            return self._wrap(store)
        if self.store is not None:
            if not self._store_clash_warned:
                found = graph_store if graph_store is not None else _graph_store()
                if found is not None:
                    self._warn_store_clash(found)
            return self.store
        if graph_store is None:
            graph_store = _graph_store()
        if graph_store is not None:
            return self._wrap(graph_store)
        if self._own_store is None:
            with self._lock:
                if self._own_store is None:
                    warnings.warn(
                        "langchain-autocontext: no store given and none found on the graph; "
                        "originals and offloads are kept in memory for this process only. "
                        "Pass store=… to AutoContext or compile your graph with store=….",
                        stacklevel=3,
                    )
                    self._own_store = OffloadStore(InMemoryStore(), prefix=self.config.store_prefix)
        return self._own_store

    def _warn_store_clash(self, graph_store: BaseStore) -> None:
        """Say once that the graph's store is not where this engine keeps its data (a
        server such as LangGraph Platform injects its durable store into every graph:
        an ``AutoContext(store=InMemoryStore())`` kept from a notebook loses everything
        at the next restart)."""
        backend = graph_store.backend if isinstance(graph_store, OffloadStore) else graph_store
        assert self.store is not None
        if backend is self.store.backend:
            return
        self._store_clash_warned = True
        warnings.warn(
            f"langchain-autocontext: the graph runs with a store "
            f"({type(backend).__name__}) but this AutoContext was given another "
            f"({type(self.store.backend).__name__}); originals, offloads and events go to "
            "AutoContext's store and the tools read them there, the graph's store holds "
            "none of them. Drop AutoContext(store=…) to use the graph's store.",
            stacklevel=4,
        )

    def _wrap(self, store: BaseStore) -> OffloadStore:
        if isinstance(store, OffloadStore) and store.prefix != self.config.store_prefix:
            # An OffloadStore names its namespace (the graph's, or one given per call),
            # as in the constructor: re-prefixing it filed two apps that share a
            # database, each with its own prefixed store, under one namespace.
            if "store_prefix" in self._base_config.model_fields_set:
                raise InvalidConfigError(
                    f"store is OffloadStore(prefix={store.prefix!r}) but config.store_prefix "
                    f"is {self.config.store_prefix!r}: set one of them, or make them equal"
                )
            return store
        if isinstance(store, OffloadStore):
            return store
        key = id(store)
        wrapped = self._wrapped.get(key)
        if wrapped is None or wrapped.backend is not store:
            wrapped = OffloadStore.wrap(store, prefix=self.config.store_prefix)
            with self._lock:
                self._wrapped[key] = wrapped
                while len(self._wrapped) > 64:  # a store per request must not pile up
                    self._wrapped.pop(next(iter(self._wrapped)))
        return wrapped

    # --- the budget: given, or read from the model's window ------------------------------
    @property
    def window(self) -> ModelWindow | None:
        """The model window the budget was derived from (``None``: ``max_tokens`` was
        given, or no window is known and the default budget applies)."""
        return None if self._explicit_max else self._window

    def _derive_config(self, window: ModelWindow | None) -> AutoContextConfig:
        """The config for ``window``: ``max_tokens`` from it unless given, and the
        ``trigger=``/``keep=`` forms mapped for that budget."""
        base = self._base_config
        fields: dict[str, Any] = {}
        if self._explicit_max:
            origin = "given"
        elif window is not None:
            fields["max_tokens"] = window.budget
            origin = window.describe()
        else:
            origin = "the default: no max_tokens given and no model window known"
        max_tokens = int(fields.get("max_tokens", base.max_tokens))
        if self._spec is not None:
            fields.update(self._spec.fields(base, max_tokens, origin))
        if not fields:
            return base
        try:
            return config_with(base, fields)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"{exc} (max_tokens={max_tokens:,}: {origin})") from None

    def use_model(self, model: Any) -> bool:
        """Take the budget from ``model.profile["max_input_tokens"]`` (a local model: the
        window it is served with, ChatOllama's ``num_ctx``; see
        :func:`~langchain_autocontext.budget.model_window`) unless ``max_tokens``
        was given: ``max_tokens`` becomes that window less room for the reply (the
        profile's ``max_output_tokens``, at most a quarter of the window; a quarter when
        the profile does not say), and ``trigger=``/``keep=`` are mapped again for it.

        The middleware calls it at every model call with the request's model (a model
        with another window changes the budget from that call on); ``AutoContext(model=…)``
        calls it once. Returns True when the config changed. A model without a window
        keeps the budget known so far (and warns once when there is none).
        """
        warn_bound_chain(model)
        if self._explicit_max:
            return False
        window = model_window(model)
        if window is None or window == self._window:
            if window is None and self._window is None:
                self._warn_default_budget()
            return False
        with self._budget_lock:
            if window == self._window:
                return False
            config = self._derive_config(window)
            back = window in self._windows_seen  # a window it had left: two models alternate
            if self._window is not None:
                self._windows_seen.add(self._window)
            self._window, self.config = window, config
        if back and not self._shared_warned:
            self._shared_warned = True
            warnings.warn(
                "langchain-autocontext: this AutoContext takes its budget from the model of "
                "each call, and models with different context windows alternate (two agents "
                "sharing it, or a ModelFallbackMiddleware/dynamic model switching models?): "
                "each call may be compressed to the other model's budget. Give each agent its "
                "own AutoContext (they can share the store); for one agent with several "
                "models, pass max_tokens=… (the smallest window).",
                UserWarning,
                stacklevel=2,
            )
        return True

    def _check_summarizer_settings(self, summarizer: LLMSummarizer) -> None:
        """Warn when the config sets a ``summarizer_*`` field (retries, timeout,
        concurrency) that an :class:`LLMSummarizer` instance was built with a value of
        its own for: the instance's stays (those it was not built with were applied by
        :func:`resolve_summarizer`)."""
        explicit = {
            name: getattr(self.config, f"summarizer_{name}")
            for name in ("retries", "timeout", "concurrency")
            if f"summarizer_{name}" in self.config.model_fields_set
        }
        kept = summarizer.adopt_settings(**explicit)
        if kept:
            detail = ", ".join(
                f"{name}={own!r} (config summarizer_{name}={theirs!r})"
                for name, (own, theirs) in kept.items()
            )
            warnings.warn(
                f"langchain-autocontext: the LLMSummarizer instance was built with its own "
                f"{detail}; its own settings are used. Build it without them, or leave them "
                "out of the config.",
                UserWarning,
                stacklevel=3,
            )

    def _warn_default_budget(self) -> None:
        """Once per instance: no ``max_tokens`` and no window known. The warning names
        the caller's line, whichever public entry point (sync or async) led here."""
        if self._budget_warned or self._explicit_max or self._window is not None:
            return
        self._budget_warned = True
        warnings.warn(
            "langchain-autocontext: no max_tokens given and the model's context window is "
            f"unknown, so the default budget max_tokens={self.config.max_tokens:,} is used. "
            "Pass max_tokens=… (the model's input window less room for the reply), or "
            "model=… with a chat model whose profile states max_input_tokens "
            "(ChatModel(..., profile={'max_input_tokens': …}), or a local model served "
            "with a set window (ChatOllama(..., num_ctx=…)); the middleware reads the "
            "agent's model by itself).",
            UserWarning,
            stacklevel=caller_stacklevel(),
        )

    def learn_tools(self, tools: Sequence[Any]) -> None:
        """Count ``tools`` in the budget too (those of a name already counted are
        skipped): the schemas your model is bound with and this instance was not told."""
        known = {_tool_name(t) for t in self.count_tools}
        for tool in tools:
            name = _tool_name(tool)
            if name is not None and name not in known:
                self.agent_tools.append(tool)
                known.add(name)

    @property
    def count_tools(self) -> list[Any]:
        """Tool schemas counted in the budget: the agent's tools plus the package's
        (:meth:`with_own_tools` of the agent's)."""
        return self.with_own_tools(self.agent_tools)

    #: Builds the model's context tools for an engine (``tool_factory(engine)``): set by
    #: :class:`~langchain_autocontext.AutoContext` (the facade) to
    #: :func:`langchain_autocontext.tools.make_tools`, and on an engine a surface builds
    #: itself (:func:`langchain_autocontext.tools.attach_tools`). ``None`` here: the engine
    #: counts the tools' schemas but does not know them.
    tool_factory: Callable[[Any], list[BaseTool]] | None = None

    @property
    def tools(self) -> list[BaseTool]:
        """The model's context tools (``[]`` when ``config.self_management_tools`` is off).

        ``reload_offloaded``, ``search_history``, ``working_context_append``,
        ``working_context_replace``, and with the metadata tags (``config.metadata_tags``)
        ``update_message``, ``delete_message`` and ``pin_message``, which name a message
        by the id its tag shows: give them to your agent next to its own tools. See
        :mod:`langchain_autocontext.tools`.
        """
        offered = self.all_tools
        if self.config.metadata_tags:
            return offered
        return [t for t in offered if t.name not in ID_TOOLS]

    @property
    def all_tools(self) -> list[BaseTool]:
        """Every context tool this engine can offer, whatever the tags (what a surface
        registers so that a tool the model calls is always there; :attr:`tools` is
        what is offered to the model)."""
        factory = self.tool_factory
        if not self.config.self_management_tools or factory is None:
            return []
        if self._tools is None:
            with self._lock:
                if self._tools is None:
                    self._tools = factory(self)
        return list(self._tools)

    # --- the archive: originals go to the history store before anything changes -------
    def _memo(self, store: OffloadStore, thread_id: str) -> _ThreadMemo:
        """What this engine knows of ``thread_id`` in ``store`` (a cache:
        ``append_history`` itself skips ids the store holds, and offload records never
        change). A backend that cannot be weakly referenced gets an empty, unkept memo
        each time."""
        backend = store.backend
        key = (id(backend), store.prefix, thread_id)
        entry: tuple[weakref.ref[BaseStore], _ThreadMemo] | None = self._archived.get(key)
        if entry is not None and entry[0]() is backend:  # a hit: used most recently now
            return entry[1]
        try:
            ref = weakref.ref(backend)
        except TypeError:
            return _ThreadMemo()
        with self._lock:  # two first callers of a thread: the second takes the first's memo
            entry = self._archived.get(key)
            if entry is not None and entry[0]() is backend:
                return entry[1]
            memo = _ThreadMemo()
            self._archived.put(key, (ref, memo))
        return memo

    def _archived_ids(self, store: OffloadStore, thread_id: str) -> dict[str, _Archived]:
        """The ids this engine archived in ``store`` for ``thread_id`` (with what it
        archived last under each)."""
        return self._memo(store, thread_id).archived

    def _unarchived(
        self, store: OffloadStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """The messages to hand to ``append_history``: those this engine has not archived
        with this content (a new id, or an edit that reused one: the store keeps it as a
        later version, once per content)."""
        seen = self._archived_ids(store, thread_id)
        return [
            m
            for m in messages
            if (m.id not in seen or (not is_context_edit(m) and not _still(seen, m)))
            and marker(m) is None  # after the memo: the call's one marker scan is elsewhere
        ]

    def _lost(
        self, store: OffloadStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> str | None:
        """The id of the newest of ``messages`` this engine remembers archiving, which
        the store is asked for before the memo is trusted (:meth:`_revalidate`); None
        when it remembers none of them."""
        seen = self._archived_ids(store, thread_id)
        return next((str(m.id) for m in reversed(messages) if m.id in seen), None)

    def _forget(self, store: OffloadStore, thread_id: str) -> None:
        """Drop the thread's memo: its history was deleted (``delete_thread`` in this
        process, or elsewhere: :meth:`_revalidate`), so the ids it remembers archiving
        are not in the store any more."""
        with self._lock:
            self._archived.pop((id(store.backend), store.prefix, thread_id))

    def _revalidate(
        self, store: OffloadStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """:meth:`_unarchived`, after forgetting the thread's memo if the store lost a
        message it remembers archiving.

        ``delete_thread`` in this process drops the memo itself; a deletion elsewhere
        (another process, another connection to the database) is seen here: one read of
        one key, and only in a call that writes anyway (each turn brings a new message),
        so the originals of the working list are archived again at the first such call,
        in their order."""
        fresh = self._unarchived(store, thread_id, messages)
        witness = self._lost(store, thread_id, messages) if fresh else None
        if witness is not None and store.get_history_message(thread_id, witness) is None:
            self._forget(store, thread_id)
            fresh = self._unarchived(store, thread_id, messages)
        return fresh

    async def _arevalidate(
        self, store: OffloadStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> list[BaseMessage]:
        """Async twin of :meth:`_revalidate`."""
        fresh = self._unarchived(store, thread_id, messages)
        witness = self._lost(store, thread_id, messages) if fresh else None
        if witness is not None and await store.aget_history_message(thread_id, witness) is None:
            self._forget(store, thread_id)
            fresh = self._unarchived(store, thread_id, messages)
        return fresh

    def _mark_archived(
        self, store: OffloadStore, thread_id: str, messages: Sequence[BaseMessage]
    ) -> None:
        self._archived_ids(store, thread_id).update((str(m.id), _archived(m)) for m in messages)

    def _settle_archived(
        self, store: OffloadStore, thread_id: str, originals: Sequence[BaseMessage]
    ) -> None:
        """After archiving the whole working list: remember only the ids of the thread's
        latest inputs (:meth:`_ThreadMemo.settle`). One that comes back (an older
        checkpoint) costs a look in the store, which skips what it holds."""
        self._memo(store, thread_id).settle(str(m.id) for m in originals)

    def _archive_input(
        self,
        originals: Sequence[BaseMessage],
        *,
        thread_id: str,
        store: OffloadStore,
        summaries: Sequence[str] | None = None,
    ) -> int:
        """Archive a call's whole input (the originals of :meth:`_prepare_all`), then
        remember only the ids of the thread's latest inputs (:meth:`_settle_archived`). Returns how many were new.
        ``summaries``: the offload ids of the summaries among them, when the call found
        them already (:attr:`_Call.summaries`)."""
        return self._archive(originals, summaries, thread_id, store, settle=True)

    async def _aarchive_input(
        self,
        originals: Sequence[BaseMessage],
        *,
        thread_id: str,
        store: OffloadStore,
        summaries: Sequence[str] | None = None,
    ) -> int:
        """Async twin of :meth:`_archive_input`."""
        return await self._aarchive(originals, summaries, thread_id, store, settle=True)

    def _unknown_spans(
        self,
        store: OffloadStore,
        thread_id: str,
        messages: Sequence[BaseMessage],
        summaries: Sequence[str] | None = None,
    ) -> list[str]:
        """Offload ids of the summaries in ``messages`` whose replaced ids this engine
        has not read yet (see :func:`place_summaries`). ``summaries``: the offload ids
        of the summaries in ``messages``, when the caller found them already."""
        spans = self._memo(store, thread_id).spans
        if summaries is None:
            summaries = summary_offload_ids(messages)
        return [oid for oid in summaries if oid not in spans]

    def _learn_span(
        self, store: OffloadStore, thread_id: str, offload_id: str, record: OffloadRecord | None
    ) -> list[str]:
        """Remember what the summary ``offload_id`` replaced; returns the offload ids of
        the summaries among those messages whose records are still to read."""
        memo = self._memo(store, thread_id)
        if record is None:
            memo.spans[offload_id], memo.nested[offload_id] = frozenset(), ()
            return []
        memo.spans[offload_id] = frozenset(i for i in record.message_ids if i)
        memo.nested[offload_id] = tuple(summary_offload_ids(record.messages))
        return [oid for oid in memo.nested[offload_id] if oid not in memo.spans]

    def _spans(
        self, store: OffloadStore, thread_id: str, summaries: Sequence[str]
    ) -> dict[str, frozenset[str]]:
        """For each summary (its offload id in ``summaries``, :func:`summary_offload_ids`
        of a list), every id it stands for (:meth:`_ThreadMemo.closure`): an agent that extended its own summary within a run returns only the
        latest to a parent graph, whose copies of what the earlier one covered must be
        recognised too, or the next agent summarizes them again."""
        memo = self._memo(store, thread_id)
        present = {oid: memo.closure(oid) for oid in summaries}
        memo.closures.update(present)
        memo.forget_absorbed(present)
        return present

    def archive(
        self, messages: Sequence[BaseMessage], *, thread_id: str, store: OffloadStore
    ) -> int:
        """Append originals not yet in the thread's history, and the later version of one
        edited under its id (idempotent). Returns how many items were written.

        Also reads, once, which messages each summary in ``messages`` replaced (from its
        offload record), and which those it absorbed replaced, so that :meth:`_repair`
        can put a summary that arrives beside its originals back in their place."""
        return self._archive(messages, None, thread_id, store)

    def _archive(
        self,
        messages: Sequence[BaseMessage],
        summaries: Sequence[str] | None,
        thread_id: str,
        store: OffloadStore,
        *,
        settle: bool = False,
    ) -> int:
        """:meth:`archive`; ``summaries``: the offload ids of the summaries in
        ``messages`` (:func:`summary_offload_ids`), when the caller found them already;
        ``settle``: ``messages`` are a call's whole input, after which the memo keeps
        only the ids of the thread's latest inputs (:meth:`_settle_archived`). The memo is read and rewritten under
        the archive lock only: another caller's archive of the thread, marking what it
        wrote, must not run while it is filtered (the dict changed size while iterated)."""
        with store.archive_lock(thread_id):  # the calls of one reply archive it once
            fresh = self._revalidate(store, thread_id, messages)  # before the spans: it may forget
            todo = self._unknown_spans(store, thread_id, messages, summaries)
            spans = self._memo(store, thread_id).spans
            while todo:  # each summary's record, then those of the summaries it absorbed
                oid = todo.pop()
                if oid in spans:
                    continue
                try:
                    record: OffloadRecord | None = store.reload(thread_id, oid)
                except OffloadNotFoundError:  # written under another thread or store
                    record = None
                todo += self._learn_span(store, thread_id, oid, record)
            # cleaned as compress cleans its input: a reply archived after the model call
            # (the middleware's after_agent, the package's tools) has not been through it
            new = [sanitize_message(m) for m in fresh]
            written = store.append_history(thread_id, new) if new else []
            self._mark_archived(store, thread_id, fresh)  # as they come: compared so next time
            if settle:
                self._settle_archived(store, thread_id, messages)
            return len(written)

    async def aarchive(
        self, messages: Sequence[BaseMessage], *, thread_id: str, store: OffloadStore
    ) -> int:
        """Async twin of :meth:`archive`."""
        return await self._aarchive(messages, None, thread_id, store)

    async def _aarchive(
        self,
        messages: Sequence[BaseMessage],
        summaries: Sequence[str] | None,
        thread_id: str,
        store: OffloadStore,
        *,
        settle: bool = False,
    ) -> int:
        """Async twin of :meth:`_archive`."""
        async with store.aarchive_lock(thread_id):  # see _archive
            fresh = await self._arevalidate(store, thread_id, messages)  # before the spans
            todo = self._unknown_spans(store, thread_id, messages, summaries)
            spans = self._memo(store, thread_id).spans
            while todo:  # each summary's record, then those of the summaries it absorbed
                oid = todo.pop()
                if oid in spans:
                    continue
                try:
                    record: OffloadRecord | None = await store.areload(thread_id, oid)
                except OffloadNotFoundError:  # written under another thread or store
                    record = None
                todo += self._learn_span(store, thread_id, oid, record)
            # cleaned as compress cleans its input: a reply archived after the model call
            # (the middleware's after_agent, the package's tools) has not been through it
            new = [sanitize_message(m) for m in fresh]
            written = await store.aappend_history(thread_id, new) if new else []
            self._mark_archived(store, thread_id, fresh)  # as they come: compared so next time
            if settle:
                self._settle_archived(store, thread_id, messages)
            return len(written)

    def _edited(self, message: BaseMessage, entry: HistoryEntry) -> bool:
        """Whether the working ``message`` is not what the history holds under its id
        (an edit through ``graph.update_state``: the history keeps the first version)."""
        held = entry.message
        return (message.type, message.content, getattr(message, "tool_calls", None)) != (
            held.type,
            held.content,
            getattr(held, "tool_calls", None),
        )

    def _edit_record(self, message: BaseMessage) -> dict[str, Any]:
        return {
            "strategy": EDITED_COPY,
            "preview": f"{message.type} message {message.id}, as edited in the working copy",
            "tokens": self.counter.count_message(message),
        }

    def keep_edited(
        self, messages: Sequence[BaseMessage], *, thread_id: str, store: OffloadStore
    ) -> list[str]:
        """Offload the working copies among ``messages`` whose content the history does
        not hold, before the model deletes or rewrites them.

        The history keeps a message's first version under its id and each later content
        (``graph.update_state`` with its id, the developer's documented way to edit) as
        a version of it (:meth:`OffloadStore.append_history`), once archived; a working
        copy it holds neither way (the package's own context edit, one not archived
        yet) would be gone once deleted or rewritten by the model. Returns the offload
        ids, in ``messages``' order (recorded in one ``edited_copy`` event)."""
        found = []
        for m in _edit_candidates(messages):
            entry = store.get_history_message(thread_id, str(m.id))
            if (
                entry is not None
                and self._edited(m, entry)
                and store.get_history_message(thread_id, message_version_key(m)) is None
            ):
                found.append(m)
        ids = [store.offload(thread_id, [m], **self._edit_record(m)).offload_id for m in found]
        if ids:
            store.record_event(thread_id, _edited_event(found, ids))
        return ids

    async def akeep_edited(
        self, messages: Sequence[BaseMessage], *, thread_id: str, store: OffloadStore
    ) -> list[str]:
        """Async twin of :meth:`keep_edited`."""
        found = []
        for m in _edit_candidates(messages):
            entry = await store.aget_history_message(thread_id, str(m.id))
            if (
                entry is not None
                and self._edited(m, entry)
                and await store.aget_history_message(thread_id, message_version_key(m)) is None
            ):
                found.append(m)
        ids = [
            (await store.aoffload(thread_id, [m], **self._edit_record(m))).offload_id for m in found
        ]
        if ids:
            await store.arecord_event(thread_id, _edited_event(found, ids))
        return ids

    # --- compress: the plain-function form -------------------------------------------
    def _prepare(self, messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], bool, bool]:
        """The working messages of ``messages``: see :meth:`_prepare_all`."""
        return self._prepare_all(messages)[:3]

    def _prepare_all(
        self, messages: Sequence[BaseMessage], request_only: Collection[str] = ()
    ) -> tuple[list[BaseMessage], bool, bool, list[BaseMessage]]:
        """``(working messages, ids_assigned, virtual_system, originals to archive)``.

        Hostile input: ids for messages without one (or a duplicated one), text every
        store and provider accepts (no lone surrogates, no NUL). "ids_assigned" means
        "the working messages differ from the input": the surfaces write them back.
        Several system messages become one, first; the originals to archive are the
        messages before that merge, so each system message is archived as it was
        (merged first, a system message in the middle of a run was never archived).
        Messages named in ``request_only`` (see :meth:`compress`) are not originals.
        """
        fixed = ensure_ids([sanitize_message(m) for m in messages])
        skip = {_SYSTEM_PLACEHOLDER_ID, *request_only}  # a stand-in, request-only additions
        originals = [m for m in fixed if m.id not in skip]
        ids_assigned = any(a is not b for a, b in zip(fixed, messages, strict=True))
        merged = merge_system_messages(fixed)
        if merged is not fixed:
            fixed, ids_assigned = merged, True
        virtual_system = False
        if self.system_prompt and not (fixed and isinstance(fixed[0], SystemMessage)):
            fixed = [SystemMessage(self.system_prompt, id=_SYSTEM_PLACEHOLDER_ID), *fixed]
            virtual_system = True
        return fixed, ids_assigned, virtual_system, originals

    def _with_view(
        self,
        msgs: list[BaseMessage],
        state: Mapping[str, Any] | None,
        virtual: bool,
        shown: AutoContextConfig,
    ) -> tuple[list[BaseMessage], bool, SystemMessage | None]:
        """The messages with the system message as the model's view has it.

        The generated section and the working context (``state``) are appended to
        the system message, or form a virtual one, so the pipeline counts them.
        ``shown`` is the call's :meth:`view_config`. Returns the messages, whether the
        first one is virtual, and the system message to put back afterwards (``None``
        when unchanged).
        """
        if virtual:  # the agent adds its own system prompt: the view reserves the rest
            return msgs, True, None
        text = instructions_text(shown, state)
        if not text:
            return msgs, False, None
        if msgs and isinstance(msgs[0], SystemMessage):
            return [augment_system(msgs[0], text), *msgs[1:]], False, msgs[0]
        return [SystemMessage(text, id=_SYSTEM_PLACEHOLDER_ID), *msgs], True, None

    def _budget(
        self,
        messages: Sequence[BaseMessage],
        state: Mapping[str, Any] | None,
        shown: AutoContextConfig | None = None,
    ) -> AutoContextConfig:
        """The config the pipeline runs with: ``max_tokens`` minus what the view may add.

        The view may add a notice (memory pressure, command errors), when the
        agent owns the system prompt, the instructions as a message of their own, and
        when ``messages`` open with an assistant turn, the opener note
        (:func:`~langchain_autocontext.view.with_opener`); reserving their tokens keeps
        the view itself within ``max_tokens``. ``shown``:
        the call's :meth:`view_config`, when the caller has it already.
        """
        return self._budget_and_slack(messages, state, shown, with_slack=False)[0]

    def _budget_and_slack(
        self,
        messages: Sequence[BaseMessage],
        state: Mapping[str, Any] | None,
        shown: AutoContextConfig | None = None,
        with_slack: bool = True,
    ) -> tuple[AutoContextConfig, int]:
        """:meth:`_budget`, and the part of its reserve that is the pressure notice's
        (:func:`~langchain_autocontext.view.pressure_slack`, what the pipeline may
        drop; 0 without ``with_slack``), from one count of the view's notice."""
        owns_system = bool(messages) and isinstance(messages[0], SystemMessage)
        config = self.view_config(messages, state) if shown is None else shown
        separate = bool(self.system_prompt) and not owns_system
        opener = opens_with_assistant(messages)
        if with_slack:
            reserve, slack = view_reserve_and_slack(
                config, self.counter, state, separate_instructions=separate, opener=opener
            )
        else:
            reserve, slack = (
                view_reserve(
                    config, self.counter, state, separate_instructions=separate, opener=opener
                ),
                0,
            )
        limit = int(config.max_tokens / (token_scale(state) * window_scale(state)))
        return config.model_copy(update={"max_tokens": max(1, limit - reserve)}), slack

    def floor_tokens(
        self,
        messages: Sequence[BaseMessage],
        shown: AutoContextConfig | None = None,
        tools: Sequence[Any] | None = None,
        request_only: Collection[str] = (),
    ) -> int:
        """Tokens of what no strategy compresses in ``messages`` (system prompt, tool
        schemas, latest user message, pending call, pins, what is kept as a pin while
        there is room: :func:`~.strategies.pipeline.soft_pins`),
        counted as the pipeline counts them: the ``floor`` of :meth:`AutoContextConfig.thresholds`. ``tools``:
        the tool schemas the pipeline counts (default :attr:`count_tools`);
        ``request_only``: as :meth:`compress` takes it (none is the latest user message)."""
        tags = (shown or self.config).tags_mode
        counted = self.count_tools if tools is None else list(tools)
        return floor_tokens(
            list(messages),
            self.counter,
            counted,
            tags,
            request_only,
            plan_note_tools=self.config.plan_note_tools,
            pin_limit=self.config.pin_limit,
        )

    def with_own_tools(self, tools: Sequence[Any] | None) -> list[Any]:
        """The tool schemas the pipeline counts for a call that sends ``tools``: those
        and the package's own tools not among them (counted from the first call, shown
        or not, so that the room they take is there once they are shown);
        :attr:`count_tools` when ``tools`` is ``None``.

        A ``create_agent`` request sends the agent's tools, and the package's only once
        the model is shown the package: its view, its trigger and its warning count what
        the request sends plus what it will send."""
        given = list(self.agent_tools if tools is None else tools)
        names = {_tool_name(t) for t in given}
        return given + [t for t in self.tools if t.name not in names]

    def calibrate(
        self, call: ModelCall, reply: Any, state: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Learn from what the provider reports it was sent.

        ``reply``'s ``usage_metadata["input_tokens"]`` against ``call.tokens`` (what the
        package counted for that request): when the provider counts more, later calls
        budget ``max_tokens / scale`` counted tokens (``state["autocontext"]["token_scale"]``,
        kept with the thread), ``scale`` being what a request of the whole budget needs
        to fit by the provider's count, plus a 5% margin: the provider's ratio up to
        :data:`TOKENIZER_RATIO_CAP`, its excess beyond that as a fixed cost. The scale
        rises as soon as a request needs more; it falls (to 1 when the provider counts
        as much or less) only when it reserves more than twice the margin beyond what
        the request needed, so a ratio that moves a few percent with the content does
        not move it. Returns the new state and a ``calibration`` event when the scale changed,
        else ``(None, None)``.
        """
        usage = getattr(reply, "usage_metadata", None) or {}
        reported = usage.get("input_tokens") if isinstance(usage, Mapping) else None
        if not isinstance(reported, int) or reported <= 0 or call.tokens <= 0:
            return None, None
        # Up to TOKENIZER_RATIO_CAP the excess is taken as the provider's tokenizer (a
        # ratio); beyond it, as a fixed cost the package does not see (a hidden tool
        # prompt, images, another middleware's prompt), which a small request would
        # otherwise turn into a ratio shrinking the budget many times over.
        ratio = min(reported / call.tokens, TOKENIZER_RATIO_CAP)
        fixed = max(0.0, reported - ratio * call.tokens)
        window = self.config.max_tokens
        if fixed > window * MAX_FIXED_SHARE:
            # Not a cost every request carries: a provider that adds up the sampling
            # steps of a server-side tool loop (web search), or a wrong report. Set
            # aside, it left no room for the conversation (the scale at its cap, every
            # later call of the round a ContextBudgetError). A real one is answered by
            # the overflow recovery.
            return None, None
        needed = ratio * window / max(window - fixed, window / 16)
        scale = round(needed * CALIBRATION_MARGIN, 4) if needed > 1.0 else 1.0
        old = token_scale(state)
        # Up at once (a request must fit); down only once the scale reserves more than
        # twice the margin beyond what is needed. A tokenizer's ratio moves a few
        # percent with the content, and following it rewrote the state on every call (a
        # provider counting 12-18% more: 300 calibrations in 300 calls; soak audit).
        # Never down on a provider's own compaction (in the reply or the request): the
        # reply reports the compacted context, and Anthropic bills a request from its
        # compaction block on, not what the package sent (it put the scale back to 1,
        # under the provider's tokenizer, until the package compressed the block away).
        lowers = scale * CALIBRATION_MARGIN**2 < old and not (
            carries_compaction(reply) or any(carries_compaction(m) for m in call.messages)
        )
        if not (scale >= old + 0.01 or lowers):
            return None, None
        new_state = {**normalize_state(state), TOKEN_SCALE_KEY: scale}
        event = {
            "kind": "calibration",
            "strategy": "calibration",
            "counted_tokens": call.tokens,
            "reported_tokens": reported,
            "scale_before": old,
            "scale_after": scale,
        }
        return new_state, event

    def overflow_state(self, state: Mapping[str, Any] | None) -> dict[str, Any]:
        """The state after the provider rejected a request as too long: the window's
        scale grows by a quarter (this and later compressions aim a quarter lower);
        calibration from reported usage does not undo it."""
        return {
            **normalize_state(state),
            WINDOW_SCALE_KEY: round(window_scale(state) * OVERFLOW_SCALE_STEP, 4),
        }

    def _repair(
        self,
        messages: list[BaseMessage],
        store: OffloadStore | None = None,
        thread_id: str | None = None,
        marks: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> tuple[list[BaseMessage], bool]:
        """Summaries in their originals' place, and tool calls and results paired up
        (after archiving: what is dropped stays in the history). Returns the messages
        and whether anything changed.

        With ``store`` and ``thread_id``, a summary that arrives beside originals it
        replaced (a parent graph merged an agent's compressed messages into its own by
        id: the summary is appended at the end, the originals stay) takes their place
        and they are dropped, so nothing is summarized twice (:func:`place_summaries`,
        with the spans :meth:`archive` read). ``marks``: the :func:`markers` of
        ``messages``, when the caller has them."""
        fixed = messages
        if store is not None and thread_id is not None:
            marks = markers(fixed) if marks is None else marks
            spans = self._spans(store, thread_id, summary_offload_ids(fixed, marks))
            fixed = place_summaries(fixed, spans, marks)
        fixed = repair_tool_pairs(fixed)
        changed = len(fixed) != len(messages) or any(
            a is not b for a, b in zip(fixed, messages, strict=True)
        )
        return fixed, changed

    def _warn_latest_user_pin(
        self, messages: Sequence[BaseMessage], request_only: Collection[str]
    ) -> None:
        """Warn, once per message, when pins are past the pin limit only because the
        pinned latest user message (a developer's long task statement) is free while it
        is the latest: the next user message makes every call a
        :class:`ContextBudgetError` until pins are removed, so say it at first sight."""
        lu = latest_user_index(messages, request_only)
        if lu is None or not is_pinned(messages[lu]) or str(messages[lu].id) in self._pin_warned:
            return
        used, limit = pinned_tokens(messages, self.counter), self.config.pin_limit
        if used <= limit or developer_pin_tokens(messages, self.counter, request_only) > limit:
            return  # within the limit, or past it already: the pipeline's error says so
        self._pin_warned[str(messages[lu].id)] = None
        while len(self._pin_warned) > 4096:
            self._pin_warned.popitem(last=False)
        warnings.warn(
            f"langchain-autocontext: pinned messages take {used} tokens with the pinned "
            f"latest user message {messages[lu].id!r}, more than the pin limit of {limit} "
            "(pin_max_tokens, default max_tokens // 8). While it is the latest user message "
            "it is never compressed and takes nothing from the limit; once a later user "
            "message arrives every call raises ContextBudgetError until pins are removed. "
            "Unpin it (langchain_autocontext.pin(message, False)) or raise pin_max_tokens.",
            UserWarning,
            stacklevel=caller_stacklevel(),
        )

    def _pipeline(
        self,
        messages: list[BaseMessage],
        thread_id: str,
        tools: Sequence[Any] | None,
        force: bool,
        config: AutoContextConfig | None = None,
        state: Mapping[str, Any] | None = None,
        headroom: int = 0,
        reload_tool: bool | None = None,
        floor: int | None = None,
        request_only: Collection[str] = (),
        slack: int | None = None,
    ) -> Any:
        """``reload_tool``: the model has ``reload_offloaded`` (default: it has it with
        the package's tools, which come with the compression that writes this).
        ``floor``: the messages' :meth:`floor_tokens`, when the call measured it.
        ``request_only``: see :meth:`compress`.
        ``slack``: the budget's pressure slack, when :meth:`_budget_and_slack` gave it."""
        budget = config or self.config
        self._warn_latest_user_pin(messages, request_only)
        reserved = self.config.max_tokens - budget.max_tokens
        # the view drops its pressure notice rather than exceed max_tokens: what fits
        # without it is sent, not refused (the notice's room stays reserved for the
        # trigger and the target)
        droppable = 0
        if reserved > 0:
            if slack is None:
                shown = budget.model_copy(update={"max_tokens": self.config.max_tokens})
                slack = pressure_slack(shown, self.counter, state)
            droppable = slack
        return run_pipeline(
            messages,
            config=budget,
            counter=self.counter,
            thread_id=thread_id,
            tools=self.count_tools if tools is None else list(tools),
            tags=budget.tags_mode,
            strategies=self.strategies,
            force=force,
            reserved_tokens=reserved,
            reload_tool=self.config.self_management_tools if reload_tool is None else reload_tool,
            droppable_tokens=droppable,
            headroom=headroom,
            floor=floor,
            request_only=frozenset(request_only),
        )

    def _drive(self, run: Pipeline, store: OffloadStore) -> PipelineResult:
        """Drive a pipeline of this engine's (sync): every surface compresses here, and
        reports the compression's progress to the run's custom stream (:func:`_progress`)."""
        return drive(run, store, self.summarizer, _progress())

    async def _adrive(self, run: Pipeline, store: OffloadStore) -> PipelineResult:
        """Async twin of :meth:`_drive`."""
        return await adrive(run, store, self.summarizer, _progress())

    def _finish(
        self,
        result: PipelineResult,
        archived: int,
        ids_assigned: bool,
        virtual_system: bool,
        system: SystemMessage | None = None,
    ) -> CompressionResult:
        msgs = result.messages
        if virtual_system:
            msgs = msgs[1:]
        elif system is not None and msgs:
            msgs = [system, *msgs[1:]]
        return CompressionResult(
            messages=msgs,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            triggered=result.triggered,
            events=result.events,
            archived=archived,
            ids_assigned=ids_assigned,
        )

    def compress(
        self,
        messages: Sequence[MessageLikeRepresentation],
        *,
        thread_id: str | None = None,
        store: BaseStore | None = None,
        tools: Sequence[Any] | None = None,
        force: bool = False,
        state: Mapping[str, Any] | None = None,
        view: bool = True,
        headroom: int = 0,
        request_only: Collection[str] = (),
    ) -> CompressionResult:
        """Archive new originals, then compress ``messages`` if over a threshold.

        Returns the working messages to send (``result.messages``) with the token
        counts and one event per strategy that ran. ``force=True`` compresses even
        below the trigger. ``state`` is the graph state's ``autocontext`` dict: what
        the model's view adds (generated section, working context, notices) is
        counted in the budget; pass the same state to :meth:`prepare_model_call`.
        ``view=False``: the messages are sent as they are, without the view (no tags,
        no generated section, none of the package's tools), as a chain does with the
        chat history or the Runnable; only the tools given to this instance count.
        ``headroom``: tokens the result leaves free for what the caller adds before the
        model call (the chat history: the next turn's input); the trigger and the target
        never pass ``max_tokens - headroom`` (see :meth:`AutoContextConfig.thresholds`).
        ``request_only``: ids of messages sent with this call only, not part of the
        conversation (another middleware's retrieved documents): counted and compressed
        like the others, never archived in the history, and never taken for the latest
        user message (a document appended as a user message leaves the user's own
        latest message kept); one that a strategy summarizes or offloads is kept in that
        offload's record (``reload_offloaded``).
        ``thread_id``: the thread the originals, offloads and events are filed under;
        without it, the thread of the LangGraph run this is called in (a node, an
        ``@entrypoint``, a ``@task``), as the package's surfaces and tools resolve it
        (:func:`call_thread`), and ``"default"`` outside any run.
        Raises :class:`ContextBudgetError` when the system prompt and the latest
        user message alone exceed ``max_tokens``.
        """
        st = self.resolve_store(store)  # first: its warning names the caller's line
        call = self._intake(messages, thread_id, st, tools, state, view, request_only)
        archived = self._archive_input(
            call.originals, thread_id=call.thread_id, store=call.store, summaries=call.summaries
        )
        result = self._drive(self._compression(call, force, headroom), call.store)
        return self._finish(result, archived, call.ids_assigned, call.virtual, call.system)

    def _intake(
        self,
        messages: Sequence[MessageLikeRepresentation],
        thread_id: str | None,
        store: OffloadStore,
        tools: Sequence[Any] | None,
        state: Mapping[str, Any] | None,
        view: bool,
        request_only: Collection[str] = (),
    ) -> _Call:
        """What :meth:`compress` and :meth:`acompress` do before the archive."""
        given = as_messages(messages)
        state = checked_state(state)
        thread_id = call_thread(thread_id, state, given)  # the ids as given, before ours
        if tools is None:
            self._check_counted_tools(given, view, stacklevel=4)
        # _prepare_all's (msgs, ids_assigned, virtual, originals), in _Call's order
        call = _Call(
            given, *self._prepare_all(given, request_only), store, thread_id, state, tools, view
        )
        call.marks = markers(call.msgs)  # the one scan for the package's messages
        call.request_only = frozenset(request_only)
        return call

    def _compression(self, call: _Call, force: bool, headroom: int) -> Any:
        """What :meth:`compress` and :meth:`acompress` do after the archive: repair,
        the view's messages and budget, then the pipeline to drive (sets
        ``call.virtual`` and ``call.system`` for :meth:`_finish`)."""
        msgs, repaired = self._repair(call.msgs, call.store, call.thread_id, call.marks)
        if repaired:
            call.ids_assigned, call.marks = True, markers(msgs)
        msgs, budget, tools, floor, slack = self._as_sent(call, msgs)
        reload_tool = _offers_reload(call.view, tools)
        return self._pipeline(
            msgs,
            call.thread_id,
            tools,
            force,
            budget,
            call.state,
            headroom,
            reload_tool,
            floor,
            call.request_only,
            slack,
        )

    def _check_counted_tools(
        self, messages: Sequence[BaseMessage], view: bool = True, stacklevel: int = 3
    ) -> None:
        """Warn once when the agent's latest turn calls a tool whose schema this engine
        does not count: each schema is sent with every request, and uncounted they can
        take a request past ``max_tokens`` (a ``create_react_agent`` hook cannot see
        the tools its model is bound with; ``AutoContext(tools=…)`` tells it). Without
        the view (a chain) only those given as ``tools`` are counted."""
        if self._uncounted_warned or self.tools_from_requests:
            return
        last = next((m for m in reversed(messages[-8:]) if isinstance(m, AIMessage)), None)
        calls = getattr(last, "tool_calls", None)
        if not calls:
            return
        if view:
            known = {_tool_name(t) for t in self.count_tools} | {t.name for t in self.all_tools}
        else:  # a chain: only the tools given to this instance are counted
            known = {_tool_name(t) for t in self.agent_tools}
        missing = sorted({str(c.get("name")) for c in calls} - known)
        if not missing:
            return
        self._uncounted_warned = True
        warnings.warn(
            f"langchain-autocontext: the agent calls {', '.join(missing)}, whose schema "
            "this AutoContext does not count; every request sends the schemas of the "
            "tools the model is bound with, and uncounted they can take it past "
            f"max_tokens={self.config.max_tokens}. Pass them as AutoContext(tools=[…]) "
            "(the create_agent middleware counts each request's own).",
            stacklevel=stacklevel,
        )

    def _as_sent(
        self, call: _Call, msgs: list[BaseMessage]
    ) -> tuple[list[BaseMessage], AutoContextConfig, Any, int | None, int | None]:
        """The messages, budget and tool schemas the pipeline counts: with the model's
        view (:meth:`_with_view`, :meth:`_budget_and_slack`; sets ``call.virtual`` and
        ``call.system``), or as sent without one; their floor when this call measured it
        already (else ``None``); and the budget's pressure slack (``None`` without the
        view, whose budget reserves nothing)."""
        tools = call.tools
        if not call.view:
            plain = self._config_shown(False)
            return msgs, plain, list(self.agent_tools) if tools is None else tools, None, None
        engaged, floor = self._engagement(
            msgs, call.state, tools, bool(call.marks), call.request_only
        )
        shown = self._config_shown(engaged)
        sent, call.virtual, call.system = self._with_view(msgs, call.state, call.virtual, shown)
        if sent is not msgs:  # the view added its section: the floor counts it too
            floor = None
        budget, slack = self._budget_and_slack(call.given, call.state, shown)
        return sent, budget, tools, floor, slack

    async def acompress(
        self,
        messages: Sequence[MessageLikeRepresentation],
        *,
        thread_id: str | None = None,
        store: BaseStore | None = None,
        tools: Sequence[Any] | None = None,
        force: bool = False,
        state: Mapping[str, Any] | None = None,
        view: bool = True,
        headroom: int = 0,
        request_only: Collection[str] = (),
    ) -> CompressionResult:
        """Async twin of :meth:`compress`."""
        st = self.resolve_store(store)  # first: its warning names the caller's line
        call = self._intake(messages, thread_id, st, tools, state, view, request_only)
        archived = await self._aarchive_input(
            call.originals, thread_id=call.thread_id, store=call.store, summaries=call.summaries
        )
        result = await self._adrive(self._compression(call, force, headroom), call.store)
        return self._finish(result, archived, call.ids_assigned, call.virtual, call.system)

    # --- the model managing its own context ------------------------------------------
    def prepare_model_call(
        self,
        messages: Sequence[MessageLikeRepresentation],
        *,
        state: Mapping[str, Any] | None = None,
        tools: Sequence[Any] | None = None,
        thread_id: str | None = None,
        request_only: Collection[str] = (),
    ) -> ModelCall:
        """The model's input view of the (already compressed) working messages.

        The view is never persisted: the system message with the generated section
        and the working context, the working messages with metadata tags (when
        ``config.metadata_tags``), and one-turn notices (memory pressure, errors of
        the last XML commands). ``state`` is the graph state's ``autocontext`` dict;
        ``tools`` the tool schemas sent with the call (default: :attr:`count_tools`);
        the warning and the moment the package shows itself count them with the
        package's own (:meth:`with_own_tools`), as :meth:`compress` counted them.
        ``request_only``: the ids of messages sent with this call only, as
        :meth:`compress` took them (another middleware's retrieved document): none is
        the latest user message, which moves the memory-pressure warning and the moment
        the package shows itself up with what cannot be compressed; pass the ids given
        to :meth:`compress`, or this view judges both on other terms than it did.

        ``result.state_update`` is the new ``autocontext`` value (``{}`` when
        unchanged): persist it, e.g. ``return call.update(model.invoke(call.messages))``
        in a StateGraph model node (or use :meth:`model_node`).

        Raises:
            ContextBudgetError: the view exceeds ``max_tokens`` because the messages
                were not compressed with the same ``state`` (see :meth:`compress`).
        """
        del thread_id  # the view needs no store or thread; kept for symmetry with the others
        return self._model_call(messages, state, tools, request_only=request_only)

    def _model_call(
        self,
        messages: Sequence[MessageLikeRepresentation],
        state: Mapping[str, Any] | None,
        tools: Sequence[Any] | None,
        sent_for: Callable[[bool], list[Any]] | None = None,
        request_only: Collection[str] = (),
        system_follows: bool = False,
    ) -> ModelCall:
        """:meth:`prepare_model_call`. ``sent_for``: the tools the call sends once it is
        known whether the package is shown (the middleware leaves the package's own out
        until then), from the one engagement this call measures; default ``tools``.
        ``request_only``: as :meth:`compress` takes it (none is the latest user message
        of the floor that moves the trigger and the warning). ``system_follows``: the
        agent may put a system prompt of its own before the view (the pre-model hook):
        no system message of the package's then, see :func:`build_view`."""
        state = checked_state(state)
        msgs = merge_system_messages(as_messages(messages))  # one system message, in the view too
        # calls and results paired, in the view too: a middleware listed before the
        # package's may cut a call from its result (a trim to the last messages); what
        # the repair drops stays in the state and the history
        msgs = repair_tool_pairs(msgs)
        owns_system = bool(msgs) and isinstance(msgs[0], SystemMessage)
        counted = self.with_own_tools(tools)  # what compress counted for this call
        engaged, floor = self._engagement(msgs, state, counted, request_only=request_only)
        if sent_for is not None:
            sent = sent_for(engaged)
        else:
            sent = self.count_tools if tools is None else list(tools)
        shown = self._config_shown(engaged)
        call = build_view(
            msgs,
            config=shown,
            counter=self.counter,
            tools=sent,
            state=state,
            agent_system_prompt=None if owns_system else self.system_prompt,
            # tags counted as this view shows them (hidden: as engagement measured it)
            floor_tokens=(
                self.floor_tokens(msgs, shown, counted, request_only) if floor is None else floor
            ),
            unsent_tokens=self.counter.count_tools(counted) - self.counter.count_tools(sent),
            system_follows=system_follows,
        )
        call.engaged = engaged
        if self.config.self_management_tools and "working_context" not in (
            call.state_update or normalize_state(state)
        ):  # the key exists from the first call on, shown or not
            call.state_update = {
                **(call.state_update or normalize_state(state)),
                "working_context": "",
            }
        if (
            engaged
            and self.config.disclosure == "when_needed"
            and not normalize_state(state).get("engaged")
        ):
            base = call.state_update or normalize_state(state)
            call.state_update = {**base, "engaged": True}
        return call

    def engaged(
        self,
        messages: Sequence[MessageLikeRepresentation],
        state: Mapping[str, Any] | None,
        tools: Sequence[Any] | None = None,
    ) -> bool:
        """Whether the model is shown the package's tags, section and tools on this call.

        ``tools``: the tool schemas the pipeline counts for this call (default
        :attr:`count_tools`; :meth:`with_own_tools` of what a request sends), so that
        this decides as the pipeline does.

        With ``config.disclosure == "when_needed"``: from the call that first
        compresses (the context past the trigger, ``token_ratio`` of the budget moved up
        with the floor, or past ``msg_threshold`` messages; or a message the package
        wrote already in it) for good (``state["engaged"]``). That call rewrites the
        context anyway, so the provider's prompt cache breaks once for both: shown at
        the memory-pressure warning instead, a step or two before the first compaction,
        the package cost one more uncached request of the whole context per thread
        (on the coding runs of ``benchmarks/compare_peers.py``: 4.81M / 6.51M / 7.42M of
        effective cost at 8k / 16k / 32k, then 4.65M / 6.10M / 7.31M). Before that the
        model sees the conversation alone (a warning on the way says so without the
        tools): a short conversation costs nothing extra.
        """
        return self._engagement(messages, state, tools)[0]

    def _engagement(
        self,
        messages: Sequence[MessageLikeRepresentation],
        state: Mapping[str, Any] | None,
        tools: Sequence[Any] | None = None,
        marked: bool | None = None,
        request_only: Collection[str] = (),
    ) -> tuple[bool, int | None]:
        """:meth:`engaged`, and when not, the floor it measured (:meth:`floor_tokens` of
        ``messages`` with the package hidden: the view's floor then, and the pipeline's
        when the view leaves the messages as they are), else ``None``. ``marked``:
        whether a message of the package is among ``messages``, when the caller knows;
        ``request_only``: see :meth:`compress`."""
        cfg = self.config
        if cfg.disclosure == "always" or not (cfg.metadata_tags or cfg.self_management_tools):
            return True, None
        if normalize_state(state).get("engaged"):
            return True, None
        msgs = as_messages(messages)
        if any(marker(m) for m in msgs) if marked is None else marked:
            return True, None
        # the rule the pipeline applies to this call, before anything is shown
        hidden = self._config_shown(False)
        counted = self.count_tools if tools is None else list(tools)
        floor = self.floor_tokens(msgs, hidden, counted, request_only)
        due = self._budget(msgs, state, hidden).due(
            self.counter.count(msgs, counted), len(msgs), floor
        )
        return due, None if due else floor

    def trigger_tokens(
        self,
        messages: Sequence[BaseMessage],
        state: Mapping[str, Any] | None,
        shown: AutoContextConfig,
        tools: Sequence[Any] | None = None,
    ) -> int:
        """Tokens above which this call's pipeline compresses ``messages`` with the view
        ``shown``: the budget less the view's reserve (:meth:`_budget`), its trigger
        moved up with the floor (:meth:`AutoContextConfig.thresholds`). ``tools``: the
        tool schemas the pipeline counts (default :attr:`count_tools`)."""
        budget = self._budget(messages, state, shown)
        return budget.thresholds(self.floor_tokens(messages, shown, tools)).trigger

    def view_config(
        self,
        messages: Sequence[BaseMessage],
        state: Mapping[str, Any] | None,
        tools: Sequence[Any] | None = None,
    ) -> AutoContextConfig:
        """The config the view of this call is built with: without tags and without the
        tools' section until :meth:`engaged` (the tools stay registered). ``tools``: the
        tool schemas the pipeline counts (default :attr:`count_tools`)."""
        return self._config_shown(self.engaged(messages, state, tools))

    def _config_shown(self, engaged: bool) -> AutoContextConfig:
        if not (self._budget_warned or self._window_deferred):  # every surface passes here
            self._warn_default_budget()
        if engaged:
            return self.config
        # nothing of the package before it engages: no tags, no tools, and no section
        # teaching XML commands whose ids the model cannot see yet (replies are still
        # read for commands, by the configured ``xml_commands``)
        return self.config.model_copy(
            update={"metadata_tags": False, "self_management_tools": False, "xml_commands": False}
        )

    def after_model_call(
        self,
        messages: Sequence[BaseMessage],
        *,
        state: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        store: BaseStore | None = None,
        archive_reply: bool = True,
    ) -> dict[str, Any]:
        """Process the model's reply (the last message): strip tags, apply XML commands.

        Metadata tags the model copied into its reply are removed; with
        ``config.xml_commands`` its ``<delete>``, ``<update>`` and ``<user>`` commands
        are applied (see :mod:`langchain_autocontext.commands`). The originals are
        archived and each edit is recorded as an event before anything changes.

        ``archive_reply``: archive the reply now, tool calls and all (a human who edits
        a pending call before the tools run would otherwise replace the original). The
        middleware passes ``False``: other middlewares' ``after_model`` hooks (a PII
        redaction) run after its own, so it archives the reply once they have, at the
        end of the run or at the next model call, as the state then holds it (a reply
        its XML commands rewrote, with their receipts; the messages they edited are
        archived here, before the edit).

        Returns a LangGraph state update (``{"messages": […], "autocontext": {…}}``)
        or ``{}`` when there is nothing to do. After a ``<user>`` command,
        ``update["autocontext"]["autonomous_pending"]`` is True and the update ends
        with the new user message: call the model again.

        ``thread_id``: as :meth:`compress` takes it (without it, the thread of the run
        this is called in, else ``"default"``).
        """
        state = checked_state(state)
        thread_id = call_thread(thread_id, state, messages)
        outcome = process_reply(messages, config=self.config, state=state, counter=self.counter)
        if archive_reply and _reply(messages) and not outcome.changed:
            # the reply reaches the history now, not at the next call (or never, when the
            # run ends here or a human edits its pending call first)
            self.archive(_with_ids(messages), thread_id=thread_id, store=self.resolve_store(store))
        if not outcome.changed and not outcome.state_changed:
            return {}
        if outcome.changed:
            st = self.resolve_store(store)
            originals = _originals(outcome, archive_reply)
            self.archive(originals, thread_id=thread_id, store=st)
            self.keep_edited(originals, thread_id=thread_id, store=st)
            for event in outcome.events:
                st.record_event(thread_id, event)
        return outcome.update(messages)

    async def aafter_model_call(
        self,
        messages: Sequence[BaseMessage],
        *,
        state: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        store: BaseStore | None = None,
        archive_reply: bool = True,
    ) -> dict[str, Any]:
        """Async twin of :meth:`after_model_call`."""
        state = checked_state(state)
        thread_id = call_thread(thread_id, state, messages)
        outcome = process_reply(messages, config=self.config, state=state, counter=self.counter)
        if archive_reply and _reply(messages) and not outcome.changed:
            await self.aarchive(
                _with_ids(messages), thread_id=thread_id, store=self.resolve_store(store)
            )
        if not outcome.changed and not outcome.state_changed:
            return {}
        if outcome.changed:
            st = self.resolve_store(store)
            originals = _originals(outcome, archive_reply)
            await self.aarchive(originals, thread_id=thread_id, store=st)
            await self.akeep_edited(originals, thread_id=thread_id, store=st)
            for event in outcome.events:
                await st.arecord_event(thread_id, event)
        return outcome.update(messages)


def _originals(outcome: ReplyOutcome, archive_reply: bool) -> list[BaseMessage]:
    """The originals to archive before the reply's edits reach the state: with
    ``archive_reply``, the reply first as the model wrote it
    (:attr:`ReplyOutcome.originals`) and every message its commands edited. Without it
    the caller archives the reply once every ``after_model`` hook has run (a
    redaction's), as the state then holds it (its applied commands replaced by their
    receipts): archived as written now, the history would keep what those hooks remove,
    and what a command moved out of the reply (a ``<user>`` message, an ``<update>``'s
    content) no redaction of the reply can reach."""
    originals = outcome.originals
    if archive_reply or not originals:
        return originals
    return originals[1:]  # process_reply puts the reply first


class _Archived(NamedTuple):
    """What the archive memo keeps of the content last archived under a message id."""

    #: :func:`_fingerprint` of the message
    fingerprint: int
    #: the message whose ``tool_calls`` the arguments were hashed from, weakly (``None``
    #: without calls, or for a message that cannot be weakly referenced): the memo of an
    #: idle thread keeps no message, no call and no argument alive
    owner: weakref.ref[BaseMessage] | None
    #: ``id()`` of that message's ``tool_calls`` list when hashed (compared while it lives)
    calls: int
    #: :func:`content_hash` of the calls' arguments (0 without calls)
    args: int


def _args_hash(calls: list[ToolCall]) -> int:
    return content_hash([c.get("args") for c in calls])


def _hashed(fingerprint: int, message: BaseMessage, calls: list[ToolCall], args: int) -> _Archived:
    """The memo's record of ``message``, whose ``calls`` hash to ``args``."""
    try:
        owner: weakref.ref[BaseMessage] | None = weakref.ref(message)
    except TypeError:
        owner = None
    return _Archived(fingerprint, owner, id(calls), args)


def _archived(message: BaseMessage) -> _Archived:
    """The memo's record of ``message``, archived now."""
    calls = message.tool_calls if isinstance(message, AIMessage) else None
    if not calls:
        return _Archived(_fingerprint(message, calls), None, 0, 0)
    return _hashed(_fingerprint(message, calls), message, calls, _args_hash(calls))


def _still(seen: dict[str, _Archived], message: BaseMessage) -> bool:
    """Whether ``message`` holds what the memo ``seen`` archived last under its id: the
    memo's test for "archived with this content", run on every remembered message of
    every call. Its type, content and calls' ids and names are compared by
    :func:`_fingerprint`; the calls' arguments (an edit of them alone is a later version
    too, as the store compares) are hashed only when the message or its ``tool_calls``
    list is another object than the one hashed last (LangGraph's ``add_messages`` and a
    checkpoint load give an edited message a new one), then remembered: hashing every
    call's arguments on every call cost a third more than the rest. The memo holds the
    message weakly and the list by its ``id()`` (held, the lists kept every call's
    arguments of an idle thread alive: a file written whole, previewed in the state).
    An edit of arguments in place, in the very list the engine saw, is seen by the
    store's comparison only (an engine that does not remember the id: another process,
    a restart), as is a list replaced twice in the same message (the third list may
    take the first one's address)."""
    mid = str(message.id)
    held = seen[mid]
    calls = message.tool_calls if isinstance(message, AIMessage) else None  # getattr: slow
    if held.fingerprint != _fingerprint(message, calls):
        return False
    if not calls:
        return True
    owner = held.owner() if held.owner is not None else None
    if owner is message and id(calls) == held.calls:
        return True
    if _args_hash(calls) != held.args:
        return False
    seen[mid] = _hashed(held.fingerprint, message, calls, held.args)  # not hashed again
    return True


def _fingerprint(message: BaseMessage, calls: list[ToolCall] | None) -> int:
    """What an edit that reuses a message's id changes (its type, content, the ids and
    names of its tool calls), hashed (the calls' arguments: :func:`_still`). Cheap, as
    it runs on every remembered message of every call: block content is hashed through
    its values (:func:`content_hash`), never rendered whole. ``calls``: its
    ``tool_calls`` (``None`` for a message of another type than ``AIMessage``)."""
    content = message.content
    return hash(
        (
            message.type,
            content_hash(content),
            tuple((c.get("id"), c.get("name")) for c in calls) if calls else (),
        )
    )


#: The offload strategy of a working copy kept before an edit (:meth:`ContextEngine.keep_edited`).
EDITED_COPY = "edited_copy"


def _edit_candidates(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages :meth:`ContextEngine.keep_edited` compares with the history: cleaned
    as archived, with an id, and not the package's own (offloaded already)."""
    return [m for m in map(sanitize_message, messages) if m.id is not None and marker(m) is None]


def _edited_event(messages: Sequence[BaseMessage], offload_ids: Sequence[str]) -> dict[str, Any]:
    return {
        "kind": "context_edit",
        "strategy": EDITED_COPY,
        "message_ids": [m.id for m in messages],
        "offload_ids": list(offload_ids),
    }


#: The one key of what the package writes to a run's custom stream.
STREAM_KEY = "autocontext"


def _progress() -> Progress | None:
    """Where a compression reports its progress: the custom stream of the LangGraph run
    it runs in (``stream_mode="custom"`` yields ``{"autocontext": {"event": …, …}}``,
    with the running agent's name when it has one); ``None`` outside a graph run."""
    write = stream_writer()
    if write is None:
        return None
    agent = running_agent()

    def emit(payload: dict[str, Any]) -> None:
        write({STREAM_KEY: payload if agent is None else {**payload, "agent": agent}})

    return emit


def _offers_reload(view: bool, tools: Sequence[Any] | None) -> bool | None:
    """Whether a call without the view (a chain: none of the package's tools unless
    given as ``tools``) has ``reload_offloaded``; ``None`` with the view (the engine's
    config says)."""
    if view:
        return None
    return any(_tool_name(t) == "reload_offloaded" for t in tools or ())


def _reply(messages: Sequence[BaseMessage]) -> bool:
    """Whether the last message is the model's reply."""
    return bool(messages) and isinstance(messages[-1], AIMessage)


def _with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if isinstance(m, BaseMessage) and m.id]


#: The context tools that name a message by the id its metadata tag shows: offered with
#: the tags only (without them the model sees no ids to give; on the coding runs of
#: ``benchmarks/compare_peers.py`` their 123 tokens of schemas bought nothing below 32k).
ID_TOOLS = frozenset({"update_message", "delete_message", "pin_message"})


def _tool_name(tool: Any) -> str | None:
    """A tool's name: a LangChain tool's, or an OpenAI-format dict's."""
    if isinstance(tool, Mapping):
        function = tool.get("function")
        inner = function if isinstance(function, Mapping) else tool
        name = inner.get("name")
        return str(name) if name else None
    name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
    return str(name) if name else None


def bound_tools(model: Any) -> list[Any]:
    """The tool schemas bound to a chat model (``model.bind_tools(...)`` returns a
    binding whose ``kwargs["tools"]`` they are; the outermost binding's, as LangChain
    sends them: :func:`~langchain_autocontext.budget.sent_settings`), else ``[]``."""
    tools = sent_settings(model)[0].get("tools")
    return list(tools) if isinstance(tools, list | tuple) else []


#: Key of ``state["autocontext"]`` naming the thread of a run that has no ``thread_id``.
RUN_THREAD_KEY = "run_thread"
#: Key of ``state["autocontext"]``: provider tokens per counted token (>= 1), learned
#: from the usage each response reports and from requests rejected as too long.
TOKEN_SCALE_KEY = "token_scale"
#: Margin over the provider/counter ratio a calibration applies.
CALIBRATION_MARGIN = 1.05
#: Key of ``state["autocontext"]``: how much smaller the model's real window proved than
#: the budget (grows by a quarter each time a request is rejected as too long).
WINDOW_SCALE_KEY = "window_scale"
#: How much lower the budget aims after a request was rejected as too long.
OVERFLOW_SCALE_STEP = 1.25


def _scale(state: Mapping[str, Any] | None, key: str) -> float:
    value = (state or {}).get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 1.0:
        return float(min(value, 16.0))
    return 1.0


#: Most a provider's tokenizer counts beyond this package's on the same request
#: (Anthropic's and Gemini's count 10-25% more on English and code): what a request
#: reports beyond this ratio is a fixed cost, not a ratio (see ``calibrate``).
TOKENIZER_RATIO_CAP = 1.5
#: Most of ``max_tokens`` a reported fixed cost may take (see ``calibrate``): beyond it
#: the report is not taken for a cost of every request.
MAX_FIXED_SHARE = 0.5


def token_scale(state: Mapping[str, Any] | None) -> float:
    """The thread's calibration: provider tokens per counted token (1.0 when none was
    learned; never below 1)."""
    return _scale(state, TOKEN_SCALE_KEY)


def window_scale(state: Mapping[str, Any] | None) -> float:
    """How much lower than ``max_tokens`` the thread's requests aim after rejections
    as too long (1.0 when none happened)."""
    return _scale(state, WINDOW_SCALE_KEY)


def configured_thread(config: RunnableConfig | None) -> str | None:
    """``config["configurable"]["thread_id"]`` as a string, or None when absent."""
    configurable = (config or {}).get("configurable") or {}
    value = configurable.get("thread_id")
    return str(value) if value not in (None, "") else None


def thread_id_of(
    config: RunnableConfig | None,
    state: Mapping[str, Any] | None = None,
    messages: Sequence[Any] | None = None,
) -> str:
    """The thread a graph run files its history under.

    The run's ``thread_id``; without one, the per-run thread recorded in the package's
    state (``state["autocontext"]["run_thread"]``, see :func:`run_thread`); without that
    (a parent state with no ``autocontext`` key, e.g. ``MessagesState``), the thread
    :func:`run_thread` derives from ``messages``; else ``"default"`` (plain function
    calls outside a graph).
    """
    configured = configured_thread(config)
    if configured is not None:
        return configured
    run = (state or {}).get(RUN_THREAD_KEY)
    if isinstance(run, str) and run:
        return run
    return _conversation_thread(messages) or "default"


_warned_run_thread = False


#: Namespace of the threads derived from a conversation's first user message id.
_RUN_THREAD_NS = uuid.UUID("9b1f3c2e-5d4a-4e8b-9c7f-2a6d1e0b8f35")


def _conversation_thread(messages: Sequence[Any] | None) -> str | None:
    """``run-<hex>`` derived from the id of the conversation's first user message,
    when that id is a random uuid4 (as LangGraph's ``add_messages`` and chat UIs give):
    unguessable, and the same for every agent and request of that conversation, also
    once that message was offloaded or evicted into the recursive summary, which names
    it (:func:`~langchain_autocontext.strategies.base.conversation_origin`). None
    when there is no such message (a client-chosen id like ``"1"`` could be shared by
    two users, so it never names a thread)."""
    origin = conversation_origin([m for m in messages or () if isinstance(m, BaseMessage)])
    if origin is None:
        return None
    try:
        parsed = uuid.UUID(origin)
    except ValueError:
        return None
    if parsed.version != 4 or str(parsed) != origin.lower():
        return None
    return f"run-{uuid.uuid5(_RUN_THREAD_NS, str(parsed)).hex}"


def run_thread(
    config: RunnableConfig | None,
    state: Mapping[str, Any] | None,
    messages: Sequence[Any] | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """The thread of a graph run, making one for a run without ``thread_id``.

    Stateless requests (no checkpointer, no ``thread_id``) must not share one history:
    a store shared by several users would let one user's ``search_history`` find
    another's messages. Such a run is filed under a thread of the conversation,
    ``run-<hex>`` derived from the id of its first user message when that id is a random
    uuid4 (so every agent of a multi-agent graph, and every request that sends the
    conversation again with its ids, finds the same history and reloads the same
    offloads), else a thread of its own, ``run-<uuid4>``. The thread is kept in
    ``state["autocontext"]`` for the rest of the run, and a warning says so once per
    process. Returns the thread id and the state to persist when a thread was made
    (else None).
    """
    global _warned_run_thread
    if configured_thread(config) is not None or (state or {}).get(RUN_THREAD_KEY):
        return thread_id_of(config, state), None
    derived = _conversation_thread(messages)
    thread = derived or f"run-{new_uuid().hex}"
    if not _warned_run_thread:
        _warned_run_thread = True
        where = (
            "a thread named after its first user message's id" if derived else "a thread of its own"
        )
        warnings.warn(
            "langchain-autocontext: this run has no thread_id, so its history, offloads "
            f"and events are filed under {where} ({thread}). Pass config={{'configurable': "
            "{'thread_id': ...}} (with a checkpointer) to keep a conversation's history "
            "under a thread you choose.",
            stacklevel=3,
        )
    return thread, {**normalize_state(state), RUN_THREAD_KEY: thread}


def call_thread(
    thread_id: str | None,
    state: Mapping[str, Any] | None = None,
    messages: Sequence[Any] | None = None,
) -> str:
    """The thread a plain call (:meth:`ContextEngine.compress`,
    :meth:`~ContextEngine.after_model_call`, …) files under: ``thread_id`` when given;
    inside a run (a LangGraph node, ``@entrypoint`` or ``@task``: any Runnable), the
    run's thread as the surfaces resolve it (:func:`run_thread` on the run's config,
    ``state`` being the package's state and ``messages`` the conversation), so that a
    node calling ``compress`` and the package's tools in the same run agree; outside any
    run, ``"default"``.

    A run without ``thread_id`` is filed under the thread of its conversation (with
    :func:`run_thread`'s warning); when none can be derived from ``messages`` (no random
    uuid4 id on the first user message) and the state keeps no thread, under
    ``"default"``, where the tools (:func:`thread_id_of`) look too: a thread made up
    per call could not be persisted, and would scatter the run over as many threads.
    """
    if thread_id is not None:
        return thread_id
    config = run_config()
    if config is None:
        return "default"
    found = thread_id_of(config, state, messages)
    return found if found == "default" else run_thread(config, state, messages)[0]


def _graph_store() -> BaseStore | None:
    try:
        from langgraph.config import get_store

        return get_store()
    except Exception:  # outside a graph run
        return None
