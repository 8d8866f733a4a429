"""Builders of realistic message histories for tests (not a test module)."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import itertools
import json
import re
import struct
import sys
import uuid
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():  # CI clones the repo with shared/ beside it
    DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

_ids = itertools.count()


def benchmark(name: str) -> ModuleType:
    """The module of ``benchmarks/{name}.py`` (the benchmarks are scripts, not a package),
    loaded once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def uid(prefix: str = "m") -> str:
    return f"{prefix}{next(_ids)}"


def log_text(n_lines: int, seed: int = 0) -> str:
    """A tool output that looks like a build/test log (newlines, paths, numbers)."""
    lines = []
    for i in range(n_lines):
        k = (i * 7919 + seed) % 1000
        lines.append(
            f"/src/pkg/module_{k % 37}.py:{k}: checked item {k} status=ok time={k / 7:.2f}s"
        )
    return "\n".join(lines)


def tool_group(name: str, args: dict[str, Any], outputs: Sequence[str]) -> list[BaseMessage]:
    """One AI message calling ``len(outputs)`` tools (parallel calls) and their results."""
    calls = [
        {"name": name, "args": {**args, "i": k}, "id": uid("call"), "type": "tool_call"}
        for k in range(len(outputs))
    ]
    ai = AIMessage(content=f"Running {name}", tool_calls=calls, id=uid("ai"))
    results = [
        ToolMessage(content=out, tool_call_id=c["id"], name=name, id=uid("tool"))
        for c, out in zip(calls, outputs, strict=True)
    ]
    return [ai, *results]


def anthropic_server_tools(
    query: str, stdout: str, *, provider: bool = True, msg_id: str | None = None
) -> AIMessage:
    """An Anthropic reply (langchain-anthropic's content) that ran the server-side web
    search, code execution and web fetch (a PDF) tools, then called a client tool (in ``tool_calls`` too).
    Without ``provider``, the ``model_provider`` langchain-anthropic sets is missing (a
    message stored before langchain-core 1.0, or built by hand)."""
    call = {"name": "save_report", "args": {"path": "report.md"}, "id": uid("toolu_")}
    return AIMessage(
        [
            {"type": "text", "text": "Let me look that up."},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": query},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [
                    {
                        "type": "web_search_result",
                        "title": "Flight tracker",
                        "url": "https://flights.example/status",
                        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1" * 200,
                        "page_age": "April 30, 2025",
                    }
                ],
            },
            {
                "type": "server_tool_use",
                "id": "srvtoolu_02",
                "name": "code_execution",
                "input": {"code": "import statistics\nprint(statistics.mean(delays))"},
            },
            {
                "type": "code_execution_tool_result",
                "tool_use_id": "srvtoolu_02",
                "content": {
                    "type": "code_execution_result",
                    "stdout": stdout,
                    "stderr": "",
                    "return_code": 0,
                    "content": [],
                },
            },
            {
                "type": "server_tool_use",
                "id": "srvtoolu_03",
                "name": "web_fetch",
                "input": {"url": "https://flights.example/delays.pdf"},
            },
            {
                "type": "web_fetch_tool_result",
                "tool_use_id": "srvtoolu_03",
                "content": {
                    "type": "web_fetch_result",
                    "url": "https://flights.example/delays.pdf",
                    "content": {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": "JVBERi0xLjQKJcfs" * 2_000,
                        },
                        "title": "Delay statistics",
                    },
                    "retrieved_at": "2025-08-25T10:30:02Z",
                },
            },
            {"type": "text", "text": "Saving the report."},
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["args"]},
        ],
        tool_calls=[call],
        response_metadata={"model_provider": "anthropic"} if provider else {},
        id=msg_id or uid("ai"),
    )


def openai_server_tools(*, provider: bool = True, msg_id: str | None = None) -> AIMessage:
    """An OpenAI Responses API reply (langchain-openai's content, output_version
    "responses/v1") with a reasoning summary and the built-in code interpreter, web
    search, file search and image generation calls (the image's base64 in ``result``),
    then a client tool call whose arguments did not parse (in ``invalid_tool_calls``)."""
    return AIMessage(
        [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Compute it, then look it up."}],
            },
            {
                "type": "code_interpreter_call",
                "id": "ci_1",
                "code": "import math\nprint(math.factorial(20))",
                "container_id": "cntr_1",
                "outputs": [{"type": "logs", "logs": "2432902008176640000"}],
                "status": "completed",
            },
            {
                "type": "web_search_call",
                "id": "ws_1",
                "action": {
                    "type": "search",
                    "query": "weather in Reykjavik today",
                    "sources": [{"type": "url", "url": "https://weather.example/reykjavik"}],
                },
                "status": "completed",
            },
            {
                "type": "file_search_call",
                "id": "fs_1",
                "queries": ["refund policy"],
                "results": [
                    {
                        "file_id": "file-1",
                        "filename": "policy.pdf",
                        "score": 0.9,
                        "text": "Refunds are granted within 30 days of purchase.",
                    }
                ],
                "status": "completed",
            },
            {
                "type": "image_generation_call",
                "id": "ig_1",
                "result": "iVBORw0KGgoAAAANSUhEUg" + "A" * 40_000,
                "output_format": "png",
                "revised_prompt": "A gray tabby cat hugging an otter",
                "status": "completed",
            },
            {"type": "text", "text": "Here is what I found.", "annotations": []},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_bad",
                "name": "save_report",
                "arguments": '{"path": "report.md"',
            },
        ],
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "id": "call_bad",
                "name": "save_report",
                "args": '{"path": "report.md"',
                "error": "Unterminated string",
            }
        ],
        response_metadata={"model_provider": "openai"} if provider else {},
        id=msg_id or uid("ai"),
    )


def coding_run(
    steps: int, output_lines: int = 60, system: str = "You are a coding agent."
) -> list[BaseMessage]:
    """System, one task message, then ``steps`` tool calls with log outputs (one round)."""
    msgs: list[BaseMessage] = [
        SystemMessage(system, id=uid("sys")),
        HumanMessage("Fix the failing test in pkg/module_3.py", id=uid("user")),
    ]
    for s in range(steps):
        msgs += tool_group("bash", {"command": f"pytest -k case_{s}"}, [log_text(output_lines, s)])
    return msgs


def chat_rounds(rounds: int, tools_per_round: int = 2, output_lines: int = 20) -> list[BaseMessage]:
    """Customer-service style: many user rounds, each with a few tool calls and an answer."""
    msgs: list[BaseMessage] = [SystemMessage("You are an airline agent.", id=uid("sys"))]
    for r in range(rounds):
        msgs.append(HumanMessage(f"Request {r}: change reservation R{r:04d}", id=uid("user")))
        for t in range(tools_per_round):
            msgs += tool_group(
                "get_reservation", {"id": f"R{r:04d}"}, [log_text(output_lines, r * 10 + t)]
            )
        msgs.append(
            AIMessage(f"Done with request {r}: reservation R{r:04d} updated.", id=uid("ai"))
        )
    return msgs


def trajectories(name: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Read trajectories from ../shared/data, skipping the test when absent."""
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared real-trajectory data is not beside the repo)")
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if limit is not None and n >= limit:
                return
            yield json.loads(line)


# --- a scripted, tool-calling fake chat model -------------------------------------------
from langchain_core.callbacks import CallbackManagerForLLMRun  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import Field  # noqa: E402


class ScriptedModel(BaseChatModel):
    """Calls ``tool_name`` ``steps`` times, then answers; records every input it saw."""

    steps: int = 10
    tool_name: str = "bash"
    seen: list = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):  # the script decides which tool to call
        return self

    def _generate(
        self, messages, stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kw
    ):
        self.seen.append(list(messages))
        n = self.calls
        self.calls += 1
        if n < self.steps:
            msg = AIMessage(
                content=f"step {n}",
                tool_calls=[
                    {
                        "name": self.tool_name,
                        "args": {"command": f"run {n}"},
                        "id": f"call-{n}",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            msg = AIMessage(content=f"finished after {n} steps")
        return ChatResult(generations=[ChatGeneration(message=msg)])


@tool
def bash(command: str) -> str:
    """Run a shell command and return its output."""
    seed = sum(map(ord, command))
    return log_text(70, seed)


def node_agent(ac: Any, model: Any, store: Any, checkpointer: Any) -> Any:
    """The plain agent loop around ``ac.node()``: autocontext → model → bash tool → …"""
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_autocontext import AutoContextState

    def call_model(state: AutoContextState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(AutoContextState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", call_model)
    g.add_node("tools", ToolNode([bash]))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "autocontext")
    return g.compile(store=store, checkpointer=checkpointer)


# --- a multi-round, tool-calling, streaming script (the surfaces' end-to-end runs) --------
from collections.abc import AsyncIterator  # noqa: E402

from langchain_core.messages import AIMessageChunk  # noqa: E402
from langchain_core.outputs import ChatGenerationChunk  # noqa: E402


def _script_thread() -> str:
    """The thread (or RunnableWithMessageHistory session) the current call belongs to."""
    try:
        from langgraph.config import get_config

        conf = get_config().get("configurable") or {}
    except RuntimeError:
        return "default"
    return str(conf.get("thread_id") or conf.get("session_id") or "default")


class RoundScriptModel(BaseChatModel):
    """A user's rounds of work: per round ``steps`` calls of ``sh``, then an answer.

    The script depends only on how many calls the thread has made (never on what the
    model is shown), so every surface runs the same trajectory; output sizes follow
    :meth:`lines_for`. Call number ``fail_at`` raises (a crash; its input is kept in
    ``crashed_on``). Records each input
    (``seen``) and the tools bound to it (``bound``); streams its answers word by word
    with tool-call chunks.
    """

    steps: int = 20
    big_every: int = 7
    big_lines: int = 120
    small_lines: int = 12
    mid_lines: int = 34
    varied: bool = False
    fail_at: int = -1
    crashed_on: list = Field(default_factory=list)
    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)
    calls: dict = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "round-script"

    def bind_tools(self, tools, **kwargs):  # the script decides which tool to call
        self.bound = list(tools)
        return self

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def lines_for(self, n: int, r: int, p: int) -> int:
        """Output size of call ``n`` (round ``r``, step ``p``).

        Uniform: every ``big_every``-th call is large. Varied: three kinds of rounds
        take turns — many tiny outputs (long tool runs), large outputs early in the
        round (they age out of the last messages before the next one lands), and
        mid-size outputs with a large one every ``big_every`` calls.
        """
        if not self.varied:
            return self.big_lines if n % self.big_every == 0 else self.small_lines
        kind = r % 3
        if kind == 0:
            return self.big_lines if p == 0 else 2
        if kind == 1:
            return self.mid_lines if p in (0, 4, 12) else 2
        return self.big_lines if n % self.big_every == 0 else self.small_lines

    def _next(self, messages) -> AIMessage:
        thread = _script_thread()
        n = self.calls.get(thread, 0)
        if n == self.fail_at:
            self.crashed_on.append(list(messages))
            raise RuntimeError(f"the process died during model call {n}")
        self.seen.append(list(messages))
        self.calls[thread] = n + 1
        r, p = divmod(n, self.steps + 1)
        if p == self.steps:
            return AIMessage(content=f"round {r} finished after {self.steps} steps")
        lines = self.lines_for(n, r, p)
        return AIMessage(
            content=f"round {r} step {p} running",
            tool_calls=[
                {
                    "name": "sh",
                    "args": {"command": f"make check-{n}", "lines": lines},
                    "id": f"call-{thread}-{n}",
                    "type": "tool_call",
                }
            ],
        )

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        msg = self._next(messages)
        words = msg.content.split(" ")
        for k, word in enumerate(words):
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content=word if k == 0 else f" {word}")
            )
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if msg.tool_calls:
            tc = msg.tool_calls[0]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": tc["name"],
                            "args": json.dumps(tc["args"]),
                            "id": tc["id"],
                            "index": 0,
                            "type": "tool_call_chunk",
                        }
                    ],
                )
            )

    async def _astream(self, messages, stop=None, run_manager=None, **kw) -> AsyncIterator:
        msg_chunks = list(self._stream(messages, stop=stop, run_manager=None, **kw))
        for chunk in msg_chunks:
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


@tool
def sh(command: str, lines: int = 12) -> str:
    """Run a shell command; ``lines`` is how much output it prints."""
    seed = sum(map(ord, command))
    return log_text(lines, seed)


# --- the surfaces, built as a user would, driven through one script -----------------------
import operator  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Annotated  # noqa: E402

from langchain_core.messages import message_chunk_to_message  # noqa: E402

SURFACE_SYSTEM = "You are a coding agent. Fix what the user asks, one command at a time."
#: Every surface of the end-to-end runs uses this budget: small enough that all seven
#: strategies fire in a 15-round script, with room for one large tool output per turn.
SURFACE_CONFIG_KW: dict[str, Any] = {
    "max_tokens": 10_000,
    "token_ratio": 0.5,
    "target_ratio": 0.45,
    "last_keep": 4,
    "msg_threshold": 40,
    "min_consecutive_tool_messages": 8,
    "large_payload_threshold": 3000,
}
ALL_STRATEGIES = {
    "tool_run",
    "offload_history",
    "offload_all",
    "round",
    "current_large",
    "current_round",
    "fifo",
}
SURFACES = ("middleware", "react", "node", "history", "lcel")
MODES = ("invoke", "stream", "ainvoke", "astream")


def script_model(steps: int = 20) -> RoundScriptModel:
    """The script of the end-to-end runs (three kinds of rounds, see ``lines_for``)."""
    return RoundScriptModel(steps=steps, small_lines=16, big_lines=100, varied=True)


def user_turn(r: int) -> HumanMessage:
    """The user's message of round ``r``; every third one pastes a long log."""
    text = f"Task {r}: make module_{r} pass its checks"
    if r % 3 == 1:
        text += f". Here is what CI printed:\n{log_text(60, 1000 + r)}"
    return HumanMessage(text)


def expected_originals(rounds: int, steps: int) -> list[tuple[str, str]]:
    """(type, text) of every message of the script, the last final answer excluded."""
    model = script_model(steps)
    out: list[tuple[str, str]] = []
    n = 0
    for r in range(rounds):
        out.append(("human", user_turn(r).content))
        for _ in range(steps):
            msg = model._next([])
            out.append(("ai", msg.content))
            out.append(("tool", sh.invoke(msg.tool_calls[0]["args"])))
            n += 1
        answer = model._next([])
        if r < rounds - 1:
            out.append(("ai", answer.content))
    return out


@dataclass
class SurfaceRun:
    """A surface under test: ``round(r)`` / ``around(r)`` run user turn ``r`` to its answer."""

    kind: str
    ac: Any
    model: RoundScriptModel
    store: Any
    thread: str
    runner: Any
    checkpointer: Any = None

    @property
    def config(self) -> dict[str, Any]:
        key = "session_id" if self.kind == "history" else "thread_id"
        return {"configurable": {key: self.thread}, "recursion_limit": 10_000}

    # graph surfaces: one call runs the whole tool loop -------------------------------------
    def _graph_input(self, r: int) -> dict[str, Any]:
        inp: dict[str, Any] = {"messages": [user_turn(r)]}
        if self.kind == "node":
            inp["task_label"] = f"T-{r}"
            if r == 0:
                inp["messages"].insert(0, SystemMessage(SURFACE_SYSTEM))
        return inp

    def round(self, r: int, mode: str = "invoke") -> str:
        if self.kind in ("history", "lcel"):
            return self._chain_round(r, mode)
        if mode == "invoke":
            state = self.runner.invoke(self._graph_input(r), self.config)
        else:
            for chunk in self.runner.stream(
                self._graph_input(r), self.config, stream_mode="values"
            ):
                state = chunk
        return state["messages"][-1].content

    async def around(self, r: int, mode: str = "ainvoke") -> str:
        if self.kind in ("history", "lcel"):
            return await self._achain_round(r, mode)
        if mode == "ainvoke":
            state = await self.runner.ainvoke(self._graph_input(r), self.config)
        else:
            async for chunk in self.runner.astream(
                self._graph_input(r), self.config, stream_mode="values"
            ):
                state = chunk
        return state["messages"][-1].content

    # chain surfaces: the caller runs the tools ------------------------------------------------
    def _chain_input(self, msgs: list[BaseMessage]) -> dict[str, Any]:
        if self.kind == "history":
            return {"input": msgs}
        self.convo.extend(msgs)
        return {"messages": list(self.convo)}

    def _chain_output(self, ai: BaseMessage) -> list[BaseMessage] | None:
        ai = message_chunk_to_message(ai)
        if self.kind == "lcel":
            self.convo.append(ai)
        if not ai.tool_calls:
            self.answer = ai.content
            return None
        return [
            ToolMessage(sh.invoke(tc["args"]), tool_call_id=tc["id"], name=tc["name"])
            for tc in ai.tool_calls
        ]

    def _chain_round(self, r: int, mode: str) -> str:
        msgs: list[BaseMessage] | None = [user_turn(r)]
        while msgs:
            inp = self._chain_input(msgs)
            if mode == "invoke":
                ai = self.runner.invoke(inp, self.config)
            else:
                ai = None
                for chunk in self.runner.stream(inp, self.config):
                    ai = chunk if ai is None else ai + chunk
            msgs = self._chain_output(ai)
        return self.answer

    async def _achain_round(self, r: int, mode: str) -> str:
        msgs: list[BaseMessage] | None = [user_turn(r)]
        while msgs:
            inp = self._chain_input(msgs)
            if mode == "ainvoke":
                ai = await self.runner.ainvoke(inp, self.config)
            else:
                ai = None
                async for chunk in self.runner.astream(inp, self.config):
                    ai = chunk if ai is None else ai + chunk
            msgs = self._chain_output(ai)
        return self.answer

    def __post_init__(self) -> None:
        self.convo: list[BaseMessage] = []
        self.answer = ""


def build_surface(
    kind: str,
    model: RoundScriptModel,
    *,
    store: Any = None,
    checkpointer: Any = None,
    thread: str = "t-1",
    config: Any = None,
    summarizer: Any = None,
    autocontext: Any = None,
) -> SurfaceRun:
    """One of :data:`SURFACES`, wired the way the README shows it."""
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from langchain_autocontext import AutoContext, AutoContextConfig
    from langchain_autocontext.history import AutoContextChatMessageHistory

    store = InMemoryStore() if store is None else store
    cfg = config or AutoContextConfig(**SURFACE_CONFIG_KW)
    if kind in ("middleware", "react", "node") and checkpointer is None:
        checkpointer = InMemorySaver()

    def make_ac(**kw: Any) -> Any:
        if autocontext is not None:
            return autocontext
        return AutoContext(cfg, summarizer=summarizer, **kw)

    if kind == "middleware":
        from langchain.agents import create_agent

        ac = make_ac()
        runner = create_agent(
            model,
            [sh],
            system_prompt=SURFACE_SYSTEM,
            middleware=[ac.middleware()],
            checkpointer=checkpointer,
            store=store,
        )
    elif kind == "react":
        from langgraph.prebuilt import create_react_agent

        from langchain_autocontext import AutoContextAgentState

        ac = make_ac(system_prompt=SURFACE_SYSTEM, tools=[sh])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1.x
            runner = create_react_agent(
                model,
                [sh, *ac.tools],
                prompt=SURFACE_SYSTEM,
                pre_model_hook=ac.pre_model_hook,
                post_model_hook=ac.post_model_hook,
                state_schema=AutoContextAgentState,
                checkpointer=checkpointer,
                store=store,
            )
    elif kind == "node":
        ac = make_ac(tools=[sh])  # the system message is in the state (first turn)
        runner = surface_state_graph(ac, model).compile(checkpointer=checkpointer, store=store)
    elif kind == "history":
        from langchain_core.runnables.history import RunnableWithMessageHistory

        ac = make_ac(system_prompt=SURFACE_SYSTEM, tools=[sh])
        prompt = ChatPromptTemplate(
            [
                ("system", SURFACE_SYSTEM),
                MessagesPlaceholder("history"),
                MessagesPlaceholder("input"),
            ]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RunnableWithMessageHistory is deprecated
            runner = RunnableWithMessageHistory(
                prompt | model.bind_tools([sh]),
                AutoContextChatMessageHistory.factory(ac, store=store),
                input_messages_key="input",
                history_messages_key="history",
            )
    elif kind == "lcel":
        ac = make_ac(store=store, tools=[sh])
        prompt = ChatPromptTemplate([("system", SURFACE_SYSTEM), MessagesPlaceholder("messages")])
        runner = prompt | ac.as_runnable() | model.bind_tools([sh])
    else:
        raise ValueError(f"unknown surface {kind!r}")
    return SurfaceRun(kind, ac, model, store, thread, runner, checkpointer)


def surface_state_graph(ac: Any, model: RoundScriptModel) -> Any:
    """A StateGraph whose state has keys of its own; ``ac.node()`` runs before the model."""
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_autocontext import AutoContextState

    class ParentState(AutoContextState):
        task_label: str
        turns: Annotated[list[str], operator.add]

    def intake(state: ParentState) -> dict[str, Any]:
        return {"turns": [state["task_label"]]}

    tools = [sh, *ac.tools]
    g = StateGraph(ParentState)
    g.add_node("intake", intake)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model.bind_tools(tools)))
    g.add_node("commands", ac.command_node())
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "intake")
    g.add_edge("intake", "autocontext")
    g.add_edge("autocontext", "model")
    g.add_edge("model", "commands")
    g.add_conditional_edges("commands", tools_condition)
    g.add_edge("tools", "autocontext")
    return g


def check_model_inputs(model: RoundScriptModel, ac: Any) -> int:
    """The invariants on every input the model got; returns the largest count."""
    from langchain_autocontext.messages import find_violations

    largest = 0
    for k, sent in enumerate(model.seen):
        assert isinstance(sent[0], SystemMessage), f"call {k}: the system message is not first"
        problems = find_violations(sent)
        assert not problems, f"call {k}: {problems}"
        tagged = any(
            isinstance(m.content, str) and m.content.startswith("<metadata") for m in sent[1:]
        )
        tags = ac.config.metadata_tags and not tagged
        count = ac.counter.count(sent, model.bound, tags=tags)
        assert count <= ac.config.max_tokens, f"call {k}: {count} > {ac.config.max_tokens}"
        largest = max(largest, count)
    return largest


def history_originals(store: Any, thread: str, final_answer: str) -> list[tuple[str, str]]:
    """(type, text) of the thread's original history: system messages and the final
    answer left out (surfaces archive those at different moments)."""
    from langchain_autocontext.messages import text_of
    from langchain_autocontext.store import OffloadStore

    out = []
    for e in OffloadStore.wrap(store).iter_history(thread):
        m = e.message
        if isinstance(m, SystemMessage):
            continue
        out.append((m.type, text_of(m)))
    if out and out[-1] == ("ai", final_answer):
        out.pop()
    return out


def strategies_fired(store: Any, thread: str) -> set[str]:
    from langchain_autocontext.store import OffloadStore

    return {e.strategy for e in OffloadStore.wrap(store).list_events(thread)}


def shown_offload_ids(messages: Sequence[BaseMessage]) -> list[str]:
    """The offload ids ``messages`` carry in their markers: of every summary standing for
    other messages and of every message masked or offloaded behind a preview."""
    from langchain_autocontext.messages import marker

    return [info["offload_id"] for info in map(marker, messages) if info and info.get("offload_id")]


def compressions(store: Any, thread: str) -> list[list[Any]]:
    """The thread's compression events grouped by the compression that recorded them: one
    compression records an event per strategy that changed something, each starting
    from the tokens the one before it left (a new compression starts from more, what was
    added since)."""
    from langchain_autocontext.store import OffloadStore

    passes: list[list[Any]] = []
    for event in OffloadStore.wrap(store).list_events(thread):
        if event.kind != "compression":
            continue
        if passes and event.tokens_before == passes[-1][-1].tokens_after:
            passes[-1].append(event)
        else:
            passes.append([event])
    return passes


# --- a model driven by a function of what it sees (self-management tests) -----------------
class FunctionModel(BaseChatModel):
    """Answers ``respond(messages, n)`` for its ``n``-th call; records every input it saw
    (``seen``) and the tools it was bound with for it (``tools_seen``).

    The function sees the model's input view (tags, short ids, notices), so a script
    can address messages by the ids the model is shown, as a real model would.
    """

    respond: Any
    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)
    tools_seen: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "function"

    def bind_tools(self, tools, **kwargs):
        self.bound = list(tools)
        return self

    def _generate(
        self, messages, stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kw
    ):
        self.seen.append(list(messages))
        self.tools_seen.append(self.bound)
        msg = self.respond(list(messages), len(self.seen) - 1)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def copying_tags(respond: Any) -> Any:
    """``respond(messages, n)`` whose reply starts with the metadata tag of the last
    message the model received, as models sometimes copy it (the package strips it)."""
    from langchain_autocontext.metadata import TAG_PATTERN

    def copy(messages: list[BaseMessage], n: int) -> AIMessage:
        reply = respond(messages, n)
        last = messages[-1].content
        found = TAG_PATTERN.match(last if isinstance(last, str) else str(last))
        if not found:
            return reply
        return reply.model_copy(update={"content": found.group(0) + str(reply.content)})

    return copy


def call(name: str, args: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """A tool call dict for an AIMessage."""
    return {"name": name, "args": args, "id": call_id or uid("call"), "type": "tool_call"}


def view_ids(messages: Sequence[BaseMessage]) -> list[tuple[str, BaseMessage]]:
    """``(id shown in the metadata tag, message)`` for every tagged message of a view."""
    import re

    out = []
    for m in messages:
        text = m.content if isinstance(m.content, str) else str(m.content)
        found = re.match(
            r'(?:\[\{.*?)?(?:<metadata id="([^"]*)"|<([\w.:-]+|"[^"<>]*") \d+/\d+/>)', text
        )
        if found:
            out.append(((found.group(1) or found.group(2) or "").strip('"'), m))
    return out


@tool
def fetch(name: str, size: int = 40) -> str:
    """Return a document of ``size`` lines (a stand-in for a tool with a long output)."""
    return "\n".join(f"{name} line {i}: value-{name}-{i * 7919 % 1000:03d}" for i in range(size))


def saved(graph: Any, config: Any) -> dict:
    """The checkpointed ``autocontext`` state (private in create_agent's output)."""
    return graph.get_state(config).values.get("autocontext") or {}


def self_managed_agent(ac: Any, model: Any, store: Any, *, tools: Sequence[Any] = ()) -> Any:
    """create_react_agent with the package's hooks, tools and state schema."""
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_autocontext import AutoContextAgentState

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(
            model,
            [*tools, *ac.tools],
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            state_schema=AutoContextAgentState,
            checkpointer=InMemorySaver(),
            store=store,
        )


def loop_graph(ac: Any, model: Any, tools: Sequence[Any], state_schema: Any = None) -> Any:
    """The documented loop, not compiled: autocontext node -> model node -> command node
    -> ``tools`` -> back (``state_schema``: ``AutoContextState`` unless given)."""
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_autocontext import AutoContextState

    g = StateGraph(state_schema or AutoContextState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model))
    g.add_node("commands", ac.command_node())
    g.add_node("tools", ToolNode(list(tools)))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_edge("model", "commands")
    g.add_conditional_edges("commands", tools_condition)
    g.add_edge("tools", "autocontext")
    return g


def self_managed_graph(
    ac: Any, model: Any, store: Any, *, tools: Sequence[Any] = (), state_schema: Any = None
) -> Any:
    """A hand-written StateGraph: :func:`loop_graph` with the package's tools beside
    ``tools``, checkpointed in memory."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = loop_graph(ac, model, [*tools, *ac.tools], state_schema)
    return graph.compile(store=store, checkpointer=InMemorySaver())


def self_managed_create_agent(
    ac: Any,
    model: Any,
    store: Any,
    *,
    tools: Sequence[Any] = (),
    system_prompt: str | None = None,
) -> Any:
    """langchain's create_agent with the package's middleware (it adds the context tools)."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    return create_agent(
        model,
        tools=list(tools),
        system_prompt=system_prompt,
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )


def handoff(dest: str) -> Any:
    """A handoff tool as langgraph-supervisor writes one: it goes to ``dest`` in the
    parent graph with the agent's whole message list and its own result."""

    @tool(f"transfer_to_{dest}")
    def transfer(runtime: ToolRuntime) -> Command:
        """Hand the conversation over."""
        done = ToolMessage(f"Transferred to {dest}", tool_call_id=runtime.tool_call_id)
        return Command(
            goto=dest,
            graph=Command.PARENT,
            update={"messages": [*runtime.state["messages"], done]},
        )

    return transfer


# --- images (tiny, synthesized: a real header, no pixels worth the name) -----------------------
def png_image(width: int, height: int) -> bytes:
    """A valid PNG of ``width`` x ``height`` (an IHDR, one tiny IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def jpeg_image(width: int, height: int, *, exif: int = 0) -> bytes:
    """A JPEG header of ``width`` x ``height``: SOI, an APP0 (JFIF), an APP1 of ``exif``
    bytes when asked (the size sits after it), a DQT, the baseline SOF0, SOS, EOI."""

    def segment(marker: int, data: bytes) -> bytes:
        return bytes((0xFF, marker)) + struct.pack(">H", len(data) + 2) + data

    jfif = segment(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0")
    app1 = segment(0xE1, b"Exif\0\0" + b"\0" * exif) if exif else b""
    dqt = segment(0xDB, b"\0" + bytes(range(64)))
    sof = segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\0")
    return (
        b"\xff\xd8" + jfif + app1 + dqt + sof + segment(0xDA, b"\x01\x01\0\0\x3f\0") + b"\xff\xd9"
    )


def gif_image(width: int, height: int) -> bytes:
    """A GIF89a of ``width`` x ``height`` (header, logical screen, trailer)."""
    return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b";"


def webp_image(width: int, height: int, kind: str = "VP8X") -> bytes:
    """A WebP header of ``width`` x ``height``: lossy (``VP8 ``), lossless (``VP8L``) or
    extended (``VP8X``)."""
    if kind == "VP8 ":
        data = b"\0\0\0" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    elif kind == "VP8L":
        bits = (width - 1) | (height - 1) << 14
        data = b"\x2f" + bits.to_bytes(4, "little")
    else:
        data = b"\0\0\0\0" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + kind.encode() + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


# --- PDFs (tiny, hand-written: a catalog, a page tree, pages with one line of text) ----------
def pdf_document(pages: int, *, object_stream: bool = False, incremental: bool = False) -> bytes:
    """A valid PDF of ``pages`` pages. Classic (PDF 1.4: objects in the open, an xref
    table), or PDF 1.5 with the page tree and pages in one FlateDecode object stream,
    found through an xref stream. ``incremental``: an update appended to it (the first
    page rewritten, with the same object number) as a viewer's edit writes one."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(pages))
    objs: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        3: font,
    }
    for i in range(pages):
        text = b"BT /F1 24 Tf 72 700 Td (Page %d of the report) Tj ET" % (i + 1)
        objs[4 + 2 * i] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objs[5 + 2 * i] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text)
    out = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n" if object_stream else b"%PDF-1.4\n")
    offsets: dict[int, int | tuple[int, int]] = {}
    packed = [n for n in objs if object_stream and b"stream" not in objs[n] and n != 1]
    for n, body in objs.items():
        if n in packed:
            continue
        offsets[n] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    size = max(objs) + 1
    if packed:  # the page tree, the font and the pages in one object stream
        parts, header = b"", []
        for n in packed:
            header.append(b"%d %d" % (n, len(parts)))
            parts += objs[n] + b"\n"
        first = b" ".join(header) + b"\n"
        data = zlib.compress(first + parts)
        stm = size
        offsets[stm] = len(out)
        out += (
            b"%d 0 obj\n<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\n"
            % (
                stm,
                len(packed),
                len(first),
                len(data),
            )
        )
        out += b"stream\n" + data + b"\nendstream\nendobj\n"
        for k, n in enumerate(packed):
            offsets[n] = (stm, k)
        xref = size + 1
        offsets[xref] = len(out)
        rows = b"\0\0\0\0\0\xff\xff"
        for n in range(1, xref + 1):
            at = offsets[n]
            rows += (
                b"\2" + struct.pack(">IH", *at)
                if isinstance(at, tuple)
                else b"\1" + struct.pack(">IH", at, 0)
            )
        out += (
            b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n"
            % (
                xref,
                xref + 1,
                len(rows),
            )
        )
        out += rows + b"\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n" % offsets[xref]
        return bytes(out)
    out += _xref_table(offsets, size, len(out), b"")
    if incremental:  # the first page again, with an annotation list: same object number
        prev = out.rindex(b"startxref")
        start = len(out)
        out += b"4 0 obj\n%s\nendobj\n" % objs[4].replace(b" >>", b" /Annots [] >>", 1)
        out += _xref_table(
            {4: start}, size, len(out), b" /Prev %d" % int(out[prev + 10 :].split()[0])
        )
    return bytes(out)


def _xref_table(offsets: dict[int, Any], size: int, at: int, extra: bytes) -> bytes:
    """A classic xref table (one subsection per object) and trailer, starting at ``at``."""
    rows = b"xref\n0 1\n0000000000 65535 f \n"
    for n in sorted(offsets):
        rows += b"%d 1\n%010d 00000 n \n" % (n, offsets[n])
    trailer = b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (size, extra, at)
    return rows + trailer


# --- audio and video (tiny, hand-written: a real header of a known duration, silence) ------
def wav_audio(
    seconds: float,
    *,
    rate: int = 8000,
    list_chunk: bool = False,
    streamed: int | None = None,
    rf64: bytes | None = None,
    after: bytes = b"",
) -> bytes:
    """A PCM WAV of ``seconds`` (mono, 8-bit): RIFF, ``fmt `` (its byte rate), a ``LIST``
    chunk before the data when asked, ``data``, the chunk ``after`` it when given; its
    RIFF and data sizes ``streamed`` when asked (0 or 0xFFFFFFFF, as a recorder writes
    them while streaming). ``rf64``: an RF64 or BW64 file of that magic instead, its
    32-bit sizes all ones and its real ones in a ``ds64`` chunk first."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    data = b"\x80" * int(seconds * rate)
    extra = b"LIST" + struct.pack("<I", 12) + b"INFOISFT\0\0\0\0" if list_chunk else b""
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra
    size = len(data) if streamed is None else streamed
    if rf64:
        size = 0xFFFFFFFF
    chunks += b"data" + struct.pack("<I", size) + data + after
    if rf64:
        riff = 4 + 8 + 28 + len(chunks)
        ds64 = b"ds64" + struct.pack("<IQQQI", 28, riff, len(data), len(data), 0)
        return rf64 + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + ds64 + chunks
    body = b"WAVE" + chunks
    return b"RIFF" + struct.pack("<I", len(body) if streamed is None else streamed) + body


def mp3_audio(
    seconds: float,
    *,
    xing: bool = False,
    id3: int = 0,
    vbri: bool = False,
    passages: Sequence[int] = (),
) -> bytes:
    """An MPEG-1 Layer III stream of ``seconds`` at 128 kbit/s, 44.1 kHz (1,152 samples a
    frame): constant bit rate, or with a Xing (VBR) or VBRI header frame giving its frame
    count; behind an ID3v2 tag of ``id3`` bytes when asked. ``passages``: a variable bit
    rate stream with no such header instead, its frames in equal passages at these bit
    rate indexes (5: 64 kbit/s, 9: 128, 14: 320)."""
    frames = round(seconds * 44100 / 1152)
    if passages:
        out = b""
        for n in range(frames):
            index = passages[n * len(passages) // frames]
            kbps = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)[index]
            out += bytes((0xFF, 0xFB, index << 4, 0x64)) + b"\0" * (144 * kbps * 1000 // 44100 - 4)
        return out
    header = bytes((0xFF, 0xFB, 0x90, 0x64))  # MPEG-1 L3, 128 kbit/s, 44.1 kHz, joint stereo
    size = 144 * 128000 // 44100  # 417 bytes a frame, 418 with its padding byte
    frame = header + b"\0" * (size - 4)
    padded = bytes((0xFF, 0xFB, 0x92, 0x64)) + b"\0" * (size - 3)
    out = b""
    if id3:
        syncsafe = bytes((id3 >> 21 & 0x7F, id3 >> 14 & 0x7F, id3 >> 7 & 0x7F, id3 & 0x7F))
        out += b"ID3\x04\x00\x00" + syncsafe + b"\0" * id3
    if xing or vbri:
        info = bytearray(frame)
        if xing:  # after the 32 bytes of stereo side information
            info[36:48] = b"Xing" + struct.pack(">II", 1, frames)
        else:  # VBRI: 32 bytes after the header
            info[36:54] = b"VBRI" + struct.pack(">HHHII", 1, 0, 75, frames * size, frames)
        out += bytes(info)
        # a VBR stream: the frames do not say the duration by their size (a low bitrate)
        frame = bytes((0xFF, 0xFB, 0x10, 0x64)) + b"\0" * (144 * 32000 // 44100 - 4)
        return out + frame * frames
    # padded as an encoder pads: a frame of 418 bytes whenever the 417.96 a frame add up
    for n in range(frames):
        out += (
            padded if (n + 1) * 144 * 128000 // 44100 - n * 144 * 128000 // 44100 > size else frame
        )
    return out


def flac_audio(seconds: float, *, rate: int = 16000) -> bytes:
    """A FLAC stream header: ``fLaC`` and a STREAMINFO of ``seconds`` of samples at ``rate``."""
    samples = int(seconds * rate)
    packed = rate << 44 | 0 << 41 | 15 << 36 | samples  # mono, 16 bits a sample
    info = struct.pack(">HHII", 4096, 4096, 0, 0)[:10] + packed.to_bytes(8, "big") + b"\0" * 16
    return b"fLaC" + bytes((0x80,)) + len(info).to_bytes(3, "big") + info


def _ogg_page(serial: int, seq: int, granule: int, packet: bytes, flags: int = 0) -> bytes:
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    head = b"OggS" + struct.pack("<BBqIII", 0, flags, granule, serial, seq, 0)
    return head + bytes((len(segments),)) + bytes(segments) + packet


def ogg_audio(
    seconds: float, codec: str = "vorbis", *, serial: int = 0x1234, data_pages: int = 3
) -> bytes:
    """An Ogg stream of ``seconds``: its identification page (Vorbis at 22,050 Hz, or Opus
    with a pre-skip of 312 samples at 48 kHz), ``data_pages`` data pages of 700 bytes,
    and a last page whose granule position says its end (a chained Ogg: several
    joined, each of its own ``serial``)."""
    if codec == "opus":
        ident = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 16000, 0, 0)
        end = int(seconds * 48000) + 312
    else:
        ident = b"\x01vorbis" + struct.pack("<IBIiiiBB", 0, 1, 22050, 0, 64000, 0, 0xB8, 1)
        end = int(seconds * 22050)
    pages = [_ogg_page(serial, 0, 0, ident, flags=2)]
    for seq in range(1, data_pages + 1):
        pages.append(_ogg_page(serial, seq, end * seq // (data_pages + 1), b"\0" * 700))
    pages.append(_ogg_page(serial, data_pages + 1, end, b"\0" * 300, flags=4))
    return b"".join(pages)


def ogg_video(seconds: float, *, sound: bool = True) -> bytes:
    """An Ogg Theora video of ``seconds`` at 25 frames a second (its granule positions
    with a keyframe shift of 6, a keyframe every 64 frames), with a Vorbis sound track
    (its pages interleaved, begun after the Theora stream's) when ``sound``."""
    video, audio = 0x7E0, 0x50D
    ident = b"\x80theora" + bytes((3, 2, 1)) + struct.pack(">HH", 40, 30)
    ident += (640).to_bytes(3, "big") + (480).to_bytes(3, "big") + bytes(2)
    ident += struct.pack(">II", 25, 1) + bytes(6) + bytes(1) + bytes(3)
    ident += struct.pack(">H", 6 << 5)  # quality 0, keyframe shift 6, pixel format 0
    vorbis = b"\x01vorbis" + struct.pack("<IBIiiiBB", 0, 1, 22050, 0, 64000, 0, 0xB8, 1)
    frames, samples = int(seconds * 25), int(seconds * 22050)

    def granule(frame: int) -> int:
        key = frame // 64 * 64
        return key << 6 | (frame - key)

    pages = [_ogg_page(video, 0, 0, ident, flags=2)]
    if sound:
        pages.append(_ogg_page(audio, 0, 0, vorbis, flags=2))
    for seq in range(1, 5):
        last = seq == 4
        pages.append(_ogg_page(video, seq, granule(frames * seq // 4), b"\0" * 900, 4 * last))
        if sound:
            pages.append(_ogg_page(audio, seq, samples * seq // 4, b"\0" * 300, 4 * last))
    return b"".join(pages)


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def mp4_video(
    seconds: float, *, brand: bytes = b"isom", moov_last: bool = False, version: int = 0
) -> bytes:
    """An MP4 (or M4A, by its ``brand``) of ``seconds``: ``ftyp``, ``moov`` with its
    ``mvhd`` (timescale 600; ``version`` 1: 64-bit times) and an ``mdat`` of 4 kB,
    ``moov`` after the media data when asked (as most encoders write it)."""
    if version == 1:
        mvhd = struct.pack(">B3xQQIQ", 1, 0, 0, 600, int(seconds * 600))
    else:
        mvhd = struct.pack(">B3xIIII", 0, 0, 0, 600, int(seconds * 600))
    moov = _box(b"moov", _box(b"mvhd", mvhd + b"\0" * 80))
    ftyp = _box(b"ftyp", brand + b"\0\0\0\0" + brand + b"mp41")
    mdat = _box(b"mdat", b"\0" * 4096)
    return ftyp + (mdat + moov if moov_last else moov + mdat)


def _ebml(element: int, payload: bytes) -> bytes:
    size = len(payload)
    return (
        element.to_bytes((element.bit_length() + 7) // 8, "big")
        + (
            (1 << 56 | size).to_bytes(8, "big")  # an 8-byte size, as muxers write it
        )
        + payload
    )


def webm_video(seconds: float, *, timecode_scale: int = 1_000_000) -> bytes:
    """A WebM of ``seconds``: an EBML header, a Segment with a SeekHead, a Void and its Info
    (TimecodeScale, a float Duration in its units), then a Cluster."""
    header = _ebml(0x1A45DFA3, _ebml(0x4282, b"webm"))
    info = _ebml(
        0x1549A966,
        _ebml(0x2AD7B1, timecode_scale.to_bytes(4, "big"))
        + _ebml(0x4489, struct.pack(">d", seconds * 1e9 / timecode_scale)),
    )
    segment = _ebml(0x114D9B74, b"\0" * 20) + _ebml(0xEC, b"\0" * 40) + info
    segment += _ebml(0x1F43B675, b"\0" * 2048)
    return header + _ebml(0x18538067, segment)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- the provider payload scenarios (test_provider_payloads, test_provider_payloads_local) --
# A mock provider there records each payload in ``payloads`` and the rules it breaks in
# ``problems``, counts the model's steps in ``step`` and answers by ``script(step, payload)``
# (a list of tool calls or a text; a payload without ``tools`` is a summarizer's request).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


@tool
def read_log(name: str) -> str:
    """Read a build log."""
    return "\n".join(f"{name}: step {i} ok ({i * 7 % 13} ms) src/mod_{i}.py" for i in range(120))


@tool
def screenshot(name: str) -> list:
    """Take a screenshot."""
    return [
        {"type": "text", "text": f"screenshot of {name}"},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]


BUILD_TOOLS = [read_log, screenshot]
BUILD_SYSTEM = "You are a build assistant."
BUILD_QUESTIONS = ("Check every build.", "Again, the p builds.")
BUILD_ANSWER = "All builds pass."
TAG_ID = re.compile(r'<metadata id=\\?"([^"\\]+)')
OFFLOAD = re.compile(r'reload_offloaded\(offload_id=\\?"([^"\\]+)')


def build_script(step: int, payload: dict) -> list[dict[str, Any]] | str:
    """The model: parallel calls every fourth step, edits of its context by the ids the
    tags show, a final answer after 14 steps."""
    if not payload.get("tools"):  # a summarizer's request
        return "Summary: the agent read the logs, all ok."
    if step > 14:
        return BUILD_ANSWER

    def call(tool_name: str, **args: Any) -> dict[str, Any]:
        return {"name": tool_name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}"}

    sent = json.dumps(payload)
    ids, offloads = TAG_ID.findall(sent), OFFLOAD.findall(sent)
    if step == 5 and ids:
        return [call("pin_message", message_id=ids[-1])]
    if step in (6, 10) and offloads:
        return [call("reload_offloaded", offload_id=offloads[0])]
    if step == 9 and len(ids) > 4:
        return [call("delete_message", message_id=ids[0])]
    if step == 11 and len(ids) > 4:
        return [call("update_message", message_id=ids[-4], content="read_log: all ok")]
    if step % 4 == 0:
        return [call("read_log", name=f"p{step}"), call("screenshot", name=f"s{step}")]
    return [call("read_log", name=f"b{step}")]


def turn_problems(msgs: Sequence[dict]) -> list[str]:
    """Claude's turn order (the Messages API, and Bedrock's Converse): the first turn is
    the user's, then user and assistant turns alternate, no other role."""
    problems = [] if msgs and msgs[0]["role"] == "user" else ["the first turn is not the user's"]
    for i, m in enumerate(msgs):
        if m["role"] not in ("user", "assistant"):
            problems.append(f"role {m['role']} in messages")
        if i and msgs[i - 1]["role"] == m["role"]:
            problems.append(f"turns {i - 1} and {i} do not alternate")
    return problems


def payload_text(payload: Any) -> str:
    """A payload as text (Bedrock's media travel as ``bytes``)."""
    return json.dumps(payload, default=lambda o: f"<{len(o)} bytes>")


def run_graph(graph: Any, inputs: dict, config: Any, asynchronous: bool) -> dict:
    """``graph.invoke`` or ``graph.ainvoke``."""
    if asynchronous:
        return asyncio.run(graph.ainvoke(inputs, config))
    return graph.invoke(inputs, config)


def run_build_rounds(
    graph: Any, provider: Any, config: Any, asynchronous: bool, *, system_in_state: bool = False
) -> None:
    """The two rounds of :func:`build_script`, each question from its first step, each
    round ending with the final answer; ``system_in_state``: the system prompt is a
    ``SystemMessage`` of the first input (a StateGraph's), not the agent's."""
    first: list[BaseMessage] = [SystemMessage(BUILD_SYSTEM)] if system_in_state else []
    for question in BUILD_QUESTIONS:
        provider.step = 0
        out = run_graph(graph, {"messages": [*first, HumanMessage(question)]}, config, asynchronous)
        first = []
        assert out["messages"][-1].text == BUILD_ANSWER


def build_agent(ac: Any, model: Any, store: Any) -> Any:
    """``create_agent`` with the build tools and prompt and ``ac``'s middleware."""
    return self_managed_create_agent(
        ac, model, store, tools=BUILD_TOOLS, system_prompt=BUILD_SYSTEM
    )


def build_graph(ac: Any, model: Any, store: Any, *, state_schema: Any = None) -> Any:
    """The StateGraph of docs/surfaces.md (``ac.node()`` → ``ac.model_node(model with the
    build tools and the package's bound)`` → ``ac.command_node()`` → ``ToolNode``)."""
    bound = model.bind_tools([*BUILD_TOOLS, *ac.tools])
    return self_managed_graph(ac, bound, store, tools=BUILD_TOOLS, state_schema=state_schema)


def check_forgotten_first_user_message(provider: Any, model: Any, asynchronous: bool) -> None:
    """The model deletes the conversation's first user message ("forget my password",
    ``delete_message`` with the id its tag shows) through ``create_agent``: every payload
    keeps the provider's rules (one opening with the assistant's reply would not), and
    no payload from the one after the delete call on holds the password."""
    from langgraph.store.memory import InMemoryStore

    from langchain_autocontext import AutoContext, AutoContextConfig

    deleted: list[int] = []  # the index of the payload after the delete call

    def reply(step: int, payload: dict) -> list[dict[str, Any]] | str:
        if not payload.get("tools"):
            return "Summary."
        sent = json.dumps(payload)
        if "forget my password" in sent and "hunter2" in sent:
            first = TAG_ID.findall(sent)[0]  # the first user message's tag
            deleted.append(len(provider.payloads))
            return [{"name": "delete_message", "args": {"message_id": first}, "id": "call_del"}]
        return "Noted."

    provider.script = reply
    cfg = AutoContextConfig(
        max_tokens=6_000, metadata_tags=True, tag_format="seed", disclosure="always"
    )
    agent = build_agent(AutoContext(cfg, store=InMemoryStore()), model, InMemoryStore())
    config: Any = {"configurable": {"thread_id": "t"}}
    for text in ("My password is hunter2.", "Please forget my password.", "Hello again."):
        run_graph(agent, {"messages": [HumanMessage(text)]}, config, asynchronous)
    assert deleted and "hunter2" not in payload_text(provider.payloads[deleted[0] :])
    assert provider.problems == []
