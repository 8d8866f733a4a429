"""Issue 12, items 1-2: LangChain-style ``trigger=``/``keep=`` and the budget read from
the model's profile.

The agent runs are real ``create_agent`` runs with a fake chat model whose ``profile``
states its window; what the model receives is measured with the package's counter.
"""

from __future__ import annotations

import re
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from _builders import log_text, sh
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    AutoContextMiddleware,
    AutoContextState,
    InvalidConfigError,
)
from langchain_autocontext.budget import ModelWindow, model_window
from langchain_autocontext.config import TAGS_MIN_TOKENS as TAGS_MIN
from langchain_autocontext.messages import find_violations, text_of

THREAD = {"configurable": {"thread_id": "t"}, "recursion_limit": 500}
DEFAULT_MAX = AutoContextConfig.model_fields["max_tokens"].default
#: The context tools that take the ids the metadata tags show.
EDITING = {"update_message", "delete_message", "pin_message"}


def script(steps: int, lines: int):
    """``steps`` shell calls printing ``lines`` lines each, then an answer."""
    for n in range(steps):
        args = {"command": f"make {n}", "lines": lines}
        yield AIMessage("", tool_calls=[{"name": "sh", "args": args, "id": f"c{n}"}])
    yield AIMessage(f"done after {steps} calls")


class WindowModel(GenericFakeChatModel):
    """A scripted fake chat model that records what it receives and the tools bound."""

    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        self.bound = list(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def windowed(steps: int = 40, lines: int = 30, **profile: Any) -> WindowModel:
    return WindowModel(messages=script(steps, lines), profile=profile or None)


def agent(model: WindowModel, middleware: AgentMiddleware, *extra: AgentMiddleware) -> Any:
    return create_agent(
        model,
        [sh],
        system_prompt="Be brief.",
        middleware=[*extra, middleware],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )


async def run(graph: Any, run_async: bool) -> dict[str, Any]:
    msgs = {"messages": [HumanMessage("go")]}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*no store given")
        return await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)


def ac_count(ac: AutoContext, texts: list[str]) -> int:
    return sum(ac.counter.count_text(t) for t in texts)


def sent_tokens(model: WindowModel, ac: AutoContext) -> list[int]:
    return [ac.counter.count(sent, model.bound) for sent in model.seen]


# --- trigger= and keep=: the forms and what they map to ---------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"trigger": ("tokens", 6_000)}, {"token_ratio": 0.75, "target_ratio": 0.4}),
        ({"trigger": ("fraction", 0.6)}, {"token_ratio": 0.6, "target_ratio": 0.32}),
        ({"trigger": ("fraction", 0.3)}, {"token_ratio": 0.3, "target_ratio": 0.16}),
        ({"trigger": ("messages", 40)}, {"msg_threshold": 40, "token_ratio": 0.75}),
        (
            {"trigger": [("tokens", 7_000), ("messages", 60)]},
            {"token_ratio": 0.875, "msg_threshold": 60},
        ),
        ({"keep": ("tokens", 2_000)}, {"target_ratio": 0.25, "token_ratio": 0.75}),
        ({"keep": ("fraction", 0.4)}, {"target_ratio": 0.4}),
        (
            {"trigger": ("tokens", 6_000), "keep": ("tokens", 3_000)},
            {"token_ratio": 0.75, "target_ratio": 0.375},
        ),
        (
            {"trigger": ("fraction", 0.9), "keep": ("fraction", 0.6)},
            {"token_ratio": 0.9, "target_ratio": 0.6},
        ),
    ],
)
def test_trigger_and_keep_map_onto_the_config(
    kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    for build in (AutoContext, AutoContextMiddleware):
        built = build(max_tokens=8_000, **kwargs)
        cfg = built.config if isinstance(built, AutoContext) else built.autocontext.config
        assert cfg.max_tokens == 8_000
        for name, value in expected.items():
            assert getattr(cfg, name) == pytest.approx(value), name


def test_token_forms_give_back_exact_token_counts() -> None:
    cfg = AutoContext(max_tokens=7_001, trigger=("tokens", 6_000), keep=("tokens", 2_999)).config
    assert (cfg.trigger_tokens, cfg.target_tokens) == (6_000, 2_999)
    # keep without trigger is checked against the config's own trigger
    cfg = AutoContext(AutoContextConfig(max_tokens=10_000), keep=("tokens", 1_000)).config
    assert (cfg.trigger_tokens, cfg.target_tokens) == (7_500, 1_000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trigger": ("tokenz", 5)}, "unknown kind 'tokenz'"),
        ({"trigger": ("tokens", 0)}, "greater than 0"),
        ({"trigger": ("messages", -3)}, "greater than 0"),
        ({"trigger": ("tokens", 5.5)}, "whole number"),
        ({"trigger": ("tokens", True)}, "must be a number"),
        ({"trigger": ("fraction", 0)}, r"\(0, 1\]"),
        ({"trigger": ("fraction", 1.5)}, r"\(0, 1\]"),
        ({"trigger": ("fraction", float("nan"))}, r"\(0, 1\]"),
        ({"trigger": ("fraction", "0.5")}, "must be a number"),
        ({"trigger": "tokens"}, r"\(kind, value\) tuple"),
        ({"trigger": {"tokens": 5_000}}, r"\(kind, value\) tuple"),
        ({"trigger": []}, r"\(kind, value\) tuple"),
        ({"trigger": ("tokens", 1, 2)}, r"\(kind, value\) tuple"),
        ({"trigger": [("tokens", 5_000), ("fraction", 0.5)]}, "at most one token trigger"),
        ({"trigger": [("messages", 5), ("messages", 9)]}, "one message trigger"),
        ({"keep": ("messages", 20)}, r"not supported.*'tokens', n.*'fraction', x"),
        ({"keep": ("fraction", 1.2)}, r"\(0, 1\]"),
        ({"keep": [("tokens", 100)]}, r"\(kind, value\) tuple"),
        ({"trigger": ("tokens", 4_000), "keep": ("tokens", 4_000)}, "must be below"),
        ({"trigger": ("fraction", 0.5), "keep": ("fraction", 0.7)}, "must be below"),
        ({"trigger": ("fraction", 0.5), "keep": ("tokens", 5_000)}, "must be below"),
        ({"keep": ("fraction", 0.8)}, r"must be below token_ratio=0.75"),
        ({"trigger": ("tokens", 9_000)}, "above the budget max_tokens=8,000 \\(given\\)"),
        ({"keep": ("tokens", 9_000)}, "above the budget"),
        ({"trigger": ("fraction", 0.5), "token_ratio": 0.5}, "trigger= or token_ratio="),
        ({"trigger": ("messages", 50), "msg_threshold": 50}, "trigger= or msg_threshold="),
        ({"keep": ("fraction", 0.3), "target_ratio": 0.3}, "keep= or target_ratio="),
    ],
)
def test_every_invalid_form_is_an_invalid_config_error(
    kwargs: dict[str, Any], message: str
) -> None:
    for build in (AutoContext, AutoContextMiddleware):
        with pytest.raises(InvalidConfigError, match=message):
            build(max_tokens=8_000, **kwargs)


def test_a_trigger_above_the_default_budget_says_how_to_set_it() -> None:
    with pytest.raises(InvalidConfigError, match="no max_tokens given and no model window"):
        AutoContext(trigger=("tokens", DEFAULT_MAX + 1))


class Broken:
    @property
    def profile(self) -> Any:
        raise RuntimeError("no profile here")


# --- the window of the model ----------------------------------------------------------------------------
def test_model_window_reads_the_profile_and_guards_its_absence() -> None:
    assert model_window(windowed(max_input_tokens=8_000)) == ModelWindow(8_000)
    assert model_window(windowed(max_input_tokens=8_000, max_output_tokens=1_000)) == (
        ModelWindow(8_000, 1_000)
    )
    assert model_window(windowed()) is None  # no profile
    assert model_window(windowed(max_output_tokens=1_000)) is None
    assert model_window(SimpleNamespace(profile={"max_input_tokens": "8000"})) is None
    assert model_window(SimpleNamespace(profile={"max_input_tokens": True})) is None
    assert model_window(SimpleNamespace(profile={"max_input_tokens": 0})) is None
    assert model_window(SimpleNamespace(profile="8000")) is None
    assert model_window(Broken()) is None
    assert model_window(object()) is None
    assert model_window(None) is None
    # room for the reply: max_output_tokens, at most a quarter; a quarter when unknown
    assert ModelWindow(8_000).budget == 6_000
    assert ModelWindow(8_000, 1_000).budget == 7_000
    assert ModelWindow(200_000, 64_000).budget == 150_000


def test_a_local_model_gives_the_window_it_is_served_with() -> None:
    """ChatOllama has no window in its profile: its ``num_ctx`` is the window the server
    runs the model with (unset, Ollama cuts a longer prompt silently at its own default,
    so no window is guessed), ``num_predict`` the reply it asks for; llama.cpp's
    ``n_ctx`` alike. A profile window larger than the served one is cut to it."""
    ollama = pytest.importorskip("langchain_ollama")
    assert model_window(ollama.ChatOllama(model="llama3.1")) is None
    served = model_window(ollama.ChatOllama(model="llama3.1", num_ctx=8_192))
    assert served == ModelWindow(8_192, source="num_ctx") and served.budget == 6_144
    asks = model_window(ollama.ChatOllama(model="llama3.1", num_ctx=8_192, num_predict=3_000))
    assert asks is not None and asks.budget == 8_192 - 3_000
    assert "num_ctx=8,192" in asks.describe()
    assert model_window(SimpleNamespace(n_ctx=4_096)) == ModelWindow(4_096, source="n_ctx")
    big = {"max_input_tokens": 128_000, "max_output_tokens": 1_000}
    assert model_window(SimpleNamespace(profile=big, num_ctx=8_192)) == ModelWindow(
        8_192, 1_000, source="num_ctx"
    )
    small = {"max_input_tokens": 4_000}
    assert model_window(SimpleNamespace(profile=small, num_ctx=8_192)) == ModelWindow(4_000)
    ac = AutoContext(model=ollama.ChatOllama(model="llama3.1", num_ctx=8_192))
    assert ac.config.max_tokens == 6_144 and ac.window is not None


def test_a_wrapped_model_is_read_through_its_wrapper() -> None:
    """``with_retry()`` hid the model's window (the default budget was used); with
    ``with_fallbacks`` a request may reach any model of the chain, so the smallest
    budget of those that state a window holds for all (the primary's alone overflowed a
    smaller fallback)."""
    big, small, unknown = (
        windowed(max_input_tokens=8_000),
        windowed(max_input_tokens=4_000),
        windowed(),
    )
    assert model_window(big.with_retry()) == ModelWindow(8_000)
    assert model_window(big.with_config(tags=["x"]).with_retry()) == ModelWindow(8_000)
    assert model_window(big.with_fallbacks([small])) == ModelWindow(4_000)
    assert model_window(big.with_retry().with_fallbacks([small.with_retry()])) == ModelWindow(4_000)
    assert model_window(big.with_fallbacks([unknown])) == ModelWindow(8_000)
    assert model_window(unknown.with_fallbacks([unknown])) is None
    ac = AutoContext(model=big.with_fallbacks([small]))
    assert ac.config.max_tokens == 3_000


class AsksModel(WindowModel):
    """A fake chat model with a reply size of its own, as ChatAnthropic's ``max_tokens``."""

    max_tokens: int | None = None


LONG_REPLIES = {"max_input_tokens": 200_000, "max_output_tokens": 64_000}


def test_a_bound_reply_size_is_the_one_the_budget_leaves_room_for() -> None:
    """``model.bind(max_tokens=…)`` sends its ``max_tokens`` with the request instead of
    the model's own (an outer binding's over an inner one's): the budget left room for
    the model's own, so a model asking for 1,024 bound to 64,000 got a 150,000 budget on
    a 200,000 window that input and reply share (rejected by the provider), and one
    bound to ask for less than its own lost the difference."""
    small = AsksModel(messages=iter([]), profile=LONG_REPLIES, max_tokens=1_024)
    large = AsksModel(messages=iter([]), profile=LONG_REPLIES, max_tokens=64_000)
    assert model_window(small).budget == 150_000
    assert model_window(small.bind(max_tokens=64_000)).budget == 136_000
    assert model_window(small.bind(max_completion_tokens=64_000)).budget == 136_000
    assert model_window(small.bind(max_tokens=64_000).with_retry()).budget == 136_000
    assert model_window(small.with_retry().bind(max_tokens=64_000)).budget == 136_000
    assert model_window(small.with_fallbacks([small]).bind(max_tokens=64_000)).budget == 136_000
    assert model_window(large).budget == 136_000
    assert model_window(large.bind(max_tokens=4_096)).budget == 150_000
    assert model_window(large.bind(temperature=0)).budget == 136_000  # not a reply size
    assert AutoContext(model=small.bind(max_tokens=64_000)).config.max_tokens == 136_000
    assert AutoContext(model=large.bind(max_tokens=4_096)).config.max_tokens == 150_000


def test_a_bound_ollama_options_replaces_the_models_own() -> None:
    """ChatOllama sends a bound ``options`` mapping instead of its own ``num_ctx`` and
    ``num_predict`` (``ChatOllama._chat_params``): the window is the bound ``num_ctx``,
    and without one the server runs its own default (no window known)."""
    ollama = pytest.importorskip("langchain_ollama")
    model = ollama.ChatOllama(model="llama3.1", num_ctx=8_192, num_predict=3_000)
    assert model_window(model).budget == 8_192 - 3_000
    bound = model_window(model.bind(options={"num_ctx": 4_096, "num_predict": 2_000}))
    assert bound == ModelWindow(4_096, requested_output=2_000, source="num_ctx")
    assert model_window(model.bind(options={"num_ctx": 4_096})).budget == 3_072  # a quarter
    assert model_window(model.bind(options={"temperature": 0})) is None


@pytest.mark.parametrize("run_async", [False, True])
async def test_the_middleware_reads_the_reply_size_of_the_requests_model_settings(
    run_async: bool,
) -> None:
    """create_agent binds ``request.model_settings`` with the tools (a middleware before
    this one may set ``max_tokens`` there): the budget leaves room for that reply."""

    class AskMore(AgentMiddleware):
        def wrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
            return handler(request.override(model_settings={"max_tokens": 64_000}))

        async def awrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
            return await handler(request.override(model_settings={"max_tokens": 64_000}))

    model = AsksModel(messages=iter([AIMessage("ok")]), profile=LONG_REPLIES, max_tokens=1_024)
    mw = AutoContextMiddleware()
    await run(agent(model, mw, AskMore()), run_async)
    assert mw.autocontext.config.max_tokens == 136_000
    # a binding's own max_tokens is not sent when create_agent binds tools (bind_tools
    # goes to the model it binds): the model's own reply size is the one sent
    model = AsksModel(messages=iter([AIMessage("ok")]), profile=LONG_REPLIES, max_tokens=64_000)
    mw = AutoContextMiddleware()
    await run(agent(model.bind(max_tokens=4_096), mw), run_async)  # type: ignore[arg-type]
    assert mw.autocontext.config.max_tokens == 136_000


def test_model_argument_sets_the_budget_at_construction() -> None:
    model = windowed(max_input_tokens=8_000)
    ac = AutoContext(model=model, trigger=("tokens", 4_000), keep=("fraction", 0.25))
    assert ac.window == ModelWindow(8_000)
    assert (ac.config.max_tokens, ac.config.trigger_tokens, ac.config.target_ratio) == (
        6_000,
        4_000,
        0.25,
    )
    assert ac.config.pin_limit == 6_000 // 8  # derived budgets follow
    # an explicit max_tokens wins over the model
    ac = AutoContext(model=model, max_tokens=5_000)
    assert ac.config.max_tokens == 5_000 and ac.window is None
    ac = AutoContext(AutoContextConfig(max_tokens=5_000), model=model)
    assert ac.config.max_tokens == 5_000
    assert ac.use_model(windowed(max_input_tokens=100_000)) is False
    # a window too small for the trigger: the error says where the budget comes from
    with pytest.raises(InvalidConfigError, match="max_input_tokens=8,000 less 2,000"):
        AutoContext(model=model, trigger=("tokens", 7_000))


def test_a_model_with_another_window_changes_the_budget() -> None:
    ac = AutoContext(model=windowed(max_input_tokens=8_000), trigger=("tokens", 4_000))
    assert ac.use_model(windowed(max_input_tokens=8_000)) is False  # same window
    assert ac.use_model(windowed(max_input_tokens=32_000, max_output_tokens=4_000)) is True
    assert (ac.config.max_tokens, ac.config.trigger_tokens) == (28_000, 4_000)
    assert ac.use_model(windowed()) is False  # no window: the known one stays
    assert ac.config.max_tokens == 28_000


def test_the_node_compresses_to_the_window_of_the_model_argument() -> None:
    model = windowed(max_input_tokens=8_000)
    ac = AutoContext(model=model, store=InMemoryStore())
    graph = StateGraph(AutoContextState)
    graph.add_node("autocontext", ac.node())
    graph.add_edge(START, "autocontext")
    app = graph.compile()
    msgs: list[BaseMessage] = [SystemMessage("Be brief.")]
    for k in range(30):
        msgs += [HumanMessage(f"question {k}"), AIMessage(log_text(20, k))]
    assert ac.counter.count(msgs, ac.count_tools) > 8_000
    out = app.invoke({"messages": msgs})
    assert ac.counter.count(out["messages"], ac.count_tools) <= 6_000


# --- the middleware reads the agent's model --------------------------------------------------------------
async def test_the_middleware_takes_the_budget_from_the_models_profile() -> None:
    """No max_tokens: a model with max_input_tokens=8000 never receives more than that."""
    for run_async in (False, True):
        model = windowed(max_input_tokens=8_000)
        mw = AutoContextMiddleware(trigger=("fraction", 0.8), keep=("fraction", 0.5))
        assert mw.autocontext.config.max_tokens == DEFAULT_MAX  # unknown until the first call
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = await run(agent(model, mw), run_async)
        assert not [w for w in caught if "default budget" in str(w.message)]
        assert out["messages"][-1].content == "done after 40 calls"
        cfg = mw.autocontext.config
        assert (cfg.max_tokens, cfg.token_ratio, cfg.target_ratio) == (6_000, 0.8, 0.5)
        sent = sent_tokens(model, mw.autocontext)
        assert len(sent) == 41
        assert max(sent) <= 6_000 < 8_000
        # the run needed it: unmanaged, the context grows far past the window
        assert ac_count(mw.autocontext, [log_text(30, n) for n in range(40)]) > 3 * 8_000
        assert all(not find_violations(s) for s in model.seen)


async def test_a_resumed_thread_longer_than_the_window_fits_at_the_first_call() -> None:
    """The first before_model runs before the model is known (default budget); the view
    of that first call is fitted to the model's window all the same."""
    for run_async in (False, True):
        model = WindowModel(messages=iter([AIMessage("ok")]), profile={"max_input_tokens": 8_000})
        mw = AutoContextMiddleware()
        history: list[BaseMessage] = []
        for k in range(25):
            history += [HumanMessage(f"question {k}"), AIMessage(log_text(20, k))]
        history.append(HumanMessage("and now?"))
        assert mw.autocontext.counter.count(history) > 10_000
        graph = agent(model, mw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            msgs = {"messages": history}
            out = await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)
        assert out["messages"][-1].content == "ok"
        assert sent_tokens(model, mw.autocontext) and max(sent_tokens(model, mw.autocontext)) <= (
            6_000
        )


class SwitchModel(AgentMiddleware):
    """Sends the calls after the first ``after`` to another model (a dynamic model)."""

    def __init__(self, other: WindowModel, after: int) -> None:
        super().__init__()
        self.other, self.after, self.calls = other, after, 0

    def _pick(self, request: ModelRequest) -> ModelRequest:
        self.calls += 1
        return request.override(model=self.other) if self.calls > self.after else request

    def wrap_model_call(self, request, handler):
        return handler(self._pick(request))

    async def awrap_model_call(self, request, handler):
        return await handler(self._pick(request))


async def test_a_model_with_a_smaller_window_later_is_followed() -> None:
    for run_async in (False, True):
        big = windowed(steps=40, lines=30, max_input_tokens=32_000, max_output_tokens=4_000)
        small = windowed(steps=40, lines=30, max_input_tokens=8_000, max_output_tokens=1_000)
        small.messages = big.messages  # one script, whichever model answers
        mw = AutoContextMiddleware()
        out = await run(agent(big, mw, SwitchModel(small, after=25)), run_async)
        assert out["messages"][-1].content == "done after 40 calls"
        assert len(big.seen) == 25 and len(small.seen) == 16
        assert max(sent_tokens(big, mw.autocontext)) > 7_000  # the big window was used
        assert max(sent_tokens(small, mw.autocontext)) <= 7_000
        assert mw.autocontext.config.max_tokens == 7_000


async def test_explicit_max_tokens_wins_over_the_profile() -> None:
    for run_async in (False, True):
        model = windowed(steps=20, max_input_tokens=100_000)
        mw = AutoContextMiddleware(max_tokens=5_000, trigger=("tokens", 4_000))
        await run(agent(model, mw), run_async)
        assert mw.autocontext.config.max_tokens == 5_000
        assert mw.autocontext.config.trigger_tokens == 4_000
        assert max(sent_tokens(model, mw.autocontext)) <= 5_000


# --- no window known: the default budget, and one warning ---------------------------------------------
async def test_no_window_known_warns_once_and_keeps_the_default_budget() -> None:
    for run_async in (False, True):
        model = windowed(steps=3, lines=2)  # no profile
        mw = AutoContextMiddleware()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = await run(agent(model, mw), run_async)
            await run(agent(windowed(steps=2, lines=2), mw), run_async)  # same instance
        assert out["messages"][-1].content == "done after 3 calls"
        notes = [str(w.message) for w in caught if "default budget" in str(w.message)]
        assert len(notes) == 1
        assert f"max_tokens={DEFAULT_MAX:,}" in notes[0]
        assert "max_tokens=…" in notes[0] and "max_input_tokens" in notes[0]
        assert mw.autocontext.config.max_tokens == DEFAULT_MAX


def test_the_engine_surfaces_warn_once_without_a_budget() -> None:
    ac = AutoContext(store=InMemoryStore())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ac.compress([HumanMessage("hi")])
        ac.compress([HumanMessage("hi again")])
        ac.prepare_model_call([HumanMessage("hi")])
    assert len([w for w in caught if "default budget" in str(w.message)]) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AutoContext(model=windowed())  # a model without a window: said at construction
        quiet = AutoContext(max_tokens=8_000, store=InMemoryStore())
        quiet.compress([HumanMessage("hi")])
        known = AutoContext(model=windowed(max_input_tokens=8_000), store=InMemoryStore())
        known.compress([HumanMessage("hi")])
    assert len([w for w in caught if "default budget" in str(w.message)]) == 1


async def test_the_default_budget_warning_names_the_callers_line() -> None:
    """Every public entry point, sync and async, shown or not: the warning points at
    the line that called the package (it pointed inside engine.py for compress and
    acompress, and one frame above the caller for prepare_model_call with
    ``disclosure="always"``)."""
    msgs = [HumanMessage("hi", id="h1")]

    def fresh(disclosure: str) -> AutoContext:
        return AutoContext(store=InMemoryStore(), disclosure=disclosure)

    for disclosure in ("when_needed", "always"):
        with pytest.warns(UserWarning, match="default budget") as caught:
            fresh(disclosure).compress(msgs)
        assert {w.filename for w in caught} == {__file__}, disclosure
        with pytest.warns(UserWarning, match="default budget") as caught:
            fresh(disclosure).compress(msgs, view=False)
        assert {w.filename for w in caught} == {__file__}, disclosure
        with pytest.warns(UserWarning, match="default budget") as caught:
            await fresh(disclosure).acompress(msgs)
        assert {w.filename for w in caught} == {__file__}, disclosure
        with pytest.warns(UserWarning, match="default budget") as caught:
            fresh(disclosure).prepare_model_call(msgs)
        assert {w.filename for w in caught} == {__file__}, disclosure
        with pytest.warns(UserWarning, match="default budget") as caught:
            fresh(disclosure).view_config(msgs, None)
        assert {w.filename for w in caught} == {__file__}, disclosure
    with pytest.warns(UserWarning, match="default budget") as caught:
        AutoContext(model=windowed())  # a model without a window
    assert {w.filename for w in caught} == {__file__}
    # the middleware under a sync agent: the line that invoked the agent (an async
    # agent runs its nodes as tasks of their own, whose stack holds no caller's line)
    graph = agent(windowed(steps=2, lines=2), AutoContextMiddleware())
    with pytest.warns(UserWarning, match="default budget") as caught:
        graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert {w.filename for w in caught if "default budget" in str(w.message)} == {__file__}


def test_models_of_two_windows_alternating_on_one_instance_are_warned_about() -> None:
    """One AutoContext without max_tokens takes its budget from each call's model: a
    switch of model is followed, but two agents of different windows sharing it would
    compress each other to their budgets. When a window it had left comes back, it says
    so, once."""
    ac = AutoContext(store=InMemoryStore())
    big = SimpleNamespace(profile={"max_input_tokens": 128_000})
    small = SimpleNamespace(profile={"max_input_tokens": 8_000})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ac.use_model(big) and ac.use_model(small)  # a switch: followed, no warning
        assert not [w for w in caught if "alternate" in str(w.message)]
        assert ac.use_model(big) and ac.use_model(small) and ac.use_model(big)
    shared = [w for w in caught if "alternate" in str(w.message)]
    assert len(shared) == 1 and "its own AutoContext" in str(shared[0].message)
    assert ac.config.max_tokens > 64_000  # the budget still follows the call's model


def test_a_fallback_model_of_another_window_fits_its_window_and_the_warning_says_so() -> None:
    """ModelFallbackMiddleware before ours (the documented order), the primary down: each
    call goes to the primary's window, then to the fallback's. What the fallback gets
    fits its own budget; the warning about alternating windows used to guess "two agents
    sharing it?" only, for one agent using LangChain's own fallback."""
    from langchain.agents.middleware import ModelFallbackMiddleware

    class Down(WindowModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise RuntimeError("503 service unavailable")

    primary = Down(messages=iter(()), profile={"max_input_tokens": 64_000})
    fallback = windowed(steps=12, lines=30, max_input_tokens=6_000)
    ac = AutoContext()
    graph = agent(primary, ac.middleware(), ModelFallbackMiddleware(fallback))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert out["messages"][-1].content == "done after 12 calls"
    ac.use_model(fallback)  # the fallback's budget (the last call's already)
    assert all(
        ac.counter.count(sent, fallback.bound) <= ac.config.max_tokens for sent in fallback.seen
    )
    shared = [str(w.message) for w in caught if "alternate" in str(w.message)]
    assert len(shared) == 1 and "ModelFallbackMiddleware" in shared[0]
    assert "max_tokens=… (the smallest window)" in shared[0]


def test_the_reply_room_is_at_least_what_the_model_asks_for() -> None:
    """ChatAnthropic asks for 64,000 reply tokens by default on a 200,000 window that
    input and reply share: the budget used to leave 50,000 (a quarter), so a request of
    140,000 was rejected ("input length and `max_tokens` exceed context limit")."""
    profile = {"max_input_tokens": 200_000, "max_output_tokens": 64_000}
    asks = SimpleNamespace(profile=profile, max_tokens=64_000)
    assert model_window(asks).budget == 136_000
    assert model_window(SimpleNamespace(profile=profile)).budget == 150_000  # a quarter
    greedy = SimpleNamespace(profile=profile, max_tokens=500_000)
    assert model_window(greedy).budget == 100_000  # at most half the window
    ac = AutoContext(store=InMemoryStore(), model=asks)
    assert ac.config.max_tokens == 136_000


# --- the metadata tags follow the budget unless set ---------------------------------------------
TAG = re.compile(r"<[\w.:-]+ \d+/\d+/>(\n|$)")


def tagged_shares(model: WindowModel) -> list[float]:
    """Per call: the share of the non-system messages the model received with a tag."""
    shares = []
    for sent in model.seen:
        body = [m for m in sent if not isinstance(m, SystemMessage)]
        shares.append(sum(bool(TAG.match(text_of(m))) for m in body) / max(1, len(body)))
    return shares


@pytest.mark.parametrize(
    ("window", "kwargs", "tagged"),
    [
        (8_000, {}, False),  # a small window: a tag a message costs more than it gives
        (200_000, {}, True),
        (8_000, {"metadata_tags": True}, True),  # asked for: always
        (200_000, {"metadata_tags": False}, False),  # refused: never
        (8_000, {"xml_commands": True}, True),  # the commands name messages by tag ids
    ],
)
async def test_the_models_window_decides_the_tags_unless_they_are_set(
    window: int, kwargs: dict[str, Any], tagged: bool
) -> None:
    """No max_tokens: the budget comes from the model's profile at the first call, and
    with it whether the model sees the tags (from 32,000 tokens up, or with XML
    commands), unless ``metadata_tags`` was given."""
    for run_async in (False, True):
        model = windowed(steps=4, lines=3, max_input_tokens=window)
        mw = AutoContextMiddleware(disclosure="always", **kwargs)
        # the default budget (131,072) until the model is known
        assert mw.autocontext.config.metadata_tags is kwargs.get("metadata_tags", True)
        out = await run(agent(model, mw), run_async)
        assert out["messages"][-1].content == "done after 4 calls"
        assert mw.autocontext.config.metadata_tags is tagged
        assert tagged_shares(model) == [1.0 if tagged else 0.0] * 5


def test_derive_decides_the_tags_again_for_a_new_budget_unless_they_were_set() -> None:
    auto = AutoContextConfig(max_tokens=8_000)
    assert auto.metadata_tags is False and "metadata_tags" not in auto.model_fields_set
    assert auto.derive(max_tokens=32_000).metadata_tags is True
    assert auto.derive(max_tokens=31_999).metadata_tags is False
    assert AutoContextConfig().metadata_tags is True  # the default budget, 131,072
    assert (
        AutoContextConfig(max_tokens=8_000, metadata_tags=True)
        .derive(max_tokens=4_000)
        .metadata_tags
    )
    assert not AutoContextConfig(metadata_tags=False).derive(max_tokens=64_000).metadata_tags


def test_tags_left_to_the_budget_stay_so_through_a_dump_and_an_explicit_none() -> None:
    """A config rebuilt from its dump (exclude_defaults, JSON) or given
    ``metadata_tags=None`` decides the tags for its own budget, not the first one's
    (audit: AutoContextConfig().model_dump(exclude_defaults=True) was
    {'metadata_tags': True}, and a 16k model then saw tags)."""
    auto = AutoContextConfig()  # the default budget: on
    assert auto.metadata_tags is True
    assert auto.model_dump(exclude_defaults=True) == {}
    assert auto.model_dump()["metadata_tags"] is None
    rebuilt = [
        AutoContextConfig(**auto.model_dump(exclude_defaults=True)),
        AutoContextConfig(**{**auto.model_dump(), "max_tokens": 131_072}),
        AutoContextConfig.model_validate_json(auto.model_dump_json()),
        AutoContextConfig(metadata_tags=None),
    ]
    for cfg in rebuilt:
        assert cfg.metadata_tags is True
        assert cfg.derive(max_tokens=12_000).metadata_tags is False
    chosen = AutoContextConfig(max_tokens=8_000, metadata_tags=True)
    assert chosen.model_dump(exclude_defaults=True) == {"max_tokens": 8_000, "metadata_tags": True}
    assert (
        AutoContextConfig.model_validate_json(chosen.model_dump_json())
        .derive(max_tokens=4_000)
        .metadata_tags
    )


def test_a_model_window_decides_tags_given_as_none() -> None:
    """``AutoContext(cfg, model=…)`` with ``metadata_tags=None`` in ``cfg``: the model's
    16k window turns them off although the config was built at the default budget."""
    cfg = AutoContextConfig(metadata_tags=None)
    ac = AutoContext(cfg, model=windowed(max_input_tokens=16_000))
    assert ac.config.max_tokens < TAGS_MIN and ac.config.metadata_tags is False
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), model=windowed(max_input_tokens=200_000))
    assert ac.config.max_tokens == 8_000 and ac.config.metadata_tags is False  # given: wins


@pytest.mark.parametrize("window", [8_000, 200_000])
async def test_the_tools_sent_follow_the_window_the_middleware_learns(window: int) -> None:
    """Built without ``max_tokens``, the middleware registers all seven context tools
    (the budget is not known yet); the model's window then decides the tags, and with
    them whether the three editing tools, which take the ids the tags show, are sent."""
    mw = AutoContextMiddleware(instructions="compact")
    assert {t.name for t in mw.tools} == EDITING | {
        "reload_offloaded",
        "search_history",
        "working_context_append",
        "working_context_replace",
    }
    model = windowed(steps=60, lines=40 if window < TAGS_MIN else 400, max_input_tokens=window)
    await run(agent(model, mw), run_async=window > TAGS_MIN)
    sent = {getattr(t, "name", None) for t in model.bound}
    assert "reload_offloaded" in sent  # the package showed itself: it compressed
    tags = mw.autocontext.config.metadata_tags
    assert tags is (window >= TAGS_MIN)
    assert (sent >= EDITING) is tags and (EDITING & sent == set()) is (not tags)
