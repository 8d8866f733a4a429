"""The provider's count decides (issue 12, items 3-4): the usage each response reports
calibrates later budgets, and a request the provider rejects as too long is compressed
lower and sent once more, through a real ``create_agent`` with the middleware."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _builders import call
from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError
from langchain_autocontext.errors import is_context_overflow

BUDGET = 6_000
#: Compress only near the budget, so the requests come close to it.
NEAR = AutoContextConfig(max_tokens=BUDGET, token_ratio=0.95, target_ratio=0.6)


@tool
def blob(n: int) -> str:
    """Return document ``n`` (about 1,200 tokens)."""
    return "\n".join(f"doc {n} line {i}: value-{n}-{i * 7919 % 1000:03d}" for i in range(110))


class ProviderModel(BaseChatModel):
    """Calls ``blob`` ``steps`` times, then answers. Counts what it receives with the
    package's counter and reports ``factor`` times that as its input tokens; refuses a
    request counting more than ``limit`` with ``error`` (a provider's overflow)."""

    counter: Any
    steps: int = 14
    factor: float = 1.0
    hidden: int = 0  # tokens the provider adds to every request (a hidden tool prompt)
    limit: int | None = None
    error: Any = None
    bound: list = Field(default_factory=list)
    reported: list = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "provider"

    def bind_tools(self, tools, **kwargs):
        self.bound = list(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        counted = self.counter.count(messages, self.bound)
        if self.limit is not None and counted > self.limit:
            raise self.error
        n = self.calls
        self.calls += 1
        reported = int(counted * self.factor) + self.hidden
        self.reported.append(reported)
        done = n >= self.steps
        msg = (
            AIMessage("All documents read.")
            if done
            else AIMessage("", tool_calls=[call("blob", {"n": n})])
        )
        msg.usage_metadata = {
            "input_tokens": reported,
            "output_tokens": 5,
            "total_tokens": reported + 5,
        }
        return ChatResult(generations=[ChatGeneration(message=msg)])


def agent(ac: AutoContext, model: ProviderModel, store: Any) -> Any:
    return create_agent(
        model,
        tools=[blob],
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )


def run(graph: Any, mode: str, thread: str) -> dict:
    cfg = {"configurable": {"thread_id": thread}, "recursion_limit": 500}
    inputs = {"messages": [HumanMessage("Read the documents.")]}
    if mode == "sync":
        return graph.invoke(inputs, cfg)
    return asyncio.run(graph.ainvoke(inputs, cfg))


def events(ac: AutoContext, store: Any, thread: str, kind: str) -> list[dict]:
    return [e for e in ac.resolve_store(store).list_events(thread) if e.kind == kind]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_provider_counting_25_percent_more_is_never_sent_over_budget_after_its_first_reply(
    mode: str,
) -> None:
    store = InMemoryStore()
    ac = AutoContext(NEAR, store=store)
    model = ProviderModel(counter=ac.counter, factor=1.25)
    out = run(agent(ac, model, store), mode, "cal")
    assert out["messages"][-1].content == "All documents read."
    assert len(model.reported) > 10
    assert max(model.reported[1:]) <= BUDGET, model.reported
    (event, *_) = events(ac, store, "cal", "calibration")
    assert event.scale_after >= 1.25 and event.reported_tokens > event.counted_tokens

    # the same run with a provider that counts like the package: the requests do come
    # near the budget, so without the calibration 25% more would have gone over it
    control_store = InMemoryStore()
    control = AutoContext(NEAR, store=control_store)
    exact = ProviderModel(counter=control.counter, factor=1.0)
    run(agent(control, exact, control_store), mode, "control")
    assert max(exact.reported) * 1.25 > BUDGET
    assert not events(control, control_store, "control", "calibration")


class _OpenAIStyle(Exception):
    code = "context_length_exceeded"


OVERFLOWS = {
    "langchain": ContextOverflowError("input exceeds the context window"),
    "openai": _OpenAIStyle("This model's maximum context length is 4097 tokens."),
    "anthropic": RuntimeError("prompt is too long: 210000 tokens > 200000 maximum"),
}


@pytest.mark.parametrize("shape", sorted(OVERFLOWS))
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_request_rejected_as_too_long_is_compressed_and_sent_again(shape: str, mode: str) -> None:
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=BUDGET), store=store)
    # the provider's real window holds 3,500 of the package's tokens, not 6,000 (the
    # requests of this run reach about 3,800 before each compaction)
    model = ProviderModel(counter=ac.counter, limit=3_500, error=OVERFLOWS[shape])
    out = run(agent(ac, model, store), mode, "over")
    assert out["messages"][-1].content == "All documents read."
    (event, *_) = events(ac, store, "over", "overflow")
    assert event.scale_after == 1.25 and shape in {"langchain", "openai", "anthropic"}
    assert event.tokens_after <= 3_500
    assert max(model.reported) <= 3_500  # every request answered fit the real window


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_rejection_is_a_clear_error(mode: str) -> None:
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=BUDGET), store=store)
    model = ProviderModel(counter=ac.counter, limit=10, error=OVERFLOWS["anthropic"])
    with pytest.raises(ContextBudgetError, match="rejected the request as too long twice"):
        run(agent(ac, model, store), mode, "twice")


def test_other_errors_are_not_taken_for_an_overflow() -> None:
    assert not is_context_overflow(RuntimeError("rate limit reached"))
    assert not is_context_overflow(ValueError("bad request: unknown parameter"))
    # Bedrock's throttling speaks of tokens: compressing and resending at once would be wrong
    throttled = RuntimeError(
        "An error occurred (ThrottlingException) when calling the Converse operation: "
        "Too many tokens, please wait before trying again."
    )
    assert not is_context_overflow(throttled)
    assert all(is_context_overflow(e) for e in OVERFLOWS.values())
    # what Gemini and Anthropic (input plus the reply's max_tokens) say
    assert is_context_overflow(
        RuntimeError(
            "400 The input token count (1048577) exceeds the maximum number of "
            "tokens allowed (1048576)."
        )
    )
    assert is_context_overflow(
        RuntimeError("input length and `max_tokens` exceed context limit: 150000 + 64000 > 200000")
    )


@pytest.mark.parametrize(
    ("text", "overflow"),
    [
        ("400 The input token count (1048577) exceeds the maximum number of tokens allowed", True),
        ("input length and `max_tokens` exceed context limit: 150000 + 64000 > 200000", True),
        (
            "This model's maximum context length is 8192 tokens. Please reduce the length of the messages.",
            True,
        ),
        ("Request has too many input tokens for this model", True),
        ("Input exceeds the model's maximum input length", True),
        ("ThrottlingException: Too many tokens, please wait before trying again.", False),
        ("Rate limit reached: too many tokens per minute", False),
        ("bad request: unknown parameter", False),
    ],
)
def test_the_agent_and_the_summarizer_read_an_overflow_alike(text: str, overflow: bool) -> None:
    """The agent's overflow recovery and the summarizer's retries had two vocabularies:
    an overflow only one knew was retried by the summarizer, or not recovered by the
    agent. Both read one now (``errors.says_context_overflow``)."""
    from langchain_autocontext.summarizers.calls import cannot_succeed

    error = RuntimeError(text)
    assert is_context_overflow(error) is overflow
    assert cannot_succeed(error) is overflow


def test_a_fixed_cost_the_package_does_not_see_is_not_taken_for_a_ratio() -> None:
    """A provider adding a fixed 400 tokens (a hidden tool prompt) to a first request of
    50 used to make a scale of 9.6: the budget fell to a tenth and a document that fits
    was offloaded. The excess beyond a tokenizer's plausible ratio is a fixed cost: the
    budget keeps room for it, and the documents stay whole."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=20_000), store=store)
    model = ProviderModel(counter=ac.counter, steps=6, hidden=400)
    out = run(agent(ac, model, store), "sync", "fixed")
    assert out["messages"][-1].content == "All documents read."
    assert max(model.reported) <= 20_000
    first, *_ = events(ac, store, "fixed", "calibration")
    assert first.counted_tokens < 100 and first.scale_after < 2.0
    results = [m for m in out["messages"] if m.type == "tool"]
    assert len(results) == 6 and not any("Offloaded" in str(m.content) for m in results)


# --- everything sent is counted: the response format's tool ------------------------------------
def _big_schema() -> Any:
    from pydantic import create_model

    fields = {
        f"field_{k}": (str, Field(description=f"The {k}th detail of the booking, " + "as " * 30))
        for k in range(40)
    }
    return create_model("Booking", **fields)


class FormatModel(ProviderModel):
    """Reads ``steps`` documents, then answers through the response-format tool."""

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        counted = self.counter.count(messages, self.bound)
        self.reported.append(counted)
        n = self.calls
        self.calls += 1
        if n < self.steps:
            msg = AIMessage("", tool_calls=[call("blob", {"n": n})])
        else:
            args = {f"field_{k}": "x" for k in range(40)}
            msg = AIMessage("", tool_calls=[call("Booking", args)])
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_response_format_tool_is_counted_in_the_budget(mode: str) -> None:
    from langchain.agents.structured_output import ToolStrategy

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=BUDGET), store=store)
    model = FormatModel(counter=ac.counter, steps=10)
    schema = _big_schema()
    graph = create_agent(
        model,
        tools=[blob],
        middleware=[ac.middleware()],
        response_format=ToolStrategy(schema),
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = run(graph, mode, "format")
    assert out["structured_response"].field_0 == "x"
    assert any(getattr(t, "name", None) == "Booking" for t in model.bound)
    format_tokens = ac.counter.count_tools([t for t in model.bound if t.name == "Booking"])
    assert format_tokens > 500  # large enough to matter
    assert max(model.reported) <= BUDGET, model.reported


# --- everything sent is counted: tools bound to the model of a StateGraph ----------------------
class BoundModel(BaseChatModel):
    """Counts what it receives with the tools it was bound with (``model.bind(tools=…)``,
    what ``bind_tools`` returns for OpenAI-style models); reads documents, then answers."""

    counter: Any
    steps: int = 12
    reported: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "bound"

    def _generate(self, messages, stop=None, run_manager=None, tools=None, **kw):
        self.reported.append(self.counter.count(messages, tools or []))
        n = len(self.reported) - 1
        msg = (
            AIMessage("", tool_calls=[call("blob", {"n": n})])
            if n < self.steps
            else AIMessage("All documents read.")
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])


def test_the_tools_bound_to_a_stategraph_model_are_counted() -> None:
    """The README's StateGraph wiring without ``AutoContext(tools=…)``: the bound tools'
    schemas (here 60 of them, ~2,300 tokens) still count in the budget."""
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_autocontext import AutoContextState

    def make(k: int) -> Any:
        def op(ref: str) -> str:
            return ref

        return StructuredTool.from_function(
            op, name=f"op_{k}", description=f"Operation {k} on a booking, " + "with care " * 6
        )

    extra = [make(k) for k in range(60)]
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=BUDGET), store=store)  # no tools=
    model = BoundModel(counter=ac.counter)
    llm = model.bind(tools=[convert_to_openai_tool(t) for t in [blob, *extra]])
    g = StateGraph(AutoContextState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(llm))
    g.add_node("tools", ToolNode([blob, *extra]))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "autocontext")
    graph = g.compile(store=store, checkpointer=InMemorySaver())
    out = run(graph, "sync", "bound")
    assert out["messages"][-1].content == "All documents read."
    assert ac.counter.count_tools(extra) > 1_000
    assert max(model.reported) <= BUDGET, model.reported


def test_a_prompt_that_grows_after_before_model_is_fitted_to_the_calibrated_budget() -> None:
    """A @dynamic_prompt placed before the package (passages retrieved per call) makes
    a request larger than before_model budgeted for. The view was only checked against
    the unscaled max_tokens, so with a provider counting 30% more a request over the
    thread's calibrated budget went out and was rejected; it is fitted first now."""
    from langchain.agents.middleware import dynamic_prompt

    step = {"n": 0}

    @dynamic_prompt
    def passages(request: Any) -> str:
        step["n"] += 1
        many = 230 if step["n"] % 4 == 0 else 5  # every fourth call retrieves a lot
        lines = (f"passage {i}: fact-{i * 7 % 101} holds for item {i}" for i in range(many))
        return "You answer from these passages:\n" + "\n".join(lines)

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    model = ProviderModel(
        counter=ac.counter,
        steps=30,
        factor=1.3,
        limit=int(8_000 / 1.3),
        error=ContextOverflowError("prompt is too long"),
    )
    graph = create_agent(
        model,
        tools=[blob],
        middleware=[passages, ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = run(graph, "sync", "rag")
    assert out["messages"][-1].content == "All documents read."
    assert not events(ac, store, "rag", "overflow")  # never rejected: fitted before sending
    assert max(model.reported[1:]) <= 8_000


class VaryingProvider(ProviderModel):
    """Counts 12-18% more than the package, the ratio moving with each request's content
    as it does between two tokenizers."""

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.factor = 1.12 + 0.06 * ((self.calls * 7) % 5) / 4
        return super()._generate(messages, stop, run_manager, **kw)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_ratio_that_moves_with_the_content_settles_the_calibration(mode: str) -> None:
    """The calibration followed each request's ratio: a provider counting 12-18% more
    rewrote the thread's scale (and recorded an event) on nearly every call (300 of 300
    in the soak audit). It now rises at once and falls only past twice its margin."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=6_000), store=store)
    model = VaryingProvider(counter=ac.counter, steps=60)
    run(agent(ac, model, store), mode, "vary")
    assert model.calls == 61
    assert 1 <= len(events(ac, store, "vary", "calibration")) <= 4
    # later requests stay within the budget by the provider's own count
    assert max(model.reported[5:]) <= 6_000


class WatchedProvider(ProviderModel):
    """A :class:`ProviderModel` that records, for every request it receives (refused
    ones too), whether the package's section is in the system message and which tools
    were bound."""

    requests: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        section = "# Context: " in str(messages[0].content)
        self.requests.append((section, {getattr(t, "name", None) for t in self.bound}))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_retry_that_first_shows_the_package_sends_its_tools_too(mode: str) -> None:
    """The provider refuses a request as too long before anything was compressed: the
    retry is compressed, which shows the package (tags, section), and now carries the
    package's tools with it, counted in the budget. They were chosen on the messages
    before the fit and came one call late (audit)."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=40_000, metadata_tags=True), store=store)
    own = {t.name for t in ac.tools}
    # refused below the package's trigger (about 30,200), so nothing is shown before
    model = WatchedProvider(counter=ac.counter, steps=30, limit=29_000, error=OVERFLOWS["openai"])
    out = run(agent(ac, model, store), mode, "retry")
    assert out["messages"][-1].content == "All documents read."
    assert len(events(ac, store, "retry", "overflow")) == 1
    shown = [section for section, _ in model.requests]
    first = shown.index(True)
    assert not model.requests[first - 1][0]  # the refused request showed nothing
    for section, tools in model.requests:
        assert (own <= tools) is section and (own & tools == set()) is (not section)
    assert max(model.reported) <= 29_000


class SpikeModel(ProviderModel):
    """Reports ten times its count once (a server-side tool loop's summed usage)."""

    spike_at: int = 3

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        result = super()._generate(messages, stop, run_manager, **kw)
        if self.calls - 1 == self.spike_at:
            msg = result.generations[0].message
            spiked = msg.usage_metadata["input_tokens"] * 10
            msg.usage_metadata = {**msg.usage_metadata, "input_tokens": spiked}
        return result


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_report_far_beyond_the_budget_does_not_stop_the_run(mode: str) -> None:
    """A usage report ten times the request (more than the whole budget set aside as a
    fixed cost) put the scale at its cap: the next call of the round raised
    ContextBudgetError. Such a report is not taken for a cost of every request."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=BUDGET), store=store)
    model = SpikeModel(counter=ac.counter)
    out = run(agent(ac, model, store), mode, "spike")
    assert out["messages"][-1].content == "All documents read."
    assert not events(ac, store, "spike", "calibration")


class CompactingProvider(ProviderModel):
    """A provider with its own server-side compaction (Anthropic's ``compact_20260112``)
    and a tokenizer counting 25% more: its reply to call ``compact_at`` opens with a
    ``compaction`` block and reports the compacted context's tokens (the top-level
    usage leaves the compaction out); later requests are billed from their last
    compaction block on (the provider drops what comes before it), the whole request
    once the package compressed the block away."""

    compact_at: int = 4

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        result = super()._generate(messages, stop, run_manager, **kw)
        msg = result.generations[0].message
        last = max(
            (
                i
                for i, m in enumerate(messages)
                if isinstance(m.content, list)
                and any(isinstance(b, dict) and b.get("type") == "compaction" for b in m.content)
            ),
            default=None,
        )
        billed = self.reported[-1]
        if self.calls - 1 == self.compact_at:
            summary = {"type": "compaction", "content": "Summary: documents 0-3 read."}
            msg.content = [summary, *(msg.content if isinstance(msg.content, list) else [])]
            billed = 300  # what is left after the compaction
        elif last is not None:
            kept = [messages[0], *messages[last:]]  # the system prompt is never dropped
            billed = int(self.counter.count(kept, self.bound) * self.factor)
        self.reported[-1] = billed
        msg.usage_metadata = {**msg.usage_metadata, "input_tokens": billed}
        return result


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_usage_of_a_provider_compaction_does_not_lower_the_calibration(mode: str) -> None:
    """The provider's own compaction reports the compacted context's tokens (and then
    bills only from its compaction block on), far less than the package sent: taken as
    the provider's ratio, it put the thread's scale back to 1, under a tokenizer
    counting 25% more, until a reply to a request without the block raised it again
    (a request sent in between counted less than the provider bills). Such a report
    may raise the scale, never lower it."""
    store = InMemoryStore()
    ac = AutoContext(NEAR, store=store)
    model = CompactingProvider(counter=ac.counter, factor=1.25, steps=20)
    out = run(agent(ac, model, store), mode, "compact")
    assert out["messages"][-1].content == "All documents read."
    assert min(e.scale_after for e in events(ac, store, "compact", "calibration")) >= 1.25
    assert max(model.reported[1:]) <= BUDGET, model.reported
