"""The engine inside real LangGraph graphs: the subgraph node and create_react_agent's hook."""

from __future__ import annotations

import typing
import warnings

from _builders import ScriptedModel, bash
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, AutoContextState
from langchain_autocontext.messages import find_violations
from langchain_autocontext.store import OffloadStore

CFG = AutoContextConfig(max_tokens=6_000, last_keep=6, msg_threshold=40)


class ParentState(AutoContextState):
    task_label: str  # a key of the parent's own


def build_graph(ac: AutoContext, model: ScriptedModel, store, checkpointer=None):
    def call_model(state: ParentState):
        assert state["task_label"] == "T-1"
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(ParentState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", call_model)
    g.add_node("tools", ToolNode([bash]))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "autocontext")
    return g.compile(store=store, checkpointer=checkpointer)


def check_inputs(model: ScriptedModel, ac: AutoContext) -> None:
    for sent in model.seen:
        assert not find_violations(sent)
        assert (
            ac.counter.count(sent, ac.count_tools, tags=ac.config.metadata_tags)
            <= ac.config.max_tokens
        )
        assert isinstance(sent[0], SystemMessage)


def test_subgraph_node_in_a_state_graph() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG)
    model = ScriptedModel(steps=40)
    graph = build_graph(ac, model, store, InMemorySaver())
    config = {"configurable": {"thread_id": "run-1"}, "recursion_limit": 500}
    out = graph.invoke(
        {
            "messages": [SystemMessage("You are a coder."), HumanMessage("fix it")],
            "task_label": "T-1",
        },
        config,
    )
    assert out["messages"][-1].content == "finished after 40 steps"
    check_inputs(model, ac)
    wrapped = OffloadStore.wrap(store)
    assert wrapped.list_events("run-1"), "compression never ran"
    # every original the model was called with is in the history: system, user, and
    # 40 calls with their results (the final answer is archived at the next turn)
    assert wrapped.history_count("run-1") == 2 + 40 * 2
    # the persisted state is the compressed one
    state = graph.get_state(config).values
    assert len(state["messages"]) < 2 + 40 * 2 + 1


async def test_subgraph_node_async() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG)
    model = ScriptedModel(steps=30)
    graph = build_graph(ac, model, store)
    out = await graph.ainvoke(
        {
            "messages": [SystemMessage("You are a coder."), HumanMessage("fix it")],
            "task_label": "T-1",
        },
        {"configurable": {"thread_id": "a"}, "recursion_limit": 500},
    )
    assert out["messages"][-1].content == "finished after 30 steps"
    check_inputs(model, ac)
    assert OffloadStore.wrap(store).list_events("a")


def test_create_react_agent_pre_model_hook() -> None:
    from langgraph.prebuilt import create_react_agent

    store = InMemoryStore()
    ac = AutoContext(CFG, system_prompt="You are a coder.", tools=[bash])
    model = ScriptedModel(steps=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            [bash],
            prompt="You are a coder.",
            pre_model_hook=ac.pre_model_hook,
            store=store,
            checkpointer=InMemorySaver(),
        )
    config = {"configurable": {"thread_id": "r"}, "recursion_limit": 500}
    out = agent.invoke({"messages": [HumanMessage("fix it")]}, config)
    assert out["messages"][-1].content == "finished after 40 steps"
    check_inputs(model, ac)
    assert OffloadStore.wrap(store).list_events("r")
    assert len(agent.get_state(config).values["messages"]) < 1 + 40 * 2 + 1


def test_a_tool_call_edited_by_a_reviewer_keeps_its_original_in_the_history() -> None:
    """A review node between the model and the tools replaced the model's call (a human
    editing its arguments): the command node archived only replies without tool calls,
    so the original call was lost. Every reply is archived as soon as it is written."""
    from _builders import FunctionModel, call
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.types import Command, interrupt

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("delete_file", {"path": "/etc/x"}, "del")])
        return AIMessage("done")

    def review(state: AutoContextState) -> Command:
        ai = state["messages"][-1]
        if interrupt({"review": ai.tool_calls}) == "edit":
            edited = [{**ai.tool_calls[0], "args": {"path": "/tmp/x"}}]
            return Command(
                goto="tools", update={"messages": [ai.model_copy(update={"tool_calls": edited})]}
            )
        return Command(goto="tools")

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(max_tokens=4_000, store=store)
    model = FunctionModel(respond=respond)
    g = StateGraph(AutoContextState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model.bind_tools([delete_file, *ac.tools])))
    g.add_node("commands", ac.command_node())
    g.add_node("review", review)
    g.add_node("tools", ToolNode([delete_file, *ac.tools]))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_edge("model", "commands")
    g.add_conditional_edges("commands", tools_condition, {"tools": "review", "__end__": "__end__"})
    g.add_edge("tools", "autocontext")
    graph = g.compile(checkpointer=InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "review"}}
    graph.invoke({"messages": [SystemMessage("sys"), HumanMessage("clean up")]}, config)
    pending = graph.get_state(config).values["messages"][-1]
    out = graph.invoke(Command(resume="edit"), config)
    assert out["messages"][-1].content == "done"
    assert "deleted /tmp/x" in [m.content for m in out["messages"]]
    original = store.get_history_message("review", pending.id)
    assert original is not None and original.message.tool_calls[0]["args"] == {"path": "/etc/x"}


def test_the_surfaces_are_what_their_annotations_say() -> None:
    """``node()`` was annotated ``Any`` and the hooks bare ``Runnable``/``RunnableLambda``:
    each factory's return annotation names the class of what it returns."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    ac = AutoContext(CFG, store=InMemoryStore())
    model = GenericFakeChatModel(messages=iter([AIMessage("ok")]))
    made = {
        "node": ac.node(),
        "pre_model_hook": ac.pre_model_hook,
        "command_node": ac.command_node(),
        "post_model_hook": ac.post_model_hook,
        "model_node": ac.model_node(model),
    }
    for name, value in made.items():
        attr = getattr(AutoContext, name)
        hint = typing.get_type_hints(attr.fget if isinstance(attr, property) else attr)["return"]
        kind = typing.get_origin(hint)
        assert isinstance(kind, type), f"{name} -> {hint}: not a parameterized class"
        assert isinstance(value, kind), f"{name} returned {type(value).__name__}, not {hint}"
