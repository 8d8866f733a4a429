"""Property tests of the media readers (:mod:`langchain_autocontext.media`) on hostile bytes.

Inline media comes from tool results, users and MCP servers: untrusted bytes. The
promise of docs/token-counting.md: counting never crashes, a block counts no more than
the readers' maximums (a PDF 3,000 tokens a page and at most 1,000 pages, a recording at
most 9.5 hours, an image at most the largest size a provider bills), and reading is
bounded (a few kilobytes of a recording or an image decoded, at most 64 MiB of a PDF and
16 MiB inflated from its object streams), whatever the container's header claims.
"""

from __future__ import annotations

import base64
import binascii
import math
import random
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from _builders import (
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
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage, ToolMessage

from langchain_autocontext import media as media_mod
from langchain_autocontext.tokens import TokenCounter

#: The readers' maximums (docs/token-counting.md): a PDF of 1,000 pages at 3,000 tokens
#: each, 9.5 hours of audio (32 tokens a second) or video (312), and the largest image
#: (Gemini's 24 tiles of 258 tokens, an image fitted to 3072 pixels whose short side
#: makes 256-pixel tiles; Anthropic's 1,600 and OpenAI's 1,445 stay under it).
PDF_MAX = 1000 * 3000
AUDIO_MAX = math.ceil(9.5 * 3600 * 32)
VIDEO_MAX = math.ceil(9.5 * 3600 * 312)
IMAGE_MAX = 24 * 258
#: What a recording's or an image's header reads decode, at most (an Ogg stream's last
#: 64 kB page search, the rest a few kilobytes).
HEADER_READ_MAX = 256 << 10

#: A valid start of each container the readers know, by the family that reads it.
MAGICS: dict[bytes, str] = {
    b"%PDF-1.7\n": "pdf",
    b"RIFF\x24\x00\x00\x00WAVEfmt ": "av",
    b"RF64\xff\xff\xff\xffWAVEds64\x1c\x00\x00\x00": "av",
    b"BW64\x24\x00\x00\x00WAVEfmt ": "av",
    b"ID3\x04\x00\x00": "av",
    b"\xff\xfb\x90\x64": "av",
    b"fLaC\x80\x00\x00\x22": "av",
    b"OggS\x00\x02": "av",
    b"\x00\x00\x00\x18ftypisom": "av",
    b"\x00\x00\x00\x6cmoov\x00\x00\x00\x64mvhd": "av",
    b"\x1a\x45\xdf\xa3": "av",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR": "image",
    b"GIF89a": "image",
    b"RIFF\x1a\x00\x00\x00WEBPVP8X": "image",
    b"\xff\xd8\xff\xe0": "image",
}

#: Valid files of each container (tests/_builders.py), to mutate.
SAMPLES: list[tuple[bytes, str]] = [
    (pdf_document(3), "pdf"),
    (pdf_document(4, object_stream=True), "pdf"),
    (pdf_document(2, incremental=True), "pdf"),
    (wav_audio(0.05, list_chunk=True), "av"),
    (wav_audio(0.05, streamed=0), "av"),
    (wav_audio(0.05, rf64=b"RF64", after=b"axml\x04\x00\x00\x00<x/>"), "av"),
    (wav_audio(0.05, rf64=b"BW64"), "av"),
    (mp3_audio(0.2), "av"),
    (mp3_audio(0.2, xing=True, id3=40), "av"),
    (mp3_audio(0.2, vbri=True), "av"),
    (mp3_audio(0.5, passages=(14, 5, 9)), "av"),
    (flac_audio(3), "av"),
    (ogg_audio(2), "av"),
    (ogg_audio(2, "opus"), "av"),
    (ogg_video(2), "av"),
    (ogg_audio(2, serial=1, data_pages=8) + ogg_audio(1, "opus", serial=2, data_pages=8), "av"),
    (mp4_video(5), "av"),
    (mp4_video(5, moov_last=True, version=1), "av"),
    (mp4_video(5, brand=b"M4A "), "av"),
    (webm_video(4), "av"),
    (png_image(1280, 800), "image"),
    (jpeg_image(640, 480, exif=64), "image"),
    (gif_image(32, 32), "image"),
    (webp_image(800, 600), "image"),
    (webp_image(800, 600, "VP8 "), "image"),
    (webp_image(800, 600, "VP8L"), "image"),
]

#: Where a size, an offset, a rate or a count sits: around the tags of each container.
TAGS = (
    b"RIFF",
    b"ds64",
    b"fmt ",
    b"data",
    b"LIST",
    b"ftyp",
    b"moov",
    b"mvhd",
    b"mdat",
    b"OggS",
    b"vorbis",
    b"OpusHead",
    b"Xing",
    b"VBRI",
    b"fLaC",
    b"IHDR",
    b"/Count",
    b"/Length",
    b"/First",
    b"/N ",
    b"stream",
    b"\x2a\xd7\xb1",
    b"\x44\x89",
    b"\x15\x49\xa9\x66",
    b"\x18\x53\x80\x67",
)
#: Field values that break naive readers: zero, one, all ones, the sign bit.
EDGES = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _field_offsets(data: bytes) -> tuple[list[int], list[int]]:
    """Where the fields around the tags of ``data`` sit, and where a PDF name ends."""
    offsets, ends = [], []
    for tag in TAGS:
        at = data.find(tag)
        while at >= 0 and len(offsets) < 300:
            if tag.startswith(b"/"):  # a PDF name whose number follows
                ends.append(at + len(tag))
            offsets.extend(o for o in (at - 4, at + len(tag), at + len(tag) + 4) if o >= 0)
            at = data.find(tag, at + 1)
    return offsets or [0], ends or [0]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, str]:
    """A valid file with a few bytes flipped, a field set to an edge value, cut short,
    extended, or its digits or box sizes blown up."""
    family = draw(st.sampled_from(["pdf", "av", "image"]))
    data, _ = draw(st.sampled_from([sample for sample in SAMPLES if sample[1] == family]))
    out = bytearray(data)
    fields, ends = _field_offsets(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "edge", "truncate", "extend", "digits", "edge64"]))
        if op == "flip" and out:
            at = draw(st.integers(0, len(out) - 1))
            out[at] = draw(st.integers(0, 255))
        elif op in ("edge", "edge64"):
            at = min(draw(st.sampled_from(fields)), max(0, len(out) - 4))
            width = 4 if op == "edge" else 8
            value = draw(st.sampled_from(EDGES)) * (1 if width == 4 else 0x100000001)
            order = draw(st.sampled_from(["big", "little"]))
            out[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, order)
        elif op == "truncate" and out:
            out = out[: draw(st.integers(0, len(out)))]
        elif op == "extend":
            out += draw(st.binary(max_size=64))
        elif op == "digits":  # a PDF number thousands of digits long, or with a sign
            at = min(draw(st.sampled_from(ends)), len(out))
            digits = draw(st.sampled_from([b"9" * 5000, b"9" * 5000, b"9" * 40, b"-1", b"0"]))
            out[at:at] = b" " + digits
    return bytes(out), family


@st.composite
def prefixed(draw: st.DrawFn) -> tuple[bytes, str]:
    """A valid start of a container, then arbitrary bytes."""
    magic = draw(st.sampled_from(sorted(MAGICS)))
    return magic + draw(st.binary(max_size=300)), MAGICS[magic]


def wrap(text: str, width: int, first: int | None = None) -> list[str]:
    """The lines of ``text`` wrapped at ``width``, its first line ``first`` wide if given
    (a MIME part or a PEM-like body whose first line is short, or long)."""
    head = width if first is None else first
    return [text[:head]] + [text[i : i + width] for i in range(head, len(text), width)]


@st.composite
def encoded(draw: st.DrawFn, data: bytes) -> str:
    """``data`` as base64 text: standard, URL-safe, wrapped, padded oddly, or broken."""
    text = base64.b64encode(data).decode("ascii")
    style = draw(
        st.sampled_from(
            ["plain", "urlsafe", "wrapped", "crlf", "spaces", "unpadded", "overpadded", "junk"]
        )
    )
    if style == "urlsafe":
        text = base64.urlsafe_b64encode(data).decode("ascii")
    elif style in ("wrapped", "crlf", "spaces"):
        width = draw(st.sampled_from([1, 4, 64, 76, 200]))
        sep = {"wrapped": "\n", "crlf": "\r\n", "spaces": draw(st.sampled_from([" ", "\t", "\v"]))}
        text = sep[style].join(wrap(text, width, draw(st.sampled_from([None, 1, 10, 100]))))
    elif style == "unpadded":
        text = text.rstrip("=")
    elif style == "overpadded":
        text += "=" * draw(st.integers(1, 5))
    elif style == "junk" and text:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["!", "*", "é", "\0", "==", "-_"])) + text[at:]
    return text


MIMES = ["application/pdf", "audio/wav", "audio/mpeg", "video/mp4", "video/webm", "image/png"]


def blocks(data: bytes, text: str, mime: str) -> list[dict[str, Any]]:
    """The payload in every block format that carries media inline."""
    url = f"data:{mime};base64,{text}"
    return [
        {"type": "image", "base64": text, "mime_type": mime},
        {"type": "audio", "base64": text, "mime_type": mime},
        {"type": "video", "source_type": "base64", "data": text, "mime_type": mime},
        {"type": "file", "base64": text, "mime_type": mime},
        {"type": "input_audio", "input_audio": {"data": text, "format": "wav"}},
        {"type": "file", "file": {"filename": "a", "file_data": url}},
        {"type": "input_file", "file_data": url},
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "document", "source": {"type": "base64", "media_type": mime, "data": text}},
        {"type": "image", "source": {"type": "base64", "media_type": mime, "data": text}},
        {"type": "media", "mime_type": mime, "data": text},
        {"inline_data": {"mime_type": mime, "data": text}},
        {"video": {"format": "mp4", "source": {"bytes": data}}},
        {"audio": {"format": "wav", "source": {"bytes": data}}},
        {"document": {"format": "pdf", "name": "d", "source": {"bytes": data}}},
        {"document": {"format": "txt", "name": "d", "source": {"bytes": data}}},
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "file", "url": url}]},
    ]


@contextmanager
def decoding_spied() -> Iterator[dict[str, int]]:
    """Count the bytes the readers decode from base64 and inflate, none read before."""
    seen = {"decoded": 0, "inflated": 0, "largest": 0}
    b64decode, a2b, decompressobj = base64.b64decode, binascii.a2b_base64, zlib.decompressobj

    def decode(*args: Any, **kwargs: Any) -> bytes:
        out = b64decode(*args, **kwargs)
        seen["decoded"] += len(out)
        seen["largest"] = max(seen["largest"], len(out))
        return out

    def a2b_base64(*args: Any, **kwargs: Any) -> bytes:
        out = a2b(*args, **kwargs)
        seen["decoded"] += len(out)
        return out

    class Inflater:
        def __init__(self) -> None:
            self.inner = decompressobj()

        def decompress(self, data: Any, max_length: int = 0) -> bytes:
            out = self.inner.decompress(data, max_length)
            seen["inflated"] += len(out)
            return out

    with (
        mock.patch.object(media_mod.base64, "b64decode", decode),
        mock.patch.object(media_mod.binascii, "a2b_base64", a2b_base64),
        mock.patch.object(media_mod.zlib, "decompressobj", Inflater),
        mock.patch.object(media_mod, "_PAYLOAD_READS", media_mod._LRU(8)),
    ):
        yield seen


def check_payload(data: bytes, family: str, text: str, mime: str) -> None:
    counter = TokenCounter()
    base = counter.count_message(HumanMessage([]))
    for block in blocks(data, text, mime):
        _, media = media_mod._without_media(block)
        declared = media_mod._declared_kind(block, block.get("source"), block.get("inline_data"))
        if "%PDF-" in data[:1024].decode("latin-1"):
            cap = PDF_MAX
        elif family == "image":
            cap = max(IMAGE_MAX, 85)
        elif family == "pdf":
            cap = PDF_MAX
        else:
            cap = max(AUDIO_MAX if declared == "audio" else VIDEO_MAX, IMAGE_MAX)
        assert isinstance(media, int) and 0 <= media <= cap, (block, media)
        if family == "pdf" and media > 85:  # read as a PDF: whole pages
            assert media % 3000 == 0, media
        if data.startswith(b"%PDF-") and block.get("document", {}).get("format") == "txt":
            assert media in (0, 85), media  # a text document quoting a PDF is no PDF
        for msg in (HumanMessage([block]), ToolMessage([block], tool_call_id="c")):
            count = counter.count_message(msg)
            assert isinstance(count, int) and count >= base, (block, count)


SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(st.one_of(prefixed(), mutated()), st.sampled_from(MIMES), st.data())
def test_hostile_media_never_crashes_and_counts_no_more_than_the_readers_maximums(
    payload: tuple[bytes, str], mime: str, data: st.DataObject
) -> None:
    """Whatever the bytes after a container's magic, whatever a mutated file's fields
    (zero, all ones, the sign bit, a box of size 0 or 1, a number of 5,000 digits, cut
    short), in whatever base64 (URL-safe, wrapped, unpadded, broken) and block format:
    counting returns a non-negative int, a block no more than its readers' maximum."""
    raw, family = payload
    check_payload(raw, family, data.draw(encoded(raw)), mime)


@SETTINGS
@given(st.one_of(prefixed(), mutated()), st.data())
def test_reading_hostile_media_is_bounded_whatever_its_declared_sizes(
    payload: tuple[bytes, str], data: st.DataObject
) -> None:
    """A header's sizes, offsets and lengths are untrusted: behind a megabyte of payload,
    an image's or a recording's header read decodes a few kilobytes, a PDF is decoded
    once and inflates at most 16 MiB, whatever the header claims."""
    raw, family = payload
    big = raw + b"\0" * (1 << 20)
    text = data.draw(encoded(big))
    with decoding_spied() as seen:
        for block in blocks(big, text, data.draw(st.sampled_from(MIMES)))[:12]:
            media_mod._without_media(block)
    if family == "pdf" or b"%PDF-" in big[:1024]:  # decoded once, inflated within 16 MiB
        assert seen["decoded"] <= len(big) + 12 * HEADER_READ_MAX, seen
        assert seen["inflated"] <= 16 << 20, seen
    else:
        assert seen["largest"] <= HEADER_READ_MAX, seen
        assert seen["decoded"] <= 12 * 2 * HEADER_READ_MAX, seen


class Indexed(str):
    """Text that counts the characters and slices taken of it one by one (in Python)."""

    taken = 0

    def __getitem__(self, key: Any) -> str:
        Indexed.taken += 1
        return super().__getitem__(key)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from([wav_audio(5), ogg_audio(5), mp4_video(5), png_image(640, 480)]),
    st.sampled_from(["\n", "=", " ", "\r\n", "=\n"]),
)
def test_trailing_whitespace_and_padding_are_not_walked_a_character_at_a_time(
    raw: bytes, trailing: str
) -> None:
    """A payload ending in a megabyte of line breaks, spaces or padding counts as it does
    without them, its end found in a few steps: it was walked back a character at a time
    in Python (20 MB of them took seconds to count)."""
    text = base64.b64encode(raw).decode("ascii")
    with mock.patch.object(media_mod, "_PAYLOAD_READS", media_mod._LRU(8)):
        want = media_mod._payload_tokens(text, None)
    padded = Indexed(text + trailing * (1 << 20))
    Indexed.taken = 0
    with mock.patch.object(media_mod, "_PAYLOAD_READS", media_mod._LRU(8)):
        assert media_mod._payload_tokens(padded, None) == want
    assert Indexed.taken < 10_000, Indexed.taken


def moov_after(media: int) -> bytes:
    """An MP4 of 60 seconds whose ``moov`` follows ``media`` bytes of media data."""
    small = mp4_video(60, moov_last=True)
    mdat = (8 + media).to_bytes(4, "big") + b"mdat" + b"\0" * media
    return small[: small.index(b"mdat") - 4] + mdat + small[small.index(b"moov") - 4 :]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(prefixed(), mutated(), st.builds(lambda: (moov_after(200_000), "av"))),
    st.sampled_from([0, 150_000]),
    st.sampled_from([(76, "\n"), (76, "\r\n"), (64, "\n"), (64, "\r\n"), (200, "\n"), (76, " \n")]),
    st.booleans(),
    st.sampled_from([None, 1, 10, 20, 100, 300]),
    st.sampled_from(["", "\n", "\r\n", "  "]),
)
# lines wider than 128 characters: their first break fell past the window the reader
# looked in, and the payload read as invalid base64 (found by the explore profile)
@example((moov_after(200_000), "av"), 0, (200, "\n"), False, None, "")
# a first line narrower than the rest: every later line was looked for where the first
# line's width put it, and the moov past the prefix read as invalid base64
@example((moov_after(200_000), "av"), 0, (76, "\n"), False, 20, "")
# a line break before the first line, or a space before each break: no line was read
# past the prefix
@example((moov_after(200_000), "av"), 0, (76, "\n"), False, None, "\n")
@example((moov_after(200_000), "av"), 0, (76, " \n"), False, None, "")
def test_base64_wrapped_in_lines_counts_as_unwrapped(
    payload: tuple[bytes, str],
    padding: int,
    line: tuple[int, str],
    trailing: bool,
    first: int | None,
    lead: str,
) -> None:
    """Base64 wrapped in lines of one width (MIME, PEM), its first line of that width or
    another, after a line break or an indent or not, counts what the same base64
    unwrapped counts, for any bytes, whatever far into a large payload its reader looks
    (an MP4's ``moov`` after its media data)."""
    raw = payload[0] + b"\0" * padding
    text = base64.b64encode(raw).decode("ascii")
    width, brk = line
    wrapped = lead + brk.join(wrap(text, width, first))
    wrapped += brk if trailing else ""
    counts = []
    for body in (text, wrapped):
        with mock.patch.object(media_mod, "_PAYLOAD_READS", media_mod._LRU(8)):
            counts.append(
                [media_mod._without_media(block)[1] for block in blocks(raw, body, "video/mp4")]
            )
    assert counts[0] == counts[1]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, (1 << 32) - 1), st.integers(1, (1 << 32) - 1), st.integers(2, 9))
def test_an_image_of_any_size_counts_no_more_than_the_largest_image(
    width: int, height: int, factor: int
) -> None:
    """Any width and height count between Gemini's small image and the largest image;
    one scaled up beyond every provider's fitting (3072 pixels) counts as it did."""
    tokens = media_mod._image_tokens(width, height)
    assert 258 <= tokens <= IMAGE_MAX
    if max(width, height) >= 3072:
        assert media_mod._image_tokens(width * factor, height * factor) == tokens


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(0, 200_000),
    st.integers(1, 70_000),
    st.sampled_from([1, 2, 3, 4, 5, 64, 76, 200]),
    st.sampled_from(["\n", "\r\n", " ", "\t", "\v", "\f"]),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 1 << 20)),
)
# 4-character CRLF lines: a 64 kB tail read returned 49,282 bytes (its suffix was sized
# for line breaks adding at most an eighth)
@example(196_608, 65_536, 4, "\r\n", False, None)
# a break out of place in the first line: its width read as 1, the tail's lines mapped
# past the text's end, and the read returned nothing (found by the explore profile)
@example(49_153, 1, 2, "\r\n", False, 1)
# lines broken by vertical tabs: the payload's length counted them as base64, its tail
# read began mid-group and decoded other bytes
@example(196_608, 100, 76, "\v", False, None)
def test_a_tail_read_returns_the_bytes_asked_whatever_the_wrapping(
    length: int, size: int, width: int, brk: str, trailing: bool, stray: int | None
) -> None:
    """The last bytes of a payload (an Ogg's last page) read as asked and its size is its
    size (a WAV's held data), however narrow the lines its base64 is wrapped in, by
    whatever whitespace, with a break after its last line or not, its lines of one width
    or one break out of place (``stray``)."""
    raw = random.Random(length).randbytes(length)
    text = base64.b64encode(raw).decode("ascii")
    wrapped = brk.join(text[i : i + width] for i in range(0, len(text), width))
    wrapped += brk if trailing else ""
    if stray is not None:
        at = stray % (len(wrapped) + 1)
        wrapped = wrapped[:at] + brk + wrapped[at:]
    src = media_mod._Bytes(wrapped)
    assert src.tail(size) == raw[-size:]
    assert src.size() == length


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(100_000, 300_000),
    st.sampled_from([64, 72, 76]),
    st.sampled_from(["\n", "\r\n"]),
    st.dictionaries(st.integers(0, 4000), st.integers(1, 160), max_size=3),
    st.lists(st.tuples(st.integers(0, 300_000), st.sampled_from([1, 4, 16, 300])), max_size=40),
)
# a first and a second line of other widths than the rest: the second's width taken for
# all of them put a break where one was expected, and a read decoded other bytes
@example(200_000, 76, "\n", {0: 38, 1: 21}, [])
def test_a_read_returns_the_bytes_asked_or_none_whatever_the_lines(
    length: int, width: int, brk: str, odd: dict[int, int], reads: list[tuple[int, int]]
) -> None:
    """Base64 in lines of one width but a few (``odd``: by line, its width) reads, at any
    offset and at its end, the bytes asked for or none (then it does not read past its
    prefix): never other bytes, which a reader would take for a header."""
    raw = random.Random(length).randbytes(length)
    text = base64.b64encode(raw).decode("ascii")
    lines, at = [], 0
    while at < len(text):
        lines.append(text[at : at + odd.get(len(lines), width)])
        at += len(lines[-1])
    src = media_mod._Bytes(brk.join(lines))
    offsets = [(start, size) for start in range(0, length, 977) for size in (4, 16)]
    for start, size in offsets + reads:
        got = src.read(start, size, partial=True)
        assert got is None or got == raw[start : start + size], (start, size)
    got = src.tail(300)
    assert got is None or got == raw[-300:]
