"""Drafts: the Drafter protocol (base), MTP and DSpark, and the factory that builds/saves/loads them."""

from .base import DraftBatch, Drafter, DraftOutput
from .factory import DraftLoadError, build_draft, load_drafter, save_draft, shipped_draft_dir

__all__ = [
    "DraftBatch", "Drafter", "DraftOutput", "DraftLoadError", "build_draft", "load_drafter", "save_draft",
    "shipped_draft_dir",
]
