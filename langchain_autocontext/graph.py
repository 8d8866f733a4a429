"""The LangGraph surfaces: the subgraph node, the ``create_react_agent`` hooks, the
command node and the model node, each built around a
:class:`~langchain_autocontext.engine.ContextEngine`.

:class:`~langchain_autocontext.AutoContext` (the facade) hands these out as
``ac.node()``, ``ac.pre_model_hook``, ``ac.command_node()``, ``ac.post_model_hook`` and
``ac.model_node(model)``; the state schemas they read and write live here too. This
module calls the engine; the engine does not know it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypeAlias

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt.chat_agent_executor import AgentState
from langgraph.types import Command
from pydantic import BaseModel
from typing_extensions import TypedDict

from langchain_autocontext.engine import (
    CompressionResult,
    ContextEngine,
    as_messages,
    bound_tools,
    run_thread,
    thread_id_of,
)
from langchain_autocontext.messages import remove_all, state_messages
from langchain_autocontext.metadata import as_shown
from langchain_autocontext.strategies.pipeline import PipelineResult
from langchain_autocontext.view import ModelCall, state_in, warn_bound_chain

__all__ = [
    "AutoContextAgentState",
    "AutoContextState",
    "NodeUpdate",
    "build_node",
    "command_node",
    "graph_state",
    "hook_update",
    "merge_autocontext",
    "model_node",
    "pre_model_hook",
    "state_messages",
]


def merge_autocontext(
    left: Mapping[str, Any] | None, right: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The reducer of the ``autocontext`` state key: the newer value replaces the older.

    The package writes the whole dict each time (a key left out is a key cleared), so
    for one writer this is the plain replacement LangGraph applies to a key without a
    reducer. Nodes running in parallel (a static fan-out, ``Send``) may each write the
    key in one step, which LangGraph refuses for a key without a reducer
    (``InvalidUpdateError``): their writes are applied in turn, the last one winning.
    A write of ``None`` leaves the value as it was.

    Raises:
        TypeError: a write that is not a mapping (``graph.update_state(cfg,
            {"autocontext": [...]})``): refused, so the checkpoint keeps a usable value.
    """
    if right is not None and not isinstance(right, Mapping):
        raise TypeError(
            f"the 'autocontext' state key holds the package's own dict; got a "
            f"{type(right).__name__}: write a dict (or None to leave it as it is)"
        )
    return dict(right if right is not None else state_in({"autocontext": left}) or {})


def graph_state(state: Any) -> Mapping[str, Any]:
    """The graph state a surface receives, as a mapping: a ``TypedDict`` state as it is;
    a pydantic model or a dataclass state (which LangGraph hands to nodes as an instance)
    by its fields."""
    if isinstance(state, Mapping):
        return state
    if isinstance(state, BaseModel):
        return {name: getattr(state, name) for name in type(state).model_fields}
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    if state is None:
        return {}
    raise TypeError(
        f"langchain-autocontext: a graph state is a dict, a pydantic model or a dataclass; "
        f"got a {type(state).__name__}"
    )


#: What the command node returns: a state update, or ``Command(update=…, goto=…)`` after a
#: ``<user>`` command.
NodeUpdate: TypeAlias = dict[str, Any] | Command[str]


class AutoContextState(TypedDict):
    """Graph state with the keys the package reads and writes.

    Inherit from it (or add an ``autocontext`` key to your own state, annotated with
    :func:`merge_autocontext` if parallel nodes may write it) so the working context,
    memory-pressure flag and pending command errors persist in checkpoints. Everything under
    ``autocontext`` is plain JSON.
    """

    messages: Annotated[list[AnyMessage], add_messages]
    autocontext: NotRequired[Annotated[dict[str, Any], merge_autocontext]]


class AutoContextAgentState(AgentState):
    """``create_react_agent``'s state plus the package's ``autocontext`` key.

    Pass it as ``state_schema=`` so the working context, the memory-pressure flag
    and the command errors to report persist between turns.
    """

    autocontext: NotRequired[Annotated[dict[str, Any], merge_autocontext]]


class _NodeState(TypedDict):
    # No reducer here: the subgraph's final ``messages`` value *is* the update the
    # parent applies with its own ``add_messages`` reducer ([] when nothing changed).
    messages: list[AnyMessage]
    autocontext: NotRequired[dict[str, Any]]
    ac_work: NotRequired[dict[str, Any]]


class _NodeIO(TypedDict):
    messages: list[AnyMessage]
    autocontext: NotRequired[dict[str, Any]]


def _in_place(given: Sequence[Any], new: Sequence[BaseMessage]) -> bool:
    """Whether ``new`` is ``given`` with ids for the messages that had none and contents
    cleaned in place: nothing removed, merged or moved. The parent's ``add_messages``
    then applies it by id, and nothing else of the parent's list is touched (a ``Send``
    payload without ids, written with "remove everything" first, replaced the parent's
    whole history)."""
    pairs = zip(as_messages(given), new, strict=False)
    return len(given) == len(new) and all(not g.id or g.id == n.id for g, n in pairs)


def build_node(
    engine: ContextEngine, *, name: str = "autocontext"
) -> CompiledStateGraph[Any, None, Any, Any]:
    """A compiled subgraph (measure → strategies → commit) to put before the model node.

    The parent state needs a ``messages`` key with the ``add_messages`` reducer
    (``MessagesState``, :class:`AutoContextState`; a state kept by another reducer is
    refused, see :func:`state_messages`); add ``autocontext: dict`` to persist the
    package's own state.
    """

    def archivable(state: _NodeState) -> tuple[list[BaseMessage], bool, bool, list[Any]]:
        return engine._prepare_all(state_messages(state))

    def measured(
        state: _NodeState, msgs: list[BaseMessage], ids_assigned: bool, virtual: bool, thread: str
    ) -> dict[str, Any]:
        """After the archive: repair, count what the view sends, decide."""
        msgs, repaired = engine._repair(msgs, engine.resolve_store(), thread)
        ac_state = state_in(state)
        shown = engine.view_config(msgs, ac_state)
        msgs, _, _ = engine._with_view(msgs, ac_state, virtual, shown)
        tokens = engine.counter.count(
            as_shown(msgs, shown.tags_mode), engine.count_tools, tags=shown.tags_mode
        )
        cfg = engine._budget(state.get("messages") or [], ac_state, shown)
        triggered = cfg.due(tokens, len(msgs), engine.floor_tokens(msgs, shown))
        work = {"triggered": triggered, "ids_assigned": ids_assigned or repaired}
        return {"ac_work": {**work, "tokens": tokens}}

    def with_thread(update: dict[str, Any], made: dict[str, Any] | None) -> dict[str, Any]:
        return {**update, "autocontext": made} if made is not None else update

    def measure(state: _NodeState, config: RunnableConfig) -> dict[str, Any]:
        msgs, ids_assigned, virtual, originals = archivable(state)
        thread, made = run_thread(config, state_in(state), state.get("messages"))
        engine._archive_input(originals, thread_id=thread, store=engine.resolve_store())
        return with_thread(measured(state, msgs, ids_assigned, virtual, thread), made)

    async def ameasure(state: _NodeState, config: RunnableConfig) -> dict[str, Any]:
        msgs, ids_assigned, virtual, originals = archivable(state)
        thread, made = run_thread(config, state_in(state), state.get("messages"))
        await engine._aarchive_input(originals, thread_id=thread, store=engine.resolve_store())
        return with_thread(measured(state, msgs, ids_assigned, virtual, thread), made)

    def pipeline(state: _NodeState, config: RunnableConfig) -> tuple[Any, bool, Any]:
        msgs, _, virtual = engine._prepare(state.get("messages") or [])
        ac_state = state_in(state)
        thread = thread_id_of(config, ac_state)
        msgs, _ = engine._repair(msgs, engine.resolve_store(), thread)
        shown = engine.view_config(msgs, ac_state)
        msgs, virtual, system = engine._with_view(msgs, ac_state, virtual, shown)
        budget = engine._budget(state.get("messages") or [], ac_state, shown)
        run = engine._pipeline(msgs, thread, None, False, budget, ac_state)
        return run, virtual, system

    def compressed(
        state: _NodeState, result: PipelineResult, virtual: bool, system: Any
    ) -> dict[str, Any]:
        out = engine._finish(result, 0, False, virtual, system).messages
        return {"ac_work": {**state.get("ac_work", {}), "result": out, "changed": result.changed}}

    def strategies(state: _NodeState, config: RunnableConfig) -> dict[str, Any]:
        run, virtual, system = pipeline(state, config)
        result = engine._drive(run, engine.resolve_store())
        return compressed(state, result, virtual, system)

    async def astrategies(state: _NodeState, config: RunnableConfig) -> dict[str, Any]:
        run, virtual, system = pipeline(state, config)
        result = await engine._adrive(run, engine.resolve_store())
        return compressed(state, result, virtual, system)

    def commit(state: _NodeState, config: RunnableConfig) -> dict[str, Any]:
        work = state.get("ac_work") or {}
        if work.get("changed") or work.get("ids_assigned"):
            new = work.get("result")
            if new is None:
                new, _, _ = engine._prepare(state.get("messages") or [])
                thread = thread_id_of(config, state_in(state))
                new, _ = engine._repair(new, engine.resolve_store(), thread)
            if not work.get("changed") and _in_place(state.get("messages") or [], new):
                return {"messages": new}
            return {"messages": [remove_all(), *new]}
        return {"messages": []}

    def route(state: _NodeState) -> str:
        return "strategies" if (state.get("ac_work") or {}).get("triggered") else "commit"

    graph = StateGraph(_NodeState, input_schema=_NodeIO, output_schema=_NodeIO)
    graph.add_node("measure", RunnableLambda(measure, afunc=ameasure, name="measure"))
    graph.add_node("strategies", RunnableLambda(strategies, afunc=astrategies, name="strategies"))
    graph.add_node("commit", commit)
    graph.add_edge(START, "measure")
    graph.add_conditional_edges("measure", route, ["strategies", "commit"])
    graph.add_edge("strategies", "commit")
    graph.add_edge("commit", END)
    return graph.compile(checkpointer=False, name=name)


def pre_model_hook(engine: ContextEngine) -> RunnableLambda[Any, dict[str, Any]]:
    """For ``create_react_agent(model, tools, pre_model_hook=ac.pre_model_hook)``.

    Compresses the state's messages (persisted with ``RemoveMessage`` s) and
    hands the model its input view in ``llm_input_messages``. Pair it with
    ``post_model_hook=ac.post_model_hook``: alone, it archives a run's final answer only
    at the thread's next model call.
    """

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        state = graph_state(state)
        messages = state_messages(state)
        thread, made = run_thread(config, state_in(state), messages)
        ac_state = made or state_in(state)
        result = engine.compress(messages, thread_id=thread, state=ac_state)
        return hook_update(engine, result, ac_state, made is not None)

    async def ahook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        state = graph_state(state)
        messages = state_messages(state)
        thread, made = run_thread(config, state_in(state), messages)
        ac_state = made or state_in(state)
        result = await engine.acompress(messages, thread_id=thread, state=ac_state)
        return hook_update(engine, result, ac_state, made is not None)

    return RunnableLambda(hook, afunc=ahook, name="autocontext_pre_model_hook")


def hook_update(
    engine: ContextEngine,
    result: CompressionResult,
    ac_state: Mapping[str, Any] | None = None,
    new_state: bool = False,
) -> dict[str, Any]:
    """The pre-model hook's state update: the model's view in ``llm_input_messages``,
    the compressed messages when they changed, and the package's state when it did."""
    # create_react_agent puts its own prompt (which the hook cannot see) before this view:
    # the package's section must not be a second system message after it
    call = engine._model_call(result.messages, ac_state, None, system_follows=True)
    update: dict[str, Any] = {}
    if result.changed:
        # first: ``stream_mode="messages"`` emits each id once, the first it finds in
        # the update, so a new summary streams as the state keeps it, not as the view's
        # tagged copy of it
        update["messages"] = [remove_all(), *result.messages]
    update["llm_input_messages"] = call.messages
    if call.state_update or new_state:
        update["autocontext"] = call.state_update or dict(ac_state or {})
    return update


def command_node(
    engine: ContextEngine, *, loop_to: str | None = "autocontext"
) -> Runnable[Any, NodeUpdate]:
    """A StateGraph node to put right after the model node: runs :meth:`~langchain_autocontext.engine.ContextEngine.after_model_call`.

    After a ``<user>`` command it returns ``Command(goto=loop_to)`` so the model
    is called again (the node added with :func:`build_node`, named ``"autocontext"``
    by default); route the rest as usual, e.g.
    ``graph.add_conditional_edges("commands", tools_condition)``.
    """

    def finish(update: dict[str, Any]) -> NodeUpdate:
        if loop_to and (update.get("autocontext") or {}).get("autonomous_pending"):
            return Command(update=update, goto=loop_to)
        return update

    def run(state: Any, config: RunnableConfig) -> NodeUpdate:
        state = graph_state(state)
        messages = state_messages(state)
        return finish(
            engine.after_model_call(
                messages,
                state=state_in(state),
                thread_id=thread_id_of(config, state_in(state), messages),
            )
        )

    async def arun(state: Any, config: RunnableConfig) -> NodeUpdate:
        state = graph_state(state)
        messages = state_messages(state)
        return finish(
            await engine.aafter_model_call(
                messages,
                state=state_in(state),
                thread_id=thread_id_of(config, state_in(state), messages),
            )
        )

    return RunnableLambda(run, afunc=arun, name="autocontext_commands")


def model_node(
    engine: ContextEngine, model: Runnable[list[BaseMessage], BaseMessage]
) -> Runnable[Any, dict[str, Any]]:
    """A StateGraph model node: view → ``model`` → reply (+ the ``autocontext`` update).

    ``model`` is your chat model (already ``bind_tools``-ed, with the engine's
    ``tools`` among its tools when you use them). Put :func:`build_node` before it. The tools bound
    to ``model`` are counted in the budget from here on (by :func:`build_node` too), so
    ``AutoContext(tools=…)`` need not repeat them.
    """
    engine.learn_tools(bound_tools(model))
    warn_bound_chain(model)

    def prepared(state: Any, config: RunnableConfig) -> ModelCall:
        state = graph_state(state)
        messages = state_messages(state, required=True)
        return engine.prepare_model_call(
            messages,
            state=state_in(state),
            thread_id=thread_id_of(config, state_in(state), messages),
        )

    def call(state: Any, config: RunnableConfig) -> dict[str, Any]:
        view = prepared(state, config)
        return view.update(model.invoke(view.messages, config))

    async def acall(state: Any, config: RunnableConfig) -> dict[str, Any]:
        view = prepared(state, config)
        return view.update(await model.ainvoke(view.messages, config))

    return RunnableLambda(call, afunc=acall, name="autocontext_model")
