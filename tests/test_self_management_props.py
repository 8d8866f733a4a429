"""Property tests: random tool calls and XML commands never break the state or lose an original.

Each example builds a conversation, then applies a random program of steps: context
tools called by an AI message (one to three in parallel, applied in a random order
with LangGraph's own ``add_messages`` reducer, as ``ToolNode`` would), replies with
XML commands (valid, invalid, quoted in code, entity-escaped), compressions, new
user turns and ordinary tool calls. After every step:

- ``find_violations`` is empty, the system message is first and unchanged, the
  latest user message is still there;
- the working context respects its limit;
- and at the end the history store keeps what the docs promise (docs/self-management.md):
  every message that ever entered the state (except the package's own summaries) under
  its id, once, with its first content (a reply as the model wrote it, copied metadata
  tags aside); a user's edit in a fork as a later version ``<id>~<digest>`` of that id;
  the model's own edits as no version at all; and every text the state ever held under
  an id (the model's edited copies included) is still readable: in the history, an
  offload, or the state.

A second, smaller property runs random programs through a real ``create_react_agent``.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

from _builders import FunctionModel, fetch, self_managed_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolRuntime
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.messages import (
    find_violations,
    is_context_edit,
    latest_user_index,
    marker,
    new_id,
)
from langchain_autocontext.metadata import strip_message_tags
from langchain_autocontext.store import OffloadStore

CFG = AutoContextConfig(
    max_tokens=5_000,
    msg_threshold=24,
    last_keep=4,
    large_payload_threshold=400,
    offload_single_preview=60,
    xml_commands=True,
    max_autonomous_steps=2,
    working_context_max_chars=200,
)
THREAD = "prop"

# --- a tiny interpreter of random programs --------------------------------------------------
TEXTS = ["short", "a longer replacement text with details", "", "   ", "line\nbreak", "<b>x</b>"]
WC_TEXTS = ["goal: g1", "fact: 42", "x" * 150, "", "owner: ana"]


class World:
    """The graph state (messages + autocontext), the store and the originals ever seen."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.store = InMemoryStore()
        self.ac = AutoContext(CFG, store=self.store)
        self.tools = {t.name: t for t in self.ac.tools}
        self.messages: list[BaseMessage] = []
        self.ac_state: dict[str, Any] = {}
        self.seen: dict[str, BaseMessage] = {}
        # every (id, type, content) the state held, and the user's edits made in a fork
        self.held: dict[tuple[str, str, str], BaseMessage] = {}
        self.forks: list[BaseMessage] = []
        self.system = SystemMessage("You are tested.", id="sys")
        self.apply([self.system, HumanMessage("first task", id=new_id())])

    # the reducer, as the graph applies updates
    def apply(self, update: list[BaseMessage]) -> None:
        self.messages = add_messages(self.messages, update)
        for m in self.messages:
            if m.id and marker(m) is None:
                self.seen.setdefault(m.id, m)
                self.held.setdefault((m.id, m.type, str(m.content)), m)

    def ids(self) -> list[str]:
        return [str(m.id) for m in self.messages]

    def pick_ref(self) -> str:
        choices = ["no-such-id", "autocontext-notice", "sys", ""]
        for m in self.messages:
            choices.append(str(m.id))
            if m.id and len(m.id) == 36:
                choices.append(m.id[:8])  # a short id as the view shows it
        offloads = OffloadStore.wrap(self.store).list_offloads(THREAD)
        choices += [o.offload_id for o in offloads]
        return self.rng.choice(choices)

    def random_call(self) -> dict[str, Any]:
        name = self.rng.choice(sorted(self.tools))
        r = self.rng
        args: dict[str, Any]
        if name == "update_message":
            args = {"message_id": self.pick_ref(), "content": r.choice(TEXTS)}
        elif name == "delete_message":
            args = {"message_id": self.pick_ref()}
        elif name == "reload_offloaded":
            offloads = [o.offload_id for o in OffloadStore.wrap(self.store).list_offloads(THREAD)]
            args = {
                "offload_id": r.choice(offloads)
                if offloads and r.random() < 0.5
                else self.pick_ref(),
                "offset": r.choice([0, 0, 5, 10_000]),
                "restore": r.random() < 0.4,
            }
        elif name == "search_history":
            args = {
                "query": r.choice(["task", "line", "fetch", " ", "zzz"]),
                "limit": r.randint(1, 5),
            }
        elif name == "working_context_append":
            args = {"text": r.choice(WC_TEXTS)}
        elif name == "pin_message":
            args = {"message_id": self.pick_ref(), "pinned": r.random() < 0.7}
        else:
            args = {"old": r.choice(["goal", "42", "", "nothing"]), "new": r.choice(["G", ""])}
        return {"name": name, "args": args, "id": new_id(), "type": "tool_call"}

    # --- steps ---
    def step_tools(self) -> None:
        calls = [self.random_call() for _ in range(self.rng.choice([1, 1, 2, 3]))]
        ai = AIMessage("", tool_calls=calls, id=new_id())
        self.apply([ai])
        state = {"messages": list(self.messages), "autocontext": dict(self.ac_state)}
        commands = []
        for c in calls:
            runtime = ToolRuntime(
                state=state,
                context=None,
                config={"configurable": {"thread_id": THREAD}},
                stream_writer=lambda _: None,
                tool_call_id=c["id"],
                store=self.store,
            )
            out = self.tools[c["name"]].invoke({**c, "args": {**c["args"], "runtime": runtime}})
            assert isinstance(out, Command), out
            commands.append(out)
        self.rng.shuffle(commands)  # parallel updates land in no fixed order
        ac_writes = [c.update["autocontext"] for c in commands if "autocontext" in c.update]
        assert len(ac_writes) <= 1, "two writes to the autocontext channel in one step"
        for c in commands:
            self.apply(c.update["messages"])
        if ac_writes:
            self.ac_state = ac_writes[0]
        answered = {m.tool_call_id for m in self.messages if isinstance(m, ToolMessage)}
        assert {c["id"] for c in calls} <= answered

    def step_xml(self) -> None:
        r = self.rng
        parts = []
        for _ in range(r.randint(1, 3)):
            ref = self.pick_ref()
            parts.append(
                r.choice(
                    [
                        f'<delete id="{ref}"/>',
                        f'<update id="{ref}">{r.choice(TEXTS)}</update>',
                        "<user>keep going</user>",
                        f'```\n<delete id="{ref}"/>\n```',
                        f'&lt;delete id="{ref}"/&gt;',
                        f'<update id="{ref}">unclosed',
                        "<delete/>",
                        '<metadata id="x" message_token_count="1"/>\n',
                    ]
                )
            )
        calls = [{"name": "fetch", "args": {"name": "z"}, "id": new_id(), "type": "tool_call"}]
        reply = AIMessage(
            " ".join(parts), id=new_id(), tool_calls=calls if r.random() < 0.2 else []
        )
        self.apply([reply])
        update = self.ac.after_model_call(
            self.messages, state=self.ac_state, thread_id=THREAD, store=self.store
        )
        if "messages" in update:
            self.apply(update["messages"])
        if "autocontext" in update:
            self.ac_state = update["autocontext"]
        if reply.tool_calls and reply.id in self.ids():  # answer the call, as ToolNode would
            self.apply(
                [ToolMessage("z out", tool_call_id=calls[0]["id"], name="fetch", id=new_id())]
            )

    def step_compress(self) -> None:
        result = self.ac.compress(self.messages, thread_id=THREAD, state=self.ac_state)
        if result.changed:
            self.messages = list(result.messages)
        view = self.ac.prepare_model_call(self.messages, state=self.ac_state)
        assert view.tokens <= CFG.max_tokens
        if view.state_update:
            self.ac_state = view.state_update

    def step_user(self) -> None:
        self.apply([HumanMessage(f"task {self.rng.randint(0, 99)}", id=new_id())])

    def step_fork(self) -> None:
        """A user's edit in a fork (``graph.update_state`` with a message's id, which
        ``add_messages`` applies as a replacement) of a user message or a plain reply. A
        fork starts from a checkpoint the package has been through, so the edited content
        is one the history holds (the package cannot keep what it was never shown)."""
        history = OffloadStore.wrap(self.store).iter_history(THREAD)
        archived = {(e.version_of or e.id, str(e.message.content)) for e in history}
        editable = [
            m
            for m in self.messages
            if m.id != "sys"
            and marker(m) is None
            and (m.id, str(m.content)) in archived
            and (isinstance(m, HumanMessage) or (isinstance(m, AIMessage) and not m.tool_calls))
        ]
        if editable:
            m = self.rng.choice(editable)
            edit = type(m)(f"edited by the user {self.rng.randint(0, 9)}", id=m.id)
            self.forks.append(edit)
            self.apply([edit])

    def step_work(self) -> None:
        cid = new_id()
        size = self.rng.choice([3, 30, 60])
        self.apply(
            [
                AIMessage(
                    "",
                    tool_calls=[{"name": "fetch", "args": {"name": "w"}, "id": cid}],
                    id=new_id(),
                ),
                ToolMessage(
                    fetch.invoke({"name": "w", "size": size}),
                    tool_call_id=cid,
                    name="fetch",
                    id=new_id(),
                ),
            ]
        )


def check(world: World, latest_user_before: str | None, new_user: bool) -> None:
    msgs = world.messages
    assert not find_violations(msgs), find_violations(msgs)
    assert msgs[0].id == "sys" and msgs[0].content == "You are tested."
    lu = latest_user_index(msgs)
    assert lu is not None
    if latest_user_before is not None and not new_user:
        assert latest_user_before in world.ids()
    assert len(world.ac_state.get("working_context", "")) <= CFG.working_context_max_chars


STEPS = [
    *["tools", "tools", "tools", "xml", "xml", "compress", "compress", "user", "work", "work"],
    "fork",
]


def as_archived(message: BaseMessage) -> BaseMessage:
    """What the history holds of an original: a reply without the tags the model copied."""
    return strip_message_tags(message) if isinstance(message, AIMessage) else message


def same(a: BaseMessage, b: BaseMessage) -> bool:
    """Same type, content, tool calls and tool call id."""
    return (
        a.type,
        a.content,
        getattr(a, "tool_calls", None),
        getattr(a, "tool_call_id", None),
    ) == (
        b.type,
        b.content,
        getattr(b, "tool_calls", None),
        getattr(b, "tool_call_id", None),
    )


def check_history(world: World) -> None:
    ws = OffloadStore.wrap(world.store)
    entries = list(ws.iter_history(THREAD))
    keys = [e.id for e in entries]
    assert len(keys) == len(set(keys)), "the history holds a key twice"
    history = {e.id: e for e in entries}
    # every original, once, under its id, with its first content
    for mid, original in world.seen.items():
        assert mid in history, f"original {mid} ({original.type}) is not in the history"
        entry = history[mid]
        assert entry.version_of is None
        assert same(entry.message, as_archived(original)), (mid, entry.message, original)
    # later versions: the user's edits in a fork, each once; the model's edits are none
    forks = {(str(f.id), f.type, str(f.content)) for f in world.forks}
    for entry in entries:
        if entry.version_of is None:
            assert entry.id in world.seen, f"{entry.id} in the history was never in the state"
        else:
            assert entry.id.startswith(f"{entry.version_of}~")
            m = entry.message
            assert (entry.version_of, m.type, str(m.content)) in forks, (
                f"a version not made by the user: {entry.id} {m.content!r}"
            )
    versions = {(e.version_of, e.message.type, str(e.message.content)) for e in entries}
    for key in forks:
        assert key in versions or history[key[0]].message.content == key[2], (
            f"the user's edit {key} is not in the history"
        )
    # every text the state ever held under an id is still readable somewhere
    readable = {(e.version_of or e.id, e.message.type, str(e.message.content)) for e in entries}
    for record in ws.list_offloads(THREAD):
        readable |= {(str(m.id), m.type, str(m.content)) for m in record.messages}
    readable |= {(str(m.id), m.type, str(m.content)) for m in world.messages}
    for (mid, kind, content), m in world.held.items():
        shown = (mid, kind, str(as_archived(m).content))
        assert (mid, kind, content) in readable or shown in readable, (
            f"{kind} {mid} held {content!r} (context edit: {is_context_edit(m)}), now lost"
        )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    program=st.lists(st.sampled_from(STEPS), min_size=3, max_size=14),
)
def test_random_programs_keep_the_state_valid_and_lose_nothing(
    seed: int, program: list[str]
) -> None:
    world = World(random.Random(seed))
    for step in program:
        lu = latest_user_index(world.messages)
        before = world.messages[lu].id if lu is not None else None
        getattr(world, f"step_{step}")()
        check(world, before, new_user=step in ("user", "xml"))
    world.step_compress()  # the next model call archives whatever is new
    check_history(world)


# --- the same through a real agent ------------------------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), turns=st.integers(3, 10))
def test_random_agents_through_create_react_agent(seed: int, turns: int) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)
    rng = random.Random(seed)
    helper = World(rng)  # only for random_call / pick_ref over the agent's view

    def respond(view: list[BaseMessage], n: int) -> AIMessage:
        helper.messages = [m for m in view if not isinstance(m, SystemMessage)]
        helper.store = store
        if n >= turns:
            return AIMessage("done")
        kind = rng.random()
        if kind < 0.4:
            return AIMessage(
                "", tool_calls=[helper.random_call() for _ in range(rng.randint(1, 2))]
            )
        if kind < 0.7:
            cid = new_id()
            return AIMessage(
                "", tool_calls=[{"name": "fetch", "args": {"name": "w", "size": 30}, "id": cid}]
            )
        ref = helper.pick_ref()
        return AIMessage(
            rng.choice(
                [f'<delete id="{ref}"/>', f'<update id="{ref}">s</update>', "<user>more</user>"]
            )
        )

    model = FunctionModel(respond=respond)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = self_managed_agent(ac, model, store, tools=[fetch])
    config = {"configurable": {"thread_id": "agent"}, "recursion_limit": 200}
    out = agent.invoke({"messages": [SystemMessage("s", id="sys"), HumanMessage("go")]}, config)
    assert not find_violations(out["messages"])
    assert out["messages"][0].id == "sys"
    for sent in model.seen:
        assert not find_violations(sent)
        assert ac.counter.count(sent, ac.count_tools) <= CFG.max_tokens
    ws = OffloadStore.wrap(store)
    ac.compress(out["messages"], thread_id="agent", state=out.get("autocontext"))
    history = {e.id: e.message for e in ws.iter_history("agent")}
    for m in out["messages"]:
        if marker(m) is None:
            assert m.id in history
            if not is_context_edit(m):  # the state holds the original: the history too
                assert same(history[str(m.id)], m), (m, history[str(m.id)])
