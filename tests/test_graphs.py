"""The engine inside real LangGraph graphs: the subgraph node and create_react_agent's hook."""

from __future__ import annotations

import itertools
import operator
import typing
import warnings
from typing import Annotated, Any, NotRequired

import pytest
from _builders import ScriptedModel, bash, loop_graph
from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.managed import RemainingSteps
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    AutoContextState,
    merge_autocontext,
)
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


@pytest.mark.parametrize("prompt", [None, "You are a coder."])
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_the_hook_sends_no_second_system_message_after_the_agents_prompt(
    prompt: str | None, asynchronous: bool
) -> None:
    """``create_react_agent`` puts its ``prompt=`` before the view the pre-model hook
    hands it, and the hook cannot see that prompt: with an ``AutoContext`` not told it
    (``system_prompt=``), the package's section came as a system message of its own,
    the second of the request (OpenAI's payloads carried two system items; the design
    allows one, first, as some providers accept no other). The section now travels as a user-role message whenever the state
    has no system message, so one system message, first, whether a prompt is added or
    not."""
    ac = AutoContext(CFG, tools=[bash], disclosure="always")
    model = ScriptedModel(steps=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            [bash, *ac.tools],
            prompt=prompt,
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            checkpointer=InMemorySaver(),
        )
    config = {"configurable": {"thread_id": "sp"}, "recursion_limit": 200}
    inputs = {"messages": [HumanMessage("fix it")]}
    out = await agent.ainvoke(inputs, config) if asynchronous else agent.invoke(inputs, config)
    assert out["messages"][-1].content == "finished after 12 steps"
    for sent in model.seen:
        systems = [k for k, m in enumerate(sent) if isinstance(m, SystemMessage)]
        assert systems in ([], [0]), [m.type for m in sent]
        assert not find_violations(sent)
        assert any("Context" in str(m.content) for m in sent)  # the section is still sent


@pytest.mark.parametrize("surface", ["hook", "hook with tools=", "middleware"])
def test_an_engine_that_does_not_count_the_agents_tools_says_so_once(surface: str) -> None:
    """A ``create_react_agent`` hook cannot see the tools its model is bound with: when
    the agent calls a tool whose schema the engine does not count (every request sends
    it, and uncounted it can take a request past ``max_tokens``), one warning names it
    and says how to count it; given ``tools=``, or with the middleware (which counts
    each request's own), none."""
    from langchain.agents import create_agent
    from langgraph.prebuilt import create_react_agent

    ac = AutoContext(CFG, tools=[bash] if surface == "hook with tools=" else None)
    model = ScriptedModel(steps=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if surface == "middleware":
            agent = create_agent(model, [bash], middleware=[ac.middleware()], store=InMemoryStore())
        else:
            agent = create_react_agent(
                model, [bash], pre_model_hook=ac.pre_model_hook, store=InMemoryStore()
            )
    config = {"configurable": {"thread_id": "w"}, "recursion_limit": 100}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.invoke({"messages": [HumanMessage("fix it")]}, config)
    about = [str(w.message) for w in caught if "does not count" in str(w.message)]
    if surface == "hook":
        assert len(about) == 1 and "bash" in about[0] and "AutoContext(tools=" in about[0]
    else:
        assert about == []


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


def test_parallel_nodes_may_each_write_the_package_state() -> None:
    """Two model nodes in one step (a fan-out) each write ``state["autocontext"]`` on a
    thread's first call: without a reducer on the key LangGraph raised
    ``InvalidUpdateError`` at the first step of every new thread (multi-agent audit)."""
    from _builders import FunctionModel
    from langchain_core.messages import AIMessage
    from langgraph.graph import END
    from langgraph.types import Send

    from langchain_autocontext import AutoContextAgentState, merge_autocontext

    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=InMemoryStore())

    def critic(name: str) -> Any:
        return ac.model_node(FunctionModel(respond=lambda msgs, n: AIMessage(f"{name}: ok")))

    g = StateGraph(AutoContextState)
    for name in ("critic_a", "critic_b"):
        g.add_node(name, critic(name))
        g.add_edge(START, name)
        g.add_edge(name, END)
    app = g.compile(checkpointer=InMemorySaver())
    out = app.invoke(
        {"messages": [HumanMessage("Review this.")]}, {"configurable": {"thread_id": "x"}}
    )
    assert {m.content for m in out["messages"][1:]} == {"critic_a: ok", "critic_b: ok"}
    assert isinstance(out["autocontext"], dict)

    # Send fan-out to one node, on create_react_agent's state with the package's key
    fan = StateGraph(AutoContextAgentState)
    fan.add_node("critic", critic("critic"))
    fan.add_conditional_edges(
        START, lambda s: [Send("critic", {"messages": s["messages"]}) for _ in range(3)]
    )
    fan.add_edge("critic", END)
    out = fan.compile().invoke({"messages": [HumanMessage("Review this.")]})
    assert [m.content for m in out["messages"][1:]] == ["critic: ok"] * 3

    # the reducer: the last write wins whole (a key left out is cleared), None keeps
    assert merge_autocontext({"a": 1, "b": 2}, {"b": 3}) == {"b": 3}
    assert merge_autocontext({"a": 1}, None) == {"a": 1}
    assert merge_autocontext(None, {"a": 1}) == {"a": 1}


def _supervisor_team(rounds: int, store: Any) -> tuple[Any, list[Any]]:
    """The supervisor pattern (langgraph-supervisor's handoffs): two ``create_agent``
    agents with the middleware as nodes of a parent graph on a shared ``messages`` key;
    a handoff returns the agent's whole (compressed) message list to the parent."""
    from _builders import FunctionModel, call, handoff
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, MessagesState

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        return f"Findings for {url}: " + " ".join(
            f"fact{i} of {url} is {i * 3}." for i in range(50)
        )

    def supervisor(msgs: list[Any], n: int) -> AIMessage:
        if n < rounds:
            text = f"Round {n}: asking the researcher about topic {n}. " * 5
            return AIMessage(text, tool_calls=[call("transfer_to_researcher", {})])
        return AIMessage("All done.")

    def researcher(msgs: list[Any], n: int) -> AIMessage:
        if n % 3 < 2:
            return AIMessage("", tool_calls=[call("fetch", {"url": f"https://x/{n}"})])
        text = f"Report {n}: " + "the findings are solid. " * 30
        return AIMessage(text, tool_calls=[call("transfer_to_supervisor", {})])

    models = [FunctionModel(respond=supervisor), FunctionModel(respond=researcher)]
    agents = {}
    for name, model, tools in (
        ("supervisor", models[0], [handoff("researcher")]),
        ("researcher", models[1], [fetch, handoff("supervisor")]),
    ):
        ac = AutoContext(max_tokens=5_000, store=store)
        agents[name] = create_agent(
            model, tools, system_prompt=f"You are the {name}.", middleware=[ac.middleware()]
        )
    g = StateGraph(MessagesState)
    g.add_node("supervisor", agents["supervisor"], destinations=("researcher", END))
    g.add_node("researcher", agents["researcher"], destinations=("supervisor",))
    g.add_edge(START, "supervisor")
    return g.compile(checkpointer=InMemorySaver(), store=store), models


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_agents_sharing_messages_summarize_each_original_once(mode: str) -> None:
    """In the supervisor pattern the parent keeps the originals an agent summarized and
    appends the agent's summaries at the end (LangGraph merges by id). Each agent then
    summarized those originals again, on every turn: at 12 rounds 1,081 messages were
    summarized for 98 originals and a context reached 15,379 tokens against a 5,000
    budget before compression, and summaries sat, in the assistant's role, before
    assistant messages (multi-agent audit). A summary now takes its originals' place."""
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_autocontext.messages import marker
    from langchain_autocontext.strategies.base import SUMMARY_KINDS

    store = InMemoryStore()
    app, models = _supervisor_team(12, store)
    cfg = {"configurable": {"thread_id": "team"}, "recursion_limit": 500}
    inputs = {"messages": [HumanMessage("Research X thoroughly.")]}
    if mode == "sync":
        app.invoke(inputs, cfg)
    else:
        await app.ainvoke(inputs, cfg)

    ost = OffloadStore(store)
    originals = ost.history_count("team")
    history = {e.id for e in ost.iter_history("team")}
    summarized = [
        i
        for r in ost.list_offloads("team")
        if not r.strategy.startswith("offload")  # a preview keeps the id it stands for
        for i in r.message_ids
        if i in history
    ]
    assert summarized and len(summarized) == len(set(summarized)), "summarized twice"
    events = ost.list_events("team")
    assert events and max(e.tokens_before for e in events) < 2 * 5_000
    for model in models:
        for request in model.seen:
            assert not find_violations(request)
            for m, nxt in itertools.pairwise(request):
                if (marker(m) or {}).get("kind") in SUMMARY_KINDS:
                    assert not (isinstance(m, AIMessage) and isinstance(nxt, AIMessage))
    assert originals > 60


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_agents_in_turn_over_several_user_turns_summarize_each_original_once(
    mode: str,
) -> None:
    """Two agents as nodes in turn, three user turns: within a run an agent's recursive
    summary absorbed its earlier one and only the latest reached the parent, so the
    parent's copies of what the earlier one covered went unrecognised and the other
    agent summarized them again (10 originals in 2-3 summaries; LangGraph audit). A
    summary now stands for what the summaries it absorbed stood for."""
    from _builders import FunctionModel, call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, MessagesState

    @tool
    def run(command: str) -> str:
        """Run a shell command."""
        return f"$ {command}\n" + "\n".join(
            f"test_{i} PASSED in {i * 7 % 13}ms" for i in range(150)
        )

    def script(name: str):
        def respond(msgs: list[Any], n: int) -> AIMessage:
            if n % 3 < 2:
                return AIMessage("", tool_calls=[call("run", {"command": f"pytest -k {name}{n}"})])
            return AIMessage(f"{name} done.")

        return respond

    store = InMemoryStore()
    models = [FunctionModel(respond=script(name)) for name in ("researcher", "coder")]
    g = StateGraph(MessagesState)
    for name, model in zip(("researcher", "coder"), models, strict=True):
        ac = AutoContext(AutoContextConfig(max_tokens=4_000), store=store)
        g.add_node(
            name,
            create_agent(
                model, [run], system_prompt=f"You are {name}.", middleware=[ac.middleware()]
            ),
        )
    g.add_edge(START, "researcher")
    g.add_edge("researcher", "coder")
    g.add_edge("coder", END)
    app = g.compile(checkpointer=InMemorySaver(), store=store)
    cfg = {"configurable": {"thread_id": "turns"}, "recursion_limit": 200}
    for question in ("Q1", "Q2", "Q3"):
        inputs = {"messages": [HumanMessage(question)]}
        app.invoke(inputs, cfg) if mode == "sync" else await app.ainvoke(inputs, cfg)

    ost = OffloadStore(store)
    history = {e.id for e in ost.iter_history("turns")}
    summarized = [
        i
        for r in ost.list_offloads("turns")
        if not r.strategy.startswith("offload")  # a preview keeps the id it stands for
        for i in r.message_ids
        if i in history
    ]
    assert summarized and len(summarized) == len(set(summarized)), "summarized twice"
    for model in models:
        for request in model.seen:
            assert not find_violations(request)


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


def test_a_send_to_the_node_keeps_the_parent_history() -> None:
    """``Send`` hands ``ac.node()`` a payload whose messages have no id (it skips the
    reducer). The node gives them ids; it wrote them back as "remove everything, then
    these", which replaced the parent's whole history with the payload (multi-agent
    audit). With nothing compressed, the node now writes them by id."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, MessagesState
    from langgraph.types import Send

    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=InMemoryStore())
    g = StateGraph(MessagesState)
    g.add_node("plan", lambda s: {"messages": [AIMessage("plan: two branches")]})
    g.add_node("autocontext", ac.node())
    g.add_edge(START, "plan")
    g.add_conditional_edges(
        "plan",
        lambda s: [
            Send("autocontext", {"messages": [HumanMessage(f"branch {k}")]}) for k in range(2)
        ],
        ["autocontext"],
    )
    g.add_edge("autocontext", END)
    out = g.compile().invoke({"messages": [HumanMessage("Review the design.")]})
    assert [m.content for m in out["messages"]] == [
        "Review the design.",
        "plan: two branches",
        "branch 0",
        "branch 1",
    ]
    assert all(m.id for m in out["messages"])


@pytest.mark.parametrize("surface", ["node", "middleware"])
def test_a_checkpoint_whose_package_state_is_not_a_dict_does_not_stop_the_run(
    surface: str,
) -> None:
    """``update_state(cfg, {"autocontext": ["corrupt"]})`` (a hand-edited or foreign
    checkpoint) made the next run fail with a raw ValueError deep in the view (audit):
    the value is ignored with a warning and replaced by the package's next update."""
    store = InMemoryStore()
    ac = AutoContext(CFG)
    cfg = {"configurable": {"thread_id": "corrupt"}, "recursion_limit": 500}
    if surface == "node":
        model = ScriptedModel(steps=30)
        graph = build_graph(ac, model, store, InMemorySaver())
        first = {"messages": [SystemMessage("You are a coder."), HumanMessage("fix it")]}
        graph.invoke({**first, "task_label": "T-1"}, cfg)
    else:
        from langchain.agents import create_agent

        model = ScriptedModel(steps=30)
        graph = create_agent(
            model, [bash], middleware=[ac.middleware()], checkpointer=InMemorySaver(), store=store
        )
        graph.invoke({"messages": [HumanMessage("fix it")]}, cfg)
    assert isinstance(graph.get_state(cfg).values["autocontext"], dict)
    model.steps = model.calls + 10
    if surface == "node":  # AutoContextState's reducer refuses the write itself
        with pytest.raises(TypeError, match=r"'autocontext' state key .* got a list"):
            graph.update_state(cfg, {"autocontext": ["corrupt"]})
        out = graph.invoke({"messages": [HumanMessage("and the next one")]}, cfg)
    else:  # the middleware's state key takes any value: it is read as absent
        graph.update_state(cfg, {"autocontext": ["corrupt"]})
        with pytest.warns(UserWarning, match="'autocontext'\\] is a list"):
            out = graph.invoke({"messages": [HumanMessage("and the next one")]}, cfg)
    assert out["messages"][-1].content.startswith("finished")
    assert isinstance(graph.get_state(cfg).values["autocontext"], dict)
    for sent in model.seen:
        assert not find_violations(sent)
        assert ac.counter.count(sent, [*ac.all_tools, bash]) <= ac.config.max_tokens


@pytest.mark.parametrize("call", ["compress", "prepare_model_call", "after_model_call"])
def test_the_engine_refuses_a_package_state_that_is_not_a_mapping(call: str) -> None:
    ac = AutoContext(CFG)
    msgs = [SystemMessage("s", id="s"), HumanMessage("hi", id="u")]
    with pytest.raises(TypeError, match=r"'autocontext' dict .* got list"):
        getattr(ac, call)(msgs, state=["corrupt"])


def test_a_stateless_run_on_messages_state_keeps_its_own_thread() -> None:
    """``MessagesState`` has no ``autocontext`` key, so the node's per-run thread is not
    in the state the command node, the model node and the tools see: they must still
    file under the conversation's thread, never the shared ``"default"`` (where every
    stateless conversation's replies met and ``search_history`` showed them to others)."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.graph import MessagesState

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=3_000), store=store)

    class Searcher(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):
            if self.calls == self.steps:  # after the commands: search the history
                self.calls += 1
                self.seen.append(list(messages))
                call = {"name": "search_history", "args": {"query": "passport"}, "id": "s1"}
                msg = AIMessage("", tool_calls=[{**call, "type": "tool_call"}])
                return ChatResult(generations=[ChatGeneration(message=msg)])
            return super()._generate(messages, stop, run_manager, **kw)

    def run(first: str) -> dict[str, Any]:
        model = Searcher(steps=3)
        tools = [bash, *ac.all_tools]
        g = loop_graph(ac, model, tools, MessagesState)
        graph = g.compile(store=store)  # no checkpointer, no thread_id
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return graph.invoke({"messages": [SystemMessage("Be brief."), HumanMessage(first)]})

    run("My passport number is X1234567.")
    out = run("Fix the tests.")
    st = ac.resolve_store(store)
    assert st.get_history("default") == []
    found = [
        m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "search_history"
    ]
    assert found and "X1234567" not in str(found[0].content)


def test_parallel_branches_of_one_agent_each_keep_their_own_fitted_view() -> None:
    """``Send`` runs one ``create_agent`` node (one middleware) several times in a step.
    A view fitted in the model call (a retrieved document another middleware adds) was
    held for ``after_model`` per store, thread and agent name: the branches overwrote
    each other's, and a branch wrote another's summary into its own state, whose model
    was then shown the other branch's offload id (multi-agent review). Each branch's
    ``after_model`` now takes the fit made from its own state."""
    import re
    import threading

    from _builders import FunctionModel, call
    from langchain.agents import create_agent
    from langchain.agents.middleware import after_model, wrap_model_call
    from langchain_core.messages import AIMessage, RemoveMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, MessagesState
    from langgraph.types import Send

    @tool
    def run(command: str) -> str:
        """Run a shell command."""
        return f"$ {command}\n" + "\n".join(f"test_{i} PASSED ({command})" for i in range(60))

    def branch(messages: list[Any]) -> int:
        return int(next(m.content for m in messages if str(m.content).startswith("task"))[4:])

    # each step, the three branches' model calls end in the order task0, task1, task2, all
    # before any branch's after_model, which then run in the same order
    turn = {"call": 0, "after": 0}
    cond = threading.Condition()
    barrier = threading.Barrier(3, timeout=60)

    def in_turn(kind: str, k: int) -> None:
        with cond:
            assert cond.wait_for(lambda: turn[kind] == k, timeout=60)

    def next_turn(kind: str) -> None:
        with cond:
            turn[kind] = (turn[kind] + 1) % 3
            cond.notify_all()

    document = HumanMessage("Retrieved: " + " ".join(f"doc fact {i}." for i in range(500)))

    @wrap_model_call
    def retrieve(request: Any, handler: Any) -> Any:
        k = branch(request.messages)
        in_turn("call", k)
        try:
            return handler(request.override(messages=[*request.messages, document]))
        finally:
            next_turn("call")
            barrier.wait()

    @after_model
    def in_order(state: Any, runtime: Any) -> None:  # runs before the package's after_model
        in_turn("after", branch(state["messages"]))

    @after_model
    def done(state: Any, runtime: Any) -> None:  # runs after it
        next_turn("after")

    steps: dict[str, int] = {}

    def respond(msgs: list[Any], n: int) -> AIMessage:
        task = next(m.content for m in msgs if str(m.content).startswith("task"))
        done = steps[task] = steps.get(task, -1) + 1
        if done < 6:
            return AIMessage("", tool_calls=[call("run", {"command": f"pytest -k {task}-{done}"})])
        return AIMessage(f"finished {task}")

    store = InMemoryStore()
    model = FunctionModel(respond=respond)
    ac = AutoContext(AutoContextConfig(max_tokens=3_000), store=store)
    worker = create_agent(
        model, [run], middleware=[done, retrieve, ac.middleware(), in_order], name="worker"
    )
    g = StateGraph(MessagesState)
    g.add_node("worker", worker)
    g.add_conditional_edges(
        START,
        lambda s: [Send("worker", {"messages": [HumanMessage(f"task{k}")]}) for k in range(3)],
        ["worker"],
    )
    g.add_edge("worker", END)
    app = g.compile(checkpointer=InMemorySaver(), store=store)
    cfg = {"configurable": {"thread_id": "fan"}, "recursion_limit": 200}
    written = []  # what each branch's steps wrote to its own state
    for _, update in app.stream(
        {"messages": [HumanMessage("Three tasks.")]}, cfg, stream_mode="updates", subgraphs=True
    ):
        written += [
            v["messages"] for v in update.values() if isinstance(v, dict) and v.get("messages")
        ]
    out = app.get_state(cfg).values

    assert {m.content for m in out["messages"] if isinstance(m, AIMessage) and m.content} == {
        f"finished task{k}" for k in range(3)
    }
    ost = OffloadStore(store)

    def foreign(messages: list[Any], own: str) -> list[str]:
        """The strategies of the summaries in ``messages`` that stand for messages of a
        branch other than ``own``."""
        text = " ".join(str(m.content) for m in messages)
        found = []
        for ref in re.findall(r'offload_id="([0-9a-f]{8})', text):
            record = ost.reload("fan", ref)
            originals = " ".join(
                f"{m.content} {getattr(m, 'tool_calls', '')}" for m in record.messages
            )
            found += [record.strategy] if set(re.findall(r"task\d", originals)) - {own} else []
        return found

    shown = 0
    for request in model.seen:
        assert not find_violations(request)
        assert not foreign(request, f"task{branch(request)}")
        shown += "offload_id=" in " ".join(str(m.content) for m in request)
    assert shown  # the views did show summaries
    for messages in written:
        whole = [m for m in messages if not isinstance(m, RemoveMessage)]
        if any(str(m.content).startswith("task") for m in whole):
            assert not foreign(whole, f"task{branch(whole)}")


def test_parallel_branches_from_one_state_each_write_their_own_fitted_view() -> None:
    """``Send`` the same state to one ``create_agent`` node three times (three answers
    to choose from): the branches' model calls were made from states with the same ids,
    so their fitted views were held under one key. The last call's replaced the
    others', the first branch's ``after_model`` took it and the other two found none:
    their states kept what their views had summarized, and the ids those views showed
    named nothing in them. Each branch now writes the view fitted in its own call."""
    import threading

    from _builders import FunctionModel, log_text
    from langchain.agents import create_agent
    from langchain.agents.middleware import wrap_model_call
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, MessagesState
    from langgraph.types import Send

    barrier = threading.Barrier(3, timeout=60)
    document = HumanMessage("Retrieved: " + " ".join(f"doc fact {i}." for i in range(700)))

    @wrap_model_call
    def retrieve(request: Any, handler: Any) -> Any:
        # every branch's model call ends before any branch's after_model runs
        response = handler(request.override(messages=[document, *request.messages]))
        barrier.wait()
        return response

    history: list[Any] = [HumanMessage("Fix the build.", id="u0")]
    for k in range(4):
        history += [
            AIMessage("", id=f"a{k}", tool_calls=[{"name": "sh", "args": {}, "id": f"c{k}"}]),
            ToolMessage(log_text(20, k), tool_call_id=f"c{k}", id=f"t{k}"),
        ]
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=3_000), store=store)
    worker = create_agent(
        FunctionModel(respond=lambda msgs, n: AIMessage(f"answer {n}")),
        [],
        middleware=[retrieve, ac.middleware()],
        name="worker",
    )
    g = StateGraph(MessagesState)
    g.add_node("worker", worker)
    g.add_conditional_edges(
        START, lambda s: [Send("worker", {"messages": s["messages"]}) for _ in range(3)], ["worker"]
    )
    g.add_edge("worker", END)
    app = g.compile(checkpointer=InMemorySaver(), store=store)
    cfg = {"configurable": {"thread_id": "same"}}
    fitted = []  # per branch: whether its after_model wrote the fitted view
    for namespace, update in app.stream(
        {"messages": history}, cfg, stream_mode="updates", subgraphs=True
    ):
        for node, value in update.items():
            if node == "AutoContextMiddleware.after_model" and namespace:
                fitted.append(bool(value and value.get("messages")))
    assert fitted == [True, True, True]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_parallel_branches_from_one_state_compress_it_alike(mode: str) -> None:
    """``Send`` the same state to one ``create_agent`` node three times, the branches'
    ``before_model`` hooks running at once (a barrier): they share the middleware, the
    engine's per-thread memo and the store, yet each compresses the state as a fresh
    thread does, the fresh offload ids aside (reproducibility, prompt caching). A branch
    that starts after a sibling's model call counts the system prompt and tools that call
    taught the middleware (docs/surfaces.md): a difference of knowledge, not of timing."""
    import asyncio
    import re
    import threading

    from _builders import FunctionModel, call, log_text
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
    from langgraph.graph import END, MessagesState
    from langgraph.types import Send

    history: list[Any] = []
    for r in range(3):
        history.append(HumanMessage(f"Fix build {r}.", id=f"u{r}"))
        for k in range(r * 100, r * 100 + 40):
            history += [
                AIMessage(
                    f"step {k}", id=f"a{k}", tool_calls=[call("sh", {"cmd": f"make {k}"}, f"c{k}")]
                ),
                ToolMessage(log_text(60, k), tool_call_id=f"c{k}", id=f"t{k}"),
            ]
        if r < 2:
            history.append(AIMessage(f"done {r}", id=f"f{r}"))

    def app(branches: int) -> Any:
        barrier = threading.Barrier(branches, timeout=60)
        abarrier: list[asyncio.Barrier] = []

        class AtOnce(AgentMiddleware):  # listed first: its before_model runs first
            def before_model(self, state: Any, runtime: Any) -> None:
                barrier.wait()

            async def abefore_model(self, state: Any, runtime: Any) -> None:
                abarrier[:] = abarrier or [asyncio.Barrier(branches)]
                await asyncio.wait_for(abarrier[0].wait(), 60)

        store = InMemoryStore()
        ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
        worker = create_agent(
            FunctionModel(respond=lambda msgs, n: AIMessage("answer")),
            [],
            middleware=[AtOnce(), ac.middleware()],
            system_prompt="You are a careful build engineer. " * 100,
            name="worker",
        )
        g = StateGraph(MessagesState)
        g.add_node("worker", worker)
        g.add_conditional_edges(
            START,
            lambda s: [Send("worker", {"messages": s["messages"]}) for _ in range(branches)],
            ["worker"],
        )
        g.add_edge("worker", END)
        return g.compile(checkpointer=InMemorySaver(), store=store)

    offload_id = re.compile(r'offload_id="[0-9a-f-]+"')

    async def compressed(branches: int) -> list[list[tuple[str, Any, str]]]:
        """What each branch's package ``before_model`` wrote, offload ids aside."""
        cfg = {"configurable": {"thread_id": "same"}}
        run = app(branches)
        given = ({"messages": history}, cfg)
        if mode == "async":
            updates = [u async for u in run.astream(*given, stream_mode="updates", subgraphs=True)]
        else:
            updates = list(run.stream(*given, stream_mode="updates", subgraphs=True))
        out = []
        for namespace, update in updates:
            value = update.get("AutoContextMiddleware.before_model")
            if namespace and value and value.get("messages"):
                kept = [m for m in value["messages"] if not isinstance(m, RemoveMessage)]
                out.append(
                    [
                        (m.type, m.id if m.id in ids else None, offload_id.sub("X", str(m.content)))
                        for m in kept
                    ]
                )
        return out

    ids = {m.id for m in history}
    branches = await compressed(3)
    (fresh,) = await compressed(1)
    assert len(branches) == 3
    assert len(fresh) < len(history)  # it compressed
    assert all(b == fresh for b in branches)


def test_an_unnamed_subagent_in_a_named_agents_tool_is_recorded_under_the_callers_name() -> None:
    """LangChain's run metadata is inherited: an unnamed ``create_agent`` run inside a
    named agent's tool runs with the caller's ``lc_agent_name``, so its history reads as
    the caller's (docs/surfaces.md, "Several agents", says so; multi-agent review)."""
    from _builders import FunctionModel, call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    helper = create_agent(
        FunctionModel(respond=lambda msgs, n: AIMessage("fixed")), [], middleware=[ac.middleware()]
    )

    @tool
    def task(description: str) -> str:
        """Hand a task to the helper."""
        return helper.invoke({"messages": [HumanMessage(description)]})["messages"][-1].content

    def lead_script(msgs: list[Any], n: int) -> AIMessage:
        return (
            AIMessage("", tool_calls=[call("task", {"description": "Fix it."})])
            if n == 0
            else AIMessage("done")
        )

    lead = create_agent(
        FunctionModel(respond=lead_script),
        [task],
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
        name="lead",
    )
    lead.invoke({"messages": [HumanMessage("Go.")]}, {"configurable": {"thread_id": "u"}})
    agents = {e.message.content: e.agent for e in OffloadStore(store).iter_history("u")}
    assert agents["Fix it."] == agents["fixed"] == "lead"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_agent_that_hands_off_archives_its_last_reply_under_its_own_name(
    mode: str,
) -> None:
    """A handoff tool (``Command(goto=…, graph=Command.PARENT)``) leaves the agent's
    graph before its ``after_agent``: its last reply reached the history only at the next
    agent's model call, under that agent's name (the researcher's report read as the
    supervisor's), and, handed off to ``END``, not at all until the thread's next turn
    (multi-agent review). The middleware now archives the agent's messages, the handoff's
    result included, when one of its tools hands off."""
    from _builders import FunctionModel, call, handoff
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, MessagesState

    def supervisor(msgs: list[Any], n: int) -> AIMessage:
        return AIMessage("Delegating.", tool_calls=[call("transfer_to_researcher", {})])

    def researcher(msgs: list[Any], n: int) -> AIMessage:
        return AIMessage("Report: X is 42.", tool_calls=[call(f"transfer_to_{END}", {})])

    store = InMemoryStore()
    g = StateGraph(MessagesState)
    for name, respond, dest in (
        ("supervisor", supervisor, "researcher"),
        ("researcher", researcher, END),
    ):
        ac = AutoContext(AutoContextConfig(max_tokens=4_000), store=store)
        agent = create_agent(
            FunctionModel(respond=respond), [handoff(dest)], middleware=[ac.middleware()], name=name
        )
        g.add_node(name, agent, destinations=(dest,))
    g.add_edge(START, "supervisor")
    app = g.compile(checkpointer=InMemorySaver(), store=store)
    cfg = {"configurable": {"thread_id": "handoff"}}
    inputs = {"messages": [HumanMessage("Research X.")]}
    out = app.invoke(inputs, cfg) if mode == "sync" else await app.ainvoke(inputs, cfg)

    history = {e.id: e for e in OffloadStore(store).iter_history("handoff")}
    assert [m.content for m in out["messages"] if m.id not in history] == []
    who = {str(e.message.content): e.agent for e in history.values()}
    assert who["Delegating."] == who["Transferred to researcher"] == "supervisor"
    assert who["Report: X is 42."] == who[f"Transferred to {END}"] == "researcher"


class TicketModel(BaseModel):  # a pydantic state schema
    messages: Annotated[list[AnyMessage], add_messages]
    autocontext: Annotated[dict[str, Any], merge_autocontext] = Field(default_factory=dict)
    ticket: str = ""


class ReactModel(BaseModel):  # create_react_agent's state, as a pydantic model
    messages: Annotated[list[AnyMessage], add_messages]
    remaining_steps: RemainingSteps = 25
    autocontext: Annotated[dict[str, Any], merge_autocontext] = Field(default_factory=dict)


class AddState(TypedDict):  # messages appended with operator.add, not add_messages
    messages: Annotated[list[AnyMessage], operator.add]
    autocontext: NotRequired[Annotated[dict[str, Any], merge_autocontext]]


class PlainState(TypedDict):  # messages without a reducer
    messages: list[AnyMessage]
    autocontext: NotRequired[Annotated[dict[str, Any], merge_autocontext]]


class ChatState(TypedDict):  # the conversation under another key
    chat: Annotated[list[AnyMessage], add_messages]
    autocontext: NotRequired[dict[str, Any]]


def _own_loop_graph(
    schema: Any, ac: AutoContext, model: ScriptedModel, store: Any, checkpointer: Any = None
) -> Any:
    """The documented loop (node → model node → command node → tools) on ``schema``
    (checkpointed in memory unless ``checkpointer`` is given)."""
    g = loop_graph(ac, model, [bash], schema)
    return g.compile(store=store, checkpointer=checkpointer or InMemorySaver())


def test_a_pydantic_state_runs_the_node_model_node_and_command_node() -> None:
    """LangGraph hands a pydantic state to nodes as a model instance, not a dict: the
    model node and the command node read it by its fields (they called ``state.get``)."""

    store = InMemoryStore()
    ac = AutoContext(CFG, tools=[bash])
    model = ScriptedModel(steps=30)
    graph = _own_loop_graph(TicketModel, ac, model, store)
    config = {"configurable": {"thread_id": "p"}, "recursion_limit": 500}
    start = [SystemMessage("You are a coder."), HumanMessage("fix it")]
    out = graph.invoke({"messages": start, "ticket": "T-9"}, config)
    assert out["messages"][-1].content == "finished after 30 steps"
    assert out["ticket"] == "T-9"
    check_inputs(model, ac)
    assert OffloadStore.wrap(store).list_events("p")


def test_a_pydantic_state_runs_the_react_hooks() -> None:

    ac = AutoContext(CFG, tools=[bash], system_prompt="You are a coder.")
    model = ScriptedModel(steps=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            model,
            [bash],
            prompt="You are a coder.",
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            state_schema=ReactModel,
            checkpointer=InMemorySaver(),
        )
    config = {"configurable": {"thread_id": "pr"}, "recursion_limit": 500}
    out = agent.invoke({"messages": [HumanMessage("fix it")]}, config)
    assert out["messages"][-1].content == "finished after 30 steps"
    check_inputs(model, ac)


@pytest.mark.parametrize("reducer", ["operator.add", "none"])
def test_a_messages_key_without_add_messages_is_refused_before_the_model_sees_it_twice(
    reducer: str,
) -> None:
    """The graph surfaces write the messages by id and with ``RemoveMessage``: with
    ``operator.add`` the node's write of the ids it gave was appended (the model saw the
    question twice) and a compression's ``RemoveMessage`` became a message of the state
    (a ``ValueError`` from the offload step, naming no cause). Now a clear ``ValueError``
    names the reducer, before the model is called with such a state."""
    State = AddState if reducer == "operator.add" else PlainState
    ac = AutoContext(CFG, tools=[bash])
    model = ScriptedModel(steps=40)
    graph = _own_loop_graph(State, ac, model, InMemoryStore())
    config = {"configurable": {"thread_id": "r"}, "recursion_limit": 500}
    with pytest.raises(ValueError, match="add_messages"):
        graph.invoke({"messages": [HumanMessage("fix it")]}, config)
    for sent in model.seen:  # what reached the model was never doubled
        ids = [m.id for m in sent]
        assert len(ids) == len(set(ids))
        assert [m.content for m in sent if isinstance(m, HumanMessage)] == ["fix it"]


def test_a_state_whose_messages_key_has_another_name_is_refused() -> None:
    """The surfaces read ``messages``: under another key the model node sent the model
    no conversation at all, silently."""
    ac = AutoContext(CFG)
    model = ScriptedModel(steps=0)
    g = StateGraph(ChatState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    graph = g.compile()
    with pytest.raises(ValueError, match="no 'messages' key"):
        graph.invoke({"chat": [HumanMessage("hi")]}, {"configurable": {"thread_id": "c"}})
    assert model.seen == []


def test_parallel_branches_of_one_agent_read_the_history_no_more_than_separate_runs() -> None:
    """Three ``Send`` branches of one ``create_agent`` worker on one thread share the
    engine's memo of what it archived there; each model call kept in it only its own
    input's ids, so each branch's next call read every id of its input from the store
    again: the history reads grew with the square of the steps (573 for three branches
    of 10 steps, against 43 for one). They grow as three separate runs' do now."""
    import threading

    from _builders import FunctionModel, call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, MessagesState
    from langgraph.store.base import GetOp
    from langgraph.types import Send

    class HistoryReads(InMemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.reads = 0
            self.guard = threading.Lock()

        def batch(self, ops: Any) -> Any:
            ops = list(ops)
            with self.guard:
                self.reads += sum(
                    isinstance(op, GetOp) and op.namespace[-1:] == ("history",) for op in ops
                )
            return super().batch(ops)

    @tool
    def run(command: str) -> str:
        """Run a command."""
        return f"ok {command}"

    def reads(branches: int) -> int:
        steps: dict[str, int] = {}

        def respond(msgs: list[Any], n: int) -> AIMessage:
            task = next(str(m.content) for m in msgs if str(m.content).startswith("task"))
            done = steps[task] = steps.get(task, -1) + 1
            if done < 10:
                return AIMessage("", tool_calls=[call("run", {"command": f"{task}-{done}"})])
            return AIMessage(f"finished {task}")

        store = HistoryReads()
        ac = AutoContext(AutoContextConfig(max_tokens=100_000), store=store)
        worker = create_agent(
            FunctionModel(respond=respond), [run], middleware=[ac.middleware()], name="worker"
        )
        g = StateGraph(MessagesState)
        g.add_node("worker", worker)
        g.add_conditional_edges(
            START,
            lambda s: [
                Send("worker", {"messages": [HumanMessage(f"task{k}")]}) for k in range(branches)
            ],
            ["worker"],
        )
        g.add_edge("worker", END)
        app = g.compile(checkpointer=InMemorySaver(), store=store)
        cfg = {"configurable": {"thread_id": "fan"}, "recursion_limit": 200}
        app.invoke({"messages": [HumanMessage("Tasks.")]}, cfg)
        return store.reads

    assert reads(3) <= 3 * reads(1) + 6


class DeltaState(TypedDict):
    """LangGraph's delta-checkpointed conversation (``DeltaChannel``, beta): a checkpoint
    stores the writes, not the whole list, and a read replays them."""

    messages: Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]
    autocontext: NotRequired[Annotated[dict[str, Any], merge_autocontext]]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_delta_channel_conversation_compresses_and_resumes(
    mode: str, tmp_path: Any
) -> None:
    """A long-running agent is who keeps its messages in a ``DeltaChannel``: the node's
    ``RemoveMessage`` of all and the command node's edits replay from SQLite into the
    compressed conversation, and a graph built again on the same database goes on from
    it within the budget."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    db = str(tmp_path / "checkpoints.db")
    store = InMemoryStore()
    ac = AutoContext(CFG, tools=[bash])
    model = ScriptedModel(steps=60)
    config = {"configurable": {"thread_id": "delta"}, "recursion_limit": 1_000}

    def graph(saver: Any) -> Any:
        return _own_loop_graph(DeltaState, ac, model, store, saver)

    async def run(messages: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        """One run on a graph built anew on the database, and the messages it restored."""
        if mode == "sync":
            with SqliteSaver.from_conn_string(db) as saver:
                g = graph(saver)
                before = g.get_state(config).values.get("messages", [])
                return g.invoke({"messages": messages}, config), before
        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            g = graph(saver)
            before = (await g.aget_state(config)).values.get("messages", [])
            return await g.ainvoke({"messages": messages}, config), before

    first, _ = await run([SystemMessage("You are a coder."), HumanMessage("fix it")])
    assert first["messages"][-1].content == "finished after 60 steps"
    assert len(first["messages"]) < 60  # the compressed conversation, not 120 messages
    assert OffloadStore.wrap(store).list_events("delta")

    second, restored = await run([HumanMessage("and the docs")])  # the deltas replay
    assert [m.id for m in restored] == [m.id for m in first["messages"]]
    assert second["messages"][-1].content == "finished after 61 steps"
    assert not find_violations(second["messages"])
    check_inputs(model, ac)
