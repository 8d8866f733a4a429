"""Search over a thread's complete original history (MemGPT's recall storage).

Ranking is Okapi BM25 (k1=1.2, b=0.75) over a tokenizer made for agent
transcripts: identifiers such as uuids, paths, dotted names and ``key=value``
pieces are kept whole *and* split into their parts, so an exact identifier
matches the one message holding it with a very rare (high-idf) token while
partial words still match. A message that contains the whole query as a phrase
ranks before every message that does not. Each message is indexed with the turn
before it as context (half weight), and a hit that asks about the query's words brings
its reply, placed just before it (:func:`_with_replies`).

The index is built incrementally: the history is append-only, so each search
reads only the entries appended since the previous one (per store backend and
thread, kept in a small in-process cache). The first search of a long thread indexes
the stored items without building message objects (:func:`_doc_of_item`), tokenizes
each distinct token once, and pauses the cyclic collector meanwhile (:func:`_bulk`).
When the backing store has a semantic
index (``index_config``), its vector search over the same history items is fused
with the BM25 ranking (reciprocal rank fusion).

Why not a dependency: ``rank-bm25`` rebuilds its whole index for every new
document and ``bm25s`` brings numpy/scipy sparse matrices built in one batch;
an append-only history needs an index that grows one message at a time, which
is about 60 lines here.

Filters (``speaker``, ``after``, ``before``) narrow the search to one speaker and a
time range; with a filter the query may be empty (the matching messages, newest
first). A message's time is the time it carries itself, else the time it was
archived (see :func:`search_history`).

Over 600 lines because the tokenizer, the index, the filters and the ranking with
its fusion, phrase and reply rules are one retrieval concept read together; the
index's cache, its reading of stored items and its sync/async entry points share every
helper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import heapq
import itertools
import math
import re
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.store.base import Item

from langchain_autocontext.errors import shown_value
from langchain_autocontext.messages import (
    content_text,
    is_rewrite,
    load_message,
    speaker_role,
    text_of,
)
from langchain_autocontext.store import (
    MADE_OF_KEY,
    OffloadStore,
    _search_text,
    _SharedLock,
    on_thread_deleted,
    revive,
    stored_agent,
)

__all__ = [
    "BM25Index",
    "SearchFilter",
    "SearchHit",
    "asearch_history",
    "check_language",
    "format_hits",
    "languages",
    "mark_in_context",
    "search_history",
    "tokenize",
]

#: Tools whose results only copy the history (searching them would find the copies
#: before the originals): their calls and results are left out of the results.
COPY_TOOLS = frozenset({"search_history", "reload_offloaded"})

#: A term: a run of letters, digits and ``_`` of any script, joined into one
#: identifier by ``- . / : @ = +`` (paths, dotted names, uuids, key=value).
_TOKEN_RE = re.compile(r"\w+(?:[-./:@=+]\w+)*")
#: The parts of an identifier: its runs of letters and digits.
_PART_RE = re.compile(r"[^\W_]+")
#: Scripts written without spaces: indexed as overlapping character pairs.
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RE = re.compile(f"[{_CJK}]")
#: A part's CJK runs and the runs of other characters between them.
_CJK_RUNS_RE = re.compile(f"[{_CJK}]+|[^{_CJK}]+")
#: English function words and question words: they carry no topic, and a question
#: ("When did Caroline go to the support group?") is mostly made of them. The list
#: is the closed classes (articles, pronouns, auxiliaries, prepositions, conjunctions,
#: question words), not words fitted to any data.
_STOPWORDS = """
    a an the this that these those i me my mine myself you your yours yourself we us our
    ours he him his she her hers it its they them their theirs what which who whom whose
    when where why how am is are was were be been being have has had having do does did
    doing will would shall should can could may might must and but or nor if then else so
    than too very of at by for with about against between into through during before after
    above below to from up down in out on off over under again further once here there all
    any both each few more most other some such no not only own same just as until while
    also yes ourselves yourselves himself herself itself themselves because cannot ought
    nor now
    s t m d re ve ll don didn doesn isn aren wasn weren hasn haven hadn couldn wouldn
    shouldn mustn needn shan ain
"""
# The last two lines: what the tokenizer makes of contractions and the possessive
# ("Caroline's" -> caroline + s, "didn't" -> didn + t, "we've" -> we + ve).
_STOP = frozenset(_STOPWORDS.split())
#: Verbs of saying: in a conversation every message is said, told or mentioned, so in a
#: query ("What did Melanie say about running?") they frame the question and carry no
#: topic. Dropped from English queries only (a message about "a talk" keeps the word).
_SAYING_WORDS = """
    say says said saying tell tells told telling mention mentions mentioned mentioning
    talk talks talked talking speak speaks spoke spoken speaking
"""
_SAYING = frozenset(_SAYING_WORDS.split())


def languages() -> list[str]:
    """The values ``search_language`` accepts: Snowball's languages and ``"none"``."""
    try:
        import snowballstemmer
    except ImportError:  # pragma: no cover - a core dependency
        return ["none"]
    return [*snowballstemmer.algorithms(), "none"]


@functools.lru_cache(maxsize=32)
def _stemmer(language: str) -> Any:
    """The Snowball stemmer of ``language`` (``snowballstemmer``), or ``None``."""
    if language == "none":
        return None
    try:
        import snowballstemmer
    except ImportError:  # pragma: no cover - a core dependency
        return None
    return snowballstemmer.stemmer(language)


_STEM_LOCK = threading.Lock()


@functools.lru_cache(maxsize=200_000)
def _stem(word: str, language: str = "english") -> str:
    """``word``'s stem (``painted``/``paints`` -> ``paint``); cached, thread-safe. English
    stems ASCII words only (a foreign word is left whole); other languages stem theirs."""
    stemmer = _stemmer(language)
    if stemmer is None or not word.isalpha() or len(word) <= 3:
        return word
    if language == "english" and not word.isascii():
        return word
    with _STEM_LOCK:  # Snowball stemmer objects keep state between calls
        return str(stemmer.stemWord(word))


def _part_terms(part: str, language: str = "english") -> list[str]:
    """Terms of one alphanumeric run: its stem, or character pairs of CJK text; English
    function and question words dropped (other languages keep theirs: BM25's idf
    weighs them down)."""
    if _CJK_RE.search(part):
        # CJK runs as character pairs; a Latin word or a number written against them
        # ("我用Python写代码", "2023年") is a term of its own, not split into pairs
        out: list[str] = []
        for run in _CJK_RUNS_RE.findall(part):
            if not _CJK_RE.match(run):
                out += _part_terms(run, language)
            elif len(run) == 1:
                out.append(run)
            else:
                out += [a + b for a, b in itertools.pairwise(run)]
        return out
    if language == "english" and part in _STOP:
        return []
    if len(part) <= 3 or not part.isalpha():  # numbers, ids: nothing to stem
        return [part]
    return [_stem(part, language)]


@functools.lru_cache(maxsize=64)
def _token_terms(language: str) -> Callable[[str], tuple[str, ...]]:
    """The terms of one token in ``language``, computed once per distinct token (a
    bounded cache: a chat reuses its words, so a long history tokenizes mostly by
    lookups)."""

    @functools.lru_cache(maxsize=100_000)
    def terms(tok: str) -> tuple[str, ...]:
        parts = _PART_RE.findall(tok)
        out = [tok] if len(parts) > 1 or tok not in parts else []  # an identifier whole
        for part in parts:
            out.extend(_part_terms(part, language))
        return tuple(out)

    return terms


def tokenize(text: str, language: str = "english") -> list[str]:
    """Lower-cased terms of any script: compound identifiers whole, plus their parts;
    parts stemmed (Snowball, in ``language``), CJK runs as character pairs, English
    function and question words dropped."""
    terms = _token_terms(language)
    return [t for tok in _TOKEN_RE.findall(text.lower()) for t in terms(tok)]


def query_terms(query: str, language: str = "english") -> list[str]:
    """The distinct terms a query is scored by: :func:`tokenize`'s, and in English without
    the verbs of saying (``say``, ``tell``, ``mention``, ``talk``, ``speak``) unless the
    query has nothing else."""
    terms = list(dict.fromkeys(tokenize(query, language)))
    if language == "english":
        saying = {_stem(w) for w in _SAYING}
        topic = [t for t in terms if t not in saying]
        if topic:
            return topic
    return terms


_WORD_RE = re.compile(r"\w+")


class BM25Index:
    """An append-only Okapi BM25 index (documents are added, never changed)."""

    def __init__(self, k1: float = 1.2, b: float = 0.75, language: str = "english") -> None:
        self.k1 = k1
        self.b = b
        self.language = language
        self.keys: list[str] = []
        self.lengths: list[float] = []
        #: term -> its documents and frequencies, flat: ``[doc, tf, doc, tf, ...]`` (no
        #: tuple per posting: less memory, and less for the garbage collector to walk);
        #: a document's own count is an ``int``, a neighbour's weighted count a ``float``
        self.postings: dict[str, list[float]] = {}
        self.total_length = 0.0

    def __len__(self) -> int:
        return len(self.keys)

    def add(
        self,
        key: str,
        text: str,
        context: str | Counter[str] = "",
        weight: float = 0.5,
    ) -> Counter[str]:
        """Index one document under ``key``; the terms of ``context`` (a neighbouring
        message, as text or as the term counts this method returned for it) that the
        document lacks count ``weight`` times as much as its own: the context lets a
        message be found by words it does not use, never outranks it for words it does.
        Returns the document's own term counts."""
        doc = len(self.keys)
        own = Counter(tokenize(text, self.language))
        postings = self.postings
        for term, tf in own.items():
            posting = postings.get(term)
            if posting is None:
                postings[term] = [doc, tf]
            else:
                posting += (doc, tf)
        length = float(own.total())
        if context:
            around = (
                context
                if isinstance(context, Counter)
                else Counter(tokenize(context, self.language))
            )
            for term in around.keys() - own.keys():
                ctf = float(weight * around[term])  # a float: not the document's own
                length += ctf
                posting = postings.get(term)
                if posting is None:
                    postings[term] = [doc, ctf]
                else:
                    posting += (doc, ctf)
        self.keys.append(key)
        self.lengths.append(length)
        self.total_length += length
        return own

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every document matching at least one of the query's terms
        (:func:`query_terms`)."""
        n = len(self.keys)
        if not n:
            return {}
        avg = self.total_length / n or 1.0
        k1, b, lengths = self.k1, self.b, self.lengths
        out: dict[int, float] = {}
        for term in self._expanded(query_terms(query, self.language)):
            posting = self.postings.get(term)
            if not posting:
                continue
            df = len(posting) // 2
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            flat: Iterator[Any] = iter(posting)  # doc (an int), tf, doc, tf, ...
            for doc, tf in zip(flat, flat, strict=True):
                norm = tf + k1 * (1 - b + b * lengths[doc] / avg)
                out[doc] = out.get(doc, 0.0) + idf * tf * (k1 + 1) / norm
        return out

    def _expanded(self, terms: Iterable[str]) -> list[str]:
        """``terms``, a single CJK character not indexed by itself standing for the
        character pairs that hold it (CJK text is indexed as pairs, and many Chinese and
        Japanese words are one character: "湖" finds "湖边")."""
        out: list[str] = []
        for term in terms:
            if len(term) == 1 and _CJK_RE.match(term):
                # the character on its own (between punctuation: "湖、山") and in pairs
                out += [t for t in self.postings if term in t and (len(t) == 2 or t == term)]
            else:
                out.append(term)
        return out

    def containing_all(self, query: str) -> list[str]:
        """Keys of the documents whose own text holds every one of the query's word
        terms, oldest first: the candidates of an exact phrase match, however low their
        score. A term a document is indexed under only from its neighbour does not count
        (the phrase is looked for in the document's own text: on a long thread most
        documents holding two common words hold one of them only through the message
        before). A compound term (``a.b.c``) is left out: a text holding the phrase may
        hold it inside a longer compound (``x=a.b.c``), and its parts are terms of their
        own."""
        terms = {t for t in query_terms(query, self.language) if _WORD_RE.fullmatch(t)}
        postings = sorted((self.postings.get(t, []) for t in terms), key=len)
        if not postings or not postings[0]:
            return []
        docs: set[float] | None = None
        for posting in postings:  # doc, tf, doc, tf, ...: an int tf is the doc's own
            own = {
                doc for doc, tf in zip(posting[::2], posting[1::2], strict=True) if type(tf) is int
            }
            docs = own if docs is None else docs & own
            if not docs:
                return []
        return [self.keys[int(doc)] for doc in sorted(docs or ())]

    def search(
        self,
        query: str,
        k: int,
        keep: Callable[[str], bool] | None = None,
        prior: Callable[[str], float] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(key, score)`` pairs, best first; with ``keep``, the ``k``
        best among the keys it accepts (every scored document is tested); with ``prior``,
        each score is multiplied by ``prior(key)`` first."""
        scores = self.scores(query)
        items: Iterable[tuple[int, float]] = scores.items()
        if keep is not None:
            items = [(doc, score) for doc, score in items if keep(self.keys[doc])]
        if prior is not None:
            items = [(doc, score * prior(self.keys[doc])) for doc, score in items]
        best = heapq.nlargest(k, items, key=lambda kv: (kv[1], -kv[0]))
        return [(self.keys[doc], score) for doc, score in best]


# --- speakers and times ------------------------------------------------------------------------
#: Keys of ``additional_kwargs`` / ``response_metadata`` holding a message's own time.
TIME_KEYS = ("timestamp", "created_at")
#: Roles a ``speaker`` filter may name (and their LangChain spellings).
ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "tool": "tool",
    "system": "system",
}
_BOUND_RE = re.compile(
    r"(?P<date>\d{4}-\d{2}(?:-\d{2})?)"
    r"(?:[T ](?P<h>\d{2})(?::(?P<m>\d{2})(?::(?P<s>\d{2})(?:[.,]\d+)?)?)?)?"
    r"(?P<tz>Z|[+-](?P<oh>\d{2})(?::?(?P<om>\d{2}))?)?"
)


class _Meta(NamedTuple):
    seq: int
    role: str
    tool_name: str | None  # a ToolMessage's tool
    speaker: str | None  # the name of any other message
    time: float | None  # unix seconds: the message's own time, else its archiving
    day: bool  # the time is a date only (shown without the time of day)
    doc: int  # its document number in the BM25 index (its neighbours are doc - 1, doc + 1)
    #: who said it, for the speaker prior: its ``name``, else a speaker its text opens
    #: with in the transcript convention ("Caroline: …", "Caroline (May 8): …")
    said_by: str | None = None
    agent: str | None = None  # the named agent whose run archived it
    version_of: str | None = None  # a later version's message id (its working copy's id)
    held: int | None = (
        None  # :func:`_held` of what it holds: in context when a working copy holds it too
    )


def _aware(value: dt.datetime) -> dt.datetime:
    """Naive datetimes are UTC."""
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _parse_time(value: Any) -> tuple[float, bool] | None:
    """``(unix seconds, date only)`` of a message-carried time, or ``None``.

    Accepts ISO 8601 strings (a date or a datetime; naive means UTC), unix seconds
    (milliseconds when above 1e11) and ``datetime``/``date`` objects.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            return None
        return (value / 1000 if value > 1e11 else float(value)), False
    if isinstance(value, dt.datetime):
        return _aware(value).timestamp(), False
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp(), True
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                day = dt.date.fromisoformat(text)
                return _parse_time(day)
            return _aware(dt.datetime.fromisoformat(text.replace("z", "Z"))).timestamp(), False
        except ValueError:
            return None
    return None


def _carried_time(*sources: Any) -> tuple[float, bool] | None:
    """The time a message carries in its ``additional_kwargs`` / ``response_metadata``
    (given in that order, as objects or as stored: encoded values are revived)."""
    for source in sources:
        if isinstance(source, dict):
            for key in TIME_KEYS:
                value = source.get(key)
                if value is None:
                    continue
                found = _parse_time(revive(value) if isinstance(value, dict) else value)
                if found is not None:
                    return found
    return None


def format_time(time: float, day: bool = False) -> str:
    """``2023-05-08`` (a date only) or ``2023-05-08 14:03`` (UTC, to the minute)."""
    when = dt.datetime.fromtimestamp(time, dt.UTC)
    return when.strftime("%Y-%m-%d" if day else "%Y-%m-%d %H:%M")


def _bound(name: str, value: Any) -> tuple[str, float, float] | None:
    """``(text, start, end)`` of the span an ``after``/``before`` value names: a month,
    a day, or a time to the hour, minute or second (naive means UTC); ``end`` excluded."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, dt.datetime | dt.date):
        value = value.isoformat()
    text = value.strip() if isinstance(value, str) else ""
    match = _BOUND_RE.fullmatch(text)
    try:
        if not match or (match["h"] and len(match["date"]) == 7):
            raise ValueError
        if not match["h"]:  # a month or a day, in its offset (UTC without one)
            zone = dt.UTC
            if match["oh"]:
                hours, minutes = int(match["oh"]), int(match["om"] or 0)
                sign = -1 if match["tz"][0] == "-" else 1
                zone = dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
            day = match["date"] if len(match["date"]) == 10 else match["date"] + "-01"
            start = dt.datetime.fromisoformat(day).replace(tzinfo=zone)
            if len(match["date"]) == 7:  # a month
                year, month = divmod(start.month, 12)
                nxt = start.replace(year=start.year + year, month=month + 1)
            else:  # a day
                nxt = start + dt.timedelta(days=1)
            return text, start.timestamp(), nxt.timestamp()
        moment = _aware(dt.datetime.fromisoformat(text.replace("z", "Z")))
    except ValueError:
        raise ValueError(
            f"{name}={shown_value(value)} is not an ISO 8601 date or time; write it like "
            "2023-05-08 or 2023-05-08T14:30 (UTC unless an offset is given)."
        ) from None
    unit = 1 if match["s"] else 60 if match["m"] else 3_600
    return text, moment.timestamp(), moment.timestamp() + unit


@dataclass(frozen=True)
class SearchFilter:
    """Which messages a search may return: one speaker, a time range.

    ``speaker`` is a role (``user``, ``assistant``, ``tool``, ``system``; ``human`` and
    ``ai`` also work) or a message ``name`` (case-insensitive; a tool result's name is
    its tool). ``after`` and ``before`` are ISO 8601 and each names a span (a month
    ``2023-05``, a day ``2023-05-08``, a time ``2023-05-08T14:30`` to the hour, minute
    or second; UTC unless an offset is given) and include all of it: ``after`` keeps
    messages from the span's start on, ``before`` those up to its end, so
    ``after=before="2023-05-08"`` is that day.
    """

    speaker: str | None = None
    after: tuple[str, float, float] | None = None
    before: tuple[str, float, float] | None = None

    @classmethod
    def parse(cls, speaker: Any = None, after: Any = None, before: Any = None) -> SearchFilter:
        """Validated filters; ``ValueError`` says what is wrong."""
        if speaker is not None and not isinstance(speaker, str):
            raise ValueError(f"speaker must be a string, got {speaker!r}")
        who = " ".join((speaker or "").split()) or None
        lo, hi = _bound("after", after), _bound("before", before)
        if lo is not None and hi is not None and lo[1] >= hi[2]:
            raise ValueError(
                f"after={lo[0]!r} is later than before={hi[0]!r}: no time is in between; "
                "after is the earlier bound."
            )
        return cls(who, lo, hi)

    def __bool__(self) -> bool:
        return bool(self.speaker or self.after or self.before)

    def describe(self) -> str:
        """``speaker Caroline, after 2023-05-01, before 2023-06`` (empty without filters)."""
        parts = [f"speaker {self.speaker}"] if self.speaker else []
        parts += [f"{n} {b[0]}" for n, b in (("after", self.after), ("before", self.before)) if b]
        return ", ".join(parts)

    def matcher(self, index: _ThreadIndex) -> Callable[[str], bool]:
        """A test of message ids of ``index``; ``ValueError`` for a speaker that is
        neither a role nor a name of the thread."""
        role = ROLES.get(self.speaker.casefold()) if self.speaker else None
        name = self.speaker.casefold() if self.speaker else None
        if name is not None and role is None:
            names = Counter(
                m.speaker or m.tool_name for k, m in index.meta.items() if k not in index.noise
            )
            known = {" ".join(n.split()).casefold() for n in names if n}
            if name not in known:
                people = [n for n, _ in names.most_common() if n][:12]
                raise ValueError(
                    f"No message of this conversation is by {shown_value(self.speaker)}: give "
                    "a role (user, assistant, tool, system)"
                    + (f" or one of the names {', '.join(people)}." if people else ".")
                )
        lo = self.after[1] if self.after else -math.inf
        hi = self.before[2] if self.before else math.inf
        timed = self.after is not None or self.before is not None

        def keep(key: str) -> bool:
            meta = index.meta.get(key)
            if meta is None:
                return False
            if self.speaker is not None and meta.role != role:
                who = meta.speaker or meta.tool_name
                if role is not None or who is None or " ".join(who.split()).casefold() != name:
                    return False
            return not timed or (meta.time is not None and lo <= meta.time < hi)

        return keep


class HistorySize(NamedTuple):
    """The size of a thread's history as the search tool tells it: its messages, each
    counted once however often it was edited, and the later versions of edited ones
    (``OffloadStore.history_count`` counts both together)."""

    messages: int
    versions: int = 0

    def describe(self) -> str:
        """``"12 messages"``, and ``" and 2 later versions of edited ones"`` when any."""
        if self.versions == 1:
            return f"{self.messages} messages and 1 later version of an edited one"
        if self.versions:
            return f"{self.messages} messages and {self.versions} later versions of edited ones"
        return f"{self.messages} messages"


@dataclass
class _ThreadIndex:
    bm25: BM25Index
    texts: dict[str, str]
    meta: dict[str, _Meta]
    noise: set[str] = field(default_factory=set)  # copies: COPY_TOOLS calls and results
    next_seq: int = 0
    #: the previous message's terms (of its first 2,000 characters): context for the next
    last_terms: Counter[str] = field(default_factory=Counter)
    #: each speaker's name (``message.name``, tools excepted) and the terms it names
    speakers: dict[str, frozenset[str]] = field(default_factory=dict)
    #: each edited message's id -> the keys of its later versions, in seq order (which
    #: version a rewrite by the package was made of: see :func:`_in_context`)
    later: dict[str, tuple[str, ...]] = field(default_factory=dict)
    versions: int = 0  # the later versions indexed (the values of ``later``, counted)
    #: taken by searches in threads and in coroutines: a coroutine awaits it (a sync
    #: search ranking a long history keeps no event loop waiting)
    lock: _SharedLock = field(default_factory=_SharedLock)

    def size(self) -> HistorySize:
        """The size of the history indexed: its messages, and the later versions of
        edited ones apart."""
        return HistorySize(len(self.meta) - self.versions, self.versions)

    def named(self, query: str) -> set[str]:
        """The speakers a query names by a word of their name ("What did Caroline's
        sister…" names Caroline); numbers in a name (``agent_2``) do not count."""
        if not self.speakers:
            return set()
        terms = set(query_terms(query, self.bm25.language))
        return {name for name, words in self.speakers.items() if not words.isdisjoint(terms)}


class _Cache:
    """Per (backend, prefix, thread) indexes; backends are held weakly."""

    def __init__(self, max_threads: int = 64) -> None:
        self._by_backend: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, str], _ThreadIndex]]
        self._by_backend = weakref.WeakKeyDictionary()
        self._max = max_threads
        self.lock = threading.Lock()

    def get(
        self,
        store: OffloadStore,
        thread_id: str,
        *,
        reset: bool = False,
        language: str = "english",
    ) -> _ThreadIndex:
        with self.lock:
            try:
                per = self._by_backend.setdefault(store.backend, OrderedDict())
            except TypeError:  # an unhashable / non-weakrefable backend: no caching
                return _ThreadIndex(BM25Index(language=language), {}, {})
            key = (store.prefix, thread_id)
            idx = None if reset else per.get(key)
            if idx is not None and idx.bm25.language != language:
                idx = None  # indexed with another language's word forms: build it again
            if idx is None:
                idx = per[key] = _ThreadIndex(BM25Index(language=language), {}, {})
                while len(per) > self._max:
                    per.popitem(last=False)
            per.move_to_end(key)
            return idx


_CACHE = _Cache()


def _drop_index(store: OffloadStore, thread_id: str) -> None:
    """Forget the in-process index of a deleted thread."""
    with _CACHE.lock:
        try:
            per = _CACHE._by_backend.get(store.backend)
        except TypeError:  # an unhashable backend: nothing was cached
            return
        if per is not None:
            per.pop((store.prefix, thread_id), None)


on_thread_deleted(_drop_index)


class _Doc(NamedTuple):
    """What the index keeps of one history message."""

    text: str  # its searchable text: content plus tool calls (as stored)
    role: str
    name: str | None  # the message's name (a tool result's: its tool)
    tool: bool  # a tool result
    copy: bool  # a search_history / reload_offloaded call or result (see _is_copy)
    time: tuple[float, bool] | None  # the time the message carries itself


def _doc_of_message(message: BaseMessage) -> _Doc:
    name = message.name.strip() if isinstance(message.name, str) else None
    return _Doc(
        _search_text(message),
        speaker_role(message.type, message.additional_kwargs),
        name or None,
        isinstance(message, ToolMessage),
        _is_copy(message),
        _carried_time(message.additional_kwargs, message.response_metadata),
    )


def _doc_of_item(value: dict[str, Any]) -> _Doc:
    """:func:`_doc_of_message` read from a stored history item (see
    ``OffloadStore.get_history_items``) without building the message: the first search
    of a long thread reads every message, and a LangChain message object costs more than
    indexing its text."""
    dumped = value.get("message")
    data = dumped.get("data") if isinstance(dumped, dict) else None
    text = value.get("text")
    if not isinstance(dumped, dict) or not isinstance(data, dict) or not isinstance(text, str):
        # not as written here
        return _doc_of_message(load_message(revive(dumped)))
    kind = str(dumped.get("type") or value.get("type") or "")
    name = data.get("name")
    name = name.strip() if isinstance(name, str) else None
    tool = kind in ("tool", "ToolMessageChunk")
    calls = data.get("tool_calls") or []
    if tool:
        copy = name in COPY_TOOLS
    else:
        copy = (
            bool(calls)
            and all(isinstance(c, dict) and c.get("name") in COPY_TOOLS for c in calls)
            and not content_text(data.get("content") or "").strip()
        )
    return _Doc(
        text,
        speaker_role(kind, data.get("additional_kwargs")),
        name or None,
        tool,
        copy,
        _carried_time(data.get("additional_kwargs"), data.get("response_metadata")),
    )


#: Reading and indexing this many messages at once is a bulk load (see :func:`_bulk`).
BULK = 5_000


@contextlib.contextmanager
def _bulk(count: int) -> Iterator[None]:
    """Pause the cyclic garbage collector while ``count`` (at least :data:`BULK`)
    messages are read and indexed at once, as on the first search of a long thread.

    Every object the load creates is kept (the stored items until indexed, the index
    for good), so the collections that their number triggers find nothing to free, yet
    walk everything allocated so far: a third of the time of a 60,000-message load.
    Reference counting still frees memory meanwhile; the collector's previous state is
    restored after."""
    if count < BULK or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: A transcript line's speaker: one to three capitalised words, an optional
#: parenthesis (a date), then a colon ("Caroline: …", "Mel Jones (8 May 2023): …").
_OPENING_SPEAKER_RE = re.compile(
    r"([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*){0,2})(?: \([^)\n]{0,60}\))?: "
)


def _opening_speaker(text: str) -> str | None:
    """The speaker a message's text opens with in the transcript convention, if any."""
    m = _OPENING_SPEAKER_RE.match(text)
    return m.group(1) if m else None


def _add(index: _ThreadIndex, items: Iterable[Item]) -> None:
    """Index stored history items (``OffloadStore.get_history_items``), in seq order."""
    with index.lock:
        _add_locked(index, items)


def _add_locked(index: _ThreadIndex, items: Iterable[Item]) -> None:
    bm25 = index.bm25
    for item in items:
        key = item.key
        if key in index.texts:
            continue
        value = item.value
        d = _doc_of_item(value)
        text = d.text
        if d.name and not d.tool:
            text = f"{d.name}: {text}"  # the speaker is searchable
        # The turn before is indexed with it: an answer ("Yes, last Sunday") is found by
        # the words of the question it answers.
        doc = len(bm25)
        own = bm25.add(key, text, index.last_terms)
        index.texts[key] = text
        if not d.copy:  # each text is tokenized once, unless it is long
            index.last_terms = (
                own if len(text) <= 2_000 else Counter(tokenize(text[:2_000], bm25.language))
            )
        seq = int(value["seq"])
        of = value.get("version_of")
        ts = value.get("ts")
        when = d.time or ((float(ts), False) if ts else None)
        said_by = None if d.tool else (d.name or _opening_speaker(text))
        index.meta[key] = _Meta(
            seq,
            d.role,
            d.name if d.tool else None,
            None if d.tool else d.name,
            when[0] if when else None,
            when[1] if when else False,
            doc,
            said_by,
            stored_agent(value),
            of if isinstance(of, str) else None,
            _held(d.role, d.text),
        )
        if isinstance(of, str):  # items come in seq order
            index.later[of] = (*index.later.get(of, ()), key)
            index.versions += 1
        if d.copy:
            index.noise.add(key)
        elif said_by and said_by not in index.speakers:
            words = tokenize(said_by, bm25.language)
            index.speakers[said_by] = frozenset(w for w in words if not w.isdigit())
        index.next_seq = max(index.next_seq, seq + 1)


def _is_copy(message: BaseMessage) -> bool:
    """A result of search_history or reload_offloaded, or a message only calling them.

    They repeat the query, snippets of its hits or whole originals, and would rank
    before the originals they copy.
    """
    if isinstance(message, ToolMessage):
        return message.name in COPY_TOOLS
    calls = getattr(message, "tool_calls", None) or []
    return (
        bool(calls)
        and all(c.get("name") in COPY_TOOLS for c in calls)
        and not text_of(message).strip()
    )


@dataclass(frozen=True)
class SearchHit:
    """One search result."""

    id: str
    seq: int
    role: str
    score: float
    snippet: str
    tool_name: str | None = None
    in_context: str = "no"
    """``"yes"``, ``"no"`` or ``"shortened"`` (in the context as a preview/summary)."""
    speaker: str | None = None
    """The message's ``name`` (not for tool results: their name is ``tool_name``)."""
    time: str | None = None
    """When it was said (UTC): ``2023-05-08`` or ``2023-05-08 14:03`` (see
    :func:`search_history`)."""
    agent: str | None = None
    """The named agent whose run archived it (:attr:`HistoryEntry.agent`); the search
    tool shows it only for another agent's messages."""
    version_of: str | None = None
    """For a later version of a message edited under its id (:attr:`HistoryEntry.version_of`):
    that message id, the id of its working copy; ``None`` otherwise."""
    _held: int | None = field(default=None, repr=False, compare=False)
    """What the hit holds (:func:`_held`), compared with its working copy's
    (:func:`mark_in_context`); ``None`` in a hit built elsewhere."""
    _later: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """The keys of its message's later versions (of which a rewrite of the working copy
    may have been made); empty in a hit built elsewhere (the first version counts)."""


def snippet(text: str, query: str, width: int = 320, windows: int = 3) -> str:
    """Windows of ``text`` around the matches of ``query`` (at most ``windows``).

    Every occurrence of the whole query gets a window (up to ``windows``, each
    ``width`` characters, overlapping ones merged), so a value that appears twice
    in a message (say once as a value and once as a key) shows both places.
    Without a whole-query match, the window is around the longest matching term.
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    low = flat.lower()
    q = " ".join(query.lower().split())
    found: list[int] = []
    pos = low.find(q) if q else -1
    while pos >= 0 and len(found) < windows:
        found.append(pos)
        pos = low.find(q, pos + max(1, len(q)))
    if not found:
        terms = sorted(set(tokenize(query)), key=len, reverse=True)
        found = [next((p for p in (low.find(t) for t in terms) if p >= 0), 0)]
    spans: list[list[int]] = []
    for p in found:
        a = max(0, p - width // 3)
        b = min(len(flat), a + width)
        a = max(0, b - width)
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    parts = [flat[a:b] for a, b in spans]
    return (
        ("…" if spans[0][0] else "") + " … ".join(parts) + ("…" if spans[-1][1] < len(flat) else "")
    )


def _newest(
    index: _ThreadIndex, limit: int, keep: Callable[[str], bool]
) -> list[tuple[str, float]]:
    """The ``limit`` newest messages ``keep`` accepts (by time, then position)."""
    found = [key for key in index.meta if keep(key)]
    best = heapq.nlargest(
        limit, found, key=lambda k: (index.meta[k].time or 0.0, index.meta[k].seq)
    )
    return [(key, 0.0) for key in best]


#: The score factor of a message by a speaker the query names ("What did Melanie paint?"
#: prefers Melanie's messages): a prior that reorders messages matching the query's
#: words about as much as one more matching word of low weight, never lifts a message
#: without them (a score of 0 stays 0), and leaves other speakers' messages findable.
SPEAKER_PRIOR = 1.25


#: Quotes a model may put around a query it means as an exact phrase (ASCII and
#: typographic).
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u201e\u00ab\u00bb"


def _rank(
    index: _ThreadIndex,
    query: str,
    limit: int,
    semantic: Sequence[str],
    exclude: frozenset[str] = frozenset(),
    keep: Callable[[str], bool] | None = None,
) -> list[tuple[str, float]]:
    pool = max(limit * 4, 20) + len(index.noise)
    skip = index.noise | exclude
    accept = keep

    def wanted(key: str) -> bool:
        return key not in skip and (accept is None or accept(key))

    named = index.named(query) if query else set()
    prior = None
    if named:  # a query naming a speaker prefers what that speaker said

        def prior(key: str) -> float:
            return SPEAKER_PRIOR if index.meta[key].said_by in named else 1.0

    if keep is not None:  # a filter: every scored message is tested before the cut-off
        if not query:
            return _newest(index, limit, wanted)
        lexical = index.bm25.search(query, pool, wanted, prior)
        semantic = [k for k in semantic if wanted(k)]
    else:
        lexical = index.bm25.search(query, pool + len(exclude), prior=prior)
        lexical = [kv for kv in lexical if kv[0] not in skip]
        semantic = [k for k in semantic if k not in skip]
    # The whole query as a phrase, on word boundaries ("red car" is not in "tired car"),
    # without the quotes a model may put around it; looked for among every message
    # holding all its terms, not only the best-scored few (a long message holding the
    # phrase can score below short ones holding its words).
    q = " ".join(query.lower().split()).strip(_QUOTES).strip()
    exact: dict[str, None] = {}
    if q:
        # any run of spaces between the words, any case: read the texts as they are
        # (CJK is written without spaces: no word boundary around a CJK end)
        words = r"\s+".join(map(re.escape, q.split()))
        before = "" if _CJK_RE.match(q[0]) else r"(?<!\w)"
        after = "" if _CJK_RE.match(q[-1]) else r"(?!\w)"
        phrase = re.compile(f"{before}{words}{after}", re.I)
        # one term: the scored pool is already every message's rank by it (a check of
        # all its holders would cost a scan of a common word's postings per search);
        # none (only function words or symbols: "to be or not to be", "🎉"): nothing
        # is scored, and every message is read for the phrase
        terms = len(set(query_terms(q, index.bm25.language)))  # parts count
        if terms > 1:
            candidates = index.bm25.containing_all(q)
        else:
            candidates = [k for k, _ in lexical] if terms else list(index.texts)
        exact = dict.fromkeys(
            key for key in candidates if wanted(key) and phrase.search(index.texts[key])
        )
        scored = {key for key, _ in lexical}
        lexical = lexical + [(key, 0.0) for key in reversed(exact) if key not in scored]
    if semantic:
        fused: dict[str, float] = {}
        for ranking in ([k for k, _ in lexical], list(semantic)):
            for r, key in enumerate(ranking):
                if key in index.texts:
                    fused[key] = fused.get(key, 0.0) + 1.0 / (60 + r + 1)
        ranked = sorted(fused.items(), key=lambda kv: (-kv[1], index.meta[kv[0]].seq))
    else:
        ranked = lexical
    ranked = sorted(ranked, key=lambda kv: kv[0] not in exact)  # stable: exact phrase first
    return _with_replies(index, ranked, query, exact, wanted, limit)[:limit]


#: Question marks (ASCII, full-width, Arabic), and every sentence end (with ``. ! 。``
#: and new lines): a question is a sentence ending with a question mark.
_QUESTION_MARKS = "?\uff1f\u061f"
_SENTENCE_END_RE = re.compile("([.!\n\u3002" + _QUESTION_MARKS + "])")


def _asks_about(text: str, terms: set[str], language: str) -> bool:
    """``text`` asks a question holding one of ``terms`` ("Nice! What pet do you have?"
    asks about pets; "I adopted a pup. How are you?" does not). Linear in the text."""
    if not any(mark in text for mark in _QUESTION_MARKS):
        return False
    parts = _SENTENCE_END_RE.split(text)  # sentence, its end, sentence, its end, ...
    return any(
        parts[i + 1] in _QUESTION_MARKS and not terms.isdisjoint(tokenize(parts[i], language))
        for i in range(0, len(parts) - 1, 2)
    )


def _reply(
    index: _ThreadIndex, key: str, terms: set[str], wanted: Callable[[str], bool]
) -> str | None:
    """The message answering ``key`` when ``key`` asks about the query's ``terms``: the
    next message of the history, by another speaker (or role), if the search may return
    it."""
    if not _asks_about(index.texts[key], terms, index.bm25.language):
        return None
    meta = index.meta[key]
    keys = index.bm25.keys
    if meta.doc + 1 >= len(keys):
        return None
    nxt = keys[meta.doc + 1]
    after = index.meta.get(nxt)
    if after is None or (after.role, after.speaker) == (meta.role, meta.speaker):
        return None
    return nxt if wanted(nxt) else None


def _with_replies(
    index: _ThreadIndex,
    ranked: list[tuple[str, float]],
    query: str,
    exact: Collection[str],
    wanted: Callable[[str], bool],
    limit: int | None = None,
) -> list[tuple[str, float]]:
    """``ranked`` with the reply of each question placed just before it, at its score;
    with ``limit``, the first ``limit`` (or one more: a pair is kept whole) of that list
    only (a common phrase can have thousands of holders: each is no longer read for a
    question when the first few are all the search returns).

    A question matches the words of a query about its topic, but its answer holds the
    fact ("What pet do you have?" / "We've got a pup and a kitty"); the reply is indexed
    with the question's words at half weight (:meth:`BM25Index.add`) and so often ranks
    below it, past the cut-off. A hit holding the whole query keeps its place first,
    its reply just after it."""
    terms = set(query_terms(query, index.bm25.language))
    out: list[tuple[str, float]] = []
    placed: set[str] = set()
    for key, score in ranked:
        if limit is not None and len(out) >= limit:
            break
        if key in placed:
            continue
        reply = _reply(index, key, terms, wanted)
        if reply is None or reply in placed:
            out.append((key, score))
            placed.add(key)
            continue
        pair = [(key, score), (reply, score)] if key in exact else [(reply, score), (key, score)]
        out += pair
        placed.update((key, reply))
    return out


def _held(role: str, text: str) -> int:
    """A fingerprint of what a message holds, as the index reads it: its role and its
    searchable text (content plus tool calls)."""
    return hash((role, text))


def _in_context(hit: SearchHit, copy: BaseMessage | None) -> str:
    """Whether ``hit`` is in the context, ``copy`` being the working message with its
    message id (``hit.version_of`` for a later version, else ``hit.id``).

    A message edited under its id has several contents in the history (the first under
    the id, each later one under its version key) and one in the context: the hit
    holding that content is in it; when the working copy is this package's rewrite (a
    preview or summary, the model's update), the version it was made of is in it
    "shortened" (:func:`_made_of`). A hit built without a fingerprint is in it when its
    id is."""
    if copy is None:
        return "no"
    rewritten = is_rewrite(copy)
    if hit._held is None:
        return "no" if hit.version_of is not None else "shortened" if rewritten else "yes"
    if not rewritten:
        held = _held(speaker_role(copy.type, copy.additional_kwargs), _search_text(copy))
        return "yes" if hit._held == held else "no"
    return "shortened" if hit.id == _made_of(hit, copy) else "no"


def _made_of(hit: SearchHit, rewrite: BaseMessage) -> str:
    """The key of the version of ``hit``'s message that ``rewrite``, this package's
    rewrite of its working copy, was made of: the one it names
    (:data:`~langchain_autocontext.store.MADE_OF_KEY`) when a later version, else the
    first (the content it names is held under the id: a message edited back to its
    first content); the latest for a rewrite naming none (written before it was named:
    the working copy is archived before it is rewritten)."""
    mid = hit.version_of or hit.id
    named = rewrite.additional_kwargs.get(MADE_OF_KEY)
    if isinstance(named, str):
        return named if named in hit._later else mid
    return hit._later[-1] if hit._later else mid


def _context_copies(working: Sequence[BaseMessage] | None) -> dict[str, BaseMessage]:
    return {m.id: m for m in working or () if m.id}


def mark_in_context(
    hits: Sequence[SearchHit], working: Sequence[BaseMessage] | None
) -> list[SearchHit]:
    """``hits`` with ``in_context`` recomputed against new working messages (the ranking
    does not depend on the context, so a changed context needs no second search)."""
    copies = _context_copies(working)
    return [
        dataclasses.replace(h, in_context=_in_context(h, copies.get(h.version_of or h.id)))
        for h in hits
    ]


def _hits(
    index: _ThreadIndex,
    ranked: list[tuple[str, float]],
    query: str,
    working: Sequence[BaseMessage] | None,
) -> list[SearchHit]:
    copies = _context_copies(working)
    out = []
    for key, score in ranked:
        meta = index.meta[key]
        hit = SearchHit(
            id=key,
            seq=meta.seq,
            role=meta.role,
            score=round(score, 4),
            snippet=snippet(index.texts[key], query),
            tool_name=meta.tool_name,
            speaker=meta.speaker,
            time=None if meta.time is None else format_time(meta.time, meta.day),
            agent=meta.agent,
            version_of=meta.version_of,
            _held=meta.held,
            _later=index.later.get(meta.version_of or key, ()),
        )
        out.append(
            dataclasses.replace(
                hit, in_context=_in_context(hit, copies.get(meta.version_of or key))
            )
        )
    return out


def _check(query: Any, limit: Any, filters: SearchFilter) -> tuple[str, int]:
    if query is None and filters:
        query = ""
    if not isinstance(query, str):
        raise ValueError(f"query must be a string, got {query!r}")
    if not query.strip() and not filters:
        raise ValueError("query must be a non-empty string (or give speaker, after or before)")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return query.strip(), min(limit, 50)


def _last_indexed(
    store: OffloadStore, thread_id: str, language: str
) -> tuple[_ThreadIndex, str | None]:
    """The thread's cached index and the key of the last message it indexed (None when
    empty): the store is asked for that key to revalidate the cache."""
    index = _CACHE.get(store, thread_id, language=language)
    with index.lock:  # a key is in ``meta`` once the add that put it in ``keys`` is done
        return index, _last_key(index)


async def _alast_indexed(
    store: OffloadStore, thread_id: str, language: str
) -> tuple[_ThreadIndex, str | None]:
    """Async twin of :func:`_last_indexed`."""
    index = _CACHE.get(store, thread_id, language=language)
    async with index.lock.ahold():
        return index, _last_key(index)


def _last_key(index: _ThreadIndex) -> str | None:
    return index.bm25.keys[-1] if len(index.bm25) else None


def _refreshed(
    store: OffloadStore,
    thread_id: str,
    count: int,
    index: _ThreadIndex,
    key: str | None,
    last: Any,
) -> tuple[_ThreadIndex, int]:
    """The thread's index, and the seq it must be filled from (up to ``count``).

    ``key`` is the last message ``index`` indexed and ``last`` the store's entry for it.
    The cache is revalidated against the store, not trusted: when the store holds fewer
    messages than were indexed, or the last indexed message is gone or sits at another
    seq (the thread was deleted and written again, by another process too), the index is
    rebuilt from the store."""
    stale = count < index.next_seq or (
        key is not None and (last is None or last.seq != index.meta[key].seq)
    )
    if stale:
        index = _CACHE.get(store, thread_id, reset=True, language=index.bm25.language)
    return index, index.next_seq


def check_language(language: Any) -> str:
    """``language`` if it is one of :func:`languages`, else ``ValueError`` listing them
    (``search_history`` and ``AutoContextConfig.search_language`` check with it)."""
    if language in ("english", "none"):
        return str(language)
    known = languages()
    if language not in known:
        raise ValueError(
            f"unknown search language {language!r}: search_language takes a Snowball "
            f"language or 'none'; known: {', '.join(known)}"
        )
    return str(language)


def _semantic_limit(limit: int, filters: SearchFilter) -> int:
    # a filter drops vector hits after the search: ask for more of them
    return limit * 20 if filters else limit * 4


def search_history(
    store: OffloadStore,
    thread_id: str,
    query: str | None,
    limit: int = 5,
    *,
    working: Sequence[BaseMessage] | None = None,
    exclude: Iterable[str] = (),
    speaker: str | None = None,
    after: str | dt.date | None = None,
    before: str | dt.date | None = None,
    language: str = "english",
) -> list[SearchHit]:
    """The ``limit`` best history messages of ``thread_id`` for ``query``, best first.

    ``working`` (the current working messages) marks which hits are still in the
    context; ``exclude`` drops message ids (e.g. the message asking). The search
    tool's own calls and results are never returned. A hit that asks about the query's
    words brings its reply, just before it; a query naming a speaker (a word of a
    message ``name``) prefers that speaker's messages (:data:`SPEAKER_PRIOR`).

    Filters (see :class:`SearchFilter`) are applied to every scored message before the
    cut-off, so ``limit`` matching hits come back when they exist:

    - ``speaker``: a role (``user``, ``assistant``, ``tool``, ``system``) or a
      message ``name``, case-insensitive;
    - ``after`` / ``before``: ISO 8601 dates or times (UTC unless an offset is given),
      both inclusive (``after=before="2023-05-08"`` is that whole day).

    A message's time is the time it carries itself, under ``timestamp`` or
    ``created_at`` in its ``additional_kwargs``, else in its ``response_metadata``
    (an ISO 8601 string, naive meaning UTC, or unix seconds), else the time it was
    archived (``HistoryEntry.ts``). With a filter the query may be empty: the matching
    messages come newest first.

    ``language``: the word forms merged (Snowball's stemmer of that language, see
    :func:`languages`; ``"none"``: none). English also drops its function words.

    Raises ``ValueError`` (saying why) for an empty query without a filter, a limit
    below 1, an unparseable date, ``after`` later than ``before``, a speaker that is
    neither a role nor a name of the thread, or an unknown language.
    """
    return search_history_sized(
        store,
        thread_id,
        query,
        limit,
        working=working,
        exclude=exclude,
        speaker=speaker,
        after=after,
        before=before,
        language=language,
    )[0]


def search_history_sized(
    store: OffloadStore,
    thread_id: str,
    query: str | None,
    limit: int = 5,
    *,
    working: Sequence[BaseMessage] | None = None,
    exclude: Iterable[str] = (),
    speaker: str | None = None,
    after: str | dt.date | None = None,
    before: str | dt.date | None = None,
    language: str = "english",
) -> tuple[list[SearchHit], HistorySize]:
    """:func:`search_history`, and the size of the history it searched (messages, and
    later versions of edited ones apart: :class:`HistorySize`), as the search tool
    tells the model."""
    filters = SearchFilter.parse(speaker, after, before)
    query, limit = _check(query, limit, filters)
    count = store.history_count(thread_id)
    index, key = _last_indexed(store, thread_id, check_language(language))
    last = store.get_history_message(thread_id, key) if key is not None else None
    index, start = _refreshed(store, thread_id, count, index, key, last)
    if count > start:
        with _bulk(count - start):
            _add(index, store.get_history_items(thread_id, start=start, end=count))
    # The index is shared by every search of the thread: read it under its lock, or a
    # concurrent search adding newer messages is seen half-way (a key without its
    # length or meta: IndexError, KeyError; a dict changing size while iterated).
    with index.lock:
        keep = filters.matcher(index) if filters else None
    semantic: list[str] = []
    if store.index_config and query:
        items = store.search(
            store.namespace(thread_id, "history"),
            query=query,
            limit=_semantic_limit(limit, filters),
        )
        semantic = [it.key for it in items]
    with index.lock:
        ranked = _rank(index, query, limit, semantic, frozenset(exclude), keep)
        return _hits(index, ranked, query, working), index.size()


async def asearch_history(
    store: OffloadStore,
    thread_id: str,
    query: str | None,
    limit: int = 5,
    *,
    working: Sequence[BaseMessage] | None = None,
    exclude: Iterable[str] = (),
    speaker: str | None = None,
    after: str | dt.date | None = None,
    before: str | dt.date | None = None,
    language: str = "english",
) -> list[SearchHit]:
    """Async twin of :func:`search_history`."""
    return (
        await asearch_history_sized(
            store,
            thread_id,
            query,
            limit,
            working=working,
            exclude=exclude,
            speaker=speaker,
            after=after,
            before=before,
            language=language,
        )
    )[0]


async def asearch_history_sized(
    store: OffloadStore,
    thread_id: str,
    query: str | None,
    limit: int = 5,
    *,
    working: Sequence[BaseMessage] | None = None,
    exclude: Iterable[str] = (),
    speaker: str | None = None,
    after: str | dt.date | None = None,
    before: str | dt.date | None = None,
    language: str = "english",
) -> tuple[list[SearchHit], HistorySize]:
    """Async twin of :func:`search_history_sized`."""
    filters = SearchFilter.parse(speaker, after, before)
    query, limit = _check(query, limit, filters)
    count = await store.ahistory_count(thread_id)
    index, key = await _alast_indexed(store, thread_id, check_language(language))
    last = await store.aget_history_message(thread_id, key) if key is not None else None
    index, start = _refreshed(store, thread_id, count, index, key, last)
    if count > start:
        items = await store.aget_history_items(thread_id, start=start, end=count)
        async with index.lock.ahold():  # see _add
            with _bulk(count - start):
                _add_locked(index, items)
    # The index is shared by every search of the thread: read it under its lock, or a
    # concurrent search adding newer messages is seen half-way (a key without its
    # length or meta: IndexError, KeyError; a dict changing size while iterated).
    async with index.lock.ahold():
        keep = filters.matcher(index) if filters else None
    semantic: list[str] = []
    if store.index_config and query:
        hits = await store.asearch(
            store.namespace(thread_id, "history"),
            query=query,
            limit=_semantic_limit(limit, filters),
        )
        semantic = [it.key for it in hits]
    async with index.lock.ahold():
        ranked = _rank(index, query, limit, semantic, frozenset(exclude), keep)
        return _hits(index, ranked, query, working), index.size()


def format_hits(
    query: str,
    hits: Sequence[SearchHit],
    total: int | HistorySize,
    filters: SearchFilter | None = None,
    *,
    more: int = 0,
) -> str:
    """The search result as the model reads it (``total``: the number of messages
    searched, or the :class:`HistorySize` of :func:`search_history_sized`; ``filters``:
    those the search used; ``more``: further hits left out for lack of room, said at
    the end)."""
    size = total.describe() if isinstance(total, HistorySize) else f"{total} messages"
    where_ = filters.describe() if filters else ""
    what = " ".join(p for p in (repr(query) if query else "", f"({where_})" if where_ else "") if p)
    if not hits:
        return f"No message of this conversation's history ({size}) matches {what}. " + (
            "Try other keywords, a shorter identifier, or a part of it."
            if query
            else "Try another speaker or a wider time range."
        )
    if query:
        head = f"{len(hits)} result(s) for {what} among {size}, best first"
    else:
        head = " ".join(p for p in (f"{len(hits)} message(s)", what) if p)
        head += f" among {size}, newest first"
    lines = [head + (" (times UTC):" if any(h.time for h in hits) else ":")]
    for n, h in enumerate(hits, 1):
        who = h.role + (f" ({h.tool_name or h.speaker})" if h.tool_name or h.speaker else "")
        who += f" of agent {h.agent}" if h.agent else ""
        when = f" at {h.time}" if h.time else ""
        where = {
            "yes": "in your context",
            "shortened": "in your context as a shortened version",
            "no": "not in your context",
        }[h.in_context]
        hint = "" if h.in_context == "yes" else f'; reload_offloaded("{h.id}") returns it in full'
        lines.append(f"{n}. id={h.id} {who}{when}, position {h.seq}, {where}{hint}")
        lines.append(f"   {h.snippet}")
    if more:
        lines.append(
            f"{more} more result(s) not shown: your context has no room for them. Ask for "
            "fewer (limit), narrow the query or filter by speaker, after or before."
        )
    return "\n".join(lines)
