"""Tools from an MCP server (``langchain-mcp-adapters``) in agents the package manages.

A FastMCP server (the ``mcp`` package) runs in-process over the SDK's in-memory
transport (``create_connected_server_and_client_session``), its tools loaded with
``load_mcp_tools``: offline, no subprocess. Its tools return what real servers return:
a long file read, several text blocks, a 1280x800 PNG, embedded resources (text and
blob), structured content, an ``isError`` result, a raised error and a slow call. The
adapters' tools are coroutines only (``StructuredTool`` without ``func``), so the
agents run async. Checked as a user would: every request the model got fits the budget
and is a valid sequence, the image counts by its size, previews and offload ids,
restore and the store round trip keep the content blocks and the ``artifact``,
``search_history`` finds an MCP result's text, a checkpoint restart keeps the artifact,
and the payloads ``ChatOpenAI``/``ChatAnthropic`` would send stay valid.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("mcp")
pytest.importorskip("langchain_mcp_adapters")

import anyio
from _builders import FunctionModel, call, loop_graph, png_image
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore
from langchain_autocontext.messages import find_violations


def big_png(width: int, height: int, extra: int = 120_000) -> str:
    """A 1280x800-style PNG of a real file's weight: the header of ``png_image`` plus an
    ancillary chunk of ``extra`` incompressible-looking bytes (base64: ~160 KB of text,
    ~40,000 tokens were it counted as text)."""
    raw = png_image(width, height)
    data = bytes((i * 7919 + i // 251) % 256 for i in range(extra))
    chunk = struct.pack(">I", len(data)) + b"zzZz" + data
    chunk += struct.pack(">I", zlib.crc32(b"zzZz" + data))
    return base64.b64encode(raw[:-12] + chunk + raw[-12:]).decode("ascii")


PNG = big_png(1280, 800)
BLOB = base64.b64encode(bytes(range(256)) * 8).decode("ascii")


class Stats(TypedDict):
    repo: str
    files: int
    lines: int


def server() -> FastMCP:
    srv = FastMCP("workspace")

    @srv.tool()
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return "\n".join(
            f"{path}:{i}: def handler_{i}(request): return compute_{i}(request.body)"
            for i in range(300)
        )

    @srv.tool(structured_output=False)
    def list_dir(path: str) -> list[TextContent]:
        """List a directory."""
        return [TextContent(type="text", text=f"{path}/{n}.py") for n in ("main", "util", "db")]

    @srv.tool(structured_output=False)
    def screenshot(url: str) -> list[TextContent | ImageContent]:
        """Screenshot a page."""
        return [
            TextContent(type="text", text=f"screenshot of {url} (1280x800)"),
            ImageContent(type="image", data=PNG, mimeType="image/png"),
        ]

    @srv.tool(structured_output=False)
    def fetch_resource(uri: str) -> list[EmbeddedResource]:
        """Fetch a resource."""
        text = TextResourceContents(
            uri="file:///notes.md",
            mimeType="text/markdown",
            text="\n".join(f"- note {i}: migrate table orders_{i}" for i in range(150)),
        )
        blob = BlobResourceContents(
            uri="file:///dump.bin", mimeType="application/octet-stream", blob=BLOB
        )
        return [
            EmbeddedResource(type="resource", resource=text),
            EmbeddedResource(type="resource", resource=blob),
        ]

    @srv.tool()
    def repo_stats(repo: str) -> Stats:
        """Statistics of a repository (structured content)."""
        return {"repo": repo, "files": 120, "lines": 45_000}

    @srv.tool()
    def deploy(env: str) -> CallToolResult:
        """Deploy (the server answers with an error result)."""
        return CallToolResult(
            content=[TextContent(type="text", text=f"deploy to {env} refused: quota exceeded")],
            isError=True,
        )

    @srv.tool()
    async def slow_query(sql: str) -> str:
        """A slow database query that fails."""
        await anyio.sleep(0.01)
        raise RuntimeError(f"query timed out: {sql}")

    return srv


PLAN: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "src/app.py"}),
    ("screenshot", {"url": "http://localhost:3000"}),
    ("list_dir", {"path": "src"}),
    ("fetch_resource", {"uri": "file:///notes.md"}),
    ("repo_stats", {"repo": "acme/shop"}),
    ("deploy", {"env": "prod"}),
    ("slow_query", {"sql": "select * from orders"}),
]


@asynccontextmanager
async def mcp_tools() -> AsyncIterator[list[Any]]:
    async with create_connected_server_and_client_session(server()._mcp_server) as session:
        yield await load_mcp_tools(session)


async def tool_results() -> dict[str, ToolMessage]:
    """What each MCP tool returns, as the ToolMessage an agent stores."""
    out = {}
    async with mcp_tools() as tools:
        by_name = {t.name: t for t in tools}
        for name, args in PLAN:
            tc = {"name": name, "args": args, "id": f"call_{name}", "type": "tool_call"}
            out[name] = await by_name[name].ainvoke(tc)
    return out


OFFLOAD = re.compile(r'reload_offloaded\(offload_id=\\?"([^"\\]+)')


def blocks(content: Any) -> Any:
    """The content without the block ids the adapters make up per call."""
    if isinstance(content, str):
        return content
    return [{k: v for k, v in b.items() if k != "id"} for b in content]


def the_same(a: BaseMessage, b: BaseMessage) -> None:
    """``a`` is the tool result ``b`` (another call of the same tool), blocks and all."""
    assert type(a) is type(b)
    assert blocks(a.content) == blocks(b.content)
    if isinstance(a, ToolMessage):
        assert isinstance(b, ToolMessage)
        assert (a.artifact, a.status, a.tool_call_id, a.name) == (
            b.artifact,
            b.status,
            b.tool_call_id,
            b.name,
        )


# --- what the adapters give ---------------------------------------------------------------------
async def test_the_mcp_results_are_what_real_servers_return() -> None:
    """The fixture is realistic: content blocks, an image, a file block, an artifact with
    structured content, error statuses for ``isError`` and a raised error."""
    r = await tool_results()
    assert [b["type"] for b in r["screenshot"].content] == ["text", "image"]  # type: ignore[index]
    assert r["screenshot"].content[1]["base64"] == PNG  # type: ignore[index]
    assert [b["type"] for b in r["fetch_resource"].content] == ["text", "file"]  # type: ignore[index]
    assert r["repo_stats"].artifact == {
        "structured_content": {"repo": "acme/shop", "files": 120, "lines": 45_000}
    }
    assert r["deploy"].status == "error" and r["slow_query"].status == "error"
    assert "quota exceeded" in r["deploy"].text and "timed out" in r["slow_query"].text


async def test_an_mcp_image_counts_by_its_size_not_its_base64() -> None:
    r = await tool_results()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000))
    shot = r["screenshot"]
    tokens = ac.counter.count([shot])
    assert len(PNG) > 150_000
    assert 500 < tokens < 3_000, tokens  # a 1280x800 image: ~1,000-1,600 tokens
    text_only = shot.model_copy(update={"content": [shot.content[0]]})
    assert tokens - ac.counter.count([text_only]) > 500


# --- a create_agent run -------------------------------------------------------------------------
def scripted(store: OffloadStore, rounds_end: int = 24) -> Any:
    """Cycles through the MCP tools; from step 12 on, reloads the first screenshot the
    store offloaded (by its id), searches the history at step 18."""
    state: dict[str, Any] = {}

    def respond(msgs: list[BaseMessage], n: int) -> AIMessage:
        if n >= rounds_end:
            return AIMessage("All checked.")
        if n >= 12 and "reloaded" not in state:
            for r in store.list_offloads("t"):
                if r.strategy == "offload_all" and r.messages[0].name == "screenshot":
                    state["reloaded"] = r
                    args = {"offload_id": r.offload_id}
                    return AIMessage("", tool_calls=[call("reload_offloaded", args)])
        if n == 18:
            return AIMessage("", tool_calls=[call("search_history", {"query": "handler_17"})])
        name, args = PLAN[n % len(PLAN)]
        return AIMessage("", tool_calls=[call(name, args)])

    return FunctionModel(respond=respond), state


def replies(model: Any, name: str) -> list[ToolMessage]:
    """The results of ``name`` the model saw, first seen first."""
    out: dict[str, ToolMessage] = {}
    for sent in model.seen:
        for m in sent:
            if isinstance(m, ToolMessage) and m.name == name:
                out.setdefault(m.tool_call_id, m)
    return list(out.values())


def check_requests(model: Any, ac: AutoContext) -> None:
    for k, sent in enumerate(model.seen):
        assert not find_violations(sent), (k, find_violations(sent))
        count = ac.counter.count(sent, model.tools_seen[k], tags=False)
        assert count <= ac.config.max_tokens, (k, count)


async def test_a_create_agent_run_on_mcp_tools_stays_in_budget_and_loses_nothing() -> None:
    originals = await tool_results()
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    model, _ = scripted(store)
    async with mcp_tools() as tools:
        agent = create_agent(
            model,
            tools=tools,
            system_prompt="You are a coding agent.",
            middleware=[ac.middleware()],
            checkpointer=InMemorySaver(),
            store=store,
        )
        config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
        out = await agent.ainvoke({"messages": [HumanMessage("Audit the shop.")]}, config)
    assert out["messages"][-1].text == "All checked."
    check_requests(model, ac)
    kinds = Counter(e.strategy for e in store.list_events("t"))
    assert {"offload_all", "fifo"} <= set(kinds), kinds

    # every offloaded MCP result: a preview that says something, the tool's own message
    # behind its id (blocks, artifact, status); the history holds every result as it came
    single = [r for r in store.list_offloads("t") if r.strategy == "offload_all"]
    names = set()
    for r in single:
        (m,) = r.messages
        if not (isinstance(m, ToolMessage) and m.name in originals):
            continue  # a search result, offloaded too
        assert r.preview.strip() and OFFLOAD.search(r.preview) is None, r.preview
        like = {"id": m.id, "tool_call_id": m.tool_call_id}
        the_same(m, originals[m.name].model_copy(update=like))
        names.add(m.name)
    assert {"read_file", "screenshot", "fetch_resource"} <= names, names
    archived = [e.message for e in store.iter_history("t") if isinstance(e.message, ToolMessage)]
    for m in archived:
        if m.name in originals:
            like = {"id": m.id, "tool_call_id": m.tool_call_id}
            the_same(m, originals[m.name].model_copy(update=like))
    assert {m.name for m in archived} >= set(originals)
    # the preview of a screenshot says what it was, the image included
    shots = [r for r in store.list_offloads("t") if r.strategy == "offload_all"]
    assert any("screenshot of" in r.preview for r in shots)

    # the model reloaded the screenshot: its text, the image named, where it came from
    (reload,) = replies(model, "reload_offloaded")
    assert "screenshot of http://localhost:3000" in reload.text, reload.text
    assert "[image]" in reload.text and "result of screenshot" in reload.text, reload.text
    # search_history found the text of an MCP result
    (found,) = replies(model, "search_history")
    assert "handler_17" in found.text, found.text


# --- the store round trip, every backend ---------------------------------------------------------
async def test_mcp_results_survive_archive_offload_and_reload(
    any_store: tuple[OffloadStore, bool],
) -> None:
    """Each MCP result (blocks, image, file, artifact, error status) comes back from the
    history and from an offload as the tool gave it, on every backend."""
    store, is_async = any_store
    originals = list((await tool_results()).values())
    originals = [m.model_copy(update={"id": f"mcp-{k}"}) for k, m in enumerate(originals)]
    if is_async:
        await store.aappend_history("t", originals)
        record = await store.aoffload("t", originals, strategy="test", preview="p", tokens=1)
        again = await store.areload("t", record.offload_id)
        history = [e.message async for e in store.aiter_history("t")]
    else:
        store.append_history("t", originals)
        record = store.offload("t", originals, strategy="test", preview="p", tokens=1)
        again = store.reload("t", record.offload_id)
        history = [e.message for e in store.iter_history("t")]
    assert len(again.messages) == len(history) == len(originals)
    for got, was in [
        *zip(again.messages, originals, strict=True),
        *zip(history, originals, strict=True),
    ]:
        the_same(got, was)
        assert got.content == was.content  # the block ids too


# --- a StateGraph with the node, a SQLite checkpointer, a restart --------------------------------
def mcp_graph(ac: AutoContext, model: Any, tools: list[Any], store: Any, saver: Any) -> Any:
    every = [*tools, *ac.tools]
    return loop_graph(ac, model.bind_tools(every), every).compile(checkpointer=saver, store=store)


async def test_a_state_graph_on_mcp_tools_restarts_from_sqlite_with_its_artifacts(
    tmp_path: Path,
) -> None:
    """``ac.node()`` in a StateGraph over the MCP tools, checkpointed in SQLite: every
    request in budget and valid; the model restores an offloaded screenshot
    (``restore=true``) and gets the tool's blocks and artifact back; after a restart from
    the same files the working messages still carry their artifacts and the next round
    runs on."""
    pytest.importorskip("langgraph.checkpoint.sqlite.aio")
    from conftest import open_sqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    originals = await tool_results()
    state: dict[str, Any] = {}

    def respond(msgs: list[BaseMessage], n: int) -> AIMessage:
        if n in (9, 30):
            return AIMessage("Done.")
        if n > 12 and "restored" not in state:
            for m in msgs:
                ids = OFFLOAD.findall(m.text) if isinstance(m, ToolMessage) else []
                if m.name == "screenshot" and ids:
                    state["restored"] = ids[0]
                    args = {"offload_id": ids[0], "restore": True}
                    return AIMessage("", tool_calls=[call("reload_offloaded", args)])
        name, args = PLAN[n % len(PLAN)]
        return AIMessage("", tool_calls=[call(name, args)])

    model = FunctionModel(respond=respond)
    config: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 200}
    cfg = AutoContextConfig(max_tokens=30_000, offload_single_preview=120)
    db, st = tmp_path / "checkpoints.db", tmp_path / "store.db"
    backend = open_sqlite(st)
    store = OffloadStore(backend)
    ac = AutoContext(cfg, store=store)
    async with mcp_tools() as tools, AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = mcp_graph(ac, model, tools, store, saver)
        await graph.ainvoke({"messages": [HumanMessage("Audit the shop.")]}, config)
        before = (await graph.aget_state(config)).values["messages"]
    backend.conn.close()
    check_requests(model, ac)
    assert any(isinstance(m, ToolMessage) and m.artifact for m in before)

    backend = open_sqlite(st)  # a new process: new store, saver and AutoContext
    store = OffloadStore(backend)
    ac = AutoContext(cfg, store=store)
    async with mcp_tools() as tools, AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = mcp_graph(ac, model, tools, store, saver)
        after = (await graph.aget_state(config)).values["messages"]
        assert [(m.id, m.content) for m in after] == [(m.id, m.content) for m in before]
        for m, b in zip(after, before, strict=True):
            if isinstance(m, ToolMessage):
                the_same(m, b)
        out = await graph.ainvoke({"messages": [HumanMessage("And the admin pages?")]}, config)
    try:
        assert out["messages"][-1].text == "Done."
        check_requests(model, ac)
        assert "restored" in state, "no screenshot preview was ever in view"
        shots = [
            m
            for sent in model.seen
            for m in sent
            if isinstance(m, ToolMessage)
            and m.name == "screenshot"
            and not isinstance(m.content, str)
            and any(b.get("type") == "image" for b in m.content if isinstance(b, dict))
        ]
        restored = [
            m
            for m in shots
            if m.id
            in {
                o.id
                for r in store.list_offloads("g")
                if r.offload_id.startswith(state["restored"])
                for o in r.messages
            }
        ]
        assert restored, "the restored screenshot never reached the model"
        like = {"id": restored[-1].id, "tool_call_id": restored[-1].tool_call_id}
        the_same(restored[-1], originals["screenshot"].model_copy(update=like))
        for e in store.iter_history("g"):
            m = e.message
            if isinstance(m, ToolMessage) and m.name in originals:
                like = {"id": m.id, "tool_call_id": m.tool_call_id}
                the_same(m, originals[m.name].model_copy(update=like))
    finally:
        backend.conn.close()


# --- what the real integrations put on the wire --------------------------------------------------
def wire_script(step: int, payload: dict) -> list[dict[str, Any]] | str:
    if not payload.get("tools"):
        return "Summary: the agent audited the shop."
    if step > 15:
        return "All checked."
    name, args = PLAN[step % len(PLAN)]
    return [{"name": name, "args": args, "id": f"call_{step}_{name}"}]


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
async def test_the_payloads_of_an_mcp_agent_are_valid_for_the_provider(api: str) -> None:
    """``create_agent`` with the middleware over the MCP tools, the model a real
    ``ChatOpenAI``/``ChatAnthropic`` on the mock transport of test_provider_payloads:
    every payload keeps the provider's rules, the image goes as an image (never its
    base64 as text), and fits the budget the package counted."""
    pytest.importorskip("httpx")
    pytest.importorskip("langchain_openai")
    pytest.importorskip("langchain_anthropic")
    from test_provider_payloads import Provider

    provider = Provider(api)
    provider.script = wire_script
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(max_tokens=10_000), store=store)
    async with mcp_tools() as tools:
        agent = create_agent(
            provider.model(),
            tools=tools,
            system_prompt="You are a coding agent.",
            middleware=[ac.middleware()],
            checkpointer=InMemorySaver(),
            store=store,
        )
        config: Any = {"configurable": {"thread_id": "w"}, "recursion_limit": 200}
        out = await agent.ainvoke({"messages": [HumanMessage("Audit the shop.")]}, config)
    assert out["messages"][-1].text == "All checked."
    assert provider.problems == []
    kinds = {e.strategy for e in store.list_events("w")}
    assert "offload_all" in kinds, kinds
    sent = [json.dumps(p) for p in provider.payloads if p.get("tools")]
    assert any(PNG[:2_000] in s for s in sent)  # the screenshot went out
    for s in sent:
        # the image as an image: its base64 only inside an image part, once per image
        assert s.count(PNG[:2_000]) == s.count("image/png;base64," + PNG[:50]) + s.count(
            '"media_type": "image/png", "data": "' + PNG[:50]
        ), s[:300]
