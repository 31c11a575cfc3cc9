"""Write the copy-heavy prompt set (issue 10, item 5): adaspec/assets/copy_prompts{,_heldout}.jsonl.

Prompts whose answers repeat text given in the prompt, as much real serving traffic does. Four
kinds, the instructions written here, the passages taken from text the machine already has:
- `rewrite`: rewrite / proofread / reformat / summarise a passage (Shakespeare or a docstring);
- `refactor`: extend or refactor a given Python function (CPython's standard library);
- `answer`: answer a question from a given passage, in the passage's words;
- `multiturn`: a conversation whose last user turn asks to quote or revise an earlier turn.

Split (R-B6 style, fixed rules): the held-out file takes its passages only from the held-out side
of adaspec.training.corpus (standard-library files with crc32 % 10 == 0, Shakespeare plays starting
with "m"), which no draft is trained on; the dev file takes them from the train side. Nothing in the
Suffix draft is tuned on the held-out file. Deterministic for one Python installation:

    python scripts/make_copy_prompts.py
"""

from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adaspec.training.corpus import passages, shakespeare_files, stdlib_files  # noqa: E402

PER_KIND = 8

REWRITE = [
    "Rewrite the following passage in plain modern English. Keep the sentences in the same order and keep "
    "every name exactly as it is written.\n\n{p}",
    "Proofread the text below. Return the whole text with any spelling or punctuation fixed and nothing else "
    "changed.\n\n{p}",
    "Copy the following text, putting each sentence on its own line.\n\n{p}",
    "Summarise this passage in a few sentences, quoting its most important line word for word.\n\n{p}",
]
REFACTOR = [
    "Here is a Python function:\n\n```python\n{f}\n```\n\nAdd type hints to its parameters and return value. "
    "Show the complete function.",
    "Add a short comment above every few lines of this function to explain what they do. Return the whole "
    "function.\n\n```python\n{f}\n```",
    "Refactor the function below so that it is easier to read, without changing its behaviour. Show the full "
    "new version.\n\n```python\n{f}\n```",
    "Extend this function with a `verbose: bool = False` parameter that prints each step when set. Write out "
    "the entire updated function.\n\n```python\n{f}\n```",
]
ANSWER = [
    "Read the passage and answer the question using the passage's own words.\n\nPassage:\n{p}\n\n"
    "Question: What does the passage say about {w}?",
    "Passage:\n{p}\n\nQuote the sentence of the passage that mentions {w}, then explain it briefly.",
    "Using only the text below, answer: what is said about {w}? Quote the text you rely on.\n\n{p}",
    "Here is some documentation:\n\n{p}\n\nWhat does it say about {w}? Answer with the relevant lines.",
]
FOLLOW_UPS = [
    "Thanks. Now repeat the part you wrote above exactly, and then add one sentence at the end.",
    "Good. Please quote my original text again, word for word, and underline nothing.",
    "Could you show the same text once more, but with the first sentence moved to the end?",
    "Now write it out again with numbered lines.",
]


def functions(files: list[Path], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """(name, source) of `n` stdlib functions of 8..30 lines, documented, in a deterministic order."""
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        lines = text.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) and 8 <= node.end_lineno - node.lineno <= 30:
                src = "\n".join(lines[node.lineno - 1:node.end_lineno])
                indent = len(src) - len(src.lstrip())
                src = "\n".join(line[indent:] for line in src.splitlines())
                if len(src) < 1400:
                    found.append((node.name, src))
    rng.shuffle(found)
    return found[:n]


def docstrings(files: list[Path], n: int, rng: random.Random) -> list[str]:
    """Module docstrings of 300..1200 characters (documentation prose)."""
    out = []
    for path in files:
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        if doc and 300 <= len(doc) <= 1200:
            out.append(doc)
    rng.shuffle(out)
    return out[:n]


def keyword(text: str) -> str:
    words = [w.strip(".,;:!?()'\"`") for w in text.split()]
    words = [w for w in words if len(w) >= 6 and w.isalpha()]
    return words[len(words) // 3] if words else "it"


def build(split: str) -> list[dict]:
    rng = random.Random(f"copy-prompts:{split}")
    prose = [it.text.strip() for it in passages(shakespeare_files(split), "prose", 2 * PER_KIND, 700, 0,
                                                f"copy-{split}")]
    docs = docstrings(stdlib_files(split), PER_KIND, rng)
    funcs = functions(stdlib_files(split), 2 * PER_KIND, rng)
    texts = [t for pair in zip(prose, docs) for t in pair]  # prose and documentation alternate
    texts += prose[len(docs):][:max(0, 2 * PER_KIND - len(texts))]
    rows = []
    for i in range(PER_KIND):
        rows.append({"kind": "rewrite", "prompt": REWRITE[i % 4].format(p=texts[i])})
        rows.append({"kind": "refactor", "prompt": REFACTOR[i % 4].format(f=funcs[i][1])})
        p = texts[(i + PER_KIND // 2) % len(texts)]
        rows.append({"kind": "answer", "prompt": ANSWER[i % 4].format(p=p, w=keyword(p))})
        if i % 2 == 0:
            name, src = funcs[PER_KIND + i]
            messages = [
                {"role": "user", "content": f"What does this function do?\n\n```python\n{src}\n```"},
                {"role": "assistant", "content": f"`{name}` is shown below with its docstring, which explains its "
                                                 f"purpose:\n\n```python\n{src}\n```"},
                {"role": "user", "content": "Now rewrite it with type hints, keeping everything else the same. "
                                            "Show the whole function."},
            ]
        else:
            p = texts[(i + 3) % len(texts)]
            messages = [
                {"role": "user", "content": f"Here is a text I am working on:\n\n{p}\n\nCan you tidy it up?"},
                {"role": "assistant", "content": f"Here it is with the spacing tidied:\n\n{' '.join(p.split())}"},
                {"role": "user", "content": FOLLOW_UPS[(i // 2) % 4]},
            ]
        rows.append({"kind": "multiturn", "messages": messages})
    for j, row in enumerate(rows):
        row["id"] = f"copy-{split}-{j}"
    return rows


def main() -> int:
    assets = ROOT / "adaspec" / "assets"
    for split, name in (("train", "copy_prompts.jsonl"), ("heldout", "copy_prompts_heldout.jsonl")):
        rows = build(split)
        with open(assets / name, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({"id": row.pop("id"), **row}, ensure_ascii=False) + "\n")
        print(f"wrote {assets / name}: {len(rows)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
