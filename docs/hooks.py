"""MkDocs hook: the benchmark results live in ``benchmarks/results/`` (where the
benchmarks write them); the site serves them from there instead of a copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    return files
