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
  on a copy of the request; nothing of the view is written to state.
* ``after_model`` / ``aafter_model`` — strip tags the model copied into its output
  and apply its XML commands when ``xml_commands`` is on.
* ``tools`` — the package's self-management tools, registered with the agent.
* ``state_schema`` — declares the private ``autocontext`` state key (plain JSON).

``create_agent`` keeps its system prompt outside the state, so ``before_model``
cannot see it. The middleware learns the system message and the tool schemas of
each model request and remembers them per thread in the store (one small item,
written when they change), so the budget counts them from the first call after a
restart too; ``AutoContext(system_prompt=…)`` overrides what is learned.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import BaseMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command

from langchain_autocontext.history import surface_namespace
from langchain_autocontext.messages import dump_message, load_message
from langchain_autocontext.store import OffloadStore

if TYPE_CHECKING:
    from langchain_autocontext.engine import AutoContext, CompressionResult

__all__ = ["AutoContextAgentState", "AutoContextMiddleware", "merge_autocontext"]

#: Key of the model-request record in the thread's ``(prefix, thread, "surface")`` namespace.
_REQUEST_KEY = "model_request"
#: Id of the stand-in system message handed to the engine (never archived, never stored).
_SYSTEM_STANDIN_ID = "autocontext-system-prompt"
_MAX_THREADS = 4096


def merge_autocontext(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer of the ``autocontext`` state key: a shallow merge (``right`` wins).

    Updates from the model node and from tools of the same step merge instead of
    colliding; a key is reset by writing ``None`` for it.
    """
    return {**(left or {}), **(right or {})}


class AutoContextAgentState(AgentState[Any]):
    """The agent state with the middleware's private ``autocontext`` key (plain JSON)."""

    autocontext: NotRequired[Annotated[dict[str, Any], PrivateStateAttr, merge_autocontext]]


def _thread_id(runtime: Runtime[Any] | None) -> str:
    info = getattr(runtime, "execution_info", None)
    value = getattr(info, "thread_id", None)
    if value not in (None, ""):
        return str(value)
    from langchain_autocontext.engine import thread_id_of

    try:
        from langgraph.config import get_config

        return thread_id_of(get_config())
    except RuntimeError:  # outside a runnable context
        return "default"


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
    def of(cls, request: ModelRequest[Any]) -> _RequestShape:
        return cls(request.system_message, [_tool_schema(t) for t in request.tools])

    def to_json(self) -> dict[str, Any]:
        return {
            "system": dump_message(self.system) if self.system is not None else None,
            "tools": self.tools,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> _RequestShape:
        system = load_message(value["system"]) if value.get("system") else None
        return cls(system if isinstance(system, SystemMessage) else None, list(value["tools"]))


class AutoContextMiddleware(AgentMiddleware[AutoContextAgentState, Any, Any]):
    """Keeps a ``create_agent`` agent inside its context budget; see the module docstring.

    Build it with :meth:`AutoContext.middleware` (or ``AutoContextMiddleware(ac)``) and
    put it in ``create_agent(..., middleware=[...])``. Place it *last* in the list so
    its ``wrap_model_call`` sees the request after your other middleware changed it.

    Args:
        autocontext: the :class:`~langchain_autocontext.AutoContext` doing the work.
    """

    state_schema = AutoContextAgentState

    def __init__(self, autocontext: AutoContext) -> None:
        from langchain_autocontext.engine import AutoContext

        if not isinstance(autocontext, AutoContext):
            raise TypeError(
                "AutoContextMiddleware needs an AutoContext, got "
                f"{type(autocontext).__name__}; build it with ac.middleware()"
            )
        super().__init__()
        self.autocontext = autocontext
        self.tools = list(getattr(autocontext, "tools", None) or [])
        self._lock = threading.Lock()
        # thread id -> the request shape last seen/persisted for it (bounded)
        self._shapes: OrderedDict[str, _RequestShape] = OrderedDict()

    @property
    def name(self) -> str:
        """The node-name prefix of the middleware in the agent graph."""
        return "AutoContextMiddleware"

    # --- what the budget counts besides the messages ---------------------------------------
    def _namespace(self, store: OffloadStore, thread_id: str) -> tuple[str, ...]:
        return surface_namespace(store, thread_id)

    def _remember(self, thread_id: str, shape: _RequestShape) -> bool:
        """Cache ``shape`` for the thread; True when it differs from what was known."""
        with self._lock:
            old = self._shapes.get(thread_id)
            self._shapes[thread_id] = shape
            self._shapes.move_to_end(thread_id)
            while len(self._shapes) > _MAX_THREADS:
                self._shapes.popitem(last=False)
        return old is None or old.fingerprint != shape.fingerprint

    def _learn(self, request: ModelRequest[Any], thread_id: str) -> None:
        shape = _RequestShape.of(request)
        if self._remember(thread_id, shape):
            store = self.autocontext.resolve_store()
            store.put(self._namespace(store, thread_id), _REQUEST_KEY, shape.to_json(), index=False)

    async def _alearn(self, request: ModelRequest[Any], thread_id: str) -> None:
        shape = _RequestShape.of(request)
        if self._remember(thread_id, shape):
            store = self.autocontext.resolve_store()
            await store.aput(
                self._namespace(store, thread_id), _REQUEST_KEY, shape.to_json(), index=False
            )

    def _known(self, thread_id: str) -> _RequestShape | None:
        with self._lock:
            return self._shapes.get(thread_id)

    def _shape(self, thread_id: str) -> _RequestShape | None:
        shape = self._known(thread_id)
        if shape is None:
            store = self.autocontext.resolve_store()
            item = store.get(self._namespace(store, thread_id), _REQUEST_KEY)
            if item is not None:
                shape = _RequestShape.from_json(item.value)
                self._remember(thread_id, shape)
        return shape

    async def _ashape(self, thread_id: str) -> _RequestShape | None:
        shape = self._known(thread_id)
        if shape is None:
            store = self.autocontext.resolve_store()
            item = await store.aget(self._namespace(store, thread_id), _REQUEST_KEY)
            if item is not None:
                shape = _RequestShape.from_json(item.value)
                self._remember(thread_id, shape)
        return shape

    def _inputs(
        self, messages: Sequence[BaseMessage], shape: _RequestShape | None
    ) -> tuple[list[BaseMessage], list[Any] | None]:
        """The messages and tools to compress with: a stand-in system message first."""
        msgs = list(messages)
        ac = self.autocontext
        has_system = bool(msgs) and isinstance(msgs[0], SystemMessage)
        if shape is not None and shape.system is not None and not (has_system or ac.system_prompt):
            msgs = [shape.system.model_copy(update={"id": _SYSTEM_STANDIN_ID}), *msgs]
        tools = shape.tools if shape is not None else None
        return msgs, tools

    @staticmethod
    def _outputs(result: CompressionResult) -> dict[str, Any] | None:
        if not result.changed:
            return None
        kept = [m for m in result.messages if m.id != _SYSTEM_STANDIN_ID]
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}

    # --- before_model: compression ------------------------------------------------------------
    def before_model(
        self, state: AutoContextAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Archive new originals and compress; replace ``messages`` when they changed."""
        thread_id = _thread_id(runtime)
        msgs, tools = self._inputs(state["messages"], self._shape(thread_id))
        result = self.autocontext.compress(msgs, thread_id=thread_id, tools=tools)
        return self._outputs(result)

    async def abefore_model(
        self, state: AutoContextAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        thread_id = _thread_id(runtime)
        msgs, tools = self._inputs(state["messages"], await self._ashape(thread_id))
        result = await self.autocontext.acompress(msgs, thread_id=thread_id, tools=tools)
        return self._outputs(result)

    # --- wrap_model_call: the model's input view ---------------------------------------------
    def _view_request(
        self, request: ModelRequest[Any], view: list[BaseMessage]
    ) -> ModelRequest[Any]:
        if view and isinstance(view[0], SystemMessage):
            return request.override(system_message=view[0], messages=list(view[1:]))
        return request.override(system_message=None, messages=list(view))

    def _full(self, request: ModelRequest[Any]) -> list[BaseMessage]:
        system = request.system_message
        return [system, *request.messages] if system is not None else list(request.messages)

    @staticmethod
    def _standin(
        messages: list[BaseMessage],
    ) -> tuple[list[BaseMessage], SystemMessage | None]:
        if messages and isinstance(messages[0], SystemMessage) and messages[0].id is None:
            system = messages[0]
            return [system.model_copy(update={"id": _SYSTEM_STANDIN_ID}), *messages[1:]], system
        return messages, None

    @staticmethod
    def _restore(messages: list[BaseMessage], system: SystemMessage | None) -> list[BaseMessage]:
        if system is not None and messages and messages[0].id == _SYSTEM_STANDIN_ID:
            return [system, *messages[1:]]
        return messages

    def _over_budget(self, messages: Sequence[BaseMessage], tools: Sequence[Any]) -> bool:
        ac = self.autocontext
        count = ac.counter.count(messages, tools, tags=ac.config.metadata_tags)
        return count > ac.config.max_tokens

    def _finish(
        self, response: ModelResponse | Any, update: dict[str, Any] | None
    ) -> ModelResponse | ExtendedModelResponse | Any:
        if not update:
            return response
        if not isinstance(response, ModelResponse):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"autocontext": update})
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse],
    ) -> ModelResponse | ExtendedModelResponse:
        """Send the model its input view (tags, working context, notices), not the state."""
        thread_id = _thread_id(request.runtime)
        self._learn(request, thread_id)
        full = self._full(request)
        if self._over_budget(full, request.tools):
            # before_model ran without knowing this request's system prompt/tools (the
            # first call of a process): fit this call's view; the state follows next call
            msgs, system = self._standin(full)
            result = self.autocontext.compress(
                msgs, thread_id=thread_id, tools=request.tools, force=True
            )
            full = self._restore(result.messages, system)
        view, update = full, None
        return self._finish(handler(self._view_request(request, view)), update)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse | ExtendedModelResponse:
        """Async twin of :meth:`wrap_model_call`."""
        thread_id = _thread_id(request.runtime)
        await self._alearn(request, thread_id)
        full = self._full(request)
        if self._over_budget(full, request.tools):
            msgs, system = self._standin(full)
            result = await self.autocontext.acompress(
                msgs, thread_id=thread_id, tools=request.tools, force=True
            )
            full = self._restore(result.messages, system)
        view, update = full, None
        return self._finish(await handler(self._view_request(request, view)), update)
