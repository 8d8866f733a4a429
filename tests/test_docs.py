"""The documentation stays true: every Python block of the README and of the docs
site runs, the README stays short, and the site's navigation and API reference cover
what exists.

A page's blocks run in order in one namespace (they build on each other), in a
temporary directory; a line ``print(...)  # value`` must print ``value``. A block may
be left out only behind a ``<!-- not run: reason -->`` line, and is then still
compiled. ``mkdocs build --strict`` (in ``.ci/run``) checks the links, the snippets
and the API reference.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

import langchain_autocontext

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
_BLOCK = re.compile(r"(<!-- not run: ([^>]*?) -->\n)?```python\n(.*?)```", re.S)
_EXPECT = re.compile(r"^print\(.*\)\s+# (.+)$")
#: What a page's run must leave behind besides its printed values.
AFTER = {"surfaces.md": ["checkpoints.db", "store.db"]}
README_LIMIT = 12_000


def blocks(page: Path) -> list[tuple[str | None, str]]:
    """``(reason it is not run, or None; code)`` of every Python block of ``page``."""
    return [(m.group(2), m.group(3)) for m in _BLOCK.finditer(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = blocks(page)
    if not found:
        pytest.skip(f"{page.name} has no Python block")
    monkeypatch.chdir(tmp_path)  # snippets may write SQLite files
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    namespace: dict[str, object] = {"__name__": "docs"}
    for k, (reason, code) in enumerate(found):
        name = f"{page.name} block {k}"
        if reason is not None:
            assert reason.strip(), f"{name}: say why it is not run"
            compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            exec(compile(code, name, "exec"), namespace)
        expected = [m.group(1) for line in code.splitlines() if (m := _EXPECT.match(line))]
        if expected:
            assert out.getvalue().splitlines() == expected, name
    for artefact in AFTER.get(page.name, []):
        assert (tmp_path / artefact).is_file(), f"{page.name} did not write {artefact}"


def test_blocks_left_out_are_few_and_said_why() -> None:
    left = [(p.name, r) for p in PAGES for r, _ in blocks(p) if r is not None]
    assert len(left) <= 3, left


def test_readme_is_short() -> None:
    size = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters (at most {README_LIMIT})"


def test_every_page_and_notebook_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in [*DOCS.glob("*.md"), *DOCS.glob("notebooks/*.ipynb")]:
        rel = path.relative_to(DOCS).as_posix()
        assert f": {rel}" in nav, f"{rel} is not in mkdocs.yml's nav"


def test_api_reference_covers_the_public_api() -> None:
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: langchain_autocontext\.(\w+)$", api, flags=re.M))
    assert documented == set(langchain_autocontext.__all__)


def test_every_exported_error_is_raised_or_documented_as_not_raised() -> None:
    """An exported error class nothing raises misleads whoever writes ``except`` for it:
    the API reference must say what it is for."""
    from langchain_autocontext.errors import AutoContextError

    source = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (ROOT / "langchain_autocontext").rglob("*.py")
        if p.name != "errors.py"
    )
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    notes = re.sub(r"^::: .*$", "", api, flags=re.M)
    for name in langchain_autocontext.__all__:
        cls = getattr(langchain_autocontext, name)
        if not (isinstance(cls, type) and issubclass(cls, AutoContextError)):
            continue
        raised = re.search(rf"\b{name}\(", source) or any(
            re.search(rf"\b{sub.__name__}\(", source) for sub in cls.__subclasses__()
        )
        assert raised or f"`{name}`" in notes, f"{name}: raised nowhere, explained nowhere"


def test_readme_links_into_the_docs_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)\)", readme):
        assert (ROOT / target).exists(), target


def test_every_extra_is_listed_and_every_extra_named_exists() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project["optional-dependencies"])
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    listed = index[index.index("Extras:") :].split("\n\n")[0]
    missing = [e for e in sorted(extras) if f"`{e}`" not in listed]
    assert not missing, f"docs/index.md's list of extras leaves out {missing}"
    pages = [*PAGES, *sorted(DOCS.glob("notebooks/*.ipynb"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for named in re.findall(r"(?:langchain-autocontext|\.)\[([\w,\s-]+)\]", text):
            unknown = {e.strip() for e in named.split(",")} - extras
            assert not unknown, f"{page.name} names the extras {sorted(unknown)}"
