"""Shared fixtures: the store backends every store test runs on.

To add a backend, add its kind to ``SYNC_BACKENDS``/``ASYNC_BACKENDS`` and a branch
to :func:`sync_backend`/:func:`async_backend`. PostgreSQL runs when
``AUTOCONTEXT_TEST_POSTGRES_URI`` is set and ``langgraph-checkpoint-postgres`` is
installed; otherwise its cases are skipped with the reason.
"""

from __future__ import annotations

import operator
import os
import random
import sqlite3
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import register_random, settings
from langgraph.store.base import BaseStore, Op, Result, SearchOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import AsyncSqliteStore, SqliteStore

from langchain_autocontext.messages import _SEEDED_IDS, seeded_ids
from langchain_autocontext.store import OffloadStore

POSTGRES_ENV = "AUTOCONTEXT_TEST_POSTGRES_URI"

# The property tests draw the same examples on every run ("ci", the default), so a red
# suite means a change, never an unlucky draw; HYPOTHESIS_PROFILE=explore draws new ones
# each run (with hypothesis' example database) to look for what the fixed ones miss.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class _IdsPerExample:
    """The generator the running test's :func:`seeded_ids` draws from, as hypothesis sees
    a PRNG it manages (``register_random``): reseeded before every example (the test's
    ``salt`` mixed in) and restored after, so an example draws the same ids each time
    hypothesis runs it. Registered once: ``register_random`` collects garbage."""

    rng: random.Random | None = None
    salt = 0

    def seed(self, seed: int) -> None:
        if self.rng is not None:
            self.rng.seed(self.salt ^ seed)

    def getstate(self) -> object:
        return None if self.rng is None else self.rng.getstate()

    def setstate(self, state: Any) -> None:
        if self.rng is not None and state is not None:
            self.rng.setstate(state)


_IDS = _IdsPerExample()
register_random(_IDS)


@pytest.fixture(autouse=True)
def _fixed_package_ids(request: pytest.FixtureRequest) -> Iterator[None]:
    """The package's own ids (offload ids, the ids of what it writes) drawn from a
    sequence fixed per test, for the same reason: an offload id is shown in the context
    and a uuid's token count varies, so a size checked against a budget could pass or
    fail by the ids a run happened to draw (a CI run failed on one such draw). In a
    property test the sequence restarts at every example, so hypothesis replaying an
    example (to shrink it, or to check it) replays its ids too: a state machine whose
    draws depend on the context (what it may edit, reload) otherwise fails as "flaky"
    instead of reporting the example. The "explore" profile salts the sequence at random
    (``AUTOCONTEXT_TEST_IDS_SALT`` replays a salt; a failure shows the one it ran with);
    ``@pytest.mark.random_ids`` (a test that patches ``uuid.uuid4``) leaves them random;
    tests that vary them on purpose nest their own ``seeded_ids``."""
    if request.node.get_closest_marker("random_ids"):
        yield
        return
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        salt = zlib.crc32(request.node.nodeid.encode())
    else:
        salt = int(os.environ.get("AUTOCONTEXT_TEST_IDS_SALT") or random.getrandbits(32))
        request.node.add_report_section("call", "ids", f"AUTOCONTEXT_TEST_IDS_SALT={salt}")
    with seeded_ids(salt):
        _IDS.rng, _IDS.salt = _SEEDED_IDS.get(), salt
        try:
            yield
        finally:
            _IDS.rng = None


# "sqlite-thread": a sync SqliteStore driven through the async API (run in a worker thread).
# "textcmp": InMemoryStore comparing range filters as text, as PostgresStore does.
SYNC_BACKENDS = ["memory", "textcmp", "sqlite", "postgres"]
ASYNC_BACKENDS = ["memory", "textcmp", "sqlite", "sqlite-thread", "postgres"]


class TextCompareStore(InMemoryStore):
    """Range filters ($gt/$gte/$lt/$lte) compare ``str(value)`` like PostgresStore's
    ``value->>'key' >= 'x'``, so ``9 >= 10`` holds; runs the suite without a server."""

    _ops: ClassVar[dict[str, Callable[[str, str], bool]]] = {
        "$gt": operator.gt,
        "$gte": operator.ge,
        "$lt": operator.lt,
        "$lte": operator.le,
    }

    def _split(self, op: Op) -> tuple[Op, dict[str, dict[str, Any]]]:
        if not isinstance(op, SearchOp) or not op.filter:
            return op, {}
        ranges = {
            k: v for k, v in op.filter.items() if isinstance(v, dict) and set(v) <= set(self._ops)
        }
        rest = {k: v for k, v in op.filter.items() if k not in ranges} or None
        return (op._replace(filter=rest, limit=10**9, offset=0) if ranges else op), ranges

    def _finish(self, ops: list[Op], results: list[Result]) -> list[Result]:
        for i, op in enumerate(ops):
            _, ranges = self._split(op)
            if ranges and isinstance(op, SearchOp):
                hits = [
                    item
                    for item in results[i]  # type: ignore[union-attr]
                    if all(
                        k in item.value and self._ops[o](str(item.value[k]), str(v))
                        for k, conds in ranges.items()
                        for o, v in conds.items()
                    )
                ]
                results[i] = hits[op.offset : op.offset + op.limit]
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._finish(ops, super().batch([self._split(op)[0] for op in ops]))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._finish(ops, await super().abatch([self._split(op)[0] for op in ops]))


def _param(kind: str, mode: str | None = None) -> Any:
    marks = [pytest.mark.postgres] if kind == "postgres" else []
    value = kind if mode is None else (mode, kind)
    return pytest.param(value, marks=marks, id=kind if mode is None else f"{kind}-{mode}")


def _postgres_uri() -> str:
    uri = os.environ.get(POSTGRES_ENV)
    if not uri:
        pytest.skip(f"PostgresStore backend: set {POSTGRES_ENV} to a PostgreSQL URI to run it")
    pytest.importorskip(
        "langgraph.store.postgres",
        reason="PostgresStore backend: langgraph-checkpoint-postgres is not installed",
    )
    return uri


def open_sqlite(path: Path) -> SqliteStore:
    """A set-up ``SqliteStore`` on a file (close it with ``store.conn.close()``)."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    return store


@contextmanager
def sync_backend(kind: str, path: Path) -> Iterator[BaseStore]:
    """A fresh sync backend of ``kind`` (SQLite on the file ``path``)."""
    if kind == "memory":
        yield InMemoryStore()
    elif kind == "textcmp":
        yield TextCompareStore()
    elif kind in ("sqlite", "sqlite-thread"):
        store = open_sqlite(path)
        try:
            yield store
        finally:
            store.conn.close()
    elif kind == "postgres":
        uri = _postgres_uri()
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(uri) as pg:
            pg.setup()
            yield pg
    else:
        raise ValueError(f"unknown backend kind {kind!r}")


@asynccontextmanager
async def async_backend(kind: str, path: Path) -> AsyncIterator[BaseStore]:
    """A fresh backend of ``kind`` for async use (SQLite on the file ``path``)."""
    if kind == "sqlite":
        async with AsyncSqliteStore.from_conn_string(str(path)) as store:
            await store.setup()
            yield store
    elif kind == "postgres":
        uri = _postgres_uri()
        from langgraph.store.postgres import AsyncPostgresStore

        async with AsyncPostgresStore.from_conn_string(uri) as pg:
            await pg.setup()
            yield pg
    else:
        with sync_backend(kind, path) as store:
            yield store


def unique_prefix() -> str:
    """A namespace prefix of its own, so tests sharing a database never collide."""
    return f"ac{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=[_param(k) for k in SYNC_BACKENDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    """Each sync backend in turn."""
    with sync_backend(request.param, tmp_path / "store.db") as store:
        yield store


@pytest.fixture(params=[_param(k) for k in ASYNC_BACKENDS])
async def abackend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    """Each backend for async use in turn."""
    async with async_backend(request.param, tmp_path / "store.db") as store:
        yield store


@pytest.fixture(
    params=[_param(k, "sync") for k in SYNC_BACKENDS] + [_param(k, "async") for k in ASYNC_BACKENDS]
)
async def any_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[OffloadStore, bool]]:
    """``(OffloadStore, is_async)`` for every backend, driven sync and async."""
    mode, kind = request.param
    path = tmp_path / "store.db"
    if mode == "sync":
        with sync_backend(kind, path) as store:
            yield OffloadStore(store, prefix=unique_prefix()), False
    else:
        async with async_backend(kind, path) as store:
            yield OffloadStore(store, prefix=unique_prefix()), True


@pytest.fixture(params=["react", "graph", "create_agent"])
def build(request: pytest.FixtureRequest) -> Any:
    """A self-managed agent builder: create_react_agent, a StateGraph, create_agent."""
    from _builders import self_managed_agent, self_managed_create_agent, self_managed_graph

    return {
        "react": self_managed_agent,
        "graph": self_managed_graph,
        "create_agent": self_managed_create_agent,
    }[request.param]
