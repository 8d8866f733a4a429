"""The package in deepagents' ``create_deep_agent``, wired as docs/surfaces.md says.

deepagents is a likely host, never a dependency: the test extra installs it and the
module skips without it. The main agent and a subagent are fake tool-calling models
(``FunctionModel``) whose provider a harness profile strips of deepagents'
summarization; ``MemoryMiddleware`` is given before the package and the subagent spec
carries its own ``AutoContextMiddleware`` on the same store. Checked as a user would:
every request either model received fits the budget by the package's count and is a
valid sequence, ``AGENTS.md`` reaches every main request, compression fired in both
agents, every tool output is in the thread's history under the agent that produced
it, and a result deepagents evicted to its filesystem keeps, once offloaded, the
first line that names its file.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("deepagents")

from _builders import FunctionModel, call
from deepagents import HarnessProfile, create_deep_agent, register_harness_profile
from deepagents.backends import StateBackend
from deepagents.backends.utils import create_file_data
from deepagents.middleware.memory import MemoryMiddleware
from deepagents.middleware.skills import SkillsMiddleware
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContextMiddleware, OffloadStore
from langchain_autocontext.messages import find_violations, seeded_ids, text_of

PROVIDER = "autocontext-deep-test"  # a provider of our own: the profile touches no other model
MAX_TOKENS = 12_000
RULE = "always run the full suite before committing"


class DeepModel(FunctionModel):
    """A ``FunctionModel`` that names its provider, as deepagents' profiles look it up."""

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        return {"ls_provider": PROVIDER, "ls_model_name": "scripted"}


register_harness_profile(
    PROVIDER, HarnessProfile(excluded_middleware=frozenset({"SummarizationMiddleware"}))
)


@tool
def run(command: str) -> str:
    """Run a shell command."""
    return f"$ {command}\n" + "\n".join(f"test_{i} PASSED in {command}" for i in range(150))


@tool
def dump(path: str) -> str:
    """Print a whole file."""
    return "\n".join(f"{path}:{i} entry {i * 7919 % 1000}" for i in range(4_000))


def lead(messages: list[BaseMessage], n: int) -> AIMessage:
    """Six commands, the big file, the researcher, five more commands, the answer."""
    if n == 2:
        return AIMessage("", tool_calls=[call("dump", {"path": "big.log"}, "call_dump")])
    if n == 7:
        task = {"description": "Research the flaky test t3.", "subagent_type": "researcher"}
        return AIMessage("", tool_calls=[call("task", task, "call_task")])
    if n < 13:
        return AIMessage("", tool_calls=[call("run", {"command": f"pytest -k lead{n}"})])
    return AIMessage("All tests pass.")


def researcher(messages: list[BaseMessage], n: int) -> AIMessage:
    if n < 6:
        return AIMessage("", tool_calls=[call("run", {"command": f"pytest -k sub{n}"})])
    return AIMessage("t3 is flaky: a race on the port.")


def check_requests(model: FunctionModel, mw: AutoContextMiddleware) -> None:
    ac = mw.autocontext
    for k, sent in enumerate(model.seen):
        assert isinstance(sent[0], SystemMessage), f"call {k}: no system message first"
        assert not find_violations(sent), f"call {k}: {find_violations(sent)}"
        tagged = any(text_of(m).startswith("<metadata") for m in sent[1:])
        count = ac.counter.count(
            sent, model.tools_seen[k], tags=ac.config.metadata_tags and not tagged
        )
        assert count <= MAX_TOKENS, f"call {k}: {count} > {MAX_TOKENS}"


def test_deep_agent_with_a_subagent_stays_in_budget_and_loses_nothing() -> None:
    store = InMemoryStore()
    main, sub = DeepModel(respond=lead), DeepModel(respond=researcher)
    main_mw = AutoContextMiddleware(max_tokens=MAX_TOKENS, store=store)
    sub_mw = AutoContextMiddleware(max_tokens=MAX_TOKENS, store=store)
    spec = {
        "name": "researcher",
        "description": "Researches one question in depth.",
        "system_prompt": "You research.",
        "tools": [run],
        "model": sub,
        "middleware": [sub_mw],
    }
    deep = create_deep_agent(
        model=main,
        tools=[run, dump],
        middleware=[MemoryMiddleware(backend=StateBackend(), sources=["/AGENTS.md"]), main_mw],
        subagents=[spec],
        checkpointer=InMemorySaver(),
        store=store,
        name="lead",
    )
    agents_md = "# AGENTS.md\n" + "\n".join(f"- rule {i}: {RULE} {i}." for i in range(100))
    config = {"configurable": {"thread_id": "deep-1"}}
    with seeded_ids(3):  # fixed offload ids: a uuid's token count varies
        out = deep.invoke(
            {
                "messages": [("user", "Fix the tests.")],
                "files": {"/AGENTS.md": create_file_data(agents_md)},
            },
            config,
        )
    assert out["messages"][-1].content == "All tests pass."
    assert len(main.seen) == 14 and len(sub.seen) == 7

    check_requests(main, main_mw)
    check_requests(sub, sub_mw)
    assert all(RULE in text_of(sent[0]) for sent in main.seen)  # memory is in every request
    # deepagents evicted the big result; offloaded, its notice keeps the file's name
    notices = [
        m for sent in main.seen for m in sent if getattr(m, "tool_call_id", None) == "call_dump"
    ]
    assert len(notices) > 3
    assert all("/large_tool_results/call_dump" in text_of(m).split("\n")[0] for m in notices)
    assert "reload_offloaded" in text_of(notices[-1])

    history = list(OffloadStore.wrap(store).iter_history("deep-1"))
    by_agent: dict[str | None, set[str]] = {}
    for entry in history:
        if isinstance(entry.message, ToolMessage):
            by_agent.setdefault(entry.agent, set()).add(text_of(entry.message))
    assert {f"pytest -k lead{n}" for n in (0, 1, 3, 4, 5, 6, 8, 12)} <= {
        t.split("\n")[0][2:] for t in by_agent["lead"]
    }
    assert {run.invoke({"command": f"pytest -k sub{n}"}) for n in range(6)} <= by_agent[
        "researcher"
    ]
    assert "t3 is flaky: a race on the port." in by_agent["lead"]  # the task's result
    events = OffloadStore.wrap(store).list_events("deep-1")
    assert {e.agent for e in events} == {"lead", "researcher"}  # both compressed


def commands(prefix: str, calls: int) -> Any:
    """A script: ``calls`` commands, then an answer."""

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < calls:
            return AIMessage("", tool_calls=[call("run", {"command": f"pytest -k {prefix}{n}"})])
        return AIMessage(f"{prefix} done.")

    return respond


def test_skills_as_a_renamed_middleware_stay_before_the_package() -> None:
    """A ``SkillsMiddleware`` in ``middleware=`` takes deepagents' skills slot, after the
    package (the skills list then comes on top of a fitted request); a subclass of its
    own name stays where it is listed, and every request fits."""

    class Skills(SkillsMiddleware):
        pass

    store = InMemoryStore()
    main = DeepModel(respond=commands("lead", 10))
    mw = AutoContextMiddleware(max_tokens=MAX_TOKENS, store=store)
    deep = create_deep_agent(
        model=main,
        tools=[run],
        middleware=[Skills(backend=StateBackend(), sources=["/skills/"]), mw],
        checkpointer=InMemorySaver(),
        store=store,
    )
    words = " ".join(f"word{j}" for j in range(150))[:1000]
    files = {
        f"/skills/s{i}/SKILL.md": create_file_data(
            f"---\nname: s{i}\ndescription: Skill{i} {words}\n---\n# s{i}\nDo it.\n"
        )
        for i in range(20)  # about 6,000 tokens of skills in the system prompt
    }
    with seeded_ids(1):
        deep.invoke(
            {"messages": [("user", "Fix.")], "files": files}, {"configurable": {"thread_id": "s"}}
        )
    assert len(main.seen) == 11
    assert all("Skill19 " in text_of(sent[0]) for sent in main.seen)
    check_requests(main, mw)


def test_a_general_purpose_spec_of_ones_own_carries_the_package() -> None:
    """deepagents' own general-purpose subagent gets no ``AutoContextMiddleware``; a spec
    named ``general-purpose`` replaces it, and its requests fit and are archived under
    its name."""
    store = InMemoryStore()

    def lead(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            task = {"description": "Run the suite.", "subagent_type": "general-purpose"}
            return AIMessage("", tool_calls=[call("task", task)])
        return AIMessage("Done.")

    main, sub = DeepModel(respond=lead), DeepModel(respond=commands("gp", 10))
    main_mw = AutoContextMiddleware(max_tokens=MAX_TOKENS, store=store)
    sub_mw = AutoContextMiddleware(max_tokens=MAX_TOKENS, store=store)
    spec = {
        "name": "general-purpose",
        "description": "Any task.",
        "system_prompt": "You help.",
        "tools": [run],
        "model": sub,
        "middleware": [sub_mw],
    }
    deep = create_deep_agent(
        model=main,
        tools=[run],
        middleware=[main_mw],
        subagents=[spec],
        checkpointer=InMemorySaver(),
        store=store,
        name="lead",
    )
    with seeded_ids(2):
        deep.invoke({"messages": [("user", "Fix.")]}, {"configurable": {"thread_id": "g"}})
    assert len(sub.seen) == 11
    check_requests(main, main_mw)
    check_requests(sub, sub_mw)
    agents = {e.agent for e in OffloadStore.wrap(store).iter_history("g")}
    assert agents == {"lead", "general-purpose"}
    assert {e.agent for e in OffloadStore.wrap(store).list_events("g")} == {"general-purpose"}
