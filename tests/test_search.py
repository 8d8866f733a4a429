"""Ranking over a thread's complete history: BM25, the incremental index, semantic fusion."""

from __future__ import annotations

import uuid

import pytest
from conftest import open_sqlite
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext.search import (
    BM25Index,
    asearch_history,
    format_hits,
    search_history,
    tokenize,
)
from langchain_autocontext.store import OffloadStore


def test_tokenize_keeps_identifiers_whole_and_split() -> None:
    toks = tokenize("Key 94071D67-86df-455c at /src/pkg/mod.py:12, the value=42")
    assert "94071d67-86df-455c" in toks and "94071d67" in toks and "455c" in toks
    assert "/src/pkg/mod.py:12" not in toks  # a leading slash is not part of a token
    assert "src/pkg/mod.py:12" in toks and "mod" in toks and "py" in toks
    assert "value=42" in toks and "the" not in toks


def test_bm25_prefers_rare_terms_and_short_documents() -> None:
    index = BM25Index()
    index.add("common", "error error error in the build log " * 3)
    index.add("rare", "ZeroDivisionError raised in compute_total")
    index.add("long", "ZeroDivisionError " + "filler words here " * 200)
    index.add("none", "all good")
    ranked = [k for k, _ in index.search("ZeroDivisionError compute_total", 3)]
    assert ranked[0] == "rare" and ranked[1] == "long"
    assert "none" not in [k for k, _ in index.search("ZeroDivisionError", 10)]
    assert index.search("nothing matches this", 5) == []


def make_history(store: OffloadStore, thread: str, n: int) -> list:
    msgs = [HumanMessage("Find the owner of each key", id=f"{thread}-u")]
    for i in range(n):
        key, value = str(uuid.UUID(int=i * 7_919 + 1)), str(uuid.UUID(int=i * 104_729 + 3))
        calls = [
            {"name": "lookup", "args": {"page": i}, "id": f"{thread}-c{i}", "type": "tool_call"}
        ]
        msgs.append(AIMessage("", tool_calls=calls, id=f"{thread}-a{i}"))
        msgs.append(
            ToolMessage(
                f"page {i}: key = {key}, value = {value}; status ok",
                tool_call_id=f"{thread}-c{i}",
                name="lookup",
                id=f"{thread}-t{i}",
            )
        )
    store.append_history(thread, msgs)
    return msgs


def test_exact_keys_rank_their_message_first_and_the_index_grows() -> None:
    store = OffloadStore(InMemoryStore())
    make_history(store, "t", 30)
    for i in (0, 7, 29):
        key = str(uuid.UUID(int=i * 7_919 + 1))
        hits = search_history(store, "t", key, 3)
        assert hits[0].id == f"t-t{i}" and hits[0].role == "tool" and hits[0].tool_name == "lookup"
        assert str(uuid.UUID(int=i * 104_729 + 3)) in hits[0].snippet  # the value is shown
    # more history: the next search indexes only what is new, and finds it
    store.append_history("t", [HumanMessage("late note: the vault code is 7781", id="late")])
    hits = search_history(store, "t", "vault code", 2)
    assert hits[0].id == "late" and hits[0].seq == 61


def test_threads_are_isolated_and_context_is_marked() -> None:
    store = OffloadStore(InMemoryStore())
    make_history(store, "a", 3)
    make_history(store, "b", 3)
    hits = search_history(store, "a", "page 1", 5)
    assert hits and all(h.id.startswith("a-") for h in hits)
    working = [HumanMessage("x", id="a-t1")]
    hits = search_history(store, "a", "page 1 key", 5, working=working)
    states = {h.id: h.in_context for h in hits}
    assert states["a-t1"] == "yes" and all(v == "no" for k, v in states.items() if k != "a-t1")


def test_the_search_tools_own_traffic_and_excluded_ids_are_left_out() -> None:
    store = OffloadStore(InMemoryStore())
    calls = [
        {"name": "search_history", "args": {"query": "zebra"}, "id": "s1", "type": "tool_call"}
    ]
    store.append_history(
        "t",
        [
            HumanMessage("the zebra is in pen 4", id="fact"),
            AIMessage("", tool_calls=calls, id="asks"),
            ToolMessage(
                "1 result for 'zebra' … pen 4", tool_call_id="s1", name="search_history", id="res"
            ),
            AIMessage("I think zebra", id="mine"),
        ],
    )
    assert [h.id for h in search_history(store, "t", "zebra", 5)] == ["fact", "mine"]
    assert [h.id for h in search_history(store, "t", "zebra", 5, exclude=["mine"])] == ["fact"]


def test_exact_phrase_beats_scattered_terms() -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("connection refused connection refused port port", id="scattered"),
            HumanMessage("got: port 5432 connection refused by server", id="phrase"),
        ],
    )
    assert search_history(store, "t", "5432 connection refused", 2)[0].id == "phrase"
    assert search_history(store, "t", "port connection", 2)[0].id in {"scattered", "phrase"}


def _embed(texts: list[str]) -> list[list[float]]:
    """A toy embedding: synonyms share a dimension (what a real model does, crudely)."""
    groups = [("car", "automobile", "vehicle"), ("dog", "puppy", "canine"), ("rain", "storm")]
    out = []
    for t in texts:
        low = t.lower()
        vec = [float(sum(w in low for w in g)) for g in groups] + [0.1]
        out.append(vec)
    return out


def test_a_semantic_index_is_fused_in() -> None:
    backend = InMemoryStore(index={"dims": 4, "embed": _embed, "fields": ["text"]})
    store = OffloadStore(backend)
    store.append_history(
        "t",
        [
            HumanMessage("I parked the car on level 3", id="car"),
            HumanMessage("the puppy chewed a shoe", id="dog"),
            HumanMessage("forecast: storm at noon", id="rain"),
        ],
    )
    # no word in common with any message: only the semantic index can find it
    hits = search_history(store, "t", "automobile location", 2)
    assert hits and hits[0].id == "car"
    assert search_history(store, "t", "canine", 1)[0].id == "dog"
    plain = OffloadStore(InMemoryStore())
    plain.append_history("t", [HumanMessage("I parked the car on level 3", id="car")])
    assert search_history(plain, "t", "automobile location", 2) == []


async def test_async_twin_and_sqlite(tmp_path) -> None:
    backend = open_sqlite(tmp_path / "h.db")
    try:
        store = OffloadStore(backend)
        make_history(store, "t", 12)
        key = str(uuid.UUID(int=5 * 7_919 + 1))
        sync = search_history(store, "t", key, 3)
        other = OffloadStore(backend)  # a second wrapper: a cold index, same answers
        assert await asearch_history(other, "t", key, 3) == sync
        assert sync[0].id == "t-t5"
    finally:
        backend.conn.close()


def test_bad_input_and_formatting() -> None:
    store = OffloadStore(InMemoryStore())
    with pytest.raises(ValueError, match="non-empty"):
        search_history(store, "t", "  ")
    with pytest.raises(ValueError, match="positive"):
        search_history(store, "t", "x", 0)
    assert "No message" in format_hits("x", [], 0)
    make_history(store, "t", 2)
    text = format_hits("page 1", search_history(store, "t", "page 1", 1), 5)
    assert text.startswith("1 result(s) for 'page 1' among 5 messages")
    assert 'reload_offloaded("t-t1") returns it in full' in text


# --- every script, word forms, question words, the turn before ---------------------------------
@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("Привет мир, встреча в четверг", "встреча"),
        ("Η συνάντηση είναι την Πέμπτη", "συνάντηση"),
        ("会议在星期四下午举行", "星期四"),
        ("会議は木曜日です", "木曜日"),
        ("Le café et le résumé sont prêts", "résumé"),
        ("Party 🎉 at the lake house", "🎉 lake"),
    ],
)
def test_text_of_every_script_is_found_by_its_words(text: str, query: str) -> None:
    store = OffloadStore(InMemoryStore())
    noise = [HumanMessage(f"unrelated message number {k}", id=f"n{k}") for k in range(5)]
    store.append_history("t", [*noise, HumanMessage(text, id="hit")])
    assert [h.id for h in search_history(store, "t", query, 1)] == ["hit"]


def test_word_forms_and_question_words() -> None:
    """ "painted" finds "paints"; "When did she …" is searched by its content words."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("When did you arrive? What did she do then?", id="questions"),
            HumanMessage("Melanie paints sunrises over the lake", id="paints"),
            HumanMessage("We went hiking last weekend", id="hike"),
        ],
    )
    hits = search_history(store, "t", "When did Melanie paint a sunrise?", 3)
    assert hits[0].id == "paints"
    assert tokenize("painted paints painting") == ["paint", "paint", "paint"]
    assert tokenize("what did she do when") == []  # question and function words only


def test_an_answer_is_found_by_the_question_it_answers() -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("Which city did you move to in March?", id="q"),
            AIMessage("Lisbon, and I love it.", id="a"),
            *[HumanMessage(f"small talk {k}", id=f"s{k}") for k in range(4)],
        ],
    )
    ids = [h.id for h in search_history(store, "t", "city moved March", 2)]
    assert set(ids) == {"q", "a"} and ids[0] == "q"  # the words' own message first


def test_the_phrase_rule_respects_word_boundaries() -> None:
    """Issue 14: for "red car", "tired car trips" (a raw substring match) outranked "a red
    sports car"; the phrase counts on word boundaries only."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("I get so tired car trips bore me", id="tired"),
            HumanMessage("We bought a red sports car", id="red"),
            HumanMessage("The red car is parked outside", id="phrase"),
        ],
    )
    ids = [h.id for h in search_history(store, "t", "red car", 3)]
    assert ids[0] == "phrase" and ids.index("red") < ids.index("tired")


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_deleted_thread_is_forgotten_and_its_id_starts_empty(use_async: bool) -> None:
    """Issue 13 item 5: after deleting a thread's data (as the docs say), the in-process
    index still returned a deleted message (an SSN) and never indexed the new messages
    at the old positions."""
    from langchain_autocontext import AutoContext, AutoContextConfig

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    old = [HumanMessage("my SSN is 078-05-1120", id="ssn"), AIMessage("noted", id="ack")]
    ac.archive(old, thread_id="user-1", store=store)
    assert [h.id for h in search_history(store, "user-1", "SSN", 1)] == ["ssn"]
    deleted = await store.adelete_thread("user-1") if use_async else store.delete_thread("user-1")
    assert deleted >= 2
    assert store.history_count("user-1") == 0
    assert search_history(store, "user-1", "SSN", 5) == []
    # the id is reused: the same message ids, new text, at the old positions
    new = [HumanMessage("my favourite colour is teal", id="ssn"), AIMessage("nice", id="ack")]
    assert ac.archive(new, thread_id="user-1", store=store) == 2
    assert [h.id for h in search_history(store, "user-1", "colour teal", 1)] == ["ssn"]
    assert search_history(store, "user-1", "SSN 078", 5) == []
