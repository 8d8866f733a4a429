"""`AutoContextMiddleware`: the package as a LangChain v1 agent middleware.

Use it with ``langchain.agents.create_agent``::

    agent = create_agent(model, tools, middleware=[ac.middleware()], checkpointer=…, store=…)

What runs where:

* ``before_model`` / ``abefore_model`` — archive new originals and compress the
  working messages (the seven strategies); the result replaces the state's
  ``messages`` (``RemoveMessage(REMOVE_ALL_MESSAGES)`` + the new list) only when it
  changed, so checkpoints hold the compressed context.
* ``wrap_model_call`` / ``awrap_model_call`` — render the model's *input view*
  (metadata tags, system-prompt section, working context, memory-pressure notice)
  on a copy of the request; nothing of the view is written to state. Without a
  ``max_tokens``, the budget is read first from the request's model
  (``model.profile["max_input_tokens"]``, see :meth:`AutoContext.use_model`).
* ``after_model`` / ``aafter_model`` — strip tags the model copied into its output
  and apply its XML commands when ``xml_commands`` is on.
* ``wrap_tool_call`` / ``awrap_tool_call`` and ``after_agent`` — archive the model's
  replies once every ``after_model`` hook has run: before their tools run, and the
  final answer when the run ends; a tool that hands off to the parent graph
  (``Command(graph=Command.PARENT)``) ends the agent's run before ``after_agent``, so
  the messages the handoff adds are archived as it returns.
* ``tools`` — the package's self-management tools, registered with the agent.
* ``state_schema`` — declares the private ``autocontext`` state key (plain JSON).

``create_agent`` keeps its system prompt outside the state, so ``before_model``
cannot see it. The middleware learns the system message and the tool schemas of
each model request and remembers them per thread in the store (one small item,
written when they change), so the budget counts them from the first call after a
restart too; ``AutoContext(system_prompt=…)`` overrides what is learned.

Over 600 lines because each hook comes in a sync and an async twin over shared helpers,
and the request bookkeeping (learned system prompt, tools, response format, overflow
retry) belongs to the one surface that sees the model request.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import Unpack

from langchain_autocontext.budget import sent_settings
from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.engine import (
    _SYSTEM_PLACEHOLDER_ID,
    AutoContextArgs,
    ContextEngine,
    run_thread,
    thread_id_of,
    token_scale,
    window_scale,
)
from langchain_autocontext.errors import ContextBudgetError, is_context_overflow
from langchain_autocontext.history import surface_namespace
from langchain_autocontext.messages import (
    content_hash,
    dump_message,
    ensure_ids,
    load_message,
    marker,
    remove_all,
    sanitize_message,
    state_messages,
)
from langchain_autocontext.metadata import strip_message_tags
from langchain_autocontext.store import (
    OffloadStore,
    on_thread_deleted,
    plain_json,
    revive,
    run_config,
    running_agent,
)
from langchain_autocontext.strategies.base import summary_offload_ids
from langchain_autocontext.tools import attach_tools
from langchain_autocontext.view import remember_reply, state_in

if TYPE_CHECKING:
    from langchain.tools import ToolRuntime

    from langchain_autocontext.engine import CompressionResult
    from langchain_autocontext.view import ModelCall

__all__ = ["AutoContextMiddleware", "AutoContextMiddlewareState"]

#: Key of the model-request record in the thread's ``(prefix, thread, "surface")`` namespace.
_REQUEST_KEY = "model_request"
#: Id of the stand-in system message handed to the engine: the engine's own placeholder
#: id, which it never archives; the middleware never writes it to state either.
_SYSTEM_STANDIN_ID = _SYSTEM_PLACEHOLDER_ID
_MAX_THREADS = 4096

#: A cache key of the middleware: the store (see :func:`_store_key`), the thread id and
#: the running agent's name (``None`` when it has none).
_CacheKey = tuple[Any, str, str, str | None]
#: a view fitted in a model call: its working messages (None when the call fitted
#: nothing), the ids the request sent and, when it fitted some, what the state's
#: messages were (:func:`_print` of each)
_Fit = tuple[list[BaseMessage] | None, frozenset[Any], frozenset[tuple[Any, ...]] | None]
#: what a fit is kept under: the agent's run in the graph (:func:`_branch`) and the ids
#: of the state the call was made from
_FitKey = tuple[str, frozenset[Any]]
#: fitted views kept per cache key at once (parallel branches of one agent in a thread)
_MAX_FITS = 64
#: a view fitted in a model call that did not return yet, for another attempt at the
#: same request (a ``ModelRetryMiddleware`` or ``ModelFallbackMiddleware`` listed before
#: this one calls it again): the config it was fitted under, what it was fitted from
#: (:func:`_attempt_of`) and the fit
_Attempt = tuple[AutoContextConfig, tuple[Any, ...], "ModelCall", list[BaseMessage] | None]

#: A token per live store backend, never reused (an ``id()`` is, once its object is gone).
_BACKENDS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_BACKEND_TOKENS = itertools.count()
_BACKENDS_LOCK = threading.Lock()


def _sent_model(request: ModelRequest[Any]) -> Any:
    """The request's model as create_agent sends it, bound with the request's
    ``model_settings`` (a reply size set there is the one the budget leaves room for).
    With tools or a response format it calls ``request.model.bind_tools(...)``, which a
    binding forwards to the model it binds: the binding's own kwargs are not sent."""
    model = request.model
    if request.tools or request.response_format is not None:
        model = sent_settings(model)[1]
    settings = request.model_settings
    return model.bind(**settings) if settings else model


def _store_key(store: OffloadStore) -> tuple[Any, str]:
    """Which store a cached thread belongs to: its backend and its prefix. One middleware
    may serve graphs compiled with different stores (tenants) under the same thread
    ids; what it learned of one must not count in another's budget."""
    backend = store.backend
    try:
        with _BACKENDS_LOCK:
            token = _BACKENDS.get(backend)
            if token is None:
                token = _BACKENDS[backend] = next(_BACKEND_TOKENS)
    except TypeError:  # a backend that cannot be weakly referenced: by identity
        return ("id", id(backend)), store.prefix
    return token, store.prefix


#: Every live middleware: a thread deleted from a store is forgotten by each.
_MIDDLEWARES: weakref.WeakSet[AutoContextMiddleware] = weakref.WeakSet()


def _forget_thread(store: OffloadStore, thread_id: str) -> None:
    for middleware in list(_MIDDLEWARES):
        middleware._forget(store, thread_id)


on_thread_deleted(_forget_thread)


class AutoContextMiddlewareState(AgentState[Any]):
    """The agent state plus the middleware's private ``autocontext`` key (plain JSON).

    The key holds the model's self-management state (working context, memory-pressure
    flag, pending command errors); every writer replaces the whole
    dict. It is private: not part of the agent's input or output schema, but kept in
    checkpoints (``agent.get_state(config).values["autocontext"]``).
    """

    autocontext: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


def _ac_state(state: AgentState[Any]) -> dict[str, Any] | None:
    """The state's private ``autocontext`` key (declared by :class:`AutoContextMiddlewareState`)."""
    return state_in(cast("AutoContextMiddlewareState", state))  # type: ignore[return-value]


def _run_config(runtime: Runtime[Any] | ToolRuntime[Any, Any] | None) -> RunnableConfig:
    """The run's thread as a config (``{"configurable": {"thread_id": …}}`` or empty)."""
    info = getattr(runtime, "execution_info", None)
    value = getattr(info, "thread_id", None)
    if value not in (None, ""):
        return {"configurable": {"thread_id": str(value)}}
    config = run_config()
    return {} if config is None else config.copy()


def _thread_id(runtime: Runtime[Any] | ToolRuntime[Any, Any] | None, ac_state: Any = None) -> str:
    """The run's thread: its ``thread_id``, else the per-run thread in the state."""
    return thread_id_of(_run_config(runtime), ac_state)


def _branch(runtime: Runtime[Any] | None) -> str:
    """The agent's run in the graph that a hook runs in: the checkpoint namespace of the
    agent's graph (the hook's own without its node's last segment). ``""`` at the top
    level; each branch of a fan-out (``Send``) its own (``worker:<task id>``), the same
    for the model call and the hooks around it, and on a resume of its task."""
    info = getattr(runtime, "execution_info", None)
    ns = getattr(info, "checkpoint_ns", None)
    if not isinstance(ns, str):
        config = run_config()
        if config is None:  # outside a runnable context
            return ""
        ns = config.get("configurable", {}).get("checkpoint_ns", "")
    return str(ns).rpartition("|")[0]


def _format_tools(fmt: Any) -> list[Any]:
    """The tools ``create_agent`` adds to a request for its ``response_format``.

    A ``ToolStrategy`` is sent as one tool per schema; a ``ProviderStrategy`` sends the
    schema as the provider's response format, counted here as a tool of that schema;
    an ``AutoStrategy`` becomes one or the other, so its schema is counted too.
    """
    if fmt is None:
        return []
    try:
        from langchain.agents.structured_output import OutputToolBinding, ToolStrategy
    except ImportError:  # pragma: no cover - another langchain layout
        return []
    if not isinstance(fmt, ToolStrategy):
        schema = getattr(fmt, "schema", None)
        if schema is None:
            return []
        fmt = ToolStrategy(schema)
    return [OutputToolBinding.from_schema_spec(spec).tool for spec in fmt.schema_specs]


def _tool_schema(tool: Any) -> dict[str, Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    if isinstance(tool, dict):
        try:
            return convert_to_openai_tool(tool)
        except Exception:  # a provider-specific dict: keep it as sent
            return dict(tool)
    return convert_to_openai_tool(tool)


class _RequestShape:
    """The system message and tool schemas of a model request (what the budget counts)."""

    __slots__ = ("fingerprint", "system", "tools")

    def __init__(self, system: SystemMessage | None, tools: list[dict[str, Any]]) -> None:
        self.system = system
        self.tools = tools
        raw = json.dumps(
            [dump_message(system) if system is not None else None, tools],
            sort_keys=True,
            default=str,
        )
        self.fingerprint = hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def of(cls, request: ModelRequest[Any], counted: Sequence[Any]) -> _RequestShape:
        """The shape of ``request`` with ``counted``, the tools its budget counts."""
        system = request.system_message
        # cleaned as the package cleans what it archives: a lone surrogate, a NUL
        clean = sanitize_message(system) if system is not None else None
        return cls(
            clean if isinstance(clean, SystemMessage) else system,
            [_tool_schema(t) for t in counted],
        )

    def to_json(self) -> dict[str, Any]:
        """The shape as the store holds it: JSON every backend takes (a value JSON
        cannot hold encoded, as the package's other records are)."""
        return plain_json(
            {
                "system": dump_message(self.system) if self.system is not None else None,
                "tools": self.tools,
                "fingerprint": self.fingerprint,
            },
            "the request's system prompt and tool schemas",
        )

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> _RequestShape:
        value = revive(value)
        system = load_message(value["system"]) if value.get("system") else None
        return cls(system if isinstance(system, SystemMessage) else None, list(value["tools"]))


class AutoContextMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Keeps a ``create_agent`` agent inside its context budget; see the module docstring.

    Build it with :meth:`AutoContext.middleware` (or ``AutoContextMiddleware(ac)``) and
    put it in ``create_agent(..., middleware=[...])`` after the middleware that changes
    the model request, so its ``wrap_model_call`` sees the request they made, and
    before one whose ``before_model`` removes messages (``SummarizationMiddleware``),
    so it archives them first (docs/surfaces.md lists the usual ones).

    Args:
        autocontext: the :class:`~langchain_autocontext.AutoContext` doing the work.
    """

    #: The state it reads and writes (``AgentState`` plus the private ``autocontext`` key).
    #: The class is an ``AgentMiddleware[AgentState[Any], …]`` for type checkers, as
    #: LangChain's own middlewares are, so that it mixes with them in one
    #: ``create_agent(middleware=[…])`` list (its state type parameter is invariant).
    state_schema = AutoContextMiddlewareState

    def __repr__(self) -> str:  # the default named only the class and an address
        return f"{type(self).__name__}({self.autocontext!r})"

    def __init__(
        self,
        autocontext: ContextEngine | AutoContextConfig | None = None,
        /,
        **kwargs: Unpack[AutoContextArgs],
    ) -> None:
        """Build it the LangChain way, ``AutoContextMiddleware(max_tokens=8_000,
        summarizer=…, store=…)`` (any :class:`AutoContextConfig` field and any
        :class:`AutoContext` argument, ``trigger=("tokens", 6_000)`` and
        ``keep=("fraction", 0.4)`` included), from an ``AutoContextConfig``, or around an
        existing ``AutoContext`` (what ``ac.middleware()`` does). Without ``max_tokens``
        the budget comes from the agent's model at its first call."""
        if autocontext is None or isinstance(autocontext, AutoContextConfig):
            autocontext = attach_tools(ContextEngine(autocontext, **kwargs))
        elif kwargs:
            raise TypeError(
                "give an AutoContext or keyword arguments to build one, not both "
                f"(got {', '.join(sorted(kwargs))})"
            )
        if not isinstance(autocontext, ContextEngine):
            raise TypeError(
                "AutoContextMiddleware needs an AutoContext, an AutoContextConfig or its "
                f"fields as keyword arguments, got {type(autocontext).__name__}; build it "
                "with AutoContextMiddleware(max_tokens=…) or ac.middleware()"
            )
        super().__init__()
        self.autocontext = autocontext
        # the budget comes from the request's model (use_model) unless max_tokens was given:
        # the engine leaves the default-budget warning to wrap_model_call
        autocontext._window_deferred = True
        autocontext.tools_from_requests = True  # each request's tools are counted
        # every tool registered (a budget learned later may offer more); each request
        # sends those offered (see _offered)
        self.tools = autocontext.all_tools
        self._lock = threading.Lock()
        # store, thread id and agent name (see _keys) -> the request shape last seen or
        # loaded for it (bounded)
        self._shapes: OrderedDict[_CacheKey, _RequestShape] = OrderedDict()
        # cache key -> the agent's run and the ids of the state a model call was made
        # from -> the working messages of the view it fitted (None: it fitted nothing)
        # and the ids it sent, for after_model (see _hold); several per key: the
        # branches of a fan-out (Send) run one agent, hence this middleware, on one
        # thread at once
        self._fitted: OrderedDict[_CacheKey, dict[_FitKey, _Fit]] = OrderedDict()
        # cache key and the agent's run -> the view fitted in a model call that has not
        # returned yet (see _attempt): another attempt at the same request reuses it
        self._attempts: OrderedDict[tuple[_CacheKey, str], _Attempt] = OrderedDict()
        self._last: tuple[Any, tuple[Any, ...], Any, _RequestShape] | None = None
        #: the last response format seen and the tools it adds (built once per format)
        self._format: tuple[Any, list[Any]] = (None, [])
        _MIDDLEWARES.add(self)  # a deleted thread's request shapes are dropped (delete_thread)

    @property
    def name(self) -> str:
        """The node-name prefix of the middleware in the agent graph."""
        return "AutoContextMiddleware"

    # --- what the budget counts besides the messages ---------------------------------------
    def _remember(self, cache_key: _CacheKey, shape: _RequestShape) -> bool:
        """Cache ``shape`` for the thread; True when it differs from what was known."""
        with self._lock:
            old = self._shapes.get(cache_key)
            self._shapes[cache_key] = shape
            self._shapes.move_to_end(cache_key)
            while len(self._shapes) > _MAX_THREADS:
                self._shapes.popitem(last=False)
        return old is None or old.fingerprint != shape.fingerprint

    def _forget(self, store: OffloadStore, thread_id: str) -> None:
        """Drop the request shapes of ``thread_id`` in ``store`` (its own and its named
        agents')."""
        where = (*_store_key(store), thread_id)
        with self._lock:
            gone = [k for k in self._shapes if k[:3] == where]
            dropped = {id(self._shapes.pop(k)) for k in gone}
            for k in [k for k in self._fitted if k[:3] == where]:
                del self._fitted[k]
            for a in [a for a in self._attempts if a[0][:3] == where]:
                del self._attempts[a]
            if self._last is not None and id(self._last[3]) in dropped:
                self._last = None

    def _counted_tools(self, request: ModelRequest[Any], tools: Sequence[Any]) -> list[Any]:
        """``tools`` and the response format's tools (``create_agent`` adds those after
        this middleware): what the budget counts. The format's tools are built once per
        format object."""
        fmt = getattr(request, "response_format", None)
        if self._format[0] is not fmt:
            self._format = (fmt, _format_tools(fmt))
        return [*tools, *self._format[1]]

    def _offered(self, request: ModelRequest[Any]) -> list[Any]:
        """The request's tools without the package's own that it does not offer now
        (:attr:`AutoContext.tools`: the editing tools only with the metadata tags)."""
        ours = {t.name for t in self.autocontext.all_tools}
        offered = {t.name for t in self.autocontext.tools}
        return [t for t in request.tools if getattr(t, "name", None) not in ours - offered]

    def _shape_of(self, request: ModelRequest[Any]) -> _RequestShape:
        """The request's shape; reused while the system message, tools and response
        format are the same objects (the usual case: ``create_agent`` builds them once)."""
        system, tools = request.system_message, tuple(self._offered(request))
        fmt = getattr(request, "response_format", None)
        last = self._last
        if (
            last is not None
            and last[0] is system
            and last[2] is fmt
            and len(last[1]) == len(tools)
            and all(a is b for a, b in zip(last[1], tools, strict=True))
        ):
            return last[3]
        shape = _RequestShape.of(request, self._counted_tools(request, tools))
        self._last = (system, tools, fmt, shape)
        return shape

    @staticmethod
    def _keys(store: OffloadStore, thread_id: str) -> tuple[_CacheKey, str]:
        """The cache key and the store key of what the running agent's requests look
        like in ``thread_id`` of ``store``: the agent's own when it has a name
        (:func:`~langchain_autocontext.store.running_agent`), since a subagent sharing
        its caller's thread and this middleware has another system prompt and tools;
        the thread's when it has none. The cache key names the store too: graphs
        compiled with different stores may share this middleware and a thread id."""
        agent = running_agent()
        key = _REQUEST_KEY if agent is None else f"{_REQUEST_KEY}:{agent}"
        return (*_store_key(store), thread_id, agent), key

    def _learn(self, request: ModelRequest[Any], thread_id: str) -> None:
        shape = self._shape_of(request)
        store = self._store()
        cache_key, key = self._keys(store, thread_id)
        if self._remember(cache_key, shape):
            store.put(
                surface_namespace(store, thread_id), key, shape.to_json(), index=False, ttl=None
            )

    async def _alearn(self, request: ModelRequest[Any], thread_id: str) -> None:
        shape = self._shape_of(request)
        store = self._store()
        cache_key, key = self._keys(store, thread_id)
        if self._remember(cache_key, shape):
            ns = surface_namespace(store, thread_id)
            await store.aput(ns, key, shape.to_json(), index=False, ttl=None)

    def _known(self, cache_key: _CacheKey) -> _RequestShape | None:
        with self._lock:
            return self._shapes.get(cache_key)

    def _loaded(self, cache_key: _CacheKey, item: Any) -> _RequestShape | None:
        if item is None:
            return None
        shape = _RequestShape.from_json(item.value)
        with self._lock:
            self._shapes.setdefault(cache_key, shape)
        return shape

    def _shape(self, thread_id: str) -> _RequestShape | None:
        store = self._store()
        cache_key, key = self._keys(store, thread_id)
        shape = self._known(cache_key)
        if shape is None:
            shape = self._loaded(cache_key, store.get(surface_namespace(store, thread_id), key))
        return shape

    async def _ashape(self, thread_id: str) -> _RequestShape | None:
        store = self._store()
        cache_key, key = self._keys(store, thread_id)
        shape = self._known(cache_key)
        if shape is None:
            item = await store.aget(surface_namespace(store, thread_id), key)
            shape = self._loaded(cache_key, item)
        return shape

    def _inputs(
        self, messages: Sequence[BaseMessage], shape: _RequestShape | None
    ) -> tuple[list[BaseMessage], list[Any] | None]:
        """The messages and tools to compress with: the request's system message first."""
        msgs = list(messages)
        has_system = bool(msgs) and isinstance(msgs[0], SystemMessage)
        known = shape.system if shape is not None else None
        if known is not None and not (has_system or self.autocontext.system_prompt):
            msgs = [_standin(known), *msgs]
        return msgs, (shape.tools if shape is not None else None)

    @staticmethod
    def _thread(
        runtime: Runtime[Any], state: Any
    ) -> tuple[list[BaseMessage], str, dict[str, Any] | None]:
        """The state's messages (:func:`~langchain_autocontext.messages.state_messages`:
        a state not kept by ``add_messages`` is refused), the run's thread, and the state
        to persist when a run without ``thread_id`` got a thread of its own
        (:func:`~langchain_autocontext.engine.run_thread`)."""
        messages = state_messages(state)
        return messages, *run_thread(_run_config(runtime), _ac_state(state), messages)

    @staticmethod
    def _compressed(
        result: CompressionResult, made: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        update: dict[str, Any] = {} if made is None else {"autocontext": made}
        kept = _working(result)
        if kept is not None:
            update["messages"] = [remove_all(), *kept]
        return update or None

    # --- before_model: compression ------------------------------------------------------------
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Archive new originals and compress; replace ``messages`` when they changed."""
        messages, thread_id, made = self._thread(runtime, state)
        self._drop_fit(thread_id, _branch(runtime), messages)
        msgs, tools = self._inputs(messages, self._shape(thread_id))
        result = self.autocontext.compress(
            msgs, thread_id=thread_id, tools=tools, state=made or _ac_state(state)
        )
        return self._compressed(result, made)

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        messages, thread_id, made = self._thread(runtime, state)
        self._drop_fit(thread_id, _branch(runtime), messages)
        msgs, tools = self._inputs(messages, await self._ashape(thread_id))
        result = await self.autocontext.acompress(
            msgs, thread_id=thread_id, tools=tools, state=made or _ac_state(state)
        )
        return self._compressed(result, made)

    # --- wrap_model_call: the model's input view ---------------------------------------------
    @staticmethod
    def _request_messages(request: ModelRequest[Any]) -> tuple[list[BaseMessage], Any]:
        """The request's messages with its system message first (as a stand-in)."""
        system = request.system_message
        if system is None:
            return list(request.messages), None
        return [_standin(system), *request.messages], system

    def _sent_tools(self, request: ModelRequest[Any], engaged: bool) -> list[Any]:
        """The request's tools offered now (:meth:`_offered`), the package's own left out
        until the model is shown the package (``config.disclosure``; see
        :meth:`AutoContext.engaged`)."""
        tools = self._offered(request)
        if engaged:
            return tools
        own = {t.name for t in self.autocontext.tools}
        return [t for t in tools if getattr(t, "name", None) not in own]

    def _view_request(
        self, request: ModelRequest[Any], call: ModelCall, system: SystemMessage | None
    ) -> ModelRequest[Any]:
        view = cast("list[AnyMessage]", list(call.messages))  # each is one of AnyMessage's
        tools = self._sent_tools(request, call.engaged)  # as the view shows the package
        if view and isinstance(view[0], SystemMessage):
            first = view[0]
            if first.id == _SYSTEM_STANDIN_ID and system is not None:
                first = first.model_copy(update={"id": system.id})
            return request.override(system_message=first, messages=view[1:], tools=tools)
        return request.override(system_message=None, messages=view, tools=tools)

    def _prepare(
        self, request: ModelRequest[Any], thread_id: str
    ) -> tuple[ModelCall | None, list[BaseMessage], SystemMessage | None]:
        """The call's view (None when it must be fitted first), its messages and the
        system message. The tools counted are those sent (the response format's too:
        ``create_agent`` adds them after this middleware)."""
        msgs, system = self._request_messages(request)
        msgs, extra = _request_only(request, msgs)  # never the latest user message
        ac_state = _ac_state(request.state)
        # the tools compress counted (the request's, the package's own included): the
        # disclosure decides as the pipeline does, measured once; the view counts those
        # sent, the package's own only once it is shown
        try:
            call = self.autocontext._model_call(
                msgs,
                ac_state,
                self._counted_tools(request, self._offered(request)),
                lambda engaged: self._counted_tools(request, self._sent_tools(request, engaged)),
                request_only=extra,
            )
        except ContextBudgetError:
            # before_model ran without this request's system prompt/tools (the first call
            # of a process, or another middleware changed them): fit this call's view;
            # the fitted messages reach the state in after_model (see _hold).
            return None, msgs, system
        scales = token_scale(ac_state) * window_scale(ac_state)
        if scales > 1.0 and call.tokens > self.autocontext.config.max_tokens / scales:
            # over the thread's calibrated budget (what the provider counts larger): the
            # prompt or tools grew after before_model; fit this call's view to it
            return None, msgs, system
        return call, msgs, system

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse],
    ) -> ModelResponse | AIMessage | ExtendedModelResponse:
        """Send the model its input view (tags, working context, notices), not the state.

        A request the provider rejects as too long (:func:`~.errors.is_context_overflow`)
        is compressed a quarter lower and sent once more; the provider's reported input
        tokens calibrate later budgets (:meth:`AutoContext.calibrate`). A state whose
        messages ``add_messages`` does not keep is refused before the model is called
        (:func:`~langchain_autocontext.messages.state_messages`)."""
        state_messages(request.state or {})
        thread_id = _thread_id(request.runtime, _ac_state(request.state))
        self.autocontext.use_model(_sent_model(request))  # the budget, unless max_tokens given
        self._learn(request, thread_id)
        ac_state = _ac_state(request.state)
        persist = None  # a state to keep although the view did not change it
        kept = None  # the working messages of a view fitted here, for the state
        call, msgs, system = self._prepare(request, thread_id)
        if call is None:
            call, kept = self._fit(request, msgs, thread_id, ac_state)
        try:
            response = handler(self._view_request(request, call, system))
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            ac_state = persist = self.autocontext.overflow_state(ac_state)
            call, kept = self._fit(request, msgs, thread_id, ac_state)
            self._store().record_event(thread_id, self._overflow_event(exc, call, ac_state))
            try:
                response = handler(self._view_request(request, call, system))
            except Exception as again:
                if not is_context_overflow(again):
                    raise
                raise self._overflow_error(again, call) from again
        self._hold(thread_id, kept, msgs, request)
        return self._finish(response, call, ac_state, thread_id, persist)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse | AIMessage | ExtendedModelResponse:
        """Async twin of :meth:`wrap_model_call`."""
        state_messages(request.state or {})
        thread_id = _thread_id(request.runtime, _ac_state(request.state))
        self.autocontext.use_model(_sent_model(request))  # the budget, unless max_tokens given
        await self._alearn(request, thread_id)
        ac_state = _ac_state(request.state)
        persist = None  # a state to keep although the view did not change it
        kept = None  # the working messages of a view fitted here, for the state
        call, msgs, system = self._prepare(request, thread_id)
        if call is None:
            call, kept = await self._afit(request, msgs, thread_id, ac_state)
        try:
            response = await handler(self._view_request(request, call, system))
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            ac_state = persist = self.autocontext.overflow_state(ac_state)
            call, kept = await self._afit(request, msgs, thread_id, ac_state)
            await self._store().arecord_event(thread_id, self._overflow_event(exc, call, ac_state))
            try:
                response = await handler(self._view_request(request, call, system))
            except Exception as again:
                if not is_context_overflow(again):
                    raise
                raise self._overflow_error(again, call) from again
        self._hold(thread_id, kept, msgs, request)
        return await self._afinish(response, call, ac_state, thread_id, persist)

    # --- fitting, overflow and calibration ---------------------------------------------------
    def _store(self) -> Any:
        return self.autocontext.resolve_store()

    def _fit(
        self, request: ModelRequest[Any], msgs: list[BaseMessage], thread_id: str, ac_state: Any
    ) -> tuple[ModelCall, list[BaseMessage] | None]:
        """This call's view, compressed to the budget (``force``: below the trigger),
        and the working messages it was made of when compressing changed them (the
        state takes them in ``after_model``, see :meth:`_hold`: the ids the view's tags
        show must name in the state what they name in the view, for the tools and
        commands of this turn).
        Compressing shows the package, so its tools are counted with the request's.
        Messages the request carries but the state does not hold (another middleware's
        request-only additions, see :func:`_request_only`) are not archived as turns of
        the conversation."""
        tools = self._counted_tools(request, list(request.tools))
        msgs, extra = _request_only(request, msgs)
        branch, made_of = _branch(request.runtime), _attempt_of(msgs, tools, ac_state, extra)
        again = self._attempt(thread_id, branch, made_of)
        if again is not None:
            return again
        fitted = self.autocontext.compress(
            msgs, thread_id=thread_id, tools=tools, force=True, state=ac_state, request_only=extra
        )
        call = self.autocontext._model_call(fitted.messages, ac_state, tools, request_only=extra)
        kept = _working(fitted)
        if kept is not None and extra:
            store = self._store()
            spans = {oid: store.reload(thread_id, oid) for oid in _new_spans(kept, msgs)}
            kept = _conversation(kept, extra, spans)
        return self._attempted(thread_id, branch, made_of, (call, kept))

    async def _afit(
        self, request: ModelRequest[Any], msgs: list[BaseMessage], thread_id: str, ac_state: Any
    ) -> tuple[ModelCall, list[BaseMessage] | None]:
        """Async twin of :meth:`_fit`."""
        tools = self._counted_tools(request, list(request.tools))
        msgs, extra = _request_only(request, msgs)
        branch, made_of = _branch(request.runtime), _attempt_of(msgs, tools, ac_state, extra)
        again = self._attempt(thread_id, branch, made_of)
        if again is not None:
            return again
        fitted = await self.autocontext.acompress(
            msgs, thread_id=thread_id, tools=tools, force=True, state=ac_state, request_only=extra
        )
        call = self.autocontext._model_call(fitted.messages, ac_state, tools, request_only=extra)
        kept = _working(fitted)
        if kept is not None and extra:
            store = self._store()
            spans = {oid: await store.areload(thread_id, oid) for oid in _new_spans(kept, msgs)}
            kept = _conversation(kept, extra, spans)
        return self._attempted(thread_id, branch, made_of, (call, kept))

    @staticmethod
    def _overflow_event(error: BaseException, call: ModelCall, ac_state: Any) -> dict[str, Any]:
        return {
            "kind": "overflow",
            "strategy": "overflow_retry",
            "error": f"{type(error).__name__}: {error}"[:500],
            "tokens_after": call.tokens,
            "scale_after": window_scale(ac_state),
        }

    def _overflow_error(self, error: BaseException, call: ModelCall) -> ContextBudgetError:
        """The error of a second rejection as too long in one call."""
        return ContextBudgetError(
            f"The model rejected the request as too long twice, the second time after it "
            f"was compressed to {call.tokens:,} counted tokens (max_tokens="
            f"{self.autocontext.config.max_tokens:,}). The token counter undercounts for "
            "this model: lower max_tokens, or pass token_counter= the model itself (its "
            f"own count). The provider said: {error}",
            required_tokens=call.tokens,
            max_tokens=self.autocontext.config.max_tokens,
        )

    @staticmethod
    def _reply(response: Any) -> Any:
        if isinstance(response, AIMessage):
            return response
        result = getattr(response, "result", None) or []
        return next((m for m in result if isinstance(m, AIMessage)), None)

    def _calibrated(
        self, response: Any, call: ModelCall, ac_state: Any, persist: Any
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The state to persist (the view's update, else ``persist``, with the
        calibration applied), and the calibration event if the scale changed."""
        base = call.state_update or persist
        new, event = self.autocontext.calibrate(call, self._reply(response), base or ac_state)
        return (new or base), event

    def _finish(
        self,
        response: Any,
        call: ModelCall,
        ac_state: Any,
        thread_id: str,
        persist: Any,
    ) -> ModelResponse | AIMessage | ExtendedModelResponse:
        remember_reply(call, self._reply(response))  # a server-side chain may continue it
        state, event = self._calibrated(response, call, ac_state, persist)
        if event is not None:
            self._store().record_event(thread_id, event)
        return self._respond(response, state)

    async def _afinish(
        self,
        response: Any,
        call: ModelCall,
        ac_state: Any,
        thread_id: str,
        persist: Any,
    ) -> ModelResponse | AIMessage | ExtendedModelResponse:
        remember_reply(call, self._reply(response))  # a server-side chain may continue it
        state, event = self._calibrated(response, call, ac_state, persist)
        if event is not None:
            await self._store().arecord_event(thread_id, event)
        return self._respond(response, state)

    @staticmethod
    def _respond(
        response: Any, state: dict[str, Any] | None
    ) -> ModelResponse | AIMessage | ExtendedModelResponse:
        """The response, with a command that persists the package's ``state``."""
        if not state:
            return response
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        update: dict[str, Any] = {"autocontext": state}
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    # --- a view fitted in the call reaches the state in after_model -------------------------
    def _hold(
        self,
        thread_id: str,
        kept: list[BaseMessage] | None,
        msgs: list[BaseMessage],
        request: ModelRequest[Any],
    ) -> None:
        """Keep the working messages of a view fitted in this call (``kept``) for
        :meth:`after_model` to write to the state, with the ids the request sent (``msgs``),
        under the ids of the state the call was made from; a call that fitted nothing
        leaves that it did (``None``), in place of what an earlier call of the same state
        left.

        Kept by the agent's run in the graph (:func:`_branch`) and the state's ids, not
        only by thread and agent: the branches of a fan-out (``Send``) run one agent on
        one thread at once, from states that may hold the same ids (one state sent to
        each), and each ``after_model`` must take its own branch's fit, never another's
        (whose summary it would write into its state), nor lose its own to another's.

        Not in this call's command: ``create_agent`` applies the reply the *outermost*
        ``wrap_model_call`` returns, then the commands, so a command carrying the fitted
        messages must repeat the reply, and would put back the reply as this middleware
        received it, undoing what an outer middleware changed in it.

        Nor kept when the request changed a message the state holds under the same id
        (``ContextEditingMiddleware`` clearing old tool results): what a middleware
        edits for one request is not the conversation, and the fit, made of the edited
        copies, would write them into the state."""
        in_state = (request.state or {}).get("messages") or ()
        if kept is not None and _edited_in_request(msgs, in_state):
            # another middleware changed state messages for this request only (a context
            # edit): the fit is made of its copies, which are not the conversation; the
            # next before_model compresses the state's own
            kept = None
        branch = _branch(request.runtime)
        cache_key = self._drop_fit(thread_id, branch, in_state)
        sent = frozenset(m.id for m in ensure_ids(msgs) if m.id != _SYSTEM_STANDIN_ID)
        held = frozenset(m.id for m in in_state)
        made_of = frozenset(_print(m) for m in in_state) if kept is not None else None
        with self._lock:
            fits = self._fitted.setdefault(cache_key, {})
            self._fitted.move_to_end(cache_key)
            fits[branch, held] = (kept, sent, made_of)
            while len(fits) > _MAX_FITS:
                del fits[next(iter(fits))]
            while len(self._fitted) > _MAX_THREADS:
                self._fitted.popitem(last=False)

    def _drop_fit(self, thread_id: str, branch: str, messages: Sequence[BaseMessage]) -> _CacheKey:
        """Forget the fitted views held for ``thread_id`` in the agent's run ``branch``
        that were made from the state ``messages`` continue (a step's ``before_model``
        and each model call start afresh: what ``after_model`` applies is its own
        step's); another branch's stay. Returns the cache key."""
        cache_key, _ = self._keys(self._store(), thread_id)
        now = {m.id for m in messages}
        with self._lock:
            fits = self._fitted.get(cache_key) or {}
            for key in [k for k in fits if k[0] == branch and k[1] <= now]:
                del fits[key]
            self._attempts.pop((cache_key, branch), None)  # the call returned, or a new step
        return cache_key

    def _attempt(
        self, thread_id: str, branch: str, made_of: tuple[Any, ...]
    ) -> tuple[ModelCall, list[BaseMessage] | None] | None:
        """The view fitted for this very request in an earlier attempt at the model call
        (one that raised: a middleware before this one retries it, or sends it to a
        fallback model): fitting it again would summarize and offload the same messages
        again (the summarizer paid twice, one more set of offload records and events per
        attempt). ``None`` when the request, the state or the budget differ."""
        cache_key, _ = self._keys(self._store(), thread_id)
        with self._lock:
            held = self._attempts.get((cache_key, branch))
        if held is None or held[0] is not self.autocontext.config or held[1] != made_of:
            return None
        return held[2], held[3]

    def _attempted(
        self,
        thread_id: str,
        branch: str,
        made_of: tuple[Any, ...],
        fit: tuple[ModelCall, list[BaseMessage] | None],
    ) -> tuple[ModelCall, list[BaseMessage] | None]:
        """Keep ``fit`` for another attempt at the same request (see :meth:`_attempt`)
        until the call returns (:meth:`_hold`) or the next step starts."""
        cache_key, _ = self._keys(self._store(), thread_id)
        with self._lock:
            self._attempts[cache_key, branch] = (self.autocontext.config, made_of, *fit)
            self._attempts.move_to_end((cache_key, branch))
            while len(self._attempts) > _MAX_THREADS:
                self._attempts.popitem(last=False)
        return fit

    def _take_fit(
        self, cache_key: _CacheKey, branch: str, messages: Sequence[BaseMessage]
    ) -> tuple[frozenset[Any], _Fit] | None:
        """The fit of the model call the state ``messages`` continue in the agent's run
        ``branch`` (the one made from the largest state they hold), forgetting it and
        any earlier one."""
        now = {m.id for m in messages}
        with self._lock:
            fits = self._fitted.get(cache_key) or {}
            mine = [k for k in fits if k[0] == branch and k[1] <= now]
            if not mine:
                return None
            key = max(mine, key=lambda k: len(k[1]))
            fit = fits[key]
            for k in mine:
                del fits[k]
        return key[1], fit

    def _refit(
        self, messages: Sequence[BaseMessage], thread_id: str, branch: str
    ) -> tuple[list[BaseMessage], bool]:
        """The state's messages with a view fitted in the last model call applied (the
        fitted working messages, then what the model node added: the reply as the outer
        middlewares left it), and whether they differ from the state's.

        A message the request carried but the state never held (another middleware's
        request-only addition, a retrieved document) is not written to the state; when
        another middleware hid state messages from the request (or edited them, see
        :meth:`_hold`), the fit is not applied
        (those messages would be lost) and the next ``before_model`` compresses. Nor is
        it when the state is not the one the fit was made from (a held fit waits per
        thread, not per checkpoint: an ``after_model`` hook listed after this middleware
        interrupted, and the user resumed an older checkpoint of the thread), nor when the
        state holds those ids with other content (the user edited a message there with
        ``update_state`` before resuming: the fit, made of the message as it was, would
        undo the edit)."""
        cache_key, _ = self._keys(self._store(), thread_id)
        taken = self._take_fit(cache_key, branch, messages)
        if taken is None:
            return list(messages), False
        held, (kept, sent, made_of) = taken
        if kept is None or not held <= sent:
            return list(messages), False
        if made_of is not None and not made_of <= {_print(m) for m in messages}:
            return list(messages), False
        now = {m.id for m in messages}  # held <= now: _take_fit took a fit of this state
        working = [m for m in kept if m.id in now or m.id not in sent]
        ids = {m.id for m in working}
        added = [m for m in messages if m.id not in held and m.id not in sent and m.id not in ids]
        return [*working, *added], True

    @staticmethod
    def _rewritten(
        update: dict[str, Any], messages: list[BaseMessage], refit: bool
    ) -> dict[str, Any]:
        """``update`` (relative to ``messages``) writing ``messages`` whole when ``refit``."""
        if not refit:
            return update
        ops = update.get("messages")
        # add_messages is annotated with an invariant list of message-likes
        final = add_messages(messages, ops) if ops else messages  # type: ignore[arg-type]
        return {**update, "messages": [remove_all(), *final]}

    # --- after_model: the model's reply ------------------------------------------------------
    @staticmethod
    def _after(update: dict[str, Any]) -> dict[str, Any] | None:
        if not update:
            return None
        if (update.get("autocontext") or {}).get("autonomous_pending"):
            # a <user> command supplied the next user message: call the model again
            return {**update, "jump_to": "model"}
        return update

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Strip tags the model copied into its reply; apply its XML commands when enabled.
        A view fitted in the model call reaches the state first (see :meth:`_hold`)."""
        thread_id = _thread_id(runtime, _ac_state(state))
        messages, refit = self._refit(state_messages(state), thread_id, _branch(runtime))
        update = self.autocontext.after_model_call(
            messages,
            state=_ac_state(state),
            thread_id=thread_id,
            archive_reply=False,  # after the other after_model hooks: see after_agent
        )
        return self._after(self._rewritten(update, messages, refit))

    @hook_config(can_jump_to=["model"])
    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model`."""
        thread_id = _thread_id(runtime, _ac_state(state))
        messages, refit = self._refit(state_messages(state), thread_id, _branch(runtime))
        update = await self.autocontext.aafter_model_call(
            messages,
            state=_ac_state(state),
            thread_id=thread_id,
            archive_reply=False,  # after the other after_model hooks: see after_agent
        )
        return self._after(self._rewritten(update, messages, refit))

    # --- wrap_tool_call: the reply that called a tool reaches the history before it runs -------
    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Archive the reply whose tool call this is before the tool runs: a tool that
        asks the human (``interrupt()``) ends the run there, and a user who then goes
        back to an earlier checkpoint instead of resuming leaves that reply in the
        abandoned checkpoint only (neither :meth:`after_agent` nor a next model call on
        that branch comes). Every ``after_model`` hook has run by now, as in
        :meth:`after_agent`; what is already archived is skipped. A tool that hands off
        to the parent graph (``Command(goto=…, graph=Command.PARENT)``, the supervisor
        pattern's handoff) ends the agent's graph without :meth:`after_agent`: the
        messages the handoff adds are archived as it returns, under this agent's name
        (else the next agent's model call would archive them under its own, or, handed
        off to ``END``, nothing would this turn)."""
        self._archive_state(request.state, request.runtime)
        result = handler(request)
        self._archive_state(request.state, request.runtime, _handed_off(request, result))
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        await self._aarchive_state(request.state, request.runtime)
        result = await handler(request)
        await self._aarchive_state(request.state, request.runtime, _handed_off(request, result))
        return result

    # --- after_agent: the run's last messages reach the history -------------------------------
    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Archive what the run added since the last model call (its final answer):
        otherwise it would reach the history store only at the next model call. Here,
        not in ``after_model``: every middleware's ``after_model`` has run by now, so a
        redacting one's output (``PIIMiddleware``) is what the history keeps.

        A reply whose copied metadata tags this middleware's ``after_model`` never
        stripped (another middleware's ``after_model``, run before it, jumped to the end:
        ``ToolCallLimitMiddleware(exit_behavior="end")`` listed after it) is stripped
        here, in the state and in what is archived."""
        messages, update = _untagged(state)
        self._archive_state(state, runtime, messages)
        return update

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        messages, update = _untagged(state)
        await self._aarchive_state(state, runtime, messages)
        return update

    def _archive_state(
        self, state: Any, runtime: Any, messages: Sequence[BaseMessage] | None = None
    ) -> None:
        """Archive the state's messages (or ``messages``, in the state's thread: a
        handoff's) not yet in the thread's history."""
        if not isinstance(state, dict):
            return
        messages = state_messages(state) if messages is None else messages
        if not messages:
            return
        ac = self.autocontext
        ac.archive(
            messages,
            thread_id=_thread_id(runtime, _ac_state(state)),  # type: ignore[arg-type]
            store=ac.resolve_store(),
        )

    async def _aarchive_state(
        self, state: Any, runtime: Any, messages: Sequence[BaseMessage] | None = None
    ) -> None:
        """Async twin of :meth:`_archive_state`."""
        if not isinstance(state, dict):
            return
        messages = state_messages(state) if messages is None else messages
        if not messages:
            return
        ac = self.autocontext
        await ac.aarchive(
            messages,
            thread_id=_thread_id(runtime, _ac_state(state)),  # type: ignore[arg-type]
            store=ac.resolve_store(),
        )


def _untagged(state: Any) -> tuple[list[BaseMessage] | None, dict[str, Any] | None]:
    """The state's messages with the metadata tags a model copied into its replies
    stripped, and the state update that strips them (``None`` when none holds one)."""
    if not isinstance(state, dict):
        return None, None
    messages = state_messages(state)
    stripped = [
        strip_message_tags(m) if isinstance(m, AIMessage) and marker(m) is None else m
        for m in messages
    ]
    changed = [new for new, old in zip(stripped, messages, strict=True) if new is not old]
    return stripped, ({"messages": changed} if changed else None)


def _handed_off(request: ToolCallRequest, result: Any) -> list[BaseMessage]:
    """The messages to archive when ``result`` hands off to the parent graph: the
    agent's state (its last reply) and the messages the handoff adds (its tool result),
    none otherwise. A message the handoff adds without an id gets the id it is archived
    under, so the next agent, which receives it, finds it archived."""
    if not (isinstance(result, Command) and result.graph == Command.PARENT):
        return []
    held = list((request.state or {}).get("messages") or ())
    update = result.update if isinstance(result.update, dict) else {}
    added = update.get("messages")
    added = added if isinstance(added, list) else [added] if added is not None else []
    ids = {m.id for m in held}
    new = [
        m
        for m in added
        if isinstance(m, BaseMessage)
        and not isinstance(m, RemoveMessage)
        and (m.id is None or m.id not in ids)
    ]
    named = ensure_ids([*held, *new])
    for m, with_id in zip(new, named[len(held) :], strict=True):
        if m.id is None:
            m.id = with_id.id
    return named


def _request_only(
    request: ModelRequest[Any], msgs: list[BaseMessage]
) -> tuple[list[BaseMessage], frozenset[str]]:
    """``msgs`` (the request's messages) with their ids, and the ids of those the state
    does not hold: another middleware added them to this request only (a retrieved
    document, each call anew). They are sent and counted, not archived: the history
    keeps the conversation, and one that compression folds into a summary or an offload
    is kept in that offload's record. A message the state holds under the same id
    (another middleware writes it there too) is conversation: the checkpoints keep it,
    so it is archived before any compression takes it out of the state."""
    msgs = ensure_ids(msgs)
    held = {m.id for m in (request.state or {}).get("messages") or ()}
    extra = frozenset(str(m.id) for m in msgs if m.id not in held and m.id != _SYSTEM_STANDIN_ID)
    return msgs, extra


def _edited_in_request(msgs: Sequence[BaseMessage], state: Sequence[BaseMessage]) -> bool:
    """Whether a request message (``msgs``) under an id the ``state`` holds is not the
    state's message (type, content, tool calls): another middleware edited it for the
    request only."""
    held = {m.id: m for m in state}
    for m in msgs:
        own = held.get(m.id)
        if own is None or own is m:
            continue
        calls = getattr(m, "tool_calls", None), getattr(own, "tool_calls", None)
        if m.type != own.type or m.content != own.content or calls[0] != calls[1]:
            return True
    return False


def _print(m: BaseMessage) -> tuple[Any, ...]:
    """What a message is, for the views this middleware keeps (:func:`_attempt_of`,
    :meth:`AutoContextMiddleware._hold`): its id, type, content, tool calls and flags (a
    pin)."""
    return (
        m.id,
        m.type,
        content_hash(m.content),
        content_hash(getattr(m, "tool_calls", None)),
        content_hash(m.additional_kwargs),
    )


def _attempt_of(
    msgs: Sequence[BaseMessage], tools: Sequence[Any], ac_state: Any, extra: frozenset[str]
) -> tuple[Any, ...]:
    """What a view is fitted from (see :meth:`AutoContextMiddleware._attempt`): each
    message's id, type, content, tool calls and flags (a pin), the tools counted (the
    same objects in every attempt at a request), the package's state and the
    request-only ids."""
    return (
        tuple(_print(m) for m in msgs),
        tuple(id(t) for t in tools),
        json.dumps(ac_state, sort_keys=True, default=str),
        extra,
    )


def _new_spans(kept: Sequence[BaseMessage], sent: Sequence[BaseMessage]) -> list[str]:
    """The offload ids of the summaries that compressing ``sent`` made (in ``kept``)."""
    ids = {m.id for m in sent}
    return summary_offload_ids([m for m in kept if m.id not in ids])


def _conversation(
    kept: list[BaseMessage], extra: frozenset[str], spans: dict[str, Any]
) -> list[BaseMessage]:
    """``kept`` without the new summaries (``spans``: offload id -> its record) that stand
    for request-only messages (``extra``) alone: what they summarize was never part of the
    conversation, and the state would gain one such summary per fitted call. Their
    records stay in the store (one per content, flagged ``request_only`` in their
    ``extra``: the same document folded again in a later call reuses the record, whose
    ``message_ids`` are the ids that document had then)."""
    covered = {oid: {i for i in record.message_ids if i} for oid, record in spans.items()}
    alone = {
        oid
        for oid, ids in covered.items()
        if spans[oid].extra.get("request_only") or (ids and ids <= extra)
    }
    if not alone:
        return kept
    return [m for m in kept if not alone.intersection(summary_offload_ids([m]))]


def _working(result: CompressionResult) -> list[BaseMessage] | None:
    """The working messages of a compression to write to the state (the system message's
    stand-in left out), or ``None`` when it changed nothing."""
    if not result.changed:
        return None
    return [m for m in result.messages if m.id != _SYSTEM_STANDIN_ID]


def _standin(system: SystemMessage) -> SystemMessage:
    """The system message under the stand-in id: never archived, never persisted."""
    return system.model_copy(update={"id": _SYSTEM_STANDIN_ID})
