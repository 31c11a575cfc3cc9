"""Imports flow one way (README "Layout"): a package imports only packages of its own or a lower layer.

Relative imports are resolved and checked against the layer order below, including imports inside
functions. The two exceptions are named with their reason; a new upward import fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import adaspec

LAYERS = [
    ["config", "rounds", "geometry", "errors", "flags", "strict_json", "outputs", "sampling_params", "assets", "hugepages",
     "kernels"],
    ["models", "sampling", "calibration", "metrics"],
    ["drafts", "adaptive"],
    ["preflight"],
    ["runner"],
    ["parallel"],
    ["engine"],
    ["commands", "server", "training"],
    ["cli"],
]
ALLOWED = {
    # a data-parallel shard and a tensor-parallel worker are engines: parallel builds LLMEngine
    # objects (lazily, inside functions), and the engine reaches parallel only lazily too
    ("parallel", "engine"),
    # `python -m adaspec.training.cli` hands its argv to the top-level command line
    ("training", "cli"),
}


def upward_imports() -> set[tuple[str, str, str]]:
    level = {p: i for i, ps in enumerate(LAYERS) for p in ps}
    root = Path(adaspec.__file__).parent
    found = set()
    for f in root.rglob("*.py"):
        parts = f.relative_to(root).with_suffix("").parts
        src = parts[0]
        if src not in level:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level < 1:
                continue
            base = list(parts[:-1])
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            mod = base + (node.module.split(".") if node.module else [])
            if mod and mod[0] in level and mod[0] != src and level[mod[0]] > level[src]:
                found.add((src, mod[0], str(f.relative_to(root))))
    return found


def test_every_package_is_in_a_layer():
    root = Path(adaspec.__file__).parent
    packages = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    layered = {p for ps in LAYERS for p in ps}
    assert (packages | modules) - layered == set()


def test_imports_flow_one_way():
    bad = sorted(u for u in upward_imports() if u[:2] not in ALLOWED)
    assert not bad, f"upward imports (see README Layout): {bad}"


def test_the_checker_sees_the_known_exceptions():
    """The detector is live: it finds the allowed upward imports (one is inside a function)."""
    assert {u[:2] for u in upward_imports()} >= ALLOWED
