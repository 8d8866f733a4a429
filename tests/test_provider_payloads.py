"""What the package sends, as the real provider integrations put it on the wire.

``ChatOpenAI`` (Chat Completions and the Responses API), ``ChatAnthropic`` (with
extended thinking) and ``ChatGoogleGenerativeAI`` (gemini-2.5-flash with thinking, its
google-genai SDK given the transport in ``client_args``) run against an ``httpx`` mock
transport that records each request's JSON payload and answers with a canned reply
(tool calls or a final text, with usage; Gemini's with thought signatures); every
payload is checked against the provider's documented rules. Offline, no key.
langchain-openai, langchain-anthropic and langchain-google-genai are in the ``test``
extra (CI runs this module); an install without the first two skips it, one without
langchain-google-genai skips the Gemini cases, and the same invariants on LangChain
messages are checked by the tests that always run (``find_violations`` in
test_invariants, the one-system-message rule of the hook in test_graphs).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import uuid
import warnings
from collections import Counter
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("langchain_openai")
pytest.importorskip("langchain_anthropic")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.messages import HumanMessage, SystemMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore  # noqa: E402
from tests._builders import (  # noqa: E402
    BUILD_TOOLS,
    build_agent,
    build_graph,
    build_script,
    check_forgotten_first_user_message,
    run_build_rounds,
    turn_problems,
)


# --- the providers' documented rules --------------------------------------------------------
def openai_chat_problems(p: dict) -> list[str]:
    msgs, problems = p["messages"], []
    roles = [m["role"] for m in msgs]
    systems = [i for i, r in enumerate(roles) if r in ("system", "developer")]
    if systems not in ([], [0]):
        problems.append(f"system messages at {systems}")
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m["role"] == "tool":
            problems.append(f"tool message {i} answers no call right before it")
        if m["role"] == "assistant" and m.get("tool_calls"):
            wanted, got, i = {c["id"] for c in m["tool_calls"]}, set(), i + 1
            while i < len(msgs) and msgs[i]["role"] == "tool":
                got.add(msgs[i]["tool_call_id"])
                i += 1
            if got != wanted:
                problems.append(f"calls {wanted} answered by {got}")
            continue
        i += 1
    return problems


def openai_responses_problems(p: dict) -> list[str]:
    items, problems, calls = p["input"], [], set()
    systems = [i for i, it in enumerate(items) if it.get("role") in ("system", "developer")]
    if systems not in ([], [0]):
        problems.append(f"system items at {systems}")
    for i, it in enumerate(items):
        if it.get("type") == "function_call":
            calls.add(it["call_id"])
        if it.get("type") == "function_call_output" and it["call_id"] not in calls:
            problems.append(f"output {i} before/without its function_call")
        if it.get("type") == "reasoning" and (
            i + 1 == len(items) or items[i + 1].get("type") == "reasoning"
        ):
            problems.append(f"reasoning item {i} without its following item")
    outputs = {it["call_id"] for it in items if it.get("type") == "function_call_output"}
    problems += [f"function_call {c} without output" for c in calls - outputs]
    return problems


def anthropic_problems(p: dict) -> list[str]:
    msgs = p["messages"]
    problems = turn_problems(msgs)

    def blocks(m: dict) -> list[dict]:
        return (
            [{"type": "text", "text": m["content"]}]
            if isinstance(m["content"], str)
            else m["content"]
        )

    for i, m in enumerate(msgs):
        bl = blocks(m)
        if not bl or any(b.get("type") == "text" and not b["text"].strip() for b in bl):
            problems.append(f"empty content or text block in turn {i}")
        results = [k for k, b in enumerate(bl) if b.get("type") == "tool_result"]
        if results != list(range(len(results))):
            problems.append(f"tool_result blocks not first in turn {i}")
        uses = {b["id"] for b in bl if b.get("type") == "tool_use"}
        if uses:
            nxt = blocks(msgs[i + 1]) if i + 1 < len(msgs) else []
            answered = {b["tool_use_id"] for b in nxt if b.get("type") == "tool_result"}
            if answered != uses:
                problems.append(f"tool_use {uses} in turn {i} answered by {answered}")
    if p.get("thinking") and len(msgs) > 1:
        last = blocks(msgs[-1])
        if any(b.get("type") == "tool_result" for b in last):
            # the API reads a turn from its compaction block on: the thinking follows it
            turn = blocks(msgs[-2])
            head = next((b["type"] for b in turn if b.get("type") != "compaction"), None)
            if head not in ("thinking", "redacted_thinking"):
                problems.append(f"the turn continuing the tool loop starts with {head}")
    return problems


# --- canned replies --------------------------------------------------------------------------
def usage(payload: dict) -> int:
    return len(json.dumps(payload)) // 4


def openai_chat_reply(payload: dict, reply: Any) -> dict:
    if isinstance(reply, str):
        msg: dict[str, Any] = {"role": "assistant", "content": reply}
    else:
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                }
                for c in reply
            ],
        }
    n = usage(payload)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": payload["model"],
        "choices": [
            {
                "index": 0,
                "message": msg,
                "finish_reason": "stop" if isinstance(reply, str) else "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": n, "completion_tokens": 9, "total_tokens": n + 9},
    }


def openai_responses_reply(payload: dict, reply: Any) -> dict:
    out: list[dict] = [{"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "summary": []}]
    if isinstance(reply, str):
        out.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply, "annotations": []}],
            }
        )
    else:
        out += [
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": c["id"],
                "name": c["name"],
                "arguments": json.dumps(c["args"]),
                "status": "completed",
            }
            for c in reply
        ]
    n = usage(payload)
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": payload["model"],
        "output": out,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": n,
            "output_tokens": 9,
            "total_tokens": n + 9,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def anthropic_reply(payload: dict, reply: Any) -> dict:
    content: list[dict] = []
    if payload.get("thinking"):
        content.append({"type": "thinking", "thinking": "Next step.", "signature": "sig"})
    if isinstance(reply, str):
        content.append({"type": "text", "text": reply})
    else:
        content += [
            {"type": "tool_use", "id": f"toolu_{c['id']}", "name": c["name"], "input": c["args"]}
            for c in reply
        ]
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": payload["model"],
        "content": content,
        "stop_reason": "end_turn" if isinstance(reply, str) else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": usage(payload), "output_tokens": 9},
    }


def gemini_calls(content: dict) -> list[dict]:
    return [p["functionCall"] for p in content.get("parts") or [] if "functionCall" in p]


def gemini_signature(calls: list[dict]) -> str:
    """The thought signature the mock puts on the first call of a reply: one per reply."""
    key = json.dumps([[c["name"], c.get("args")] for c in calls], sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()[:12]).decode()


def gemini_problems(p: dict) -> list[str]:
    contents, problems = p["contents"], []
    system = p.get("systemInstruction") or {}
    if len(system.get("parts") or []) > 1:  # langchain-google-genai merges system messages
        problems.append("a second system message merged into systemInstruction")
    system_texts = {part["text"].strip() for part in system.get("parts") or [] if "text" in part}
    if not contents or contents[0].get("role") != "user":
        problems.append("contents do not open with a user turn")
    for i, c in enumerate(contents):
        role, parts, calls = c.get("role"), c.get("parts") or [], gemini_calls(c)
        texts = [part["text"].strip() for part in parts if "text" in part]
        if role not in ("user", "model"):
            problems.append(f"role {role} in contents")
        if not parts or not all(texts):
            problems.append(f"no parts or an empty text part in turn {i}")
        if system_texts & set(texts):
            problems.append(f"the system instruction repeated in turn {i}")
        if any("functionResponse" in part for part in parts) and not (
            role == "user" and i and gemini_calls(contents[i - 1])
        ):
            problems.append(f"functionResponse in turn {i} answers no functionCall turn")
        if not calls:
            continue
        names = [f["name"] for f in calls]
        nxt = contents[i + 1] if i + 1 < len(contents) else {}
        answered = [
            x["functionResponse"]["name"] for x in nxt.get("parts") or [] if "functionResponse" in x
        ]
        if role != "model" or nxt.get("role") != "user" or answered != names:
            problems.append(f"calls {names} in {role} turn {i} answered by {answered}")
        first = next(part for part in parts if "functionCall" in part)
        sent = str(first.get("thoughtSignature")).replace("+", "-").replace("/", "_")
        if sent != gemini_signature(calls):  # (the SDK sends the bytes url-safe)
            problems.append(f"thought signature of the calls in turn {i} lost")
    return problems


TAG = re.compile(r"^<[^>\n]*/>\n?")  # a metadata tag the view puts before a message's text


def gemini_text_problems(p: dict, replies: set[str]) -> list[str]:
    """The model's text replies the package keeps (tagged at most) keep their signature."""
    return [
        f"the thought signature of text turn {i} lost"
        for i, c in enumerate(p["contents"])
        if c.get("role") == "model"
        and not gemini_calls(c)
        and TAG.sub("", "".join(x.get("text", "") for x in c.get("parts") or [])) in replies
        and not any("thoughtSignature" in x for x in c.get("parts") or [])
    ]


def gemini_reply(payload: dict, reply: Any) -> dict:
    parts: list[dict] = []
    if payload.get("generationConfig", {}).get("thinkingConfig", {}).get("includeThoughts"):
        parts.append({"text": "Next step.", "thought": True})
    if isinstance(reply, str):
        parts.append({"text": reply, "thoughtSignature": gemini_signature([{"name": reply}])})
    else:
        calls = [{"name": c["name"], "args": c["args"]} for c in reply]
        parts += [{"functionCall": f} for f in calls]
        parts[-len(calls)]["thoughtSignature"] = gemini_signature(calls)
    n = usage(payload)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": n,
            "candidatesTokenCount": 9,
            "totalTokenCount": n + 9,
        },
        "modelVersion": "gemini-2.5-flash",
    }


RULES = {
    "chat": (openai_chat_problems, openai_chat_reply),
    "responses": (openai_responses_problems, openai_responses_reply),
    "anthropic": (anthropic_problems, anthropic_reply),
    "gemini": (gemini_problems, gemini_reply),
}


class Provider:
    """The mock endpoint: records each payload and the rules it breaks."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.payloads: list[dict] = []
        self.problems: list[tuple[int, list[str]]] = []
        self.step = 0
        self.replies: set[str] = set()  # the texts the model answered with
        self.script = build_script  # the model's replies: (step, payload) -> calls or a text

    def answer(self, content: bytes) -> dict:
        payload = json.loads(content)
        self.payloads.append(payload)
        check, reply = RULES[self.api]
        problems = check(payload)
        if self.api == "gemini":
            problems += gemini_text_problems(payload, self.replies)
        if problems:
            self.problems.append((len(self.payloads), problems))
        if payload.get("tools"):
            self.step += 1
        answer = self.script(self.step, payload)
        if isinstance(answer, str):
            self.replies.add(answer)
        return reply(payload, answer)

    def model(self, **kw: Any) -> Any:
        if self.api == "anthropic":
            return self._anthropic(**kw)
        if self.api == "gemini":
            return self._gemini(**kw)
        from langchain_openai import ChatOpenAI

        def handle(request: Any) -> Any:
            return httpx.Response(200, json=self.answer(request.content))

        async def ahandle(request: Any) -> Any:
            return handle(request)

        return ChatOpenAI(
            model="gpt-4o-mini",
            api_key="sk-test",
            use_responses_api=self.api == "responses",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(handle)),
            http_async_client=httpx.AsyncClient(transport=httpx.MockTransport(ahandle)),
            **kw,
        )

    def _anthropic(self, **kw: Any) -> Any:
        import anthropic
        from anthropic import _base_client
        from langchain_anthropic import ChatAnthropic

        hx = getattr(_base_client, "httpx2", None) or getattr(_base_client, "httpx", httpx)

        def handle(request: Any) -> Any:
            return hx.Response(200, json=self.answer(request.content))

        async def ahandle(request: Any) -> Any:
            return handle(request)

        model = ChatAnthropic(model="claude-sonnet-4-5", api_key="x", max_retries=0, **kw)
        # the SDK clients are cached properties: the same clients over the mock transport
        model.__dict__["_client"] = anthropic.Client(
            api_key="x",
            max_retries=0,
            timeout=60,
            http_client=hx.Client(transport=hx.MockTransport(handle)),
        )
        model.__dict__["_async_client"] = anthropic.AsyncClient(
            api_key="x",
            max_retries=0,
            timeout=60,
            http_client=hx.AsyncClient(transport=hx.MockTransport(ahandle)),
        )
        return model

    def _gemini(self, **kw: Any) -> Any:
        pytest.importorskip("langchain_google_genai")
        from langchain_google_genai import ChatGoogleGenerativeAI

        def handle(request: Any) -> Any:
            return httpx.Response(200, json=self.answer(request.content))

        # an httpx transport in client_args: the google-genai SDK's sync and async
        # clients both send over it (and the async one does not switch to aiohttp)
        return ChatGoogleGenerativeAI(
            model="gemini-2.5-flash",
            google_api_key="x",
            max_retries=0,
            client_args={"transport": httpx.MockTransport(handle)},
            **kw,
        )


THINKING = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 4096}
APIS = ["chat", "responses", "anthropic", "gemini"]


GEMINI_THINKING = {"thinking_budget": 1024, "include_thoughts": True}


def model_kwargs(api: str) -> dict[str, Any]:
    return {"anthropic": THINKING, "gemini": GEMINI_THINKING}.get(api, {})


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", APIS)
def test_every_request_of_a_long_create_agent_run_is_valid_for_the_provider(
    api: str, asynchronous: bool
) -> None:
    """Two rounds of a tool loop at 6,000 tokens, with parallel calls, images in the
    results and the model's own pin, reload, delete and update calls, through the
    middleware (offloads, current-round summaries, FIFO eviction and calibration all
    run): every payload keeps the provider's rules."""
    provider = Provider(api)
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(max_tokens=6_000, metadata_tags=True, tag_format="seed")
    ac = AutoContext(cfg, store=store)
    agent = build_agent(ac, provider.model(**model_kwargs(api)), store)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    run_build_rounds(agent, provider, config, asynchronous)
    assert provider.problems == []
    kinds = Counter(e.strategy for e in store.list_events("t"))
    assert {"offload_all", "current_round", "fifo", "calibration"} <= set(kinds), kinds
    assert {"tool:delete", "tool:update"} & set(kinds), kinds  # the model edited its context


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", APIS)
def test_every_request_of_a_state_graph_with_the_node_is_valid_for_the_provider(
    api: str, asynchronous: bool
) -> None:
    """The same two rounds in a ``StateGraph`` built as docs/surfaces.md shows
    (``ac.node()`` → ``ac.model_node(model.bind_tools(…))`` → ``ac.command_node()`` →
    ``ToolNode``), the system prompt a ``SystemMessage`` in the state, at 30,000 tokens
    and 16 messages (tool runs or rounds of history summarized too), the same model
    summarizing: every payload keeps the provider's rules, the summarizer's included."""
    provider = Provider(api)
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(
        max_tokens=30_000, msg_threshold=16, metadata_tags=True, tag_format="seed"
    )
    ac = AutoContext(cfg, store=store, summarizer=provider.model())
    graph = build_graph(ac, provider.model(**model_kwargs(api)), store)
    config: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 200}
    run_build_rounds(graph, provider, config, asynchronous, system_in_state=True)
    assert provider.problems == []
    kinds = Counter(e.strategy for e in store.list_events("g"))
    assert {"offload_all", "current_round", "fifo", "tool:pin"} <= set(kinds), kinds
    assert {"tool_run", "round"} & set(kinds), kinds  # the older rounds summarized
    assert any(not p.get("tools") for p in provider.payloads)  # by the model
    assert {"tool:delete", "tool:update"} <= set(kinds), kinds


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", APIS)
def test_a_conversation_whose_first_user_message_the_model_deleted_stays_valid(
    api: str, asynchronous: bool
) -> None:
    """ "Forget my password" said of the first turn: the model deletes the conversation's
    first user message (``delete_message`` with the id its tag shows), and the next
    request opened with the assistant's reply right after the system prompt, which
    Anthropic's Messages API rejects ("first message must use the user role"). The
    package's user-role note opens it now; the password is in no later payload."""
    provider = Provider(api)
    check_forgotten_first_user_message(provider, provider.model(**model_kwargs(api)), asynchronous)


@pytest.mark.parametrize("api", APIS)
def test_the_hook_sends_one_system_message_when_the_agent_adds_its_prompt(api: str) -> None:
    """``create_react_agent(prompt=…)`` with an ``AutoContext`` not told the prompt: the
    package's section came as a second system message: two system items in OpenAI's
    payloads (langchain-anthropic merges leading system messages into ``system``)."""
    provider = Provider(api)
    ac = AutoContext(AutoContextConfig(max_tokens=6_000), tools=BUILD_TOOLS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(
            provider.model(**model_kwargs(api)),
            [*BUILD_TOOLS, *ac.tools],
            prompt="You are a build assistant.",
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            checkpointer=InMemorySaver(),
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.invoke(
            {"messages": [HumanMessage("Check every build.")]},
            {"configurable": {"thread_id": "r"}, "recursion_limit": 200},
        )
    assert provider.problems == []
    assert not [w for w in caught if "SystemMessage" in str(w.message)]
    assert any("Context" in json.dumps(p) for p in provider.payloads)  # the section was sent


@pytest.mark.parametrize("api", APIS)
def test_the_budget_comes_from_the_models_profile(api: str) -> None:
    """No ``max_tokens``: the window of the real model class's profile, less room for the
    reply (gpt-4o-mini: 128,000 less 16,384; claude-sonnet-4-5 asking for 4,096 reply
    tokens: 200,000 less a quarter)."""
    provider = Provider(api)
    ac = AutoContext()
    agent = create_agent(
        provider.model(**model_kwargs(api)), tools=BUILD_TOOLS, middleware=[ac.middleware()]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.invoke({"messages": [HumanMessage("hi")]}, {"recursion_limit": 200})
    window = {"anthropic": 150_000, "gemini": 983_040}.get(api, 111_616)
    assert ac.config.max_tokens == window
    assert not [w for w in caught if "default budget" in str(w.message)]


# --- OpenAI's server-side conversation (use_previous_response_id) ----------------------------
class ChainServer(Provider):
    """The Responses endpoint with the server's memory: each response id keeps what its
    request held (the chain of its ``previous_response_id``, then its input) and its
    output; a request names the chain it continues. ``log``: per request, whether it
    continued a chain, its input items, and what the server held for it."""

    def __init__(self) -> None:
        super().__init__("responses")
        self.chains: dict[str, list[dict]] = {}
        self.log: list[tuple[bool, int, list[dict]]] = []
        self.before: Any = None  # called before each request (what happened since the last)

    def answer(self, content: bytes) -> dict:
        payload = json.loads(content)
        prev = payload.get("previous_response_id")
        if prev and prev not in self.chains:
            self.problems.append((len(self.payloads) + 1, [f"unknown response {prev}"]))
        held = [*self.chains.get(prev or "", []), *payload["input"]]
        if self.before is not None:
            self.before(bool(prev))
        out = super().answer(json.dumps({**payload, "input": held}).encode())
        self.chains[out["id"]] = [*held, *out["output"]]
        self.log.append((bool(prev), len(payload["input"]), held))
        return out


def held_text(items: list[dict]) -> str:
    """The text of what the server holds: messages, calls, their results."""
    parts: list[str] = []
    for it in items:
        content = it.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
        parts += [str(it.get(k, "")) for k in ("name", "arguments", "output")]
    return "\n".join(p for p in parts if p)


def check_chains(server: ChainServer, ac: Any, thread: str, run: Any) -> None:
    """Run ``run`` against ``server``: after a compaction or an edit of the context (any
    event but a calibration or a pin since the last request), the request carries the whole view
    and no ``previous_response_id``; between them requests continue the chain with only
    the new items; the server never holds more than the budget by the package's count."""
    store, seen = ac.store, [0]
    restarts: list[bool] = []

    def before(continued: bool) -> None:
        # a pin changes nothing the model sees (until a compaction spares the message)
        quiet = ("calibration", "tool:pin")
        events = [e for e in store.list_events(thread) if e.strategy not in quiet]
        if len(events) > seen[0]:
            restarts.append(not continued)
        seen[0] = len(events)

    server.before = before
    run()
    assert server.problems == []
    assert restarts and all(restarts), restarts  # compacted or edited: a new chain
    continued = [n for prev, n, _ in server.log if prev]
    assert len(continued) >= 3 and max(continued) <= 3, server.log  # only the new items
    biggest = max(ac.counter.count_text(held_text(held)) for _, _, held in server.log)
    assert biggest <= ac.config.max_tokens, biggest


@pytest.mark.parametrize("asynchronous", [False, True])
def test_openai_server_side_chain_restarts_after_each_compaction_of_create_agent(
    asynchronous: bool,
) -> None:
    """``ChatOpenAI(use_previous_response_id=True)`` sends only what follows the newest
    reply with a ``resp_`` id: the server held the uncompressed conversation, which grew
    past the budget (2.6x at the end of two rounds), no compaction or edit reached the
    model, and it saw no tags of earlier messages to edit. Now the replies' ids are dropped from the view's copies when the view before
    them is not what was sent: a new chain starts from the compressed view."""
    server = ChainServer()
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(max_tokens=20_000, metadata_tags=True, tag_format="seed")
    ac = AutoContext(cfg, store=store)
    agent = build_agent(ac, server.model(use_previous_response_id=True), store)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    check_chains(server, ac, "t", lambda: run_build_rounds(agent, server, config, asynchronous))
    kinds = Counter(e.strategy for e in store.list_events("t"))
    assert {"offload_all", "tool:update", "tool:delete"} <= set(kinds), kinds


@pytest.mark.parametrize("asynchronous", [False, True])
def test_openai_server_side_chain_restarts_after_each_compaction_of_a_state_graph(
    asynchronous: bool,
) -> None:
    """The same with ``ac.node()`` → ``ac.model_node(…)`` → ``ac.command_node()`` in a
    ``StateGraph`` (the reply reaches the package through ``ModelCall.update``)."""
    server = ChainServer()
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(
        max_tokens=20_000, msg_threshold=24, metadata_tags=True, tag_format="seed"
    )
    ac = AutoContext(cfg, store=store)
    graph = build_graph(ac, server.model(use_previous_response_id=True), store)
    config: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 200}

    def run() -> None:
        run_build_rounds(graph, server, config, asynchronous, system_in_state=True)

    check_chains(server, ac, "g", run)


def test_a_bound_previous_response_id_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ChatOpenAI(use_responses_api=True).bind(previous_response_id=…)``: OpenAI puts
    the conversation it holds under that id before every request, the compressed view
    too (and before each chain the package restarts, with use_previous_response_id): the
    server held the old conversation beside the budget, uncounted, without a word. Each
    surface that is given the model warns (once per process)."""
    import langchain_autocontext.view as view_module

    server = ChainServer()
    server.script = lambda step, payload: "Noted."
    old = server.model().invoke([HumanMessage(" ".join(f"fact{i}" for i in range(1_500)))])
    bound = server.model(use_previous_response_id=True).bind(
        previous_response_id=old.response_metadata["id"]
    )
    ac = AutoContext(AutoContextConfig(max_tokens=2_000, metadata_tags=True))
    msgs: list[Any] = [SystemMessage("You are terse."), HumanMessage("Hi.", id="u1")]
    call = ac.prepare_model_call(msgs)
    call.update(bound.invoke(call.messages))
    held = server.log[-1][2]
    assert ac.counter.count_text(held_text(held)) > ac.config.max_tokens  # the old session
    plain = server.model(use_previous_response_id=True)
    for surface in (
        lambda model: AutoContext(model=model),
        lambda model: AutoContext(max_tokens=8_000).model_node(model),
        lambda model: AutoContext().use_model(model),
    ):
        monkeypatch.setattr(view_module, "_warned_bound_chain", False, raising=False)
        with pytest.warns(UserWarning, match="bound to previous_response_id='resp_"):
            surface(bound)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            surface(plain.bind_tools([]))  # nothing bound: no warning
    monkeypatch.setattr(view_module, "_warned_bound_chain", False, raising=False)
    settings = {"previous_response_id": "resp_1"}

    class Settings(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return handler(request.override(model_settings=settings))

    agent = create_agent(plain, system_prompt="Be brief.", middleware=[Settings(), ac.middleware()])
    server.chains["resp_1"] = []
    with pytest.warns(UserWarning, match="bound to previous_response_id='resp_1'"):
        agent.invoke({"messages": [HumanMessage("hi")]})


@pytest.mark.parametrize("asynchronous", [False, True])
def test_openai_server_side_chain_restarts_after_a_working_context_edit_or_a_delete(
    asynchronous: bool,
) -> None:
    """``prepare_model_call`` and ``call.update(reply)``: a view that extends the one
    sent continues the chain (``previous_response_id``, the new message only); a
    working-context edit (the system section) or a deleted message is sent whole,
    without it, and the state keeps the replies' ids."""
    from langchain_core.messages import AIMessage

    server = ChainServer()
    server.script = lambda step, payload: "Noted."
    model = server.model(use_previous_response_id=True)
    ac = AutoContext(AutoContextConfig(max_tokens=8_000, metadata_tags=True))
    msgs: list[Any] = [SystemMessage("You are terse."), HumanMessage("Hi.", id="u1")]
    state: dict[str, Any] = {}

    def turn(text: str | None = None) -> None:
        nonlocal state
        if text:
            msgs.append(HumanMessage(text, id=f"u{len(msgs)}"))
        call = ac.prepare_model_call(msgs, state=state)
        if asynchronous:
            reply = asyncio.run(model.ainvoke(call.messages))
        else:
            reply = model.invoke(call.messages)
        state = call.update(reply).get("autocontext", state)
        msgs.append(reply)

    turn()
    turn("And now?")
    turn("Once more.")
    assert [prev for prev, _, _ in server.log] == [False, True, True]
    assert [n for _, n, _ in server.log[1:]] == [1, 1]
    state = {**state, "working_context": "The user is terse."}
    turn("Still there?")
    assert server.log[-1][0] is False and "The user is terse." in json.dumps(server.log[-1][2])
    turn("Good.")
    assert server.log[-1][:2] == (True, 1)
    del msgs[1:3]  # the first question and its reply (delete_message)
    turn("Last one.")
    assert server.log[-1][0] is False and "Hi." not in held_text(server.log[-1][2])
    assert all(
        str(m.response_metadata.get("id", "")).startswith("resp_")
        for m in msgs
        if isinstance(m, AIMessage)
    )


# --- beside the provider's own server-side compaction -----------------------------------------
COMPACTION_SUMMARY = "Summary: the agent read the build logs b1 to b6; every build passed."


class CompactingServer(Provider):
    """The provider with its own compaction on: the reply at step ``at`` opens with it
    (Anthropic's ``compaction`` block with the summary, the Responses API's
    ``compaction`` item with its ``encrypted_content``). ``sent_at``: the number of
    requests before the first that can send it back."""

    def __init__(self, api: str, at: int = 7) -> None:
        super().__init__(api)
        self.at = at
        self.block: dict[str, Any] | None = None
        self.sent_at = 0

    def answer(self, content: bytes) -> dict:
        out = super().answer(content)
        if self.block is None and self.payloads[-1].get("tools") and self.step == self.at:
            if self.api == "anthropic":
                self.block = {"type": "compaction", "content": COMPACTION_SUMMARY}
                out["content"].insert(0, dict(self.block))
            else:
                enc = "gAAAAB" + hashlib.sha256(b"compaction").hexdigest() * 60
                self.block = {"type": "compaction", "id": "cmp_1", "encrypted_content": enc}
                out["output"].insert(0, dict(self.block))
            self.sent_at = len(self.payloads)
        return out

    def sent_back(self, payload: dict) -> list[tuple[int, list[dict]]]:
        """Where ``payload`` holds the compaction: (its index in its turn or in the input,
        the turn's blocks or the input items)."""
        if self.api == "anthropic":
            return [
                (k, m["content"])
                for m in payload["messages"]
                if isinstance(m["content"], list)
                for k, b in enumerate(m["content"])
                if b.get("type") == "compaction"
            ]
        items = payload["input"]
        return [(k, items) for k, it in enumerate(items) if it.get("type") == "compaction"]


def set_fields(block: dict) -> dict:
    """``block`` without the null fields langchain-anthropic keeps from the SDK's model."""
    return {k: v for k, v in block.items() if v is not None}


COMPACTING = {
    "anthropic": {
        "betas": ["compact-2026-01-12"],
        "context_management": {"edits": [{"type": "compact_20260112"}]},
    },
    "responses": {"context_management": [{"type": "compaction", "compact_threshold": 200_000}]},
}


@pytest.mark.parametrize("surface", ["create_agent", "state_graph"])
@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_the_providers_own_compaction_is_sent_back_where_the_provider_put_it(
    api: str, surface: str
) -> None:
    """Beside the provider's server-side compaction (Anthropic's ``compact_20260112``
    with extended thinking, the Responses API's ``context_management``) at 6,000 tokens
    with metadata tags: the reply that opens with the compaction is sent back with it
    intact and first in its turn. The tag went before it (Anthropic drops every block
    before the compaction block, and the turn continuing the tool loop no longer
    started with the provider's blocks; the Responses API got an assistant message
    between the compaction item and the items before it). The history keeps the reply
    with its compaction."""
    server = CompactingServer(api)
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(max_tokens=6_000, metadata_tags=True, tag_format="seed")
    ac = AutoContext(cfg, store=store)
    model = server.model(**model_kwargs(api), **COMPACTING[api])
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    if surface == "create_agent":
        run_build_rounds(build_agent(ac, model, store), server, config, False)
    else:
        graph = build_graph(ac, model, store)
        run_build_rounds(graph, server, config, False, system_in_state=True)
    assert server.problems == []
    assert server.block is not None and server.sent_at
    assert server.sent_back(server.payloads[server.sent_at])  # the next request has it
    for payload in server.payloads[server.sent_at :]:
        for k, seq in server.sent_back(payload):
            assert set_fields(seq[k]) == server.block  # intact: unsplit, unmasked
            if api == "anthropic":
                assert k == 0, seq[:k]  # nothing of its turn before it
            else:  # the item before it is no part of its reply
                assert seq[k - 1].get("role") != "assistant", seq[k - 1]
    kept = [
        e.message
        for e in store.get_history("t")
        if isinstance(e.message.content, list)
        and any(set_fields(b) == server.block for b in e.message.content if isinstance(b, dict))
    ]
    assert len(kept) == 1
