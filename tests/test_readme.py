"""The README stays true: CI runs its test command; every config field is documented
(in docs/configuration.md)."""

from __future__ import annotations

import re
from pathlib import Path

from langchain_autocontext import AutoContextConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def _two_commands() -> list[str]:
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_readme_gives_exactly_two_commands() -> None:
    main_job, tests = _two_commands()
    assert "autocontext replay" in main_job
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, tests = _two_commands()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    assert tests in lines, f"{tests!r} is not a line of .ci/run"
    assert "set -euo pipefail" in ci  # a failing test fails CI


def test_every_config_field_is_documented_with_its_default() -> None:
    for name, field in AutoContextConfig.model_fields.items():
        row = re.search(rf"^\| `{name}` \| `([^`]*)` \|", CONFIGURATION, flags=re.M)
        assert row, f"config field {name} is missing from docs/configuration.md"
        assert row.group(1) == repr(field.default), f"{name}: the docs say {row.group(1)}"
