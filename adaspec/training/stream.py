"""Streaming distillation data (issue 11): token windows on disk, the teacher runs inside the loop.

Nothing but token ids is stored. Each training step takes a batch of windows, runs the target over
them in prefill mode (one forward, no KV reuse between steps) and reads the teacher signals the
drafts learn from: the outputs of the capture layers and the top-k log-probabilities of the
target's next-token distribution at every position. So the data scales with tokens, not with
hidden states (an fp16 copy of three layers' outputs is 3.5 KB per position, 17 GB at 5M).

Windows, fixed once per recipe (`build_windows`, cached in `<data_dir>/windows.pt`):
- `gen`: the target's own greedy answers to several thousand training prompts (chat from
  chat_topics.py, human-eval train prompts, standard-library and Shakespeare passages), made by
  `selfdistill.py` and stored as token ids only;
- `code`: the Python standard library's training files, then the Python sources of installed
  permissively licensed packages (`CODE_PACKAGES`; never the held-out stdlib files or human-eval's
  held-out tasks), cut into windows of `seq_len` tokens;
- `prose`: the training Shakespeare texts, cut the same way.
A seeded permutation orders them; epoch 1 visits every window once, so "positions seen" during
epoch 1 are distinct positions.

`Teacher` runs the target in `teacher_dtype` (bfloat16 by default: on CPUs with AMX or avx512_bf16
its matrix products run several times faster than float32; the students are still evaluated on
float32 target features, what serving feeds them).
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..models.attention import build_layout
from ..runner.kv_cache import KVCache
from . import corpus

# pure-Python sources of installed packages with permissive licences (MIT/BSD/Apache-2.0)
CODE_PACKAGES = ("transformers", "sympy", "networkx", "numpy", "rich", "click", "jinja2", "pydantic",
                 "fastapi", "starlette", "httpx", "requests", "urllib3", "pygments", "setuptools",
                 # read where installed, after the ones above (a large --code_tokens reaches them; a GPU
                 # image has most of them)
                 "scipy", "pandas", "sklearn", "torch", "jax", "matplotlib", "statsmodels", "flax",
                 "optax", "accelerate", "peft", "timm", "lightning", "torchvision", "seaborn")


@dataclass(frozen=True)
class StreamRecipe:
    fingerprint: str
    seq_len: int = 512
    code_tokens: int = 2_600_000  # raw code tokens (stdlib train files first, then CODE_PACKAGES)
    prose_tokens: int = 900_000
    topk: int = 32
    teacher_layers: tuple[int, ...] = ()
    teacher_dtype: str = "bfloat16"
    seed: int = 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["teacher_layers"] = list(self.teacher_layers)
        return d


def _package_files(name: str) -> list[Path]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    return [p for p in sorted(root.rglob("*.py")) if "tests" not in p.parts and "test" not in p.parts]


def _cut(ids: list[int], seq_len: int, source: str, out: list, budget: int) -> int:
    """Append windows of `ids` (at most `budget` tokens); returns tokens used."""
    used = 0
    for start in range(0, len(ids) - 16, seq_len):
        if used >= budget:
            break
        w = ids[start:start + seq_len]
        out.append((source, torch.tensor(w, dtype=torch.int32)))
        used += len(w)
    return used


def build_windows(tokenizer, recipe: StreamRecipe, gen_seqs: list[tuple[str, list[int]]], log=print) -> list:
    """[(source, int32 tokens)] in a seeded order: self-distilled sequences + raw code + raw prose."""
    windows: list = [("gen-" + src, torch.tensor(ids, dtype=torch.int32)) for src, ids in gen_seqs]
    code_files = corpus.stdlib_files("train")
    for name in CODE_PACKAGES:
        code_files += _package_files(name)
    prose_files = corpus.shakespeare_files("train")
    for source, files, budget in (("code", code_files, recipe.code_tokens), ("prose", prose_files, recipe.prose_tokens)):
        used = 0
        for start in range(0, len(files), 64):  # files in order, tokenised 64 at a time
            if used >= budget:
                break
            texts = [t for t in (corpus._read(p) for p in files[start:start + 64]) if len(t) >= 200]
            for ids in tokenizer.encode_many(texts):
                if used >= budget:
                    break
                used += _cut(ids, recipe.seq_len, source, windows, budget - used)
        log(f"{source}: {used} raw tokens from {len(files)} candidate files")
    random.Random(f"windows:{recipe.seed}").shuffle(windows)
    return windows


def load_or_build_windows(tokenizer, recipe: StreamRecipe, data_dir: Path, gen_seqs, log=print) -> list:
    path = data_dir / "windows.pt"
    key = {"recipe": recipe.to_json(), "gen_sequences": len(gen_seqs)}
    if path.is_file():
        saved = torch.load(path, weights_only=False)
        if saved["key"] == key:
            return saved["windows"]
        log(f"{path} was made for {saved['key']}; rebuilding it")
    windows = build_windows(tokenizer, recipe, gen_seqs, log)
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "windows": windows}, tmp)
    tmp.replace(path)
    return windows


class Teacher:
    """The target in prefill mode over a batch of windows -> what the students' losses read."""

    def __init__(self, model, topk: int, layers: tuple[int, ...], max_batch: int, max_len: int):
        cfg = model.config
        param = next(model.parameters())
        self.model, self.topk, self.layers, self.device = model, topk, tuple(layers), param.device
        self.kv = KVCache(cfg.num_layers, max_batch, cfg.num_kv_heads, max_len + 1, cfg.head_dim, param.dtype,
                          device=self.device)

    @torch.inference_mode()
    def __call__(self, seqs: list[torch.Tensor]):
        """seqs: int token tensors -> tokens [B, T] long, feats [B, T-1, layers*H] float32, topk ids
        [B, T-1, k] long, topk log-probabilities [B, T-1, k] float32, lengths [B] (tokens); the same
        layout as trainer.collate, on the target's device."""
        slots = self.kv.k[0].shape[0]
        if len(seqs) > slots:  # more windows than KV slots: in pieces, padded to one length
            parts = [self(seqs[i:i + slots]) for i in range(0, len(seqs), slots)]
            T = max(p[0].shape[1] for p in parts)

            def pad(t, length, value):  # dim 1 of [B, L] or [B, L, X] to `length`
                return torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, length - t.shape[1]), value=value)

            return (torch.cat([pad(p[0], T, 0) for p in parts]), torch.cat([pad(p[1], T - 1, 0.0) for p in parts]),
                    torch.cat([pad(p[2], T - 1, 0) for p in parts]), torch.cat([pad(p[3], T - 1, -30.0) for p in parts]),
                    torch.cat([p[4] for p in parts]))
        lens = [len(s) for s in seqs]
        B, T = len(seqs), max(lens)
        ids = torch.cat([s.long() for s in seqs]).to(self.device)
        layout = build_layout(list(range(B)), [0] * B, lens, device=self.device)
        hidden, captured = self.model(ids, layout, self.kv, self.layers)
        logits = self.model.lm_head(self.model.model.norm(hidden))  # teacher dtype
        top, top_ids = logits.topk(self.topk, dim=-1)
        lse = torch.logsumexp(logits.float(), dim=-1, keepdim=True)
        top_lp = top.float() - lse
        feats_all = torch.cat(captured, dim=-1).float()
        H = feats_all.shape[-1]
        dev = self.device
        tokens = torch.zeros(B, T, dtype=torch.long, device=dev)
        feats = torch.zeros(B, T - 1, H, device=dev)
        tid = torch.zeros(B, T - 1, self.topk, dtype=torch.long, device=dev)
        tlp = torch.full((B, T - 1, self.topk), -30.0, device=dev)
        off = 0
        for b, L in enumerate(lens):
            tokens[b, :L] = ids[off:off + L]
            feats[b, :L - 1] = feats_all[off:off + L - 1]
            tid[b, :L - 1] = top_ids[off:off + L - 1]
            tlp[b, :L - 1] = top_lp[off:off + L - 1]
            off += L
        return tokens, feats, tid, tlp, torch.tensor(lens, device=dev)
