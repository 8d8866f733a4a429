"""Ranking over a thread's complete history: BM25, the incremental index, semantic fusion."""

from __future__ import annotations

import datetime as dt
import gc
import uuid
from collections import Counter

import pytest
from _builders import anthropic_server_tools, openai_server_tools
from conftest import open_sqlite
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import search as search_module
from langchain_autocontext.messages import text_of
from langchain_autocontext.search import (
    BM25Index,
    SearchFilter,
    _asks_about,
    _doc_of_item,
    _doc_of_message,
    asearch_history,
    format_hits,
    query_terms,
    search_history,
    tokenize,
)
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.summarizers import ExtractiveSummarizer, SummaryRequest
from langchain_autocontext.summarizers.transcript import render_transcript


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
    msgs = make_history(store, "a", 3)
    make_history(store, "b", 3)
    hits = search_history(store, "a", "page 1", 5)
    assert hits and all(h.id.startswith("a-") for h in hits)
    held = next(m for m in msgs if m.id == "a-t1")
    hits = search_history(store, "a", "page 1 key", 5, working=[held])
    states = {h.id: h.in_context for h in hits}
    assert states["a-t1"] == "yes" and all(v == "no" for k, v in states.items() if k != "a-t1")
    # a working copy under that id holding something else is not that message
    other = held.model_copy(update={"content": "x"})
    hits = search_history(store, "a", "page 1 key", 5, working=[other])
    assert all(h.in_context == "no" for h in hits)


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


def test_server_tool_calls_and_results_are_searchable() -> None:
    """Anthropic's ``server_tool_use`` was hidden from the searchable text and its
    results, like the OpenAI Responses API's built-in tool calls, were a bare
    ``[type]``: the query a web search ran, the output of the code the provider ran and
    a found passage were not found. They are searchable (the encrypted page content
    and the generated image's base64 are not indexed)."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("How late is BA103 usually?", id="u"),
            anthropic_server_tools("BA103 punctuality", "mean delay: 17.5 min", msg_id="ant"),
            AIMessage("It is usually on time.", id="other"),
            openai_server_tools(msg_id="oai"),
        ],
    )
    assert search_history(store, "t", "punctuality", 3)[0].id == "ant"
    assert search_history(store, "t", "mean delay 17.5", 3)[0].id == "ant"
    assert search_history(store, "t", "2432902008176640000", 3)[0].id == "oai"
    assert search_history(store, "t", "refunds granted within 30 days", 3)[0].id == "oai"
    hit = search_history(store, "t", "Reykjavik weather", 3)[0]
    assert hit.id == "oai" and "Reykjavik" in hit.snippet
    assert not search_history(store, "t", "EqgfCioIARgBIiQ3YTAwMjY1", 3)


def test_a_providers_compaction_summary_is_searchable() -> None:
    """Anthropic's own compaction (``compact_20260112``) answers with a ``compaction``
    block whose ``content`` is its summary of what it dropped; that summary showed as a
    bare ``[compaction]``, so neither ``search_history`` nor a preview or a summary of
    that reply saw it. OpenAI's compaction item is encrypted and stays a placeholder."""
    store = OffloadStore(InMemoryStore())
    summary = "The user is migrating the billing tables to Postgres 16; column ledger_id stays."
    store.append_history(
        "t",
        [
            HumanMessage("Go on with the migration.", id="u"),
            AIMessage(
                [{"type": "compaction", "content": summary}, {"type": "text", "text": "On it."}],
                id="anthropic",
            ),
            AIMessage(
                [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB3xq9"}],
                id="openai",
            ),
        ],
    )
    hit = search_history(store, "t", "ledger_id Postgres", 3)[0]
    assert hit.id == "anthropic" and "ledger_id" in hit.snippet
    entry = store.get_history_message("t", "openai")
    assert entry is not None and text_of(entry.message) == "[compaction]"  # nothing to read


def test_a_call_whose_arguments_did_not_parse_is_searchable_and_summarized() -> None:
    """A model's tool call whose arguments were not valid JSON is an
    ``invalid_tool_call``: providers are sent it, and ``create_agent`` answers it with an
    error. It was left out of the searchable text and of the summaries (a message whose
    only call was one summarized as "(empty)"): what the model tried is kept."""
    bad = AIMessage(
        "",
        id="bad",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "id": "c1",
                "name": "run_query",
                "args": '{"sql": "SELECT * FROM flights WHERE code = BA103',
                "error": "unterminated string",
            }
        ],
    )
    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage("Check the flight", id="u"), bad])
    assert search_history(store, "t", "run_query flights BA103", 3)[0].id == "bad"
    span = [HumanMessage("Check the flight", id="u"), bad]
    for strategy in ("current_round", "tool_run"):
        text = ExtractiveSummarizer().summarize_text(
            SummaryRequest(messages=span, strategy=strategy, max_tokens=200)
        )
        assert "run_query" in text and "(empty)" not in text, text
    transcript = render_transcript(span)
    assert "run_query" in transcript and "BA103" in transcript


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


@pytest.mark.parametrize("weight", [0.5, 1])
def test_phrase_candidates_hold_every_word_in_their_own_text(weight: float) -> None:
    """The exact-phrase candidates are the messages whose own text holds every word of
    the query: one indexed under a word only through the message before it cannot hold
    the phrase. Such neighbours made most of a long synthetic thread candidates, each
    read for the phrase at every search (benchmarks/search_scaling.py's later search)."""
    index = BM25Index()
    q = index.add("q", "Did you like the violin at the concert?")
    index.add("a", "The violin, yes; the concert hall less.", context=q, weight=weight)
    index.add("b", "A concert tonight.", context=Counter(tokenize("violin")), weight=weight)
    assert index.containing_all("violin concert") == ["q", "a"]
    assert "b" in {k for k, _ in index.search("violin concert", 3)}  # still scored by both


@pytest.mark.parametrize("limit", [1, 5, 50])
def test_the_phrase_holder_ranks_first_whatever_the_limit(limit: int) -> None:
    """A long message holding the exact identifier scores below many short ones holding
    its parts: it used to be found only when ``limit`` made the scored pool large enough."""
    store = OffloadStore(InMemoryStore())
    task = "Fix: on_delete=django.db.models.deletion.CASCADE in LookImage. " + "filler. " * 200
    store.append_history(
        "t",
        [
            HumanMessage(task, id="task"),
            *(
                AIMessage(f"step {k}: django db models deletion cascade checked", id=f"n{k}")
                for k in range(30)
            ),
        ],
    )
    hits = search_history(store, "t", "django.db.models.deletion.CASCADE", limit)
    assert hits[0].id == "task"


@pytest.mark.parametrize("quoted", ['"red car"', "'red car'", "\u201cred car\u201d", "`red car`"])
def test_a_quoted_query_is_the_phrase_it_quotes(quoted: str) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("a red car parked by a red house", id="exact"),
            HumanMessage("the car was red, a red bike and a car, a red one", id="words"),
            HumanMessage("red red red, car car car", id="noise"),
        ],
    )
    assert search_history(store, "t", quoted, 3)[0].id == "exact"


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
    assert ids == ["a", "q"]  # the reply first, then the question it answers
    index = BM25Index()
    index.add("q", "Which city did you move to in March?")
    index.add("a", "Lisbon, and I love it.", context=Counter(tokenize("city move March")))
    assert [k for k, _ in index.search("city moved March", 2)] == ["q", "a"]  # own words first


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


def test_a_query_of_only_function_words_or_symbols_finds_its_phrase() -> None:
    """Function words are not indexed and symbols are no words, so "to be or not to be"
    or "🎉" scored nothing and the search came back empty although a message holds it.
    Such a query is looked for as a phrase in every message."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("I love this 🎉 party", id="emoji"),
            AIMessage("To be, or not to be: that is the question", id="quote"),
            HumanMessage("Maybe it is not to be taken lightly", id="other"),
        ],
    )
    assert [h.id for h in search_history(store, "t", "or not to be")][:1] == ["quote"]
    assert [h.id for h in search_history(store, "t", '"that is the"')][:1] == ["quote"]
    assert [h.id for h in search_history(store, "t", "🎉")] == ["emoji"]
    assert search_history(store, "t", "what was said") == []  # no phrase anywhere


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


# --- filters: speaker and time (issue 14) ------------------------------------------------------
def said(text: str, name: str, when: str, mid: str, *, ai: bool = False):
    """A message of a named speaker carrying its own time (``additional_kwargs``)."""
    if ai:  # an assistant's time in response_metadata, as providers put it
        return AIMessage(text, name=name, id=mid, response_metadata={"created_at": when})
    return HumanMessage(text, name=name, id=mid, additional_kwargs={"timestamp": when})


def chat() -> list:
    return [
        said("I painted a sunrise over the lake", "Melanie", "2023-05-08T09:15:00Z", "m1"),
        said("Lovely! I went to the lake support group", "Caroline", "2023-05-08T09:20:00Z", "c1"),
        said("The lake was frozen when I painted it", "Melanie", "2023-01-20", "m2"),
        said("We should paint the lake together", "Caroline", "2023-06-02T18:00:00+02:00", "c2"),
        said("Sounds like a plan for the lake", "Bot", "2023-06-03T08:00:00Z", "b1", ai=True),
    ]


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_speaker_filter_returns_only_that_speaker(use_async: bool) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", chat())
    run = asearch_history if use_async else None

    async def search(**kw):
        if run is not None:
            return await run(store, "t", "lake", 10, **kw)
        return search_history(store, "t", "lake", 10, **kw)

    assert {h.id for h in await search(speaker="melanie")} == {"m1", "m2"}  # case-insensitive
    assert {h.id for h in await search(speaker=" Caroline ")} == {"c1", "c2"}
    assert {h.id for h in await search(speaker="assistant")} == {"b1"}  # a role
    assert {h.id for h in await search(speaker="user")} == {"m1", "m2", "c1", "c2"}
    hits = await search(speaker="Melanie")
    assert all(h.speaker == "Melanie" for h in hits)
    line = format_hits("lake", hits, 5).splitlines()[1]
    assert "user (Melanie) at 20" in line  # the speaker and the time are shown


def test_tool_results_are_found_by_role_and_by_tool_name() -> None:
    store = OffloadStore(InMemoryStore())
    make_history(store, "t", 4)
    assert {h.id for h in search_history(store, "t", "status", 10, speaker="tool")} == {
        "t-t0",
        "t-t1",
        "t-t2",
        "t-t3",
    }
    hits = search_history(store, "t", "", 2, speaker="lookup")  # the tool's name
    assert [h.id for h in hits] == ["t-t3", "t-t2"]  # newest first


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_time_filter_uses_the_messages_own_times(use_async: bool) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", chat())  # all archived now: only their own times differ

    async def ids(query: str = "lake", **kw) -> list[str]:
        if use_async:
            hits = await asearch_history(store, "t", query, 10, **kw)
        else:
            hits = search_history(store, "t", query, 10, **kw)
        return [h.id for h in hits]

    assert set(await ids(after="2023-05-01", before="2023-05-31")) == {"m1", "c1"}
    assert set(await ids(after="2023-05-08", before="2023-05-08")) == {"m1", "c1"}  # the day
    assert set(await ids(before="2023-05")) == {"m1", "c1", "m2"}  # the month included
    assert set(await ids(after="2023-05-08T09:16")) == {"c1", "c2", "b1"}
    assert set(await ids(before="2023-05-08T09:15")) == {"m2", "m1"}  # that minute included
    # 18:00+02:00 is 16:00 UTC: an offset is honoured, naive times are UTC
    assert await ids(after="2023-06-02T16:00", before="2023-06-02T16:59") == ["c2"]
    assert await ids(after="2023-06-02T16:01Z", before="2023-06-02T23:00") == []
    assert set(await ids(after="2023-05", speaker="caroline")) == {"c1", "c2"}
    # an empty query with a filter: the matching messages, newest first
    assert await ids("", after="2023-05-01") == ["b1", "c2", "c1", "m1"]
    assert await ids("  ", speaker="Melanie") == ["m1", "m2"]


def test_a_date_only_time_is_shown_as_a_date_and_others_to_the_minute() -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", chat())
    by_id = {h.id: h for h in search_history(store, "t", "lake", 10)}
    assert by_id["m2"].time == "2023-01-20"
    assert by_id["c2"].time == "2023-06-02 16:00"  # UTC
    assert by_id["b1"].time == "2023-06-03 08:00" and by_id["b1"].speaker == "Bot"
    hits = search_history(store, "t", None, 2, speaker="Melanie")
    text = format_hits("", hits, 5, SearchFilter.parse(speaker="Melanie"))
    assert text.splitlines()[0] == (
        "2 message(s) (speaker Melanie) among 5 messages, newest first (times UTC):"
    )
    assert "id=m2 user (Melanie) at 2023-01-20, position 2" in text


def test_the_archive_time_is_used_when_a_message_carries_none(monkeypatch) -> None:
    import types

    import langchain_autocontext.store as store_module

    store = OffloadStore(InMemoryStore())
    may, june = 1_683_536_400.0, 1_685_696_400.0  # 2023-05-08 09:00 and 2023-06-02 09:00 UTC
    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(time=lambda: may))
    store.append_history("t", [HumanMessage("first report on the lake", id="early")])
    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(time=lambda: june))
    store.append_history("t", [HumanMessage("second report on the lake", id="late")])
    assert [h.id for h in search_history(store, "t", "report", 5, after="2023-06")] == ["late"]
    assert [h.id for h in search_history(store, "t", "report", 5, before="2023-05-31")] == ["early"]
    hit = search_history(store, "t", "report", 5, before="2023-05-31")[0]
    assert hit.time == "2023-05-08 09:00"


def test_filters_apply_before_the_cut_off() -> None:
    """Many better-ranked messages outside the filter must not crowd out those inside."""
    store = OffloadStore(InMemoryStore())
    strong = [
        said(f"lake lake lake report {k}", "Melanie", "2023-01-01", f"strong{k}") for k in range(60)
    ]
    weak = [
        said(
            f"a long note that mentions the lake once, number {k}",
            "Caroline",
            "2023-07-01",
            f"w{k}",
        )
        for k in range(3)
    ]
    store.append_history("t", [*strong, *weak])
    hits = search_history(store, "t", "lake", 3, speaker="caroline")
    assert {h.id for h in hits} == {"w0", "w1", "w2"}
    hits = search_history(store, "t", "lake", 3, after="2023-06-01")
    assert {h.id for h in hits} == {"w0", "w1", "w2"}


@pytest.mark.parametrize("use_async", [False, True])
async def test_bad_filters_are_errors_that_say_why(use_async: bool) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", chat())
    search = asearch_history if use_async else search_history

    async def fails(match: str, query: str = "lake", **kw) -> None:
        with pytest.raises(ValueError, match=match):
            result = search(store, "t", query, 5, **kw)
            if use_async:
                await result

    await fails("after='last May' is not an ISO 8601 date", after="last May")
    await fails("before='2023-13-01' is not an ISO 8601", before="2023-13-01")
    await fails("before='2023/05/08' is not an ISO 8601", before="2023/05/08")
    await fails("is later than before", after="2023-06-01", before="2023-05-31")
    await fails("No message of this conversation is by 'Bob'.*Melanie", speaker="Bob")
    await fails("non-empty string", query="")  # no query and no filter


def test_the_compact_schema_lists_the_filters_and_still_validates() -> None:
    from langchain_autocontext import AutoContext, AutoContextConfig

    ac = AutoContext(AutoContextConfig(max_tokens=8_000))  # instructions="compact"
    tool = next(t for t in ac.tools if t.name == "search_history")
    schema = ac.counter.tool_schema_json(tool)
    for name in ("query", "limit", "speaker", "after", "before"):
        assert f'"{name}":{{"type":' in schema
    assert "default" not in schema and "minimum" not in schema  # names and types only
    args = tool.args_schema
    assert args.model_fields["limit"].get_default(call_default_factory=True) == 5
    with pytest.raises(ValueError, match="greater than or equal"):
        args.model_validate({"limit": 0, "runtime": None})
    with pytest.raises(ValueError, match="Extra inputs"):
        args.model_validate({"speakers": "x", "runtime": None})


@pytest.mark.parametrize("use_async", [False, True])
async def test_the_model_filters_by_speaker_and_time_through_the_tool(use_async: bool) -> None:
    from _builders import FunctionModel, call, self_managed_agent
    from langchain_core.messages import SystemMessage

    from langchain_autocontext import AutoContext, AutoContextConfig

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    script = [
        {"query": "lake", "speaker": "Caroline", "after": "2023-05-01", "before": "2023-05-31"},
        {"speaker": "melanie"},  # no query: newest first
        {"query": "lake", "after": "May 2023"},
        {"query": "lake", "after": "2023-06", "before": "2023-05"},
        {"query": "lake", "speaker": "Bob"},
        {"query": ""},
    ]

    def respond(view, n):
        if n < len(script):
            return AIMessage("", tool_calls=[call("search_history", script[n])])
        return AIMessage("done")

    agent = self_managed_agent(ac, FunctionModel(respond=respond), store)
    first = [SystemMessage("You are a friend."), *chat(), HumanMessage("When was the lake?")]
    config = {"configurable": {"thread_id": f"tool-{use_async}"}}
    if use_async:
        out = await agent.ainvoke({"messages": first}, config)
    else:
        out = agent.invoke({"messages": first}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == len(script)
    one, newest, bad_date, inverted, nobody, empty = results
    assert one.status == "success"
    assert "1 result(s) for 'lake' (speaker Caroline, after 2023-05-01, before 2023-05-31)" in (
        one.content
    )
    assert "id=c1 user (Caroline) at 2023-05-08 09:20" in one.content
    assert "id=c2" not in one.content
    lines = newest.content.splitlines()
    assert lines[0].startswith("2 message(s) (speaker melanie) among ")
    assert "id=m1 user (Melanie)" in lines[1] and "id=m2 user (Melanie)" in lines[3]
    assert bad_date.status == "error" and "after='May 2023' is not an ISO 8601" in bad_date.content
    assert inverted.status == "error" and "later than before" in inverted.content
    assert nobody.status == "error" and "'Bob'" in nobody.content and "Melanie" in nobody.content
    assert empty.status == "error" and "query is empty" in empty.content
    assert out["messages"][-1].content == "done"


def test_the_index_is_revalidated_against_the_store_not_trusted() -> None:
    """Issue 13/14: another process deletes the thread and writes it again (as many
    messages or more): the cached index notices its last message is gone and rebuilds,
    instead of returning the deleted text."""
    backend = InMemoryStore()
    store = OffloadStore(backend)
    store.append_history(
        "t", [HumanMessage(f"secret {k}: SSN 078-05-112{k}", id=f"old{k}") for k in range(5)]
    )
    assert search_history(store, "t", "SSN", 5)
    for item in backend.search(store.thread_namespace("t"), limit=100):  # not via delete_thread
        backend.delete(item.namespace, item.key)
    store.append_history(
        "t", [HumanMessage(f"note {k}: the garden needs water", id=f"new{k}") for k in range(6)]
    )
    hits = search_history(store, "t", "garden", 5)
    assert hits and all(h.id.startswith("new") for h in hits)
    assert not [h for h in search_history(store, "t", "SSN", 5) if h.id.startswith("old")]


def test_the_search_language_merges_that_languages_word_forms() -> None:
    """Issue 14: a language option (Snowball). "Häuser" is found by "Haus" in German;
    with stemming off it is not; an unknown language is a clear error; a thread
    searched in another language is indexed again."""
    from langchain_autocontext import AutoContextConfig, InvalidConfigError

    store = OffloadStore(InMemoryStore())
    store.append_history(
        "de",
        [
            HumanMessage("Wir haben zwei Häuser am See gekauft.", id="h1"),
            HumanMessage("Das Wetter war schön.", id="h2"),
        ],
    )
    assert search_history(store, "de", "Haus", language="german")[0].id == "h1"
    assert search_history(store, "de", "Haus", language="none") == []
    assert search_history(store, "de", "Haus", language="german")[0].id == "h1"
    with pytest.raises(ValueError, match="unknown search language"):
        search_history(store, "de", "Haus", language="klingon")
    with pytest.raises(InvalidConfigError, match="search_language"):
        AutoContextConfig(search_language="klingon")


# --- issue 14: the reply to a question, query analysis, indexing from the stored dicts --------
def _qa_chat() -> list:
    return [
        HumanMessage("Wow, that's awesome! What pet do you have?", id="q"),
        AIMessage("We've got a pup and a kitty, Luna and Oliver.", id="a"),
        HumanMessage("My cat sleeps all day.", id="same0"),
        HumanMessage("Anyway, which pet food is best?", id="q2"),
        HumanMessage("Dry food, I think.", id="same1"),  # the same speaker: not a reply
        AIMessage("I adopted a pet turtle. How are you?", id="t"),
        HumanMessage("Fine, busy week at work.", id="t-next"),
        *[AIMessage(f"small talk {k}", id=f"s{k}") for k in range(6)],
    ]


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_question_hit_brings_its_reply_just_before_it(use_async: bool) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", _qa_chat())

    async def ids(query: str, limit: int = 10, **kw) -> list[str]:
        run = asearch_history if use_async else search_history
        found = run(store, "t", query, limit, **kw)
        return [h.id for h in (await found if use_async else found)]

    found = await ids("Which pet do they have?")
    # "q" asks about pets: its reply (by the other speaker) comes first, at its score
    assert found.index("a") == found.index("q") - 1
    # the next message is found by its neighbour's words (half weight), but not brought
    # before it: "same1" is by the asker of "q2"; "t" asks "How are you?", not about pets
    assert found.index("q2") < found.index("same1")
    assert found.index("t") < found.index("t-next")
    hits = search_history(store, "t", "What pet do you have?", 3)
    assert [h.id for h in hits][:2] == ["q", "a"]  # the whole query: that message first
    assert hits[0].score == hits[1].score
    # a filter applies to the reply too
    assert "a" not in await ids("pet", speaker="user")
    # questions are found in linear time, in every script (a backtracking pattern took
    # minutes on one long line without a sentence end)
    assert _asks_about("b" * 60_000 + " which pet?", {"pet"}, "english")
    assert not _asks_about("Is it? " + "b" * 60_000 + " pet", {"pet"}, "english")
    assert _asks_about("可爱！你有宠物吗？", set(tokenize("宠物")), "english")


def test_query_analysis_drops_clitics_and_verbs_of_saying() -> None:
    assert tokenize("Caroline's friend didn't say, we've been") == ["carolin", "friend", "say"]
    assert query_terms("What did Melanie say about running?") == ["melani", "run"]
    assert query_terms("Who said it?") == ["said"]  # nothing else: the verb stays
    assert query_terms("Was sagen?", "german") == ["was", "sag"]  # English only
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("She said hello and talked a lot about nothing", id="said"),
            HumanMessage("Running has been great for my headspace", id="run"),
        ],
    )
    assert [h.id for h in search_history(store, "t", "What did she say about running?", 2)] == [
        "run"
    ]


def _varied_messages() -> list:
    return [
        HumanMessage("hi", id="h", name=" Caroline ", additional_kwargs={"timestamp": 1.7e9}),
        AIMessage(
            [{"type": "text", "text": "looking"}, {"type": "image_url", "image_url": {}}],
            id="ai",
            name="Melanie",
            response_metadata={"created_at": dt.datetime(2023, 5, 8, 14, 3, tzinfo=dt.UTC)},
            tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
        ),
        ToolMessage("found", tool_call_id="c1", name="lookup", id="tool"),
        AIMessage("", id="copy", tool_calls=[{"name": "search_history", "args": {}, "id": "c2"}]),
        ToolMessage("1 result", tool_call_id="c2", name="search_history", id="copy-result"),
        AIMessageChunk("partial", id="chunk", additional_kwargs={"timestamp": "2023-05-08"}),
        SystemMessage("be brief", id="sys"),
    ]


def test_the_index_reads_the_stored_dicts_as_it_would_the_messages(tmp_path) -> None:
    """The first search indexes the stored items without building LangChain messages: each
    field it keeps (text, role, name, tool, copy, time) is what the message gives."""
    backend = open_sqlite(tmp_path / "h.db")
    try:
        for store in (OffloadStore(InMemoryStore()), OffloadStore(backend)):
            msgs = _varied_messages()
            store.append_history("t", msgs)
            items = store.get_history_items("t", start=0, end=store.history_count("t"))
            assert [it.key for it in items] == [m.id for m in msgs]
            for item, entry in zip(items, store.get_history("t"), strict=True):
                assert _doc_of_item(item.value) == _doc_of_message(entry.message)
            # an item written without the fields read (an older layout) is read whole
            legacy = {k: v for k, v in items[0].value.items() if k != "text"}
            assert _doc_of_item(legacy) == _doc_of_message(msgs[0])
            docs = {it.key: _doc_of_item(it.value) for it in items}
            assert docs["copy"].copy and docs["copy-result"].copy and not docs["ai"].copy
            assert docs["ai"].time is not None and docs["chunk"].role == "assistant"
    finally:
        backend.conn.close()


async def test_history_items_cut_the_whole_read_to_the_range() -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage(f"m{k}", id=f"m{k}") for k in range(8)])
    assert [it.key for it in store.get_history_items("t", start=0, end=5)] == [
        f"m{k}" for k in range(5)
    ]
    assert [it.key for it in store.get_history_items("t", start=3, end=6)] == ["m3", "m4", "m5"]
    assert [it.key for it in await store.aget_history_items("t", start=0, end=8)] == [
        f"m{k}" for k in range(8)
    ]
    assert store.get_history_items("t", start=4, end=4) == []
    with pytest.raises(ValueError, match="non-negative"):
        store.get_history_items("t", start=-1, end=3)


def test_a_bulk_load_pauses_the_collector_and_restores_it(monkeypatch) -> None:
    monkeypatch.setattr("langchain_autocontext.search.BULK", 10)
    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage(f"note {k}", id=f"n{k}") for k in range(20)])
    seen: list[bool] = []
    real = search_module._add

    def spy(index, items) -> None:
        seen.append(gc.isenabled())
        real(index, items)

    monkeypatch.setattr(search_module, "_add", spy)
    assert gc.isenabled()
    assert search_history(store, "t", "note 3", 1)[0].id == "n3"
    assert seen == [False] and gc.isenabled()  # paused for the 20, then restored
    store.append_history("t", [HumanMessage("note x", id="nx")])
    search_history(store, "t", "note x", 1)
    assert seen == [False, True]  # one new message: no pause
    gc.disable()
    try:
        store.append_history("t", [HumanMessage(f"more {k}", id=f"o{k}") for k in range(20)])
        search_history(store, "t", "more", 1)
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_query_naming_a_speaker_prefers_that_speakers_messages(use_async: bool) -> None:
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("Nate, your turtles are so cute and green!", id="c", name="Joanna"),
            AIMessage("My turtles are three years old.", id="n", name="Nate"),
            HumanMessage("Turtles turtles turtles, I dream of turtles!", id="c2", name="Joanna"),
            AIMessage("Nothing new here", id="x", name="agent_2"),
        ],
    )

    async def ids(query: str) -> list[str]:
        run = asearch_history if use_async else search_history
        found = run(store, "t", query, 5)
        return [h.id for h in (await found if use_async else found)]

    plain = await ids("turtles")
    assert plain[0] == "c2"  # the most turtles
    named = await ids("How long has Nate had his turtles?")
    assert named[0] == "n" and set(named) >= {"c", "c2"}  # a preference, not a filter
    assert (await ids("Joanna's turtles"))[:2] == ["c2", "c"]
    index = search_module._CACHE.get(store, "t")
    assert index.named("what did nate say") == {"Nate"}
    assert index.named("turtles 2") == set()  # the number in "agent_2" names nobody
    assert index.named("agent turtles") == {"agent_2"}


def test_a_single_cjk_character_finds_the_words_holding_it() -> None:
    """CJK text is indexed as character pairs, so a one-character query ("湖", lake) found
    nothing although many Chinese and Japanese words are one character."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("我们在湖边散步", id="zh"),
            HumanMessage("湖の近くに住んでいます", id="ja"),
            HumanMessage("今天天气很好", id="other"),
        ],
    )
    # (the message after one holding it is found too, lower: the turn before is indexed
    # with each message at half weight)
    assert {h.id for h in search_history(store, "t", "湖", 5)[:2]} == {"zh", "ja"}
    assert search_history(store, "t", "湖の", 5)[0].id == "ja"  # the phrase holder first
    assert search_history(store, "t", "湖边", 5)[0].id == "zh"


@pytest.mark.parametrize("as_name", [True, False])
def test_a_query_naming_a_speaker_prefers_them_by_name_or_by_the_transcript_prefix(
    as_name: bool,
) -> None:
    """The speaker prior applied only to message names; a chat archived as transcript
    lines ("Caroline (8 May 2023): …", the speaker only in the text) got none, and
    LoCoMo's recall@5 was 0.740 against 0.758 with names."""
    lines = [  # each names the other: only who said it tells them apart
        ("Melanie", "Caroline, I painted a sunrise over the lake last week", "m"),
        ("Caroline", "Melanie, I painted a sunrise over the lake last week", "c"),
    ]
    msgs = [
        HumanMessage(text, name=who, id=mid)
        if as_name
        else HumanMessage(f"{who} (8 May 2023): {text}", id=mid)
        for who, text, mid in lines
    ]
    store = OffloadStore(InMemoryStore())
    store.append_history("t", msgs)
    assert search_history(store, "t", "What did Caroline paint?", 2)[0].id == "c"
    assert search_history(store, "t", "What did Melanie paint?", 2)[0].id == "m"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_the_search_tool_names_the_agent_of_another_agents_messages(
    use_async: bool,
) -> None:
    """A subagent that shares its caller's thread archives into the same history: the
    boss's search shows the helper's messages as the helper's, its own as before."""
    from langchain_core.runnables import RunnableLambda
    from langgraph.prebuilt import ToolRuntime

    from langchain_autocontext import AutoContext

    store = OffloadStore(InMemoryStore())

    def archive_as(agent: str, messages: list) -> None:
        append = RunnableLambda(lambda _: store.append_history("t", messages))
        append.invoke(None, {"metadata": {"lc_agent_name": agent}})

    archive_as("helper", [AIMessage("the parser fix touches lexer.py", id="h1")])
    archive_as("boss", [HumanMessage("is the parser fixed?", id="b1")])
    assert [e.agent for e in store.get_history("t")] == ["helper", "boss"]
    asking = AIMessage(
        "",
        id="ask",
        tool_calls=[{"name": "search_history", "args": {}, "id": "c", "type": "tool_call"}],
    )
    runtime = ToolRuntime(
        state={"messages": [HumanMessage("go", id="g"), asking], "autocontext": {}},
        context=None,
        config={"configurable": {"thread_id": "t"}},
        stream_writer=lambda _: None,
        tool_call_id="c",
        store=store,
    )
    tool = next(t for t in AutoContext(store=store).tools if t.name == "search_history")
    request = {"name": "search_history", "id": "c", "type": "tool_call"}
    request["args"] = {"query": "parser", "runtime": runtime}
    as_boss = {"metadata": {"lc_agent_name": "boss"}}
    out = await tool.ainvoke(request, as_boss) if use_async else tool.invoke(request, as_boss)
    lines = out.update["messages"][-1].content.splitlines()
    helper_line = next(line for line in lines if "id=h1" in line)
    boss_line = next(line for line in lines if "id=b1" in line)
    assert "assistant of agent helper" in helper_line
    assert "of agent" not in boss_line


def test_latin_words_and_numbers_written_against_cjk_text_are_found() -> None:
    """Chinese, Japanese and Korean write Latin words and numbers without spaces around
    them ("我用Python写代码"): the whole run was split into character pairs ("py", "yt",
    "n写"), so "Python", "LangChain", "Docker" or "2023" found nothing."""
    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t",
        [
            HumanMessage("我用Python写代码", id="zh"),
            HumanMessage("LangChainを使ってエージェントを作りました", id="ja"),
            HumanMessage("오늘 Docker컨테이너를 재시작했어요", id="ko"),
            HumanMessage("2023年5月に東京へ行った", id="date"),
        ],
    )
    assert tokenize("我用Python写代码") == ["我用", "python", "写代", "代码"]
    for query, mid in [("Python", "zh"), ("LangChain", "ja"), ("Docker", "ko"), ("2023", "date")]:
        assert search_history(store, "t", query, 5)[0].id == mid
    assert search_history(store, "t", "代码", 5)[0].id == "zh"  # the pairs still match
    assert search_history(store, "t", "컨테이너", 5)[0].id == "ko"


def test_a_cjk_character_standing_alone_does_not_hide_the_words_holding_it() -> None:
    """A one-character query stood for the pairs holding it only while no message held
    the character on its own: one list "湖、山、海" and "湖边" was found no more."""
    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage("我们周末去湖边散步", id="walk")])
    store.append_history("t", [HumanMessage("今天天气很好", id="w")])
    store.append_history("t", [HumanMessage("景点：湖、山、海", id="list")])
    assert {h.id for h in search_history(store, "t", "湖", 5)} >= {"walk", "list"}


def test_a_day_or_month_with_an_offset_names_that_day_or_month_there() -> None:
    """``2023-05-08+02:00`` (accepted by the filter) was read as 02:00 UTC for an hour:
    ``datetime.fromisoformat`` takes the ``+`` for the date/time separator."""
    store = OffloadStore(InMemoryStore())

    def at(text: str, mid: str, when: str) -> HumanMessage:
        return HumanMessage(text, id=mid, additional_kwargs={"timestamp": when})

    store.append_history(
        "t",
        [
            at("lake morning", "m1", "2023-05-08T09:00:00+02:00"),
            at("lake evening", "m2", "2023-05-08T23:30:00+02:00"),  # 21:30 UTC
            at("lake next day", "m3", "2023-05-09T01:00:00+02:00"),  # the 8th, 23:00 UTC
        ],
    )

    def ids(**kw) -> set[str]:
        return {h.id for h in search_history(store, "t", "lake", 10, **kw)}

    day = "2023-05-08+02:00"
    assert SearchFilter.parse(after=day).after[1:] == (
        dt.datetime(2023, 5, 7, 22, tzinfo=dt.UTC).timestamp(),
        dt.datetime(2023, 5, 8, 22, tzinfo=dt.UTC).timestamp(),
    )
    assert ids(after=day, before=day) == {"m1", "m2"}
    assert ids(after="2023-05-08Z", before="2023-05-08Z") == {"m1", "m2", "m3"}  # UTC
    assert ids(after="2023-05-08", before="2023-05-08-0000") == {"m1", "m2", "m3"}
    assert ids(after="2023-05+02:00", before="2023-05+02:00") == {"m1", "m2", "m3"}
    with pytest.raises(ValueError, match="not an ISO 8601"):
        SearchFilter.parse(after="2023-05T10:00")
    with pytest.raises(ValueError, match="not an ISO 8601"):
        SearchFilter.parse(after="2023-05-08+25:00")


def test_a_name_with_a_run_of_spaces_is_a_speaker_the_filter_finds() -> None:
    """The speaker given had its spaces collapsed, the names of the messages not: "Mel
    Jones" stored as "Mel  Jones" was refused, even copied from the error listing it."""
    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage("lake trip", id="b", name="Mel  Jones")])
    assert [h.id for h in search_history(store, "t", "", 5, speaker="Mel  Jones")] == ["b"]
    assert [h.id for h in search_history(store, "t", "lake", 5, speaker="mel jones")] == ["b"]


def test_a_search_during_another_searchs_indexing_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two searches of one thread share its index: one that starts while another is
    half-way through adding a message (its key in ``keys``, its meta not yet written)
    waits for the add instead of reading the half-added message (KeyError, IndexError,
    a dict changing size during iteration)."""
    import threading

    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage("alpha one", id="m0")])
    assert search_history(store, "t", "alpha")  # indexed up to m0
    store.append_history("t", [HumanMessage("alpha two beta", id="m1")])
    mid_add, go = threading.Event(), threading.Event()
    real_add = BM25Index.add

    def paused_add(self: BM25Index, key: str, *args: object, **kwargs: object) -> object:
        out = real_add(self, key, *args, **kwargs)  # type: ignore[arg-type]
        if key == "m1" and threading.current_thread().name == "first":
            mid_add.set()
            go.wait(5)
        return out

    monkeypatch.setattr(BM25Index, "add", paused_add)
    results: dict[str, object] = {}

    def run(name: str, **kw: object) -> None:
        try:
            results[name] = [h.id for h in search_history(store, "t", "alpha", 5, **kw)]  # type: ignore[arg-type]
        except Exception as exc:  # the race this test is about
            results[name] = exc

    first = threading.Thread(target=run, args=("first",), name="first")
    first.start()
    assert mid_add.wait(5)
    second = threading.Thread(target=run, args=("second",), kwargs={"speaker": "user"})
    second.start()
    second.join(0.3)  # without the lock it fails here, reading the half-added m1
    go.set()
    first.join(5)
    second.join(5)
    assert results["first"] == ["m1", "m0"] or results["first"] == ["m0", "m1"]
    second_ids = results["second"]
    assert isinstance(second_ids, list), repr(second_ids)
    assert sorted(second_ids) == ["m0", "m1"]


def test_an_edit_that_reuses_an_id_is_found_and_the_original_too() -> None:
    """LangGraph's add_messages replaces a message that has the same id (an edit): the
    engine, which remembers the id as archived, archives the new content as a later
    version of the message, once; search finds both contents, each readable by the id
    the hit names."""
    from langchain_autocontext import AutoContext, AutoContextConfig

    ac = AutoContext(AutoContextConfig(max_tokens=100_000), store=InMemoryStore())
    store = ac.store
    assert store is not None
    system = SystemMessage("You help.", id="s")
    before = [
        system,
        HumanMessage("my favourite colour is blue", id="u1"),
        AIMessage("ok", id="a1"),
    ]
    ac.compress(before, thread_id="t")
    after = [system, HumanMessage("my favourite colour is vermilion", id="u1"), before[2]]
    for _ in range(2):  # the same edit twice: one version
        ac.compress([*after, HumanMessage("thanks", id="u2")], thread_id="t")
    assert store.history_count("t") == 5
    fresh = AutoContext(AutoContextConfig(max_tokens=100_000), store=store)
    fresh.compress([*after, HumanMessage("thanks", id="u2")], thread_id="t")
    assert store.history_count("t") == 5  # another engine (process) writes no copy
    for word, content in (("vermilion", after[1].content), ("blue", before[1].content)):
        hits = search_history(store, "t", word, 3)
        assert hits, word
        entry = store.get_history_message("t", hits[0].id)
        assert entry is not None and entry.message.content == content
        assert entry.message.id == hits[0].id and (entry.version_of or entry.id) == "u1"


def test_the_version_a_rewrite_was_made_of_is_the_one_in_context_shortened() -> None:
    """A message edited under its id (the developer's later version), then rewritten by
    the package (here the model's update; a preview or summary alike): the rewrite was
    made of the later version, yet the first version was said to be "in your context,
    shortened" and the later one "not in your context"."""
    from langchain_autocontext.messages import context_edit

    store = OffloadStore(InMemoryStore())
    store.append_history("t", [HumanMessage("codename REDFOX", id="x")])
    store.append_history("t", [HumanMessage("codename BLUEBIRD", id="x")])  # an edit
    rewrite = context_edit(HumanMessage("codename BLUEBIRD", id="x"), content="a codename")
    states = {
        word: {h.id: h.in_context for h in search_history(store, "t", word, 5, working=[rewrite])}
        for word in ("REDFOX", "BLUEBIRD")
    }
    assert states["REDFOX"]["x"] == "no"
    version = next(key for key in states["BLUEBIRD"] if key.startswith("x~"))
    assert states["BLUEBIRD"][version] == "shortened"
    # a message never edited under its id: its one version is the one rewritten
    store.append_history("t", [HumanMessage("codename GREYHOUND", id="y")])
    rewrite = context_edit(HumanMessage("codename GREYHOUND", id="y"), content="a codename")
    hits = search_history(store, "t", "GREYHOUND", 5, working=[rewrite])
    assert [(h.id, h.in_context) for h in hits if h.id == "y"] == [("y", "shortened")]


async def test_an_async_search_waiting_for_a_sync_search_of_its_thread_blocks_no_loop() -> None:
    """A thread's searches share its index, read under one lock. A sync search (a sync
    tool, in a worker thread) held it while it ranked; an async search of the same thread
    waited for it in the event loop's own thread, blocking it: no other coroutine of the
    process ran meanwhile (here the sync search waits for one, which never ran). The
    async search now waits on the loop."""
    import asyncio
    import threading
    from collections.abc import Iterator, Sequence
    from typing import Any

    from langchain_core.messages import BaseMessage

    store = OffloadStore(InMemoryStore())
    store.append_history(
        "t", [HumanMessage(f"invoice {i} was paid", id=f"m{i}") for i in range(20)]
    )
    search_history(store, "t", "invoice")  # indexed: both searches below only rank
    inside, go_on = threading.Event(), threading.Event()
    told: list[bool] = []

    class Working(Sequence[BaseMessage]):
        """The working messages of the sync search: it reads them under the index lock,
        and waits there until a coroutine tells it to go on."""

        def __getitem__(self, i: Any) -> Any:
            raise IndexError(i)

        def __len__(self) -> int:
            return 1

        def __iter__(self) -> Iterator[BaseMessage]:
            inside.set()
            told.append(go_on.wait(timeout=10))  # a blocked loop fails the test, not hangs it
            return iter(())

    sync_search = threading.Thread(
        target=lambda: search_history(store, "t", "invoice", working=Working())
    )
    sync_search.start()
    await asyncio.to_thread(inside.wait, 10)
    searching = asyncio.ensure_future(asearch_history(store, "t", "invoice"))
    for _ in range(20):  # the async search goes as far as it can: to the lock
        await asyncio.sleep(0)
    go_on.set()  # another coroutine's work
    hits = await searching
    await asyncio.to_thread(sync_search.join, 10)
    assert told == [True] and hits
