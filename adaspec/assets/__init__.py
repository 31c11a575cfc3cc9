"""Data files that ship with adaspec: chat prompts for draft training / benchmarks, trained drafts."""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent


def chat_prompts_path(split: str = "train") -> Path:
    """`chat_prompts.jsonl` (train) or `chat_prompts_heldout.jsonl` (held-out: never used in training)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return ASSETS_DIR / ("chat_prompts.jsonl" if split == "train" else "chat_prompts_heldout.jsonl")
