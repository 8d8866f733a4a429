"""Tests of langchain_autocontext.metadata: tags rendered with exact counts, and stripped."""

from __future__ import annotations

import re
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.tools import tool

from langchain_autocontext import tag_counts as md
from langchain_autocontext.metadata import (
    TAG_PATTERN,
    render_tag,
    render_view,
    strip_message_tags,
    strip_tags,
    view_counts,
)
from langchain_autocontext.tokens import REPLY_PRIMING, TokenCounter

COUNT_RE = re.compile(r'cumulative_message_token_count="(\d+)" message_token_count="(\d+)"')


@tool
def read_file(path: str) -> str:
    """Read a file from the workspace."""
    return path


def sample() -> list[BaseMessage]:
    return [
        SystemMessage("You are a careful coding agent.", id="sys"),
        HumanMessage("Fix the failing test in tests/test_x.py", id="u1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "read_file", "args": {"path": "tests/test_x.py"}, "id": "c1"}],
        ),
        ToolMessage("\n\ndef test_x():\n    assert 1 == 2\n", tool_call_id="c1", id="t1"),
        AIMessage([{"type": "text", "text": "The assertion is wrong."}], id="a2"),
        HumanMessage("/usr/bin/env python -m pytest", id="u2"),
        AIMessage("Done: 999 tests pass.", id="a3"),
    ]


def tag_of(message: BaseMessage) -> str:
    content = message.content
    text = content if isinstance(content, str) else content[0]["text"]  # type: ignore[index]
    match = TAG_PATTERN.match(text)
    assert match, text
    return match.group().rstrip("\n")


def numbers(message: BaseMessage) -> tuple[int, int]:
    match = COUNT_RE.search(tag_of(message))
    assert match
    return int(match.group(1)), int(match.group(2))


def check_exact(
    messages: Sequence[BaseMessage], counter: Any = None, tools: Sequence[Any] | None = None
) -> list[BaseMessage]:
    """Render, then recount every rendered message from scratch with a fresh counter."""
    view = render_view(messages, counter, tools=tools)
    fresh = counter if callable(counter) and not isinstance(counter, TokenCounter) else None
    recount = TokenCounter(counter=fresh) if fresh else _fresh_like(counter)
    running = recount.reply_priming + recount.count_tools(tools)
    for original, rendered in zip(messages, view, strict=True):
        own = recount.count_message(rendered)
        running += own
        if isinstance(original, SystemMessage):
            assert rendered is original
            continue
        cumulative, count = numbers(rendered)
        assert count == own, (rendered.content, count, own)
        assert cumulative == running
    tc = counter if isinstance(counter, TokenCounter) else None
    if tc is not None:
        assert tc.count(messages, tools, tags=True) == running
        assert view_counts(messages, tc, tools=tools).total == running
    assert recount.count(view, tools) == running
    return view


def _fresh_like(counter: Any) -> TokenCounter:
    if isinstance(counter, TokenCounter) and counter.encoding_name is None and counter._fn is None:
        return TokenCounter(None)
    return TokenCounter()


# --- tags ------------------------------------------------------------------------------------------
def test_render_tag_format() -> None:
    assert render_tag("abc-1", 1234, 56) == (
        '<metadata id="abc-1" cumulative_message_token_count="1234" message_token_count="56"/>'
    )


def test_render_tag_escapes_attribute_values() -> None:
    nasty = 'x" injected="1"/><evil a=\'b\'> & more'
    tag = render_tag(nasty, 10, 5)
    assert tag.count('"') == 6  # only the three attribute quote pairs
    assert "<evil" not in tag and "'" not in tag
    assert (
        "&quot;" in tag and "&lt;" in tag and "&gt;" in tag and "&amp;" in tag and "&apos;" in tag
    )
    element = ET.fromstring(tag)
    assert element.tag == "metadata"
    assert element.attrib == {
        "id": nasty,
        "cumulative_message_token_count": "10",
        "message_token_count": "5",
    }
    assert TAG_PATTERN.fullmatch(tag)


# --- render_view -------------------------------------------------------------------------------------
def test_render_view_copies_and_leaves_input_unchanged() -> None:
    msgs = sample()
    before = [message_to_dict(m) for m in msgs]
    view = render_view(msgs)
    assert [message_to_dict(m) for m in msgs] == before
    assert view[0] is msgs[0]  # system message: same object, untagged
    assert all(v is not m for v, m in zip(view[1:], msgs[1:], strict=True))
    assert all(v.id == m.id and type(v) is type(m) for v, m in zip(view, msgs, strict=True))
    assert view[1].content.startswith('<metadata id="u1" ')  # type: ignore[union-attr]
    assert view[1].content.endswith("/>\nFix the failing test in tests/test_x.py")  # type: ignore[union-attr]
    assert TAG_PATTERN.fullmatch(view[2].content)  # type: ignore[arg-type]  # tool calls only
    assert view[2].tool_calls == msgs[2].tool_calls  # type: ignore[attr-defined]
    assert view[4].content[0]["type"] == "text"  # type: ignore[index]
    assert view[4].content[1:] == msgs[4].content  # type: ignore[index]
    assert [strip_message_tags(v).content for v in view] == [m.content for m in msgs]


def test_counts_are_exact_and_cumulative() -> None:
    counter = TokenCounter()
    msgs = sample()
    view = check_exact(msgs, counter, tools=[read_file])
    first_cumulative, first_count = numbers(view[1])
    expected_start = (
        REPLY_PRIMING + counter.count_tools([read_file]) + counter.count_message(msgs[0])
    )
    assert first_cumulative == expected_start + first_count
    last_cumulative, _ = numbers(view[-1])
    assert last_cumulative == counter.count(msgs, [read_file], tags=True)
    assert last_cumulative > counter.count(msgs, [read_file])


def test_counts_exact_without_tools_and_with_default_counter() -> None:
    check_exact(sample())
    check_exact(sample(), "cl100k_base")


def test_counts_exact_on_digit_boundaries() -> None:
    """Tag counts near 10**k: the tag's own digits change its length."""
    counter = TokenCounter()
    for size in (1, 5, 30, 95, 96, 97, 98, 320, 331, 332, 333, 334, 995, 996, 997, 3300):
        msgs = [HumanMessage("7" * (size * 3), id="d")]
        check_exact(msgs, counter)
        filler = [HumanMessage("word " * size, id=f"f{i}") for i in range(3)]
        check_exact([*filler, *msgs], counter)


def test_counts_exact_with_pluggable_and_estimate_counters() -> None:
    def words(messages: Sequence[BaseMessage]) -> int:
        return 2 + sum(3 + len(str(m.content).split()) for m in messages)

    check_exact(sample(), words)
    estimate = TokenCounter(None)
    check_exact(sample(), estimate)


def test_messages_without_ids_get_empty_id() -> None:
    view = render_view([HumanMessage("no id here")])
    assert view[0].content.startswith('<metadata id="" ')  # type: ignore[union-attr]


def test_append_only_reuses_earlier_tags() -> None:
    counter = TokenCounter()
    msgs = sample()
    first = render_view(msgs, counter)
    msgs.append(HumanMessage("one more", id="u3"))
    second = render_view(msgs, counter)
    assert [m.content for m in first] == [m.content for m in second[:-1]]


def test_fast_path_self_test_and_agreement_with_slow_path() -> None:
    counter = TokenCounter()
    state = md._state(counter)
    assert state.fast and state.digits_by_length  # cl100k isolates digit runs of 3
    msgs = [*sample(), *[HumanMessage("\n" * i + "x" * i * 40, id=f"n{i}") for i in range(12)]]
    fast = view_counts(msgs, counter)
    slow = md._slow_counts(msgs, TokenCounter(), fast.base)
    assert fast == slow


def test_verification_mismatch_falls_back_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    state = md._state(counter)
    monkeypatch.setattr(md, "_SELF_TEST", dict(md._SELF_TEST))  # restore after the test
    msgs = sample()
    for m in msgs:  # corrupt the cached per-id skeleton counts
        state.skeletons[m.id or ""] = state.skeleton(m.id or "") + 1
    state.extras.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        view = render_view(msgs, counter)
    assert any("disagreed" in str(w.message) for w in caught)
    assert state.fast is False
    fresh = TokenCounter()
    for rendered in view[1:]:
        assert numbers(rendered)[1] == fresh.count_message(rendered)


# --- strip ------------------------------------------------------------------------------------------
def test_strip_tags_removes_model_written_tags() -> None:
    text = (
        '<metadata id="a1" cumulative_message_token_count="10" message_token_count="3"/>\n'
        "Here is my answer.\n"
        "<metadata message_token_count='7' id='x'>\r\n"
        'More text <metadata id="b" cumulative_message_token_count="1"></metadata> inline.\n'
        '<metadata   id="q" message_token_count="2"   />tail'
    )
    assert strip_tags(text) == "Here is my answer.\nMore text  inline.\ntail"


def test_strip_tags_leaves_other_text_alone() -> None:
    keep = [
        "plain text",
        "<metadata><groupId>org.example</groupId></metadata>",  # Maven metadata XML
        '<metadata name="x"/>',  # unknown attribute
        "<metadata",
        "a < b and c > d",
        "&lt;metadata id=&quot;x&quot;/&gt;",
    ]
    for text in keep:
        assert strip_tags(text) == text


def test_strip_message_tags() -> None:
    plain = HumanMessage("nothing to strip", id="p")
    assert strip_message_tags(plain) is plain
    tagged = AIMessage(render_tag("x", 1, 1) + "\nanswer", id="x")
    stripped = strip_message_tags(tagged)
    assert stripped is not tagged and stripped.content == "answer" and stripped.id == "x"
    assert tagged.content.startswith("<metadata")  # type: ignore[union-attr]
    blocks = AIMessage(
        [{"type": "text", "text": render_tag("y", 1, 1)}, {"type": "text", "text": "hi"}], id="y"
    )
    assert strip_message_tags(blocks).content == [{"type": "text", "text": "hi"}]
    untouched = HumanMessage([{"type": "text", "text": "hi"}, {"type": "image", "url": "u"}])
    assert strip_message_tags(untouched) is untouched


# --- properties ---------------------------------------------------------------------------------------
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("\n\n\r\t /\"'<>&=0123456789_-.:{}abcxyz")),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=40,
)


@st.composite
def message_lists(draw: st.DrawFn) -> list[BaseMessage]:
    msgs: list[BaseMessage] = []
    if draw(st.booleans()):
        msgs.append(SystemMessage(draw(TEXT), id="system"))
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["human", "ai", "calls", "tool", "blocks"]))
        ident = draw(st.sampled_from([f"m{i}", f'q"{i}<&>', f"{i}" * 3]))
        text = draw(TEXT)
        if kind == "human":
            msgs.append(HumanMessage(text, id=ident))
        elif kind == "ai":
            msgs.append(AIMessage(text, id=ident))
        elif kind == "calls":
            calls = [{"name": "f", "args": {"x": draw(TEXT)}, "id": f"c{i}"}]
            msgs.append(AIMessage(text, id=ident, tool_calls=calls))
        elif kind == "tool":
            msgs.append(ToolMessage(text, tool_call_id=f"c{i}", id=ident))
        else:
            blocks: list[Any] = [{"type": "text", "text": text}]
            if draw(st.booleans()):
                blocks.append({"type": "image", "url": "https://example.com/a.png"})
            msgs.append(HumanMessage(blocks, id=ident))
    return msgs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=message_lists(), with_tools=st.booleans())
def test_property_round_trip_and_exact_counts(msgs: list[BaseMessage], with_tools: bool) -> None:
    before = [message_to_dict(m) for m in msgs]
    view = check_exact(msgs, TokenCounter(), tools=[read_file] if with_tools else None)
    assert [message_to_dict(m) for m in msgs] == before
    for original, rendered in zip(msgs, view, strict=True):
        assert strip_message_tags(rendered).content == original.content
        if isinstance(rendered.content, str):
            assert strip_tags(rendered.content) == original.content


@settings(max_examples=80, deadline=None)
@given(
    parts=st.lists(
        st.tuples(TEXT, st.sampled_from(["", "a1", 'x"y', "ü"]), st.integers(0, 10**7)),
        min_size=1,
        max_size=5,
    )
)
def test_property_strip_fake_tags_from_model_output(parts: list[tuple[str, str, int]]) -> None:
    clean = [text for text, _, _ in parts]
    noisy = "".join(f"{text}{render_tag(mid, n, n // 3)}\n" for text, mid, n in parts)
    expected = "".join(clean)
    # a tag may fuse with surrounding text only if that text itself looks like a tag
    if "<metadata" not in expected:
        assert strip_tags(noisy) == expected
        assert strip_tags(expected) == expected


def test_stripping_an_echoed_tag_keeps_citations_and_provider_items() -> None:
    """OpenAI's Responses replies carry url citations as offsets into their text, and a
    reasoning item must be followed by its message: a tag the model echoed is removed
    with the citations moved along, and a message item left empty is kept."""
    text = "<3f2a 15/120/>\nSee the docs at example.com for details.\n<ab12 3/4/>\n"
    start = text.index("example.com")
    cite = {"type": "url_citation", "start_index": start, "end_index": start + 11, "url": "u"}
    reply = AIMessage(
        [{"type": "text", "text": text, "id": "msg_1", "annotations": [cite]}], id="r1"
    )
    block = strip_message_tags(reply).content[0]
    a = block["annotations"][0]
    assert block["text"] == "See the docs at example.com for details.\n"
    assert block["text"][a["start_index"] : a["end_index"]] == "example.com"
    only = AIMessage(
        [
            {"type": "reasoning", "id": "rs_9", "summary": []},
            {"type": "text", "text": "<3f2a 15/120/>", "id": "msg_9", "annotations": []},
        ],
        id="r9",
    )
    assert [b["type"] for b in strip_message_tags(only).content] == ["reasoning", "text"]
    plain = AIMessage([{"type": "text", "text": "<3f2a 15/120/>"}, {"type": "text", "text": "Hi"}])
    assert strip_message_tags(plain).content == [{"type": "text", "text": "Hi"}]
