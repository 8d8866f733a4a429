"""What a media block costs: the billing model of images, PDFs, audio and video.

An image whose bytes are inline counts by its size (read from its PNG, GIF, WebP or
JPEG header), a PDF by its pages (read from the PDF), audio or video by its duration
(read from its container's header), each at the largest price a provider documents for
it: LangChain converts a block to whichever provider a request goes to, and the budget
must hold for whichever one gets it (over-counting costs a little room, under-counting a
rejected request). Anything whose size does not read (a URL, a file id, another format)
counts the fixed estimate of :data:`BLOCK_TOKEN_ESTIMATES`. Every reader works on a
bounded prefix (or suffix) of the payload, decoded from base64 as far as it needs, and
what a payload costs is read once (:data:`_PAYLOAD_READS`).

:mod:`langchain_autocontext.tokens` counts a message's media through
:func:`_media_tokens` and :func:`_without_media` (media nested in other blocks).

Over 600 lines because each container has its own header to read (PNG, GIF, WebP,
JPEG, PDF page trees and object streams, WAV, MP3, FLAC, Ogg, MP4 and Matroska), each
short, bounded and documented with the provider prices it feeds.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import codecs
import math
import re
import struct
import zlib
from collections.abc import Callable, Hashable
from typing import Any

from langchain_autocontext.cache import _LRU

#: Fixed estimates for content blocks that are not text. 85 tokens is what
#: OpenAI bills for a low-detail image; other media use the same placeholder. An image
#: whose bytes are inline counts by its size instead (:func:`_image_tokens`), a PDF by
#: its pages (:data:`_PDF_TOKENS_PER_PAGE`), audio or video by its duration
#: (:data:`_AUDIO_TOKENS_PER_SECOND`, :data:`_VIDEO_TOKENS_PER_SECOND`).
#: Pass a pluggable counter for exact media accounting.
BLOCK_TOKEN_ESTIMATES: dict[str, int] = {
    "image": 85,
    "image_url": 85,
    "input_image": 85,
    "file": 85,
    "input_file": 85,
    "audio": 85,
    "input_audio": 85,
    "video": 85,
    # Anthropic: a PDF by URL or file id (inline, it counts by its pages; a plain-text
    # document counts its text)
    "document": 85,
    "media": 85,  # Gemini: inline data
    # OpenAI Responses: an image the built-in tool generated, its base64 in ``result``
    # (langchain-openai replays it by id)
    "image_generation_call": 85,
}


def _is_media(block: dict[str, Any]) -> bool:
    """Whether ``block`` counts as :data:`BLOCK_TOKEN_ESTIMATES` says: a media block,
    not an Anthropic ``document`` whose source is text (``{"type": "text", "data": …}``
    or ``{"type": "content", "content": …}``, a page its web fetch tool returned): that
    one is read as text, and counted as it is (a long page is not 85 tokens)."""
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in BLOCK_TOKEN_ESTIMATES:
        return False
    source = block.get("source")
    return not (
        kind == "document"
        and isinstance(source, dict)
        and source.get("type") in ("text", "content")
    )


# --- images billed by their size ----------------------------------------------------------
# What each provider documents an image costs, from its width and height in pixels.
#: Anthropic ("Vision", Claude docs): ``width * height / 750`` tokens, after scaling the
#: image down to a 1568-pixel long edge and to about 1,600 tokens (1.15 megapixels; the
#: docs' largest 1:1 size, 1092x1092, is 1,590 tokens).
_ANTHROPIC_LONG_EDGE = 1568
_ANTHROPIC_PIXELS_PER_TOKEN = 750
_ANTHROPIC_MAX_TOKENS = 1600
#: OpenAI ("Images and vision", high detail): 85 + 170 per 512-pixel tile, after fitting
#: 2048x2048 and then scaling the short side down to 768 (a 1024x1024 image: 765).
_OPENAI_FIT, _OPENAI_SHORT_SIDE, _OPENAI_TILE = 2048, 768, 512
_OPENAI_BASE, _OPENAI_PER_TILE = 85, 170
#: Gemini (Vertex AI "Token counting"; Gemini API "Understand and count tokens"): 258
#: tokens for an image up to 384x384; a larger one, first fitted to 3072x3072, is cropped
#: into tiles of its short side / 1.5 (kept between 256 and 768 pixels), each resized to
#: 768x768 and 258 tokens (the Gemini API page's plain "tiles of 768x768" is never more).
_GEMINI_SMALL, _GEMINI_FIT, _GEMINI_PER_TILE = 384, 3072, 258
_GEMINI_MIN_TILE, _GEMINI_MAX_TILE = 256, 768
#: At most this many JPEG segments are walked to its frame header (each skipped by its
#: length, never decoded: a 60 kB EXIF block costs one 4-byte read).
_JPEG_MAX_SEGMENTS = 64
#: JPEG start-of-frame markers (the ones carrying the size): C0-CF but DHT, JPG, DAC.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_URLSAFE = str.maketrans("-_", "+/")
_SPACE = re.compile(r"\s")
#: The whitespace base64 is wrapped with: what :data:`_SPACE` finds but Unicode spaces
#: (invalid base64 either way). Vertical tabs and form feeds taken for base64 made its
#: length too long, and its tail was read from inside a 4-character group.
_BLANKS = " \t\r\n\v\f"
_BREAK = re.compile(f"[{re.escape(_BLANKS)}]+")


def _scaled(width: float, height: float, limit: float) -> tuple[float, float]:
    """``width`` x ``height`` scaled down (never up) so that ``limit`` bounds the longer side:
    the longer side becomes ``limit`` exactly (``width * (limit / width)`` can round
    above it, and a tile count taken of 3072.0000000000005 pixels is a tile too many)."""
    if max(width, height) <= limit:
        return width, height
    if width >= height:
        return limit, height * limit / width
    return width * limit / height, limit


def _image_tokens(width: int, height: int) -> int:
    """Tokens of a ``width`` x ``height`` image: the largest of what Anthropic, OpenAI
    (high detail) and Gemini document for that size.

    The largest, whatever the block's format and an OpenAI ``detail: "low"`` (85 tokens
    there): LangChain converts a block to whichever provider the request goes to
    (an OpenAI-format image reaches Claude through langchain-anthropic, which drops
    ``detail``), a fallback or a router can send the same context to another provider,
    and the budget must hold for whichever one gets it: over-counting costs a little
    room, under-counting a rejected request.
    """
    w, h = _scaled(width, height, _ANTHROPIC_LONG_EDGE)
    anthropic = min(w * h / _ANTHROPIC_PIXELS_PER_TOKEN, _ANTHROPIC_MAX_TOKENS)
    w, h = _scaled(width, height, _OPENAI_FIT)
    w, h = _scaled(w, h, _OPENAI_SHORT_SIDE * max(w, h) / min(w, h))  # short side <= 768
    tiles = math.ceil(w / _OPENAI_TILE) * math.ceil(h / _OPENAI_TILE)
    openai = _OPENAI_BASE + _OPENAI_PER_TILE * tiles
    gemini = _GEMINI_PER_TILE
    if max(width, height) > _GEMINI_SMALL:
        w, h = _scaled(width, height, _GEMINI_FIT)
        tile = min(max(min(w, h) / 1.5, _GEMINI_MIN_TILE), _GEMINI_MAX_TILE)
        gemini *= math.ceil(w / tile) * math.ceil(h / tile)
    return max(math.ceil(anthropic), openai, gemini)


class _Bytes:
    """Random access to the bytes of media given as bytes or base64 text: a read decodes
    only the base64 characters that hold the bytes asked for (at the start, at an offset
    or at the end), never the whole payload. Base64 wrapped in lines of one width (MIME's
    76 characters, PEM's 64), its first line of that width or another (a part whose
    first line is short), after a line break or an indent or not, is read anywhere by
    where its lines fall (an MP4's ``moov`` after its media data); wrapped otherwise, in
    its first 128 kB and at its end."""

    __slots__ = ("_data", "_held", "_line", "_text")

    def __init__(self, data: str | bytes) -> None:
        self._text = data
        #: wrapped base64: the whitespace before its first line, the width of that line
        #: and of the lines after it, and the line break after each line
        self._line: tuple[int, int, int, str] | None = None
        #: whether every line is as :attr:`_line` says (:meth:`_lines_hold`, checked once)
        self._held: bool | None = None
        space = _SPACE.search(data, 0, 1 << 17) if isinstance(data, str) else None
        if isinstance(data, str) and space is not None:
            if len(data) > 1 << 17:  # longer than its prefix
                self._line = self._lines_of(data)
            data = "".join(data[: 1 << 17].split())  # wrapped base64: a bounded prefix
        self._data = data

    @staticmethod
    def _lines_of(text: str) -> tuple[int, int, int, str] | None:
        """The lines of wrapped base64 as its bounded prefix shows them: the whitespace
        before its first line (a line break or an indent before the base64 left every
        line unread past the prefix), the first line's width, the width of the lines after
        it (the second's: a first line of another width put every later line where it
        is not) and the whitespace after each line (a line break, with the spaces before
        it if any); ``None`` if no line ends in the prefix."""
        lead = _BREAK.match(text, 0, 1 << 17)
        start = lead.end() if lead else 0
        # the first break in the bounded prefix, however wide the lines (a width over
        # 128 characters read as invalid base64 when only those were looked at)
        brk = _BREAK.search(text, start, 1 << 17)
        if brk is None or len(brk.group()) > 16:  # a run of blanks is no line break
            return None
        head = brk.start() - start
        second = _BREAK.search(text, brk.end(), 1 << 17)
        width = second.start() - brk.end() if second is not None else head
        return start, head, width, brk.group()

    def read(self, start: int, size: int, *, partial: bool = False) -> bytes | None:
        """``size`` bytes at ``start`` (fewer at the end if ``partial``), or ``None`` past
        the end or on invalid base64."""
        data = self._data
        if isinstance(data, bytes):
            out = data[start : start + size]
        else:
            first, last = start // 3 * 4, -(-(start + size) // 3) * 4
            if last <= len(data) or self._line is None:  # unwrapped, or in the prefix
                chunk: str | None = data[first:last]
            else:
                chunk = self._unwrapped(first, last)
            if chunk is None:
                return None
            chunk = chunk.translate(_URLSAFE)
            try:
                raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), validate=True)
            except (binascii.Error, ValueError):
                return None
            skip = start - first // 4 * 3
            out = raw[skip : skip + size]
        return out if len(out) == size or (partial and out) else None

    def _unwrapped(self, first: int, last: int) -> str | None:
        """Base64 characters ``first`` to ``last`` (fewer at the end) of wrapped text, its
        line breaks left out, found where they fall in lines of one width after the first:
        ``None`` if its lines are not all so (wrapped otherwise: read in its prefix)."""
        text = self._text
        assert isinstance(text, str) and self._line is not None
        if not self._lines_hold():
            return None
        lead, head, width, brk = self._line
        step = width + len(brk)
        pieces = []
        at = first
        while at < last:
            if at < head:  # the first line
                col, begin, span = at, lead, head
            else:
                line, col = divmod(at - head, width)
                begin, span = lead + head + len(brk) + line * step, width
            piece = text[begin + col : begin + min(span, col + last - at)]
            pieces.append(piece)
            if len(piece) < min(span - col, last - at):  # the end of the text
                break
            at += len(piece)
        return "".join(pieces).rstrip()

    def _lines_hold(self) -> bool:
        """Whether the text is in lines as :attr:`_line` says, every one: a break where
        each line's width puts it and no other whitespace before the end (checked once,
        in C: a strided slice of where the breaks fall and a count of the blanks). A
        check of only the breaks a read crosses let lines of other widths elsewhere put
        one where it was expected, and the read decoded other bytes than it asked for."""
        if self._held is None:
            text = self._text
            assert isinstance(text, str) and self._line is not None
            lead, head, width, brk = self._line
            step, end, first = width + len(brk), self._end(), lead + head
            breaks = len(range(first, end, step)) * len(brk)
            where = [text[first + i : end : step] for i in range(len(brk))]
            self._held = all(at.count(c) == len(at) for at, c in zip(where, brk, strict=True))
            blanks = sum(text.count(c, 0, end) for c in _BLANKS)
            self._held = self._held and lead + breaks == blanks
        return self._held

    def _end(self) -> int:
        """Where the text ends, trailing whitespace and padding left out (stripped in C,
        4 kB at a time: a character at a time, megabytes of them took seconds)."""
        text = self._text
        assert isinstance(text, str)
        end = len(text)
        while end:
            chunk = text[max(0, end - 4096) : end]
            kept = len(chunk.rstrip(_BLANKS + "="))
            end -= len(chunk) - kept
            if kept:
                break
        return end

    def _clean_length(self) -> int:
        """Base64 characters of the whole text, line breaks and padding left out (counting
        the line breaks of wrapped base64 is one pass in C for each whitespace character
        its prefix leaves out; unwrapped text is not copied)."""
        text = self._text
        assert isinstance(text, str)
        end = self._end()
        if text is self._data:  # not wrapped
            return end
        return end - sum(text.count(c, 0, end) for c in _BLANKS)

    def size(self) -> int:
        """The number of bytes of the whole payload."""
        if isinstance(self._text, bytes):
            return len(self._text)
        return self._clean_length() * 3 // 4

    def tail(self, size: int) -> bytes | None:
        """The last ``size`` bytes (all of them if fewer), or ``None`` on invalid base64."""
        text = self._text
        if isinstance(text, bytes):
            return text[-size:]
        total = self._clean_length()
        want = -(-size // 3) * 4 + 4
        first = max(0, total - want)
        chunk: str | None = None
        if text is self._data:  # a suffix: no copy of the payload
            chunk = text[first:total]
        elif self._line is not None:  # lines of one width: found where they fall
            chunk = self._unwrapped(first, total)
        if chunk is None or len(chunk) != total - first:
            # not in lines of one width (one break out of place): a suffix holding
            # enough of its characters, however many line breaks it holds
            span = want + want // 8 + 256
            while True:
                chunk = "".join(text[-span:].split()).rstrip("=")
                if len(chunk) >= want or span >= len(text):
                    break
                span *= 2
            chunk = chunk[-want:]
        chunk = chunk[(len(chunk) - total) % 4 :]  # from a 4-character group's start
        try:
            raw = base64.b64decode(
                chunk.translate(_URLSAFE) + "=" * (-len(chunk) % 4), validate=True
            )
        except (binascii.Error, ValueError):
            return None
        return raw[-size:]


def _image_size(data: str | bytes) -> tuple[int, int] | None:
    """Width and height of a PNG, GIF, WebP or JPEG image from its header (base64 text or
    bytes), or ``None`` (another format, a corrupt header)."""
    src = _Bytes(data)
    head = src.read(0, 30, partial=True)
    if head is None or len(head) < 10:
        return None
    size: tuple[int, int] | None = None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        size = (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        size = (int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little"))
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 25:
        chunk = head[12:16]
        if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a" and len(head) == 30:
            w, h = int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")
            size = (w & 0x3FFF, h & 0x3FFF)
        elif chunk == b"VP8L" and head[20] == 0x2F:
            bits = int.from_bytes(head[21:25], "little")
            size = ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        elif chunk == b"VP8X" and len(head) == 30:
            size = (
                int.from_bytes(head[24:27], "little") + 1,
                int.from_bytes(head[27:30], "little") + 1,
            )
    elif head[:2] == b"\xff\xd8":
        size = _jpeg_size(src)
    if size is None or not all(size):
        return None
    return size


def _jpeg_size(src: _Bytes) -> tuple[int, int] | None:
    """A JPEG's size from its first start-of-frame segment, the segments before it skipped."""
    pos = 2
    for _ in range(_JPEG_MAX_SEGMENTS):
        seg = src.read(pos, 4)
        if seg is None or seg[0] != 0xFF:
            return None
        marker = seg[1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header
            return None
        if marker in _JPEG_SOF:
            frame = src.read(pos + 5, 4)
            if frame is None:
                return None
            return int.from_bytes(frame[2:4], "big"), int.from_bytes(frame[0:2], "big")
        pos += 2 + int.from_bytes(seg[2:4], "big")
    return None


def _data_url_payload(url: str) -> str | None:
    """The base64 payload of a ``data:`` URL, or ``None`` (not base64)."""
    head, sep, _ = url[:200].partition(",")
    if not sep or ";base64" not in head:
        return None
    return url[len(head) + 1 :]


# --- PDFs billed by their pages ---------------------------------------------------------------
# What each provider documents a PDF page costs:
# * Anthropic ("PDF support", Claude docs): the system converts each page into an image
#   and extracts its text, and gives both to the model; a page's text typically costs
#   1,500-3,000 tokens ("Estimate your costs"), and its Bedrock section puts a 3-page
#   PDF read with visual understanding at "approximately 7,000 tokens" (some 2,300 a
#   page, text and image together).
# * OpenAI ("File inputs"): "we put into the model's context both the extracted text
#   and an image of each page" (an image of a page: at most 1,105 tokens at high
#   detail, see :func:`_image_tokens`; plus its text).
# * Gemini ("Document understanding": 258 tokens a page; Vertex AI: each page of a PDF
#   is tokenized the same way as an image).
#: Tokens of one PDF page: the largest a provider documents per page, the top of
#: Anthropic's range (its own 3-page example, OpenAI's page image with a page of text
#: and Gemini's 258 stay under it), whichever provider gets the request, as for images:
#: over-counting costs a little room, under-counting a rejected request. A page denser
#: than that is met by the calibration on the provider's reported usage.
_PDF_TOKENS_PER_PAGE = 3000
#: No provider reads a longer PDF (Gemini's limit: 1,000 pages); a damaged ``/Count``
#: counts no more.
_PDF_MAX_PAGES = 1000
#: A PDF is read in its first 64 MiB at most (every provider's file limit is lower:
#: OpenAI and Gemini 50 MB, Anthropic 32 MB a request): bounded work for any payload.
_PDF_MAX_BYTES = 64 << 20
#: At most this much is inflated from its compressed object streams, in all.
_PDF_MAX_INFLATED = 16 << 20
#: At most this many object streams, and this many page dictionaries, are read in all.
_PDF_MAX_STREAMS = 4096
_PDF_MAX_MATCHES = 20_000
#: ``/Type /Page``, ``/Type /Pages`` or ``/Type /ObjStm`` (a name ends at a delimiter).
_PDF_TYPE = re.compile(rb"/Type\s*/(Pages?|ObjStm)(?![^\s/<>\[\]()%{}])")
_PDF_OBJ = re.compile(rb"(\d+)\s+\d+\s+obj\s*$")
#: A number of a PDF's page tree or object stream: at most 12 digits (no PDF holds a
#: larger count, length or offset; a longer run is damage, read as no number: Python
#: refuses to convert 4,301 digits, and a 20-digit offset overflows a regex position).
_PDF_NUMBER = rb"(?<!\d)\d{1,12}(?!\d)"
_PDF_COUNT = re.compile(rb"/Count\s+(" + _PDF_NUMBER + rb")")
_PDF_INT = re.compile(rb"/(N|First|Length)\s+(" + _PDF_NUMBER + rb")(?!\.)(?!\s+\d+\s+R)")
_PDF_HEADER_INT = re.compile(_PDF_NUMBER)
#: What was read from a payload (a PDF's pages, a recording's duration and kind), by
#: (what was read, the payload's length and hash): the same payload in another message
#: is not decoded again.
_PAYLOAD_READS: _LRU[Any] = _LRU(256)
#: A read of nothing, cached as such (the LRU's ``None`` means not cached).
_UNREAD = object()


def _read_once(what: str, data: str | bytes, reader: Callable[[str | bytes], Any]) -> Any:
    """``reader(data)``, cached in :data:`_PAYLOAD_READS` by what it reads and ``data``."""
    key = (what, len(data), hash(data))
    value = _PAYLOAD_READS.get(key)
    if value is None:
        value = reader(data)
        _PAYLOAD_READS.put(key, _UNREAD if value is None else value)
    return None if value is _UNREAD else value


def _is_pdf(data: str | bytes) -> bool:
    """Whether ``data`` (base64 text or bytes) starts as a PDF: ``%PDF-`` in its first
    1,024 bytes, as the PDF specification allows."""
    head = _Bytes(data).read(0, 1024, partial=True)
    return head is not None and b"%PDF-" in head


def _pdf_bytes(data: str | bytes) -> bytes | None:
    """The first :data:`_PDF_MAX_BYTES` bytes of a PDF given as bytes or base64 text."""
    if isinstance(data, bytes):
        return data[:_PDF_MAX_BYTES]
    text = data[: _PDF_MAX_BYTES // 3 * 4]
    if "-" in text[:65536] or "_" in text[:65536]:  # URL-safe base64
        text = text.translate(_URLSAFE)
    for pad in ("", "=="):  # non-alphabet characters (line breaks) are skipped
        try:
            return binascii.a2b_base64(text + pad if pad else text)
        except (binascii.Error, ValueError):
            continue
    return None


def _pdf_pages(data: str | bytes) -> int:
    """Pages of a PDF (:func:`_is_pdf`), cached by its payload (a 50 MB PDF is decoded
    once, in a fraction of a second). At least one: every PDF has a page, and one whose
    pages do not read (damaged, truncated, encrypted object streams) is billed at least
    that by any provider that takes it; its byte size says nothing of its pages (a page
    is 2 kB of text or 1 MB of scan)."""
    return int(_read_once("pdf", data, _read_pdf_pages))


def _read_pdf_pages(data: str | bytes) -> int:
    raw = _pdf_bytes(data)
    return min(max(_count_pdf_pages(raw) if raw else 0, 1), _PDF_MAX_PAGES)


def _count_pdf_pages(raw: bytes) -> int:
    """The page count of PDF bytes: its page objects (``/Type /Page``, each object
    number once, also in FlateDecode object streams, PDF 1.5+), or the ``/Count`` of
    its page tree root when that is larger (pages in a stream not read); 0 if neither
    reads. Bounded (:class:`_PdfTally`): the object streams inflate to
    :data:`_PDF_MAX_INFLATED` in all, and :data:`_PDF_MAX_MATCHES` page dictionaries
    are read in all."""
    tally = _PdfTally()
    scanned = [0]
    streams = 0
    for match in _PDF_TYPE.finditer(raw):
        if not tally.take_match():
            break
        kind, at = match.group(1), match.start()
        start = raw.rfind(b"obj", max(0, at - 8192), at)  # the object's "N G obj"
        number = _PDF_OBJ.search(raw, max(0, start - 24), start + 3) if start >= 0 else None
        if kind == b"Page":
            tally.pages.add(int(number.group(1)) if number else ("at", at))
        elif kind == b"Pages":
            end = raw.find(b"endobj", at, at + 8192)
            lo = start if number else max(0, at - 512)
            _page_counts(raw, lo, end if end >= 0 else at + 512, tally.counts, scanned)
        elif streams < _PDF_MAX_STREAMS and tally.inflate > 0:
            streams += 1
            _object_stream_pages(raw, start if number else at, tally)
    return max(len(tally.pages), *tally.counts)


class _PdfTally:
    """What the reading of a PDF's pages found (its page objects, its page trees'
    ``/Count`` values) and what it may still spend, in all its object streams: the
    bytes to inflate and the page dictionaries to read (a PDF of thousands of object
    streams each full of ``/Type /Pages`` is read as far as one of them would be)."""

    __slots__ = ("counts", "inflate", "matches", "pages")

    def __init__(self) -> None:
        self.pages: set[Hashable] = set()
        self.counts = [0]
        self.inflate = _PDF_MAX_INFLATED
        self.matches = _PDF_MAX_MATCHES

    def take_match(self) -> bool:
        """Whether another page dictionary may be read (and count it)."""
        self.matches -= 1
        return self.matches >= 0


def _page_counts(data: bytes, lo: int, hi: int, counts: list[int], scanned: list[int]) -> None:
    """The ``/Count`` values in ``data[lo:hi]`` (a page tree node's object) into
    ``counts``, what an earlier window scanned (up to ``scanned[0]``) not scanned again:
    thousands of ``/Type /Pages`` in one object each rescanned it, a 6 kB PDF took
    seconds. The windows overlap by a few bytes (a ``/Count`` across their border is
    read, perhaps twice: only the largest counts)."""
    lo = max(lo, scanned[0] - 64)
    if lo < hi:
        counts.extend(int(c) for c in _PDF_COUNT.findall(data, lo, hi))
        scanned[0] = max(scanned[0], hi)


def _object_stream_pages(raw: bytes, at: int, tally: _PdfTally) -> None:
    """Read the object stream whose dictionary starts before ``at`` (its ``obj``
    keyword, or its ``/Type /ObjStm``): its page objects into ``tally.pages`` (by
    object number), its page tree's ``/Count`` into ``tally.counts``; inflates (or, not
    compressed, takes) no more than ``tally.inflate`` bytes and takes them from it.
    Another filter than FlateDecode (or a predictor, or encryption) reads nothing."""
    begin = raw.find(b"stream", at, at + 8192)
    if begin < 0:
        return
    dictionary = raw[at:begin]
    flate = b"/FlateDecode" in dictionary
    if (b"/Filter" in dictionary and not flate) or b"/DecodeParms" in dictionary:
        return
    begin += 6
    begin += 2 if raw[begin : begin + 2] == b"\r\n" else 1
    ints = {k: int(v) for k, v in _PDF_INT.findall(dictionary)}
    length = ints.get(b"Length")
    data = memoryview(raw)[begin : begin + length if length else len(raw)]
    try:
        body = (
            zlib.decompressobj().decompress(data, tally.inflate)
            if flate
            else bytes(data[: tally.inflate])
        )
    except zlib.error:
        return
    tally.inflate -= len(body)
    first = ints.get(b"First", 0)
    scanned = [0]
    header = [int(v) for v in _PDF_HEADER_INT.findall(body, 0, first)]
    numbers, offsets = header[0::2], [first + o for o in header[1::2]]
    for match in _PDF_TYPE.finditer(body, first):
        if not tally.take_match():
            break
        i = bisect.bisect_right(offsets, match.start()) - 1
        known = 0 <= i < len(numbers)
        if match.group(1) == b"Page":
            tally.pages.add(numbers[i] if known else ("in", begin, match.start()))
        elif match.group(1) == b"Pages":
            lo = offsets[i] if known else max(first, match.start() - 512)
            hi = offsets[i + 1] if known and i + 1 < len(offsets) else match.start() + 512
            _page_counts(body, lo, hi, tally.counts, scanned)


# --- audio and video billed by their duration ---------------------------------------------------
# What each provider documents a second costs:
# * Gemini (Gemini API "Understand and count tokens"; "Media resolution"): "Gemini
#   represents each second of audio as 32 tokens" (1,920 a minute), at every
#   ``media_resolution``; a video is sampled at 1 frame a second by default, each frame
#   258 tokens on Gemini 2.x ("about 263 tokens a second" with the sound, 66 at low
#   resolution), and on Gemini 3 70 tokens a frame at low and medium resolution and 280
#   at ``media_resolution_high``; its sound track counts as audio besides.
# * OpenAI (Realtime API "Managing costs"): "Audio tokens in user messages are 1 token
#   per 100 ms of audio" (10 a second), an assistant's 1 per 50 ms (20 a second); the
#   chat models' ``input_audio`` bills the same audio tokens. OpenAI takes no video.
# * Anthropic and Bedrock's Claude take neither (Bedrock's Nova takes video, by the frame).
#: Tokens of a second of audio: the largest a provider documents (Gemini's 32; OpenAI's
#: 10 or 20 stay under it).
_AUDIO_TOKENS_PER_SECOND = 32
#: Tokens of a second of video: Gemini 3's largest frame (280 tokens at
#: ``media_resolution_high``) at its default 1 frame a second, plus the sound track's 32;
#: Gemini 2.x's 263 stays under it. A request that asks more frames a second
#: (``video_metadata.fps``) is met by the calibration on the provider's reported usage.
_VIDEO_TOKENS_PER_SECOND = 280 + _AUDIO_TOKENS_PER_SECOND
#: No provider takes a longer recording in one prompt (Gemini: 9.5 hours of audio): a
#: damaged header counts no more.
_MEDIA_MAX_SECONDS = 9.5 * 3600
#: At most this many chunks, boxes or elements are walked to the one giving the duration
#: (each skipped by its size, never decoded).
_MEDIA_MAX_STEPS = 64
#: The last Ogg page is looked for in this many bytes at the payload's end.
_OGG_TAIL = 1 << 16
#: A chained Ogg's links are found by bisection, each probe finding a page in this many
#: bytes (at most :data:`_MEDIA_MAX_STEPS` probes in all).
_OGG_PROBE = 1 << 13
#: Bit rates (kbit/s) of MPEG audio by (MPEG-1, layer) and index; MPEG-2 and 2.5 share theirs.
_MP3_BITRATES = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_BITRATES[(False, 3)] = _MP3_BITRATES[(False, 2)]
_MP3_RATES = (44100, 48000, 32000)
#: A variable bit rate MP3 without a Xing or VBRI header is timed by the mean bit rate of
#: the frames at this many points spread across it, this many frames at each (a frame
#: header's 4 bytes each, a point found in a window of this many bytes).
_MP3_POINTS, _MP3_FRAMES_AT, _MP3_WINDOW = 16, 4, 4096
#: MP4 brands of audio-only files (M4A, audiobooks, protected iTunes audio).
_MP4_AUDIO_BRANDS = frozenset({b"M4A ", b"M4B ", b"M4P "})
#: What a payload is, by the MIME type its block or ``data:`` URL declares.
_AV_KINDS = ("audio", "video")
#: Bedrock document formats whose bytes are text (the others: pdf, doc, docx, xls, xlsx).
_TEXT_FORMATS = frozenset({"txt", "csv", "md", "html"})
#: Byte order marks of the encodings a text document may come in besides UTF-8 (the
#: longer UTF-32 marks first: they begin with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
#: MIME types that declare no type (the payload's own bytes say what it is).
_GENERIC_MIMES = frozenset(
    {"application/octet-stream", "binary/octet-stream", "application/binary", "application/unknown"}
)


def _mime_kind(mime: Any) -> str | None:
    """What a MIME type declares: ``"audio"``, ``"video"``, ``"pdf"``
    (``application/pdf``), ``"other"`` (``text/plain``, ``image/png``: not a PDF,
    whatever its bytes quote), or ``None`` (none, or a generic one such as
    ``application/octet-stream``: the payload's bytes say what it is)."""
    if not isinstance(mime, str):
        return None
    mime = mime.partition(";")[0].strip().lower()
    major, slash, minor = mime.partition("/")
    if not slash or not major or not minor or mime in _GENERIC_MIMES:
        return None
    if major in _AV_KINDS:
        return major
    return "pdf" if minor in ("pdf", "x-pdf") else "other"


def _media_seconds(src: _Bytes) -> tuple[float, str] | None:
    """The duration in seconds of an audio or video payload and the kind its container
    holds (``"audio"``, or ``"video"`` where the container can hold either: MP4 but M4A,
    WebM, Matroska), read from the container's header (WAV with RF64 and BW64, MP3,
    FLAC, Ogg Vorbis or Opus, MP4/MOV/M4A, WebM/Matroska) with a few bounded reads;
    ``None`` for another
    format or a header that does not read."""
    head = src.read(0, 16, partial=True)
    if head is None or len(head) < 12:
        return None
    seconds: float | None = None
    kind = "audio"
    try:
        if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
            seconds = _wav_seconds(src)
        elif head[:4] == b"fLaC":
            seconds = _flac_seconds(src)
        elif head[:4] == b"OggS":
            seconds, kind = _ogg_seconds(src) or (None, kind)
        elif head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
            seconds = _mp4_seconds(src)
            kind = "audio" if head[4:8] == b"ftyp" and head[8:12] in _MP4_AUDIO_BRANDS else "video"
        elif head[:4] == b"\x1a\x45\xdf\xa3":
            seconds, kind = _matroska_seconds(src), "video"
        elif head[:3] == b"ID3" or (head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
            seconds = _mp3_seconds(src)
    except (ValueError, IndexError, struct.error, OverflowError):
        return None
    if seconds is None or not seconds > 0:  # not NaN, not negative
        return None
    return min(seconds, _MEDIA_MAX_SECONDS), kind


def _wav_seconds(src: _Bytes) -> float | None:
    """A WAV's ``data`` size over the byte rate of its ``fmt `` chunk (a streamed WAV,
    whose recorder left its data size 0 or all ones, or any that claims more than it
    holds: the bytes there are). An RF64 or BW64 file (a WAV over 4 GB, or any a
    broadcast tool writes) whose data size is all ones gives it in its ``ds64`` chunk."""
    pos, rate, data64 = 12, 0, 0
    for _ in range(_MEDIA_MAX_STEPS):
        chunk = src.read(pos, 16, partial=True)
        if chunk is None or len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"fmt ":  # format, channels, sample rate, then the byte rate
            rate = int.from_bytes(src.read(pos + 16, 4) or b"", "little")
        elif chunk[:4] == b"ds64":  # 64-bit sizes: the RIFF's, then the data's
            data64 = int.from_bytes(src.read(pos + 16, 8) or b"", "little")
        elif chunk[:4] == b"data":
            if not rate:
                return None
            if size == 0xFFFFFFFF and data64:
                size = data64
            held = src.size() - pos - 8
            return (min(size, held) if size else held) / rate
        pos += 8 + size + (size & 1)
    return None


def _flac_seconds(src: _Bytes) -> float | None:
    """A FLAC's total samples over its sample rate, from its STREAMINFO block."""
    info = src.read(8, 18)
    if info is None:
        return None
    packed = int.from_bytes(info[10:18], "big")
    rate, samples = packed >> 44, packed & ((1 << 36) - 1)
    return samples / rate if rate and samples else None


#: An Ogg stream's rates, as :func:`_ogg_streams` reads them (``None``: another codec).
_OggStream = tuple[int, int, int, int] | None


def _ogg_streams(src: _Bytes, pos: int) -> dict[bytes, _OggStream]:
    """The logical streams of an Ogg file (or of a chained Ogg's link) that begin at
    ``pos``, by serial, from their first pages (all before any other page): Vorbis and
    Opus as (rate, pre-skip, 0, 0), Theora as (frame rate numerator, denominator, its
    granule's keyframe shift, 1), another codec as ``None``."""
    streams: dict[bytes, _OggStream] = {}
    for _ in range(_MEDIA_MAX_STEPS):
        page = src.read(pos, 27 + 255, partial=True)
        if page is None or len(page) < 28 or page[:4] != b"OggS" or not page[5] & 2:
            break  # past the pages that begin a stream
        lacing = page[27 : 27 + page[26]]
        body = pos + 27 + page[26]
        packet = src.read(body, 42, partial=True) or b""
        stream: _OggStream = None
        if packet[:7] == b"\x01vorbis" and len(packet) >= 16:
            stream = (int.from_bytes(packet[12:16], "little"), 0, 0, 0)
        elif packet[:8] == b"OpusHead" and len(packet) >= 12:
            stream = (48000, int.from_bytes(packet[10:12], "little"), 0, 0)
        elif packet[:7] == b"\x80theora" and len(packet) >= 42:
            shift = (int.from_bytes(packet[40:42], "big") >> 5) & 31
            fps = int.from_bytes(packet[22:26], "big"), int.from_bytes(packet[26:30], "big")
            stream = (*fps, shift, 1)
        streams[page[14:18]] = stream
        pos = body + sum(lacing)
    return streams


def _ogg_link_seconds(pages: bytes, streams: dict[bytes, _OggStream]) -> float | None:
    """The longest of ``streams`` by the granule position of its last page in ``pages``
    over its rate (Opus: 48 kHz, less its pre-skip; Theora: its frames over its frame
    rate); ``None`` if none of their pages there says one."""
    timed = {serial: stream for serial, stream in streams.items() if stream is not None}
    seconds: float | None = None
    at = len(pages)
    while timed and (at := pages.rfind(b"OggS", 0, at)) >= 0:
        page = pages[at : at + 18]
        stream = timed.get(page[14:18]) if len(page) == 18 else None
        granule = int.from_bytes(page[6:14], "little", signed=True) if stream else -1
        if stream is None or granule <= 0:  # -1: no packet ends on that page
            continue
        rate, other, shift, video = timed.pop(page[14:18])
        if not rate:
            continue
        if video:  # the frame of the last keyframe, plus the frames after it
            found = ((granule >> shift) + (granule & ((1 << shift) - 1))) * other / rate
        else:
            found = (granule - other) / rate
        seconds = found if seconds is None else max(seconds, found)
    return seconds


def _ogg_page_after(src: _Bytes, pos: int) -> tuple[int, bytes] | None:
    """The first page at or after ``pos`` (within :data:`_OGG_PROBE` bytes): its offset
    and serial."""
    window = src.read(pos, _OGG_PROBE + 18, partial=True) or b""
    at = window.find(b"OggS\0")
    return (pos + at, window[at + 14 : at + 18]) if 0 <= at <= len(window) - 18 else None


def _ogg_seconds(src: _Bytes) -> tuple[float, str] | None:
    """An Ogg file's duration and kind (video if a stream is Theora): the longest of its
    Vorbis, Opus and Theora streams by their last pages (:func:`_ogg_link_seconds`, in
    its last :data:`_OGG_TAIL` bytes); a chained Ogg's (links one after another, each
    beginning its own streams) the sum of its links', each link's end found by
    bisection (:data:`_MEDIA_MAX_STEPS` probes in all, else it does not read)."""
    streams = _ogg_streams(src, 0)
    tail = src.tail(_OGG_TAIL) if streams else None
    last = tail.rfind(b"OggS") if tail else -1
    if tail is None or last < 0:
        return None
    final = tail[last + 14 : last + 18]  # the serial of the last page: the last link's
    total, start, end = 0.0, 0, src.size()
    video = False
    probes = _MEDIA_MAX_STEPS
    for _ in range(_MEDIA_MAX_STEPS):
        if not streams:
            return None
        video = video or any(stream and stream[3] for stream in streams.values())
        if final in streams:  # the last link
            seconds = _ogg_link_seconds(tail, streams)
            return None if seconds is None else (total + seconds, "video" if video else "audio")
        lo, hi = start, end  # the next link begins after lo, at most a probe after hi
        while hi - lo > _OGG_PROBE:
            probes -= 1
            mid = (lo + hi) // 2
            page = _ogg_page_after(src, mid) if probes >= 0 else None
            if page is None:
                return None
            lo, hi = (min(page[0], hi), hi) if page[1] in streams else (lo, mid)
        pages = src.read(lo, hi - lo + _OGG_PROBE + 27, partial=True) or b""
        at = -1
        while (at := pages.find(b"OggS\0", at + 1)) >= 0:  # the next link's first page
            head = pages[at : at + 18]
            if len(head) == 18 and head[5] & 2 and head[14:18] not in streams:
                break
        seconds = _ogg_link_seconds(pages[: max(at, 0)], streams)
        if at < 0 or seconds is None:
            return None
        total += seconds
        start = lo + at
        streams = _ogg_streams(src, start)
    return None


def _mp4_seconds(src: _Bytes) -> float | None:
    """An MP4/MOV/M4A's ``mvhd`` duration over its timescale, the top-level boxes walked
    by their sizes to ``moov`` (before or after the media data)."""
    total = src.size()
    pos = 0
    for _ in range(_MEDIA_MAX_STEPS):
        head = src.read(pos, 16, partial=True)
        if head is None or len(head) < 8:
            return None
        size, kind, inner = int.from_bytes(head[:4], "big"), head[4:8], 8
        if size == 1 and len(head) == 16:  # a 64-bit size
            size, inner = int.from_bytes(head[8:16], "big"), 16
        elif size == 0:  # to the end
            size = total - pos
        if size < inner:
            return None
        if kind == b"moov":
            return _mvhd_seconds(src, pos + inner, pos + size)
        pos += size
    return None


def _mvhd_seconds(src: _Bytes, pos: int, end: int) -> float | None:
    for _ in range(_MEDIA_MAX_STEPS):
        if pos + 8 > end:
            return None
        head = src.read(pos, 8 + 32, partial=True)
        if head is None or len(head) < 8:
            return None
        size = int.from_bytes(head[:4], "big")
        if head[4:8] == b"mvhd":
            if len(head) < 8 + 32:
                return None
            if head[8] == 1:  # 64-bit times: created, modified, timescale, duration
                scale, duration = struct.unpack(">IQ", head[8 + 20 : 8 + 32])
                unknown = (1 << 64) - 1
            else:
                scale, duration = struct.unpack(">II", head[8 + 12 : 8 + 20])
                unknown = (1 << 32) - 1
            # a duration of all ones: unknown (a fragmented or live recording)
            return duration / scale if scale and duration != unknown else None
        if size < 8:
            return None
        pos += size
    return None


def _vint(src: _Bytes, pos: int, *, keep_marker: bool) -> tuple[int, int] | None:
    """An EBML variable-length integer at ``pos``: (its value, its length)."""
    first = src.read(pos, 1)
    if first is None or not first[0]:
        return None
    length = 9 - first[0].bit_length()
    raw = src.read(pos, length)
    if raw is None:
        return None
    value = int.from_bytes(raw, "big")
    if not keep_marker:
        value &= (1 << (7 * length)) - 1
    return value, length


def _matroska_seconds(src: _Bytes) -> float | None:
    """A WebM/Matroska's Segment Info Duration times its TimecodeScale (nanoseconds),
    the elements before it skipped by their sizes."""
    pos, end = 0, src.size()
    scale, duration = 1_000_000, None
    for _ in range(_MEDIA_MAX_STEPS):
        element = _vint(src, pos, keep_marker=True)
        size = _vint(src, pos + element[1], keep_marker=False) if element else None
        if element is None or size is None:
            return None
        data = pos + element[1] + size[1]
        length = size[0]
        unknown = length == (1 << (7 * size[1])) - 1
        if element[0] in (0x18538067, 0x1549A966):  # Segment, Info: read inside
            if element[0] == 0x1549A966:
                end = data + length
            pos = data
            continue
        if element[0] == 0x2AD7B1 and length <= 8:  # TimecodeScale, an unsigned int
            scale = int.from_bytes(src.read(data, length) or b"", "big") or scale
        elif element[0] == 0x4489 and length in (4, 8):  # Duration, a float
            raw = src.read(data, length)
            if raw is None:
                return None
            duration = struct.unpack(">f" if length == 4 else ">d", raw)[0]
        elif unknown or element[0] == 0x1F43B675:  # a Cluster: past the Info
            break
        pos = data + length
        if pos >= end:
            break
    return duration * scale / 1e9 if duration else None


def _mp3_frame(head: bytes | None) -> tuple[tuple[int, int, int], int, int, int] | None:
    """An MPEG audio frame header (4 bytes): its stream's (version, layer, sample rate
    index), its bit rate (bit/s), its sample rate and its length in bytes; ``None`` if
    it is none (no sync, a reserved value, free format)."""
    if head is None or len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    b1, b2 = head[1], head[2]
    version, layer = (b1 >> 3) & 3, 4 - ((b1 >> 1) & 3)
    bitrate_index, rate_index = b2 >> 4, (b2 >> 2) & 3
    if version == 1 or layer == 4 or rate_index == 3 or bitrate_index in (0, 15):
        return None
    mpeg1 = version == 3
    rate = _MP3_RATES[rate_index] >> (0 if mpeg1 else 1 if version == 2 else 2)
    samples = 384 if layer == 1 else 1152 if mpeg1 or layer == 2 else 576
    bitrate = _MP3_BITRATES[(mpeg1, layer)][bitrate_index] * 1000
    slot = 4 if layer == 1 else 1
    length = (samples // 8 // slot * bitrate // rate + (b2 >> 1 & 1)) * slot
    return (version, layer, rate_index), bitrate, rate, length


def _mp3_bitrates(src: _Bytes, pos: int, stream: tuple[int, int, int], count: int) -> list[int]:
    """The bit rates of up to ``count`` frames of ``stream`` from ``pos``, one after the
    other (fewer where the frames stop)."""
    out: list[int] = []
    for _ in range(count):
        frame = _mp3_frame(src.read(pos, 4))
        if frame is None or frame[0] != stream:
            break
        out.append(frame[1])
        pos += frame[3]
    return out


def _mp3_seconds(src: _Bytes) -> float | None:
    """An MP3's duration: the frame count of its Xing/Info or VBRI header times the samples
    of a frame, else its size over its frames' bit rate (the harmonic mean of the frames
    at :data:`_MP3_POINTS` points spread across its bytes: a constant bit rate reads
    exactly, a variable one near its duration);
    an ID3v2 tag before it skipped by its size."""
    pos = 0
    tag = src.read(0, 10)
    if tag is not None and tag[:3] == b"ID3":
        pos = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(tag[6:10]))
        pos += 10 if tag[5] & 0x10 else 0  # a footer
    window = src.read(pos, 4096, partial=True)  # padding may sit between tag and frame
    if window is None:
        return None
    at = next(
        (i for i in range(len(window) - 3) if window[i] == 0xFF and window[i + 1] & 0xE0 == 0xE0),
        -1,
    )
    first = _mp3_frame(window[at : at + 4]) if at >= 0 else None
    if first is None:
        return None
    pos += at
    stream, _, rate, _ = first
    version, layer = stream[0], stream[1]
    samples = 384 if layer == 1 else 1152 if version == 3 or layer == 2 else 576
    mono = window[at + 3] >> 6 == 3
    side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    frame = src.read(pos, 4 + 36 + 18, partial=True) or b""
    xing = frame[4 + side : 4 + side + 12]
    frames = 0
    if xing[:4] in (b"Xing", b"Info") and len(xing) == 12 and xing[7] & 1:
        frames = int.from_bytes(xing[8:12], "big")
    elif frame[36:40] == b"VBRI" and len(frame) >= 54:
        frames = int.from_bytes(frame[50:54], "big")
    if frames:
        return frames * samples / rate
    bitrates = _mp3_bitrates(src, pos, stream, _MP3_FRAMES_AT)
    if len(bitrates) < 2:  # a stream of frames, not two stray bytes
        return None
    end = src.size()
    for point in range(1, _MP3_POINTS):
        start = pos + (end - pos) * point // _MP3_POINTS
        window = src.read(start, _MP3_WINDOW, partial=True) or b""
        found = window.find(b"\xff")
        for _ in range(_MEDIA_MAX_STEPS):  # a few candidates: bounded in a window of 0xFF
            if not 0 <= found < len(window) - 3:
                break
            candidate = _mp3_frame(window[found : found + 4])
            if candidate is not None and candidate[0] == stream:
                sampled = _mp3_bitrates(src, start + found, stream, _MP3_FRAMES_AT)
                if len(sampled) >= 2:  # a frame another follows: no stray sync in the data
                    bitrates += sampled
                    break
            found = window.find(b"\xff", found + 1)
    # points spread by bytes: a frame stands for its bytes, each lasting 8 / its bit rate
    return (end - pos) * 8 * sum(1 / b for b in bitrates) / len(bitrates)


def _media_tokens_of(src: _Bytes, kind: str | None) -> int | None:
    """Tokens of an audio or video payload by its duration (:func:`_media_seconds`) at
    the rate of its ``kind`` (what its block or MIME type declares; else what its
    container holds, video where it can hold either: the larger)."""
    read = _read_once("av", src._text, lambda _: _media_seconds(src))
    if read is None:
        return None
    seconds, held = read
    audio = (kind if kind in _AV_KINDS else held) == "audio"
    rate = _AUDIO_TOKENS_PER_SECOND if audio else _VIDEO_TOKENS_PER_SECOND
    return math.ceil(seconds * rate)


def _payload_tokens(data: str | bytes, kind: str | None = None) -> int | None:
    """Tokens of media given inline (base64 text or bytes): an image whose header reads
    (:func:`_image_tokens`), a PDF by its pages (:func:`_pdf_pages`) at
    :data:`_PDF_TOKENS_PER_PAGE` each, audio or video by its duration
    (:func:`_media_seconds`) at :data:`_AUDIO_TOKENS_PER_SECOND` or
    :data:`_VIDEO_TOKENS_PER_SECOND` (``kind``: what its block or MIME type declares,
    :func:`_mime_kind`; a payload declared as another type than a PDF is not read as
    one, whatever its first kilobyte quotes), each the largest a provider documents (over-counting costs a little room,
    under-counting a rejected request); ``None`` for anything else (a URL or a file id,
    whose content cannot be read, keeps the estimate of :data:`BLOCK_TOKEN_ESTIMATES`,
    and so does a recording whose duration does not read: its size does not tell it, a
    second of it being 1 kB of voice or 1 MB of film)."""
    size = _image_size(data)
    if size is not None:
        return _image_tokens(*size)
    if kind in (None, "pdf") and _is_pdf(data):
        return _pdf_pages(data) * _PDF_TOKENS_PER_PAGE
    return _media_tokens_of(_Bytes(data), kind)


def _value_tokens(value: Any, kind: str | None = None) -> int | None:
    """:func:`_payload_tokens` of a block's value: a base64 ``data:`` URL (its MIME type
    saying what it is when ``kind`` does not), base64 text or bytes; ``None`` for a
    URL, an id, or what does not read."""
    if isinstance(value, str) and value.startswith("data:"):
        kind = kind or _mime_kind(value[5:100].partition(";")[0])
        value = _data_url_payload(value)
    if isinstance(value, (str, bytes)) and value:
        return _payload_tokens(value, kind)
    return None


def _declared_kind(block: dict[str, Any], *parts: Any) -> str | None:
    """What ``block`` declares it is (:func:`_mime_kind`): ``"audio"`` or ``"video"`` by
    its type (LangChain's ``audio``/``video``, OpenAI's ``input_audio``) or a MIME type
    (``mime_type``, ``mimeType``, Anthropic-style ``media_type``) of it or of its
    ``parts``, else ``"pdf"`` or ``"other"`` by such a MIME type, else ``None``."""
    kind = block.get("type")
    if kind in ("audio", "input_audio"):
        return "audio"
    if kind == "video":
        return "video"
    declared: list[str] = []
    for part in (block, *parts):
        if isinstance(part, dict):
            for field in ("mime_type", "mimeType", "media_type"):
                found = _mime_kind(part.get(field))
                if found in _AV_KINDS:
                    return found
                if found:
                    declared.append(found)
    return "pdf" if "pdf" in declared else declared[0] if declared else None


def _inline_tokens(block: dict[str, Any]) -> int | None:
    """Tokens of what a media block carries inline: a ``data:`` URL (``image_url``,
    ``input_image``, ``url``, OpenAI's ``file_data`` and chat ``file.file_data``),
    base64 (LangChain's ``base64``, its ``source_type: "base64"`` ``data``, Gemini's
    ``data`` or ``inline_data``, Anthropic's ``source``, OpenAI's ``input_audio.data``, a
    generated image's ``result``) or bytes, read as an image by its size, a PDF by its
    pages, audio or video by its duration; ``None`` when unknown (a URL, a file id,
    another format, an unreadable header)."""
    url = block.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    source = block.get("source")
    file = block.get("file")
    audio = block.get("input_audio")
    inline = block.get("inline_data") or block.get("inlineData")
    kind = _declared_kind(block, source, inline)
    for value in (
        url,
        block.get("url"),
        block.get("base64"),
        block.get("data"),
        block.get("result"),
        block.get("file_data"),
        file.get("file_data") if isinstance(file, dict) else None,
        source.get("data") if isinstance(source, dict) else None,
        inline.get("data") if isinstance(inline, dict) else None,
        audio.get("data") if isinstance(audio, dict) else None,
    ):
        tokens = _value_tokens(value, kind)
        if tokens is not None:
            return tokens
    return None


def _media_tokens(block: dict[str, Any]) -> int:
    """Tokens of a media block (:func:`_is_media`): what its inline bytes tell
    (:func:`_inline_tokens`: an image by its size, a PDF by its pages, a recording by its
    duration), at least the
    fixed estimate of :data:`BLOCK_TOKEN_ESTIMATES`."""
    return _known_or(_inline_tokens(block), BLOCK_TOKEN_ESTIMATES[block["type"]])


def _known_or(tokens: int | None, estimate: int) -> int:
    """``tokens`` when known (at least ``estimate``), else ``estimate``."""
    return estimate if tokens is None else max(estimate, tokens)


def _without_media(value: Any, kind: str | None = None) -> tuple[Any, int]:
    """``value`` (a block counted as its JSON) without the media nested in it, and their
    count: a media block inside it (an image in an Anthropic ``tool_result``) counts as
    :func:`_media_tokens`, Gemini's own ``inline_data`` part and a base64 ``data:`` URL
    as an image of its size, a PDF of its pages or a recording of its duration (or the
    estimate), never their base64 as text; what sits under an ``audio`` or ``video`` key
    (Bedrock Converse's ``{"video": {"source": {"bytes": …}}}``) is read as that
    ``kind``; media Bedrock names by ``s3Location`` counts the estimate of media by URL."""
    if isinstance(value, dict):
        if _is_media(value):
            return None, _media_tokens(value)
        out: dict[Any, Any] = {}
        media = 0
        for k, v in value.items():
            if k in ("inline_data", "inlineData") and isinstance(v, dict):
                out[k] = None
                media += _known_or(
                    _value_tokens(v.get("data"), _declared_kind(v)), BLOCK_TOKEN_ESTIMATES["media"]
                )
                continue
            if k == "source" and isinstance(v, dict) and "s3Location" in v:
                # Bedrock's media by S3 location: no size to read, the estimate of a URL
                out[k] = None
                media += BLOCK_TOKEN_ESTIMATES["file"]
                continue
            sub = k if k in _AV_KINDS else kind
            if k == "document" and isinstance(v, dict) and isinstance(v.get("format"), str):
                # Bedrock's document names its format (pdf, txt, csv, docx…), no MIME
                # type: another than pdf is not read as a PDF, whatever its bytes quote,
                # and a text format's bytes are text in whatever encoding they are in
                fmt = v["format"].strip().lower()
                sub = "pdf" if fmt == "pdf" else "text" if fmt in _TEXT_FORMATS else "other"
            out[k], n = _without_media(v, sub)
            media += n
        return out, media
    if isinstance(value, list):
        items = [_without_media(v, kind) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, str) and value.startswith("data:") and ";base64," in value[:100]:
        return "", _known_or(_value_tokens(value, kind), BLOCK_TOKEN_ESTIMATES["image"])
    if isinstance(value, (bytes, bytearray)):  # raw bytes: Bedrock's native ``source.bytes``
        return _raw_bytes_tokens(bytes(value), kind)
    return value, 0


def _raw_bytes_tokens(data: bytes, kind: str | None = None) -> tuple[Any, int]:
    """Raw bytes in a block (Bedrock Converse's native ``{"image": {"format": "png",
    "source": {"bytes": …}}}``, a ``document``, a ``video``): never their ``repr`` as text
    (100 kB of PNG counted some 300,000 tokens). An image whose header reads counts as
    :func:`_image_tokens`, a PDF by its pages (not one whose ``kind`` says otherwise: a
    Bedrock ``document`` of another ``format`` than ``pdf``), audio or video (``kind``) by
    its duration; bytes that are UTF-8 text count as that text, and so do those of a
    document of a text format (``txt``, ``md``, ``csv``, ``html``: ``kind`` ``"text"``)
    in another encoding (UTF-16 or UTF-32 by its byte order mark, else one byte a
    character); anything else the fixed estimate of a file."""
    tokens = _payload_tokens(data, kind)
    if tokens is not None:
        return "", tokens
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        if kind != "text":
            return "", BLOCK_TOKEN_ESTIMATES["file"]
    # a text document in another encoding: UTF-16 or UTF-32 by its byte order mark, else
    # a single-byte one (Latin-1 decodes any bytes, one character each, as Windows-1252
    # text has them). Counted as the fixed estimate of a file, 17 kB of a CSV exported
    # in Windows-1252 counted 85 tokens for its 8,776
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec), 0
            except UnicodeDecodeError:
                break
    return data.decode("latin-1"), 0
