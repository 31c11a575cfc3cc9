"""Self-distilled answers, stored as token ids only (issue 11).

The target (in the teacher dtype) answers several thousand training prompts greedily: chat prompts
from `chat_topics.py`, human-eval's training prompts, and standard-library and Shakespeare passages
to continue. Only the tokens are kept; the streaming trainer recomputes the teacher signals. Items
are in a seeded order that mixes the sources, written in chunks (`gen_00000.pt`, ...) with a
manifest (`gen_manifest.json`: recipe, chunks done, seconds spent), so an interrupted run continues
and a `--gen_minutes` budget keeps a usable prefix. Every `valid_every`-th item is the validation
split (STS calibration and the trainer's report), never trained on.

`heldout_eval_set` makes the learning curve's data: the float32 target's greedy continuations of
held-out prompts (human-eval's held-out tasks, held-out stdlib files, the held-out chat split,
held-out plays) with their float32 teacher signals, as `distill.Sequence` objects.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import corpus
from .chat_topics import chat_prompts
from .distill import DataRecipe, Distiller, Item, Sequence, _write_json, prompt_ids


@dataclass(frozen=True)
class GenRecipe:
    fingerprint: str
    chat_prompts: int = 4000
    code_prompts: int = 1400  # human-eval train prompts, then standard-library passages
    prose_prompts: int = 400
    prompt_tokens: int = 192
    gen_tokens: int = 256
    valid_every: int = 25
    teacher_dtype: str = "bfloat16"
    seed: int = 0
    chunk: int = 384

    def to_json(self) -> dict:
        return asdict(self)


def gen_items(tokenizer, recipe: GenRecipe) -> list[Item]:
    rng = random.Random(f"gen:{recipe.seed}")
    chars = recipe.prompt_tokens * 4
    he = corpus.humaneval_items("train")
    code_rest = max(0, recipe.code_prompts - len(he))
    groups = [
        [corpus.TextItem("chat", f"topic:{i}", t, True) for i, t in enumerate(chat_prompts(recipe.chat_prompts, recipe.seed))],
        he[: recipe.code_prompts],
        corpus.passages(corpus.stdlib_files("train"), "code", code_rest, chars, recipe.seed, "gen-stdlib"),
        corpus.passages(corpus.shakespeare_files("train"), "prose", recipe.prose_prompts, chars, recipe.seed, "gen-prose"),
    ]
    texts = [t for g in groups for t in g]
    rng.shuffle(texts)
    items = []
    for i, t in enumerate(texts):
        ids = prompt_ids(tokenizer, t, recipe.prompt_tokens)
        if len(ids) >= 2:
            split = "valid" if i % recipe.valid_every == recipe.valid_every - 1 else "train"
            items.append(Item(t.source, t.id, split, ids, True))
    return items


def _distil_recipe(recipe: GenRecipe) -> DataRecipe:
    return DataRecipe(fingerprint=recipe.fingerprint, num_prompts=0, gen_tokens=recipe.gen_tokens,
                      prompt_tokens=recipe.prompt_tokens, raw_tokens=0, raw_len=16, topk=1, teacher_layers=())


def selfdistill(model, tokenizer, recipe: GenRecipe, data_dir: Path, max_minutes: float | None,
                max_batch: int = 64, log=print) -> list[dict]:
    """Generate (or continue) the answers; returns [{source, id, split, prompt_len, tokens}] of the
    chunks done, in item order."""
    from tqdm import tqdm

    data_dir.mkdir(parents=True, exist_ok=True)
    mpath = data_dir / "gen_manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else {"recipe": recipe.to_json(), "chunks": [], "seconds": 0.0}
    if manifest["recipe"] != recipe.to_json():
        raise SystemExit(f"{data_dir} holds self-distilled data of another recipe; pass another --data_dir")
    items = gen_items(tokenizer, recipe)
    n_chunks = (len(items) + recipe.chunk - 1) // recipe.chunk
    todo = [c for c in range(n_chunks) if c not in manifest["chunks"]]
    budget = None if max_minutes is None else max_minutes * 60
    if todo and (budget is None or manifest["seconds"] < budget):
        log(f"self-distilling {len(items)} prompts in {n_chunks} chunks ({len(todo)} to go) into {data_dir}")
        distiller = Distiller(model, _distil_recipe(recipe), tokenizer.eos_token_ids, max_batch)
        bar = tqdm(total=len(todo) * recipe.chunk, desc="self-distil (prompts)", unit="prompt")
        for c in todo:
            if budget is not None and manifest["seconds"] >= budget:
                log(f"generation budget ({max_minutes} min) spent: {len(manifest['chunks'])} of {n_chunks} chunks")
                break
            t0 = time.perf_counter()
            part = items[c * recipe.chunk:(c + 1) * recipe.chunk]
            done: dict[int, dict] = {}

            def on_done(i: int, seq: Sequence) -> None:
                done[i] = {"source": seq.source, "id": seq.id, "split": seq.split, "prompt_len": seq.prompt_len,
                           "tokens": seq.tokens.to(torch.int32)}
                bar.update(1)

            distiller.run(part, on_done)
            torch.save([done[i] for i in sorted(done)], data_dir / f"gen_{c:05d}.pt")
            manifest["chunks"].append(c)
            manifest["seconds"] += time.perf_counter() - t0
            _write_json(mpath, manifest)
        bar.close()
    out = []
    for c in sorted(manifest["chunks"]):
        out += torch.load(data_dir / f"gen_{c:05d}.pt", weights_only=True)
    return out


def heldout_items(tokenizer, prompt_tokens: int = 192, per_source: int = 48) -> list[Item]:
    """Held-out prompts for the learning curve (never read by the trainer): up to `per_source` code
    and chat prompts and a third as many prose passages."""
    items = []
    texts = (corpus.heldout_prompts("code", per_source) + corpus.heldout_prompts("chat", per_source)
             + corpus.heldout_prompts("prose", max(1, per_source // 3)))
    for t in texts:
        items.append(Item(t.source, t.id, "heldout", prompt_ids(tokenizer, t, prompt_tokens), True))
    return items


def heldout_eval_set(model_fp32, tokenizer, fingerprint: str, layers: tuple[int, ...], data_dir: Path,
                     gen_tokens: int = 128, per_source: int = 48, log=print) -> list[Sequence]:
    """Float32 greedy continuations of held-out prompts with their teacher signals (cached)."""
    path = data_dir / "heldout_eval.pt"
    key = {"fingerprint": fingerprint, "layers": list(layers), "gen_tokens": gen_tokens}
    if per_source != 48:
        key["per_source"] = per_source
    if path.is_file():
        saved = torch.load(path, weights_only=False)
        if saved["key"] == key:
            return [Sequence(**d) for d in saved["seqs"]]
    items = heldout_items(tokenizer, per_source=per_source)
    recipe = DataRecipe(fingerprint=fingerprint, num_prompts=0, gen_tokens=gen_tokens, prompt_tokens=192,
                        raw_tokens=0, raw_len=16, topk=32, teacher_layers=tuple(layers))
    seqs: dict[int, Sequence] = {}
    t0 = time.perf_counter()
    Distiller(model_fp32, recipe, tokenizer.eos_token_ids, 48).run(items, lambda i, s: seqs.__setitem__(i, s))
    out = [seqs[i] for i in sorted(seqs)]
    log(f"held-out eval set: {len(out)} sequences, {sum(len(s) - s.prompt_len for s in out)} continuation tokens "
        f"({time.perf_counter() - t0:.0f} s, float32)")
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "seqs": [vars(s) for s in out]}, tmp)
    tmp.replace(path)
    return out
