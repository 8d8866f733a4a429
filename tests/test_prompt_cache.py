"""What a provider's prompt cache can reuse, checked on the wire.

The package's cost rests on the provider's prompt cache surviving between compactions.
``ChatAnthropic`` (alone, and with LangChain's ``AnthropicPromptCachingMiddleware``
before or after the package's middleware) and ``ChatOpenAI`` (Chat Completions) run a
long ``create_agent`` tool loop over several user rounds against the mock transport of
``test_provider_payloads``; each request's JSON is flattened the way the cache matches
it (Anthropic: tools, then the system blocks, then each message's content blocks in
order; OpenAI: tools, then the messages), ``cache_control`` left out (a breakpoint marks
where to write, it is not content). Every request that follows one with nothing
between them that the package records as a change of the context (a compression, one
of the model's edits: ``store.list_events``) or a working-context edit (the MemGPT
block lives in the system message) must extend it: same tools, same system, every
earlier block byte-identical, only new blocks appended. The one exception is the
one-turn notice (memory pressure, the previous turn's command errors), which closes
the request it is shown in and is gone from the next: only its own block is not reused.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

pytest.importorskip("httpx")
pytest.importorskip("langchain_openai")
pytest.importorskip("langchain_anthropic")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore
from tests.test_provider_payloads import Provider

NOTICE = "[Context manager notice, not from the user]"
#: the ids the tags show: the seed's ``id="…"`` or the compact ``<id tokens/total/>``
TAG_IDS = re.compile(r'<metadata id=\\?"([^"\\]+)|<([0-9a-z]{4,}) \d+/\d+/>')
WORKING_CONTEXT = ("working_context_append", "working_context_replace")


@tool
def grep_src(pattern: str, path: str) -> str:
    """Search the sources."""
    return "\n".join(f"{path}/f{i}.py:{i}: {pattern} = {i * 3}" for i in range(25))


def loop(steps: int) -> Any:
    """The model: a pin by the id a tag shows, a working-context note, then greps whose
    arguments are not in sorted key order (``pattern`` before ``path``), then an answer."""

    def script(step: int, payload: dict) -> list[dict[str, Any]] | str:
        if not payload.get("tools"):  # a summarizer's request
            return "Summary."
        if step > steps:
            return "Done."
        sent = json.dumps(payload)
        ids = [a or b for a, b in TAG_IDS.findall(sent)]
        names = {t.get("name") or t.get("function", {}).get("name") for t in payload["tools"]}

        def call(name: str, **args: Any) -> list[dict[str, Any]]:
            return [{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}"}]

        if step == 3 and "pin_message" in names and len(ids) > 1:
            return call("pin_message", message_id=ids[1])
        if step == 4 and "working_context_append" in names:
            return call("working_context_append", text="plan: grep every module")
        return call("grep_src", pattern=f"x{step}", path="src/zz")

    return script


def cache_blocks(api: str, payload: dict) -> list[tuple[str, str]]:
    """The request as the provider's cache compares it: ``(where, block)`` in order."""

    def plain(block: Any) -> str:
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
        return json.dumps(block)

    out = [("tool", plain(t)) for t in payload.get("tools") or []]
    if api != "anthropic":
        return out + [(f"{i}:{m['role']}", plain(m)) for i, m in enumerate(payload["messages"])]
    system = payload.get("system") or []
    out += [("system", plain(b)) for b in ([system] if isinstance(system, str) else system)]
    for i, m in enumerate(payload["messages"]):
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [(f"{i}:{m['role']}", plain(b)) for b in blocks]
    return out


class Run:
    """One thread of a ``create_agent`` tool loop; for each request the model was sent,
    its payload and whether the context may have changed since the request before."""

    def __init__(self, api: str, config: AutoContextConfig, caching: str | None = None) -> None:
        self.api, self.config, self.caching = api, config, caching
        self.provider = Provider(api)
        self.provider.script = loop(20)
        self.saver, self.backend = InMemorySaver(), InMemoryStore()
        self.requests: list[dict] = []  # the agent's requests (summarizer calls left out)
        self.changed: list[bool] = []  # an event or a working-context edit since the last
        self._seen = 0
        self._edited_wc = False
        self.store = OffloadStore(self.backend)
        answer = self.provider.answer

        def recorded(content: bytes) -> dict:
            payload = json.loads(content)
            reply = answer(content)
            if payload.get("tools"):
                events = [e for e in self.store.list_events("t") if e.kind != "calibration"]
                self.requests.append(payload)
                self.changed.append(len(events) > self._seen or self._edited_wc)
                self._seen = len(events)
                self._edited_wc = bool(set(self._calls(reply)) & set(WORKING_CONTEXT))
            return reply

        self.provider.answer = recorded  # type: ignore[method-assign]

    def agent(self) -> Any:
        """A new agent (a new process) on the same checkpointer and store."""
        self.store = OffloadStore(self.backend)
        ac = AutoContext(self.config, store=self.store)
        middleware: list[Any] = [ac.middleware()]
        if self.caching is not None:
            from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

            cache = AnthropicPromptCachingMiddleware()
            middleware = [cache, *middleware] if self.caching == "before" else [*middleware, cache]
        return create_agent(
            self.provider.model(),
            tools=[grep_src],
            system_prompt="You are a code assistant.",
            middleware=middleware,
            checkpointer=self.saver,
            store=self.store,
        )

    def _calls(self, reply: dict) -> list[str]:
        if self.api == "anthropic":
            return [b["name"] for b in reply["content"] if b.get("type") == "tool_use"]
        calls = reply["choices"][0]["message"].get("tool_calls") or []
        return [c["function"]["name"] for c in calls]

    def rounds(self, *questions: str, restart: bool = False) -> Run:
        agent = self.agent()
        for question in questions:
            if restart:
                agent = self.agent()
            self.provider.step = 0
            out = agent.invoke(
                {"messages": [HumanMessage(question)]},
                {"configurable": {"thread_id": "t"}, "recursion_limit": 300},
            )
            assert out["messages"][-1].text == "Done."
        assert self.provider.problems == []
        return self

    def breaks(self) -> list[str]:
        """The requests that do not extend the one before although nothing changed the
        context between them (the previous request's closing notice aside)."""
        found = []
        for k in range(1, len(self.requests)):
            if self.changed[k]:
                continue
            before = cache_blocks(self.api, self.requests[k - 1])
            while before and NOTICE in before[-1][1]:
                before.pop()  # one-turn: shown once, at the end
            after = cache_blocks(self.api, self.requests[k])
            if after[: len(before)] != before:
                at = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
                found.append(f"request {k}, block {at} ({before[at][0]}): {before[at][1][:160]}")
        return found

    def unchanged(self) -> int:
        return self.changed.count(False) - 1


def settings(tags: str | None) -> AutoContextConfig:
    """12,000 tokens: compactions every few steps, the memory-pressure notice between."""
    if tags is None:  # the defaults: no tags below 32,000 tokens
        return AutoContextConfig(max_tokens=12_000)
    return AutoContextConfig(max_tokens=12_000, metadata_tags=True, tag_format=tags)


QUESTIONS = ("Find x.", "Again.", "Once more.")


@pytest.mark.parametrize("tags", [None, "compact", "seed"])
@pytest.mark.parametrize("api", ["anthropic", "chat"])
def test_each_request_extends_the_last_unless_the_context_changed(
    api: str, tags: str | None
) -> None:
    """Three rounds of 20 tool calls at 12,000 tokens, the package alone: compactions
    (offloads, summaries), the model's pin and working-context notes and the pressure
    notice all happen, and between them every request only appends to the one before.
    The tags keep their numbers (the seed's cumulative counts are sums from the top of
    the context, so appending a message leaves every earlier tag as it was), the
    section, the tools' schemas and order, the ids and the tool calls' argument order
    stay byte-identical."""
    run = Run(api, settings(tags)).rounds(*QUESTIONS)
    assert run.breaks() == []
    assert run.unchanged() > 30  # the property was checked, not vacuous
    assert any(run.changed[1:])  # and compactions happened
    assert any(NOTICE in json.dumps(p) for p in run.requests)
    sent = json.dumps(run.requests[-1])
    assert '"pattern": "x' in sent.replace('\\"', '"')  # arguments in the model's order
    assert "plan: grep every module" in sent  # the working context was edited


@pytest.mark.parametrize("tags", ["compact", "seed"])
@pytest.mark.parametrize("order", ["before", "after"])
def test_anthropic_prompt_caching_middleware_in_either_order(order: str, tags: str) -> None:
    """LangChain's ``AnthropicPromptCachingMiddleware`` before (outer) or after (inner)
    the package's: the prefix property holds as without it, and its breakpoints stay
    where it puts them: the last tool, one system block, and the top-level
    ``cache_control`` (the API's automatic breakpoint on the request's last block). The
    package adds none to the messages and moves none; four at most. Before the package,
    the system breakpoint sits on the agent's own prompt, the package's section a block
    after it; after it, on the one block holding both."""
    run = Run("anthropic", settings(tags), caching=order).rounds(*QUESTIONS)
    assert run.breaks() == []
    assert run.unchanged() > 30
    for p in run.requests:
        assert p.get("cache_control") == {"type": "ephemeral", "ttl": "5m"}
        assert "cache_control" in p["tools"][-1]
        assert not any("cache_control" in t for t in p["tools"][:-1])
        marked = [b for b in p["system"] if "cache_control" in b]
        assert len(marked) == 1
        assert "cache_control" not in json.dumps(p["messages"])
        if order == "before":  # the section, once the package shows itself, a block after
            assert marked[0]["text"] == "You are a code assistant."
            assert all(b["text"].startswith("# Context") for b in p["system"][1:])
        else:
            assert p["system"] == marked
            assert marked[0]["text"].startswith("You are a code assistant.")
    shown = [p for p in run.requests if "# Context" in json.dumps(p["system"])]
    assert shown and len(shown[-1]["system"]) == (2 if order == "before" else 1)


@pytest.mark.parametrize("api", ["anthropic", "chat"])
def test_a_new_process_per_round_keeps_the_prefix(api: str) -> None:
    """A new ``AutoContext`` and agent for each round (a restart) on the same
    checkpointer and store: the first request after it extends the last one before it
    (the short ids, the disclosure and the pressure flag come from the thread, not
    from the process)."""
    run = Run(api, settings("compact")).rounds(*QUESTIONS, restart=True)
    assert run.breaks() == []
    assert run.unchanged() > 30
