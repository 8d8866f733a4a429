"""MkDocs hook: the benchmark results live in ``benchmarks/results/`` (where the
benchmarks write them); the site serves them from there instead of a copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(RESULTS.rglob("*.png")):  # variants' runs in folders of their own
        name = path.relative_to(RESULTS).as_posix()
        files.append(File.generated(config, f"results/{name}", abs_src_path=str(path)))
    return files
