"""Every surface, end to end, on the same long tool-calling script.

The surfaces: ``create_agent`` with the middleware, ``create_react_agent`` with the
pre-model hook, ``ac.node()`` in a StateGraph whose state has keys of its own,
``RunnableWithMessageHistory`` with :class:`AutoContextChatMessageHistory`, and
``prompt | ac.as_runnable() | model``. The script (``_builders.RoundScriptModel``)
decides by call count only, so every surface must reach the same outcome: the same
final answer, the same number of model calls and the same original history. On
every model input the invariants hold (valid tool pairs, system message first,
counted tokens <= max_tokens), and the budget is small enough that each of the
seven strategies fires at least once.
"""

from __future__ import annotations

import pytest
from _builders import (
    ALL_STRATEGIES,
    MODES,
    SURFACES,
    build_surface,
    check_model_inputs,
    expected_originals,
    history_originals,
    script_model,
    strategies_fired,
)
from langchain_core.messages import HumanMessage

from langchain_autocontext.messages import marker, text_of
from langchain_autocontext.store import OffloadStore

LONG_ROUNDS, LONG_STEPS = 15, 20  # 15 * (20 + 1) = 315 model calls
SHORT_ROUNDS, SHORT_STEPS = 3, 6

# One long run per surface; the modes rotate so sync and async streaming both run long.
LONG_RUNS = [
    ("middleware", "invoke"),
    ("middleware", "astream"),
    ("react", "stream"),
    ("node", "ainvoke"),
    ("history", "invoke"),
    ("lcel", "astream"),
]


async def drive(kind: str, mode: str, rounds: int, steps: int) -> tuple[object, str]:
    model = script_model(steps)
    surface = build_surface(kind, model)
    answer = ""
    for r in range(rounds):
        if mode.startswith("a"):
            answer = await surface.around(r, mode)
        else:
            answer = surface.round(r, mode)
    return surface, answer


def assert_outcome(surface, answer: str, rounds: int, steps: int) -> None:
    assert answer == f"round {rounds - 1} finished after {steps} steps"
    assert surface.model.total_calls == rounds * (steps + 1)
    check_model_inputs(surface.model, surface.ac)
    originals = history_originals(surface.store, surface.thread, answer)
    expected = expected_originals(rounds, steps)
    assert len(originals) == len(expected)
    assert originals == expected  # every original, in order, exactly once


@pytest.mark.parametrize(("kind", "mode"), LONG_RUNS, ids=[f"{k}-{m}" for k, m in LONG_RUNS])
async def test_long_run_every_strategy_fires_and_invariants_hold(kind: str, mode: str) -> None:
    surface, answer = await drive(kind, mode, LONG_ROUNDS, LONG_STEPS)
    assert surface.model.total_calls >= 300
    assert_outcome(surface, answer, LONG_ROUNDS, LONG_STEPS)
    fired = strategies_fired(surface.store, surface.thread)
    # Every large message of this script is a tool result, which masking (strategy 3)
    # turns into a preview before any summary, and summaries go by age before size: the
    # current round's oldest work (6) and the historical rounds (4) reach the target, so
    # the size-driven strategies, tool runs (1) and large messages (5), have nothing left
    # to do here; test_regressions' pinned-plan cases and test_engine make them fire.
    expected = ALL_STRATEGIES - {"current_large", "tool_run"}
    assert fired >= expected, f"never fired: {sorted(expected - fired)}"


def test_long_runs_cover_every_surface() -> None:
    assert {k for k, _ in LONG_RUNS} == set(SURFACES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", SURFACES)
async def test_every_surface_every_mode_same_outcome(kind: str, mode: str) -> None:
    surface, answer = await drive(kind, mode, SHORT_ROUNDS, SHORT_STEPS)
    assert_outcome(surface, answer, SHORT_ROUNDS, SHORT_STEPS)
    assert strategies_fired(surface.store, surface.thread), "compression never ran"


async def test_graph_surfaces_persist_the_compressed_context() -> None:
    """What the checkpoint holds is the compressed working context, not the full log."""
    for kind in ("middleware", "react", "node"):
        surface, _ = await drive(kind, "invoke", SHORT_ROUNDS, SHORT_STEPS)
        state = surface.runner.get_state(surface.config).values
        full = len(expected_originals(SHORT_ROUNDS, SHORT_STEPS)) + 1
        assert len(state["messages"]) < full, kind
        if kind == "node":
            assert state["task_label"] == f"T-{SHORT_ROUNDS - 1}"
            assert state["turns"] == [f"T-{r}" for r in range(SHORT_ROUNDS)]


@pytest.mark.parametrize("kind", ["middleware", "node"])
def test_a_round_summary_replaces_one_rounds_work_and_says_how_many_messages(kind: str) -> None:
    """Every third user turn of the script pastes a long CI log, which strategy 2
    offloads in place once it is history. It still opens its round: the round before
    it was summarized across it, "the 27 messages that answered the user message
    above" holding the next request, which the model then never saw asked."""
    model = script_model(6)
    surface = build_surface(kind, model)
    for r in range(8):
        surface.round(r)
    store = OffloadStore.wrap(surface.store)
    checked: set[str] = set()
    for sent in model.seen:
        for m in sent:
            info = marker(m) or {}
            if info.get("kind") != "round_summary" or info["offload_id"] in checked:
                continue
            checked.add(info["offload_id"])
            replaced = store.reload(surface.thread, info["offload_id"]).messages
            assert not [text_of(x)[:30] for x in replaced if isinstance(x, HumanMessage)]
            header = f"[Summary of the {len(replaced)} messages that answered the user message"
            assert text_of(m).startswith(header)
    assert len(checked) >= 3
