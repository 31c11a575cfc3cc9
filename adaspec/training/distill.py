"""Self-distillation data: the target's own greedy continuations plus its teacher signals (R-B6).

One pass over each sequence does both jobs. The target (float32) prefills a prompt and then
decodes greedily with continuous batching over `max_batch` slots; every forward captures, for each
position p it reads, the teacher signals a draft learns from:
- features h_p: the outputs of `teacher_layers` (DSpark's capture layers, the last one is MTP's),
  stored as float16 [L-1, layers, H];
- the target's next-token distribution at p as its top-k log-probabilities (full-vocabulary
  log-softmax, float16) and ids [L-1, k]; the greedy label is the top-1 id.
Raw passages (code and prose, no generation) are prefilled only: teacher signals on real text.

Why not `LLM.generate` followed by a second teacher pass: the teacher pass would recompute every
position the generation already computed (about half the data cost), and the engine pads
mixed prefill/decode steps to the longest chunk. Generation here is plain greedy decoding with the
target's own forward and KV cache (no speculation), so it is the target's greedy output.

Data lives in `data_dir`: `manifest.json` (recipe + progress) and `shard_00000.pt`, ... (each
`shard_size` sequences in a fixed order). Rerunning skips finished shards (resumable); a data
directory made with another recipe is refused.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..models.attention import build_layout
from ..runner.kv_cache import KVCache
from . import corpus

SPLIT_TRAIN, SPLIT_VALID = "train", "valid"


@dataclass(frozen=True)
class DataRecipe:
    """Everything that determines the distillation data (stored in the manifest)."""

    fingerprint: str  # target weights
    num_prompts: int  # prompts the target continues (chat, human-eval, code and prose passages)
    gen_tokens: int  # greedy tokens per prompt at most (chat answers stop earlier at EOS)
    prompt_tokens: int  # prompts and passages are cut to this many tokens
    raw_tokens: int  # teacher-only raw text tokens (code and prose passages, not continued)
    raw_len: int = 512  # tokens per raw passage
    valid_every: int = 10  # every n-th prompt of each source is the trainer's validation set
    topk: int = 32
    teacher_layers: tuple[int, ...] = ()
    seed: int = 0
    shard_size: int = 64

    def to_json(self) -> dict:
        d = asdict(self)
        d["teacher_layers"] = list(self.teacher_layers)
        return d


@dataclass
class Item:
    source: str
    id: str
    split: str  # "train" | "valid"
    ids: list[int]  # prompt (or raw passage) tokens
    generate: bool


@dataclass
class Sequence:
    """One distilled sequence. Row p of the teacher arrays belongs to position p (predicts t_{p+1})."""

    source: str
    id: str
    split: str
    prompt_len: int  # positions >= prompt_len - 1 predict generated tokens
    tokens: torch.Tensor  # [L] int64
    feats: torch.Tensor  # [L-1, layers, H] float16
    topk_ids: torch.Tensor  # [L-1, k] int64 (column 0: the target's greedy token)
    topk_lp: torch.Tensor  # [L-1, k] float16 log-probabilities

    def __len__(self) -> int:
        return len(self.tokens)


# ---------------------------------------------------------------------------------- prompts
def prompt_ids(tokenizer, t, prompt_tokens: int) -> list[int]:
    """A corpus item as the target reads it: chat items with the chat template, cut to their last
    `prompt_tokens` tokens (as are human-eval prompts, whose end is the function to write),
    passages to their first ones."""
    ids = tokenizer.chat_prompt_ids(t.text) if t.chat else tokenizer.encode(t.text)
    return ids[-prompt_tokens:] if t.chat or t.id.startswith("HumanEval") else ids[:prompt_tokens]


def build_items(tokenizer, recipe: DataRecipe) -> list[Item]:
    """The fixed, ordered list of sequences to distil: prompts (train + valid), then raw passages."""
    rng = random.Random(recipe.seed)
    N = recipe.num_prompts
    chat = corpus.chat_items("train")
    he = corpus.humaneval_items("train")
    rng.shuffle(chat)
    rng.shuffle(he)
    chat_n = min(len(chat), round(0.4 * N))
    he_n = min(len(he), round(0.15 * N))
    rest = max(0, N - chat_n - he_n)
    code_n = round(0.6 * rest)
    chars = recipe.prompt_tokens * 4
    groups = {
        "chat": chat[:chat_n],
        "humaneval": he[:he_n],
        "stdlib": corpus.passages(corpus.stdlib_files("train"), "code", code_n, chars, recipe.seed, "stdlib"),
        "shakespeare": corpus.passages(corpus.shakespeare_files("train"), "prose", rest - code_n, chars,
                                       recipe.seed, "shakespeare"),
    }
    items = []
    for texts in groups.values():
        for i, t in enumerate(texts):
            valid = i % recipe.valid_every == recipe.valid_every - 1 or (len(texts) < recipe.valid_every and i == len(texts) - 1 and i > 0)
            ids = prompt_ids(tokenizer, t, recipe.prompt_tokens)
            if len(ids) >= 2:
                items.append(Item(t.source, t.id, SPLIT_VALID if valid else SPLIT_TRAIN, ids, True))
    # raw teacher-only passages: 60% code, 40% prose
    for source, share in (("code", 0.6), ("prose", 0.4)):
        n = round(recipe.raw_tokens * share / recipe.raw_len)
        files = corpus.raw_texts("train")[source]
        for t in corpus.passages(files, source, n, recipe.raw_len * 5, recipe.seed, f"raw-{source}"):
            ids = tokenizer.encode(t.text)[: recipe.raw_len]
            if len(ids) >= 16:
                items.append(Item(source, t.id, SPLIT_TRAIN, ids, False))
    return items


# ---------------------------------------------------------------------------------- distilling
@dataclass
class _Running:
    index: int
    item: Item
    slot: int
    tokens: list[int]
    feats: list[torch.Tensor] = field(default_factory=list)
    ids: list[torch.Tensor] = field(default_factory=list)
    lps: list[torch.Tensor] = field(default_factory=list)


class Distiller:
    def __init__(self, model, recipe: DataRecipe, eos_ids: set[int], max_batch: int = 48):
        self.model, self.recipe, self.eos = model, recipe, set(eos_ids)
        cfg = model.config
        self.max_batch = max_batch
        self.max_len = recipe.prompt_tokens + recipe.gen_tokens + 2
        self.max_len = max(self.max_len, recipe.raw_len + 2)
        param = next(model.parameters())
        self.device = param.device
        self.kv = KVCache(cfg.num_layers, max_batch, cfg.num_kv_heads, self.max_len, cfg.head_dim, param.dtype,
                          device=self.device)
        self.layers = tuple(recipe.teacher_layers)
        # prompts prefilled per forward: one on CPU (no padding, each prompt's own rounding), a group
        # on a GPU, where a forward costs its kernel launches more than its rows
        self.prefill_group = 1 if self.device.type == "cpu" else 32

    def _teacher(self, ids: list[int], starts: list[int], q_lens: list[int], slots: list[int]):
        """One forward of the rows `ids` -> (feats, top ids, top log-probabilities), on the CPU (a
        GPU's results come back in one copy each, so per-sequence slicing stays cheap)."""
        ids_t = torch.tensor(ids, dtype=torch.long, device=self.device)
        layout = build_layout(slots, starts, q_lens, device=self.device)
        hidden, captured = self.model(ids_t, layout, self.kv, self.layers)
        feats = (torch.stack(captured, dim=1).clamp(-6e4, 6e4).to(torch.float16) if captured
                 else hidden.new_zeros(len(hidden), 0, 0, dtype=torch.float16))  # tokens-only (selfdistill.py)
        lp = torch.log_softmax(self.model.logits(hidden), dim=-1)
        top_lp, top_ids = lp.topk(self.recipe.topk, dim=-1)
        return feats.cpu(), top_ids.cpu(), top_lp.to(torch.float16).cpu()

    def run(self, items: list[Item], on_done, progress=None, stop=None) -> None:
        """Distil `items` (index order); `on_done(index, Sequence)` is called as each one finishes.
        `stop()` true: admit no new sequence (the running ones finish)."""
        queue = list(enumerate(items))[::-1]
        free = list(range(self.max_batch))[::-1]
        running: list[_Running] = []
        while queue or running:
            if stop is not None and queue and stop():
                queue = []
            while queue and free:  # admit: prefill prompts (one at a time on CPU: no padding)
                group = []
                while queue and free and len(group) < self.prefill_group:
                    index, item = queue.pop()
                    group.append(_Running(index, item, free.pop(), list(item.ids)))
                f, i, lp = self._teacher([t for r in group for t in r.item.ids], [0] * len(group),
                                         [len(r.item.ids) for r in group], [r.slot for r in group])
                off = 0
                for r in group:
                    n = len(r.item.ids)
                    r.feats.append(f[off:off + n]), r.ids.append(i[off:off + n]), r.lps.append(lp[off:off + n])
                    off += n
                    if progress:
                        progress(n)
                    if r.item.generate and not self._append(r, int(i[off - 1, 0])):
                        running.append(r)
                    else:
                        self._finish(r, on_done)
                        free.append(r.slot)
            if not running:
                continue
            # one greedy step for every running sequence: feeds the newest token, reads its signals
            f, i, lp = self._teacher([r.tokens[-1] for r in running], [len(r.tokens) - 1 for r in running],
                                     [1] * len(running), [r.slot for r in running])
            nxt = i[:, 0].tolist()
            still = []
            for b, r in enumerate(running):
                r.feats.append(f[b:b + 1]), r.ids.append(i[b:b + 1]), r.lps.append(lp[b:b + 1])
                if self._append(r, nxt[b]):
                    self._finish(r, on_done)
                    free.append(r.slot)
                else:
                    still.append(r)
            if progress:
                progress(len(running))
            running = still

    def _append(self, r: _Running, token: int) -> bool:
        """Append a generated token; True when the sequence is complete (EOS, length, context)."""
        r.tokens.append(token)
        generated = len(r.tokens) - len(r.item.ids)
        return token in self.eos or generated >= self.recipe.gen_tokens or len(r.tokens) + 1 >= self.max_len

    def _finish(self, r: _Running, on_done) -> None:
        """Every token but the last was read by the target: L-1 rows of teacher signals."""
        feats, ids, lps = torch.cat(r.feats), torch.cat(r.ids), torch.cat(r.lps)
        n = len(r.tokens) - 1
        on_done(r.index, Sequence(r.item.source, r.item.id, r.item.split, len(r.item.ids),
                                  torch.tensor(r.tokens, dtype=torch.long), feats[:n].clone(), ids[:n].clone(), lps[:n].clone()))


def shard_path(data_dir: Path, shard: int) -> Path:
    return data_dir / f"shard_{shard:05d}.pt"


def _save_shard(path: Path, seqs: list[Sequence]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save([s.__dict__ for s in seqs], tmp)
    os.replace(tmp, path)


def shard_order(items: list[Item], shard_size: int) -> list[int]:
    """Shards interleaved across their groups (chat, human-eval, stdlib, Shakespeare, raw...), so that
    whatever a time budget leaves complete is a mix of every source, not the first source only."""
    groups: dict[str, list[int]] = {}
    for shard in range((len(items) + shard_size - 1) // shard_size):
        first = items[shard * shard_size]
        key = f"{first.source}:{first.id.split(':')[0].split('/')[0]}:{first.generate}"
        groups.setdefault(key, []).append(shard)
    order = []
    for rank in range(max(len(g) for g in groups.values())):
        order += [g[rank] for g in groups.values() if rank < len(g)]
    return order


def prepare_data(model, tokenizer, recipe: DataRecipe, data_dir: str | os.PathLike, max_batch: int = 48,
                 log=print, max_minutes: float | None = None) -> dict:
    """Build (or continue) the data directory for `recipe`; returns the manifest.

    Shards are distilled in `shard_order`; with `max_minutes` (total, across reruns) no new sequence
    is started once the budget is spent, and training uses the complete shards."""
    from tqdm import tqdm

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = data_dir / "manifest.json"
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if manifest["recipe"] != recipe.to_json():
            diff = {k: (manifest["recipe"].get(k), v) for k, v in recipe.to_json().items() if manifest["recipe"].get(k) != v}
            raise ValueError(
                f"--data_dir={data_dir} holds data of another recipe (differs in {diff}); "
                "pass another --data_dir or the same data flags"
            )
    else:
        manifest = {"recipe": recipe.to_json(), "shards": {}, "seconds": 0.0}
    items = build_items(tokenizer, recipe)
    S = recipe.shard_size
    num_shards = (len(items) + S - 1) // S
    done = {int(k) for k in manifest["shards"] if shard_path(data_dir, int(k)).is_file()}
    manifest["shards"] = {k: v for k, v in manifest["shards"].items() if int(k) in done}
    todo_items = [(s * S + j, it) for s in shard_order(items, S) if s not in done
                  for j, it in enumerate(items[s * S:(s + 1) * S])]
    manifest.update(num_items=len(items), num_shards=num_shards)
    budget_s = None if max_minutes is None else max_minutes * 60
    if todo_items and (budget_s is None or manifest["seconds"] < budget_s):
        total_rows = sum(len(it.ids) + (recipe.gen_tokens if it.generate else 0) for _, it in todo_items)
        log(f"distilling {len(todo_items)} sequences ({num_shards - len(done)} shards to go) into {data_dir}")
        bar = tqdm(total=total_rows, desc="distil (rows, gen upper bound)", unit="tok", smoothing=0.05)
        pending: dict[int, dict[int, Sequence]] = {}
        index_map = [g for g, _ in todo_items]
        clock = {"t": time.perf_counter(), "spent": manifest["seconds"]}

        def on_done(local_index: int, seq: Sequence) -> None:
            g = index_map[local_index]
            shard = g // S
            pending.setdefault(shard, {})[g] = seq
            if len(pending[shard]) == len(items[shard * S:(shard + 1) * S]):
                finished = pending.pop(shard)
                seqs = [finished[k] for k in sorted(finished)]
                _save_shard(shard_path(data_dir, shard), seqs)
                manifest["shards"][str(shard)] = {"sequences": len(seqs), "tokens": sum(len(s) for s in seqs)}
                now = time.perf_counter()
                manifest["seconds"] += now - clock["t"]
                clock["t"] = now
                _write_json(manifest_path, manifest)

        def spent() -> float:
            return manifest["seconds"] + (time.perf_counter() - clock["t"])

        stop = (lambda: spent() >= budget_s) if budget_s is not None else None
        Distiller(model, recipe, tokenizer.eos_token_ids, max_batch).run(
            [it for _, it in todo_items], on_done, bar.update, stop)
        bar.close()
        manifest["seconds"] += time.perf_counter() - clock["t"]
        if budget_s is not None and len(manifest["shards"]) < num_shards:
            log(f"data budget ({max_minutes} min) spent: {len(manifest['shards'])} of {num_shards} shards complete")
    manifest["tokens"] = sum(v["tokens"] for v in manifest["shards"].values())
    _write_json(manifest_path, manifest)
    return manifest


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def load_sequences(data_dir: str | os.PathLike, split: str | None = None) -> list[Sequence]:
    data_dir = Path(data_dir)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    seqs = []
    for shard in sorted(int(k) for k in manifest["shards"]):
        for d in torch.load(shard_path(data_dir, shard), weights_only=True):
            if split is None or d["split"] == split:
                seqs.append(Sequence(**d))
    return seqs
