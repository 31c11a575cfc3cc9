"""The training loop of `adaspec train-draft` (R-B6): batches, unrolled forwards, checkpoints.

MTP, "training-time test" (NOTES.md: chaining works only when trained for). Level 1 reads the
target's features: row p = fuse(h_p, t_{p+1}) at rotary position p+1, causal over level-1 rows,
and predicts the teacher at p+1. Level j >= 2 feeds the block's own level j-1 output with the real
token t_{p+j} (the draft token, given it was accepted) at position p+j; like `MTPDraft.draft()`
step j it attends to level-1 rows <= p (the refreshed context) and to its own chain's rows of
levels 2..j. Loss per level: CE to the teacher's greedy token + KL to its top-k, weighted
exp(-(j-1)/unroll).

DSpark. Context rows c_p = norm(fc(h_p)); anchors n are sampled per sequence; each anchor's block
[embed(t_n), mask x (w-1)] at positions n..n+w-1 sees context rows < n and its own rows. All
blocks of one sequence go through `DSparkDraft.backbone` as one row group with a block-diagonal
mask (the same layers and heads as `draft()`). The Markov bias and the confidence head are
teacher-forced with the real previous token. Loss 0.1 CE + 0.9 TV + 1.0 BCE (greedy acceptance
label, see losses.py), weighted exp(-(k-1)/w).

Checkpoints (`checkpoint.pt`: weights, optimizer, step, training seconds) are written every
`--ckpt_minutes` and at the end; a rerun resumes from them. Batches are a pure function of
(seed, step), so a resumed run sees the batches an uninterrupted one would have.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import Counter
from pathlib import Path

import torch

from ..drafts.dspark import DSparkDraft
from ..drafts.factory import build_draft, save_draft
from ..drafts.mtp import MTPDraft, attention_train
from .distill import Sequence, load_sequences
from . import losses


# ------------------------------------------------------------------------------- vocabulary
def select_vocab(seqs: list[Sequence], vocab_size: int, n: int, always: set[int] = frozenset()) -> torch.Tensor:
    """d2t: the `n` target tokens the teacher predicts most often (greedy labels), then the most
    frequent input tokens, then the lowest ids; `always` (EOS) is included. Ties break by id."""
    labels = Counter()
    inputs = Counter()
    for s in seqs:
        labels.update(s.topk_ids[:, 0].tolist())
        inputs.update(s.tokens.tolist())
    return vocab_from_counts([labels, inputs], vocab_size, n, always)


def vocab_from_counts(counters: list[Counter], vocab_size: int, n: int, always: set[int] = frozenset()) -> torch.Tensor:
    """d2t: `always` first, then the most frequent ids of each counter in turn, then the lowest ids."""
    n = min(n, vocab_size)
    chosen: list[int] = [t for t in sorted(always) if 0 <= t < vocab_size]
    seen = set(chosen)
    for counter in counters:
        for t, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(chosen) >= n:
                break
            if t not in seen:
                chosen.append(t), seen.add(t)
    t = 0
    while len(chosen) < n:
        if t not in seen:
            chosen.append(t), seen.add(t)
        t += 1
    return torch.tensor(chosen[:n], dtype=torch.long)


def vocab_coverage(seqs: list[Sequence], d2t: torch.Tensor) -> float:
    inside = set(d2t.tolist())
    labels = [t for s in seqs for t in s.topk_ids[:, 0].tolist()]
    return sum(t in inside for t in labels) / max(1, len(labels))


# ------------------------------------------------------------------------------- batches
class Batches:
    """Deterministic batches: epoch e is a seeded permutation, grouped by length to limit padding."""

    def __init__(self, seqs: list[Sequence], batch_size: int, seed: int):
        self.seqs, self.batch_size, self.seed = seqs, batch_size, seed
        self.per_epoch = max(1, len(seqs) // batch_size)

    def indices(self, step: int) -> list[int]:
        epoch, i = divmod(step, self.per_epoch)
        order = list(range(len(self.seqs)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        chunk = self.batch_size * 16  # sort within chunks of 16 batches by length, then shuffle batches
        batches = []
        for c in range(0, self.per_epoch * self.batch_size, chunk):
            part = sorted(order[c:c + chunk], key=lambda j: len(self.seqs[j]))
            batches += [part[b:b + self.batch_size] for b in range(0, len(part), self.batch_size)]
        batches = [b for b in batches if len(b) == self.batch_size] or batches
        random.Random(f"{self.seed}:{epoch}:b").shuffle(batches)
        return batches[i % len(batches)]


def collate(seqs: list[Sequence], seq_len: int, layer_index: list[int]):
    """Pad sequences (cut to `seq_len` tokens) -> tokens [B, T], feats [B, T-1, F] float32, topk ids/lp
    [B, T-1, k], lengths [B] (tokens)."""
    lens = [min(len(s), seq_len) for s in seqs]
    T = max(lens)
    B = len(seqs)
    k = seqs[0].topk_ids.shape[1]
    F_layers, H = len(layer_index), seqs[0].feats.shape[2]
    tokens = torch.zeros(B, T, dtype=torch.long)
    feats = torch.zeros(B, T - 1, F_layers * H)
    ids = torch.zeros(B, T - 1, k, dtype=torch.long)
    lp = torch.full((B, T - 1, k), -30.0)
    for b, (s, L) in enumerate(zip(seqs, lens)):
        tokens[b, :L] = s.tokens[:L]
        feats[b, :L - 1] = s.feats[:L - 1, layer_index].float().reshape(L - 1, -1)
        ids[b, :L - 1] = s.topk_ids[:L - 1]
        lp[b, :L - 1] = s.topk_lp[:L - 1].float()
    return tokens, feats, ids, lp, torch.tensor(lens)


# ------------------------------------------------------------------------------- MTP
def mtp_levels(draft: MTPDraft, tokens: torch.Tensor, feats: torch.Tensor, unroll: int) -> list[torch.Tensor]:
    """Outputs of the unrolled levels, each [B, T-1, H]; level j row p predicts t_{p+j+1}
    (teacher row p + j). tokens [B, T], feats [B, T-1, H] (target features of rows p)."""
    B, T = tokens.shape
    T1 = T - 1
    dev = tokens.device
    p_idx = torch.arange(T1, device=dev)
    causal = p_idx[None, :] <= p_idx[:, None]  # [T1, T1]
    diag = torch.eye(T1, dtype=torch.bool, device=dev)
    h, ks, vs, outs = feats, [], [], []
    for j in range(1, unroll + 1):
        nxt = torch.cat([tokens[:, j:], torch.zeros(B, j - 1, dtype=torch.long, device=dev)], dim=1)[:, :T1]
        x = draft.fuse(h, nxt)  # row p: (h, t_{p+j}) at position p + j
        pos = (p_idx + j)[None, :].expand(B, -1)
        cos, sin = draft.rotary(pos.reshape(-1), x.dtype)
        cos, sin = cos.view(B, T1, 1, -1), sin.view(B, T1, 1, -1)
        # level-1 rows <= p (the refreshed context), then this chain's rows of levels 2..j
        mask = torch.cat([causal] + [diag] * (j - 1), dim=1)[None, None]
        extra_k = torch.cat(ks, dim=2) if ks else None
        extra_v = torch.cat(vs, dim=2) if vs else None
        o, k, v = attention_train(draft.layer, x, cos, sin, extra_k, extra_v, mask)
        ks.append(k), vs.append(v), outs.append(o)
        h = o
    return outs


def mtp_forward(draft: MTPDraft, tokens, feats, ids, lp, lens, unroll: int):
    """Unrolled MTP training loss (scalar) and stats."""
    T1 = tokens.shape[1] - 1
    p_idx = torch.arange(T1, device=tokens.device)
    total, weight_sum, stats = 0.0, 0.0, {}
    for j, o in enumerate(mtp_levels(draft, tokens, feats, unroll), start=1):
        valid = (p_idx[None, :] + j) <= (lens[:, None] - 2)  # teacher row p + j exists
        rows = valid.nonzero(as_tuple=True)
        if not rows[0].numel():
            continue
        d_ids, p, label = losses.teacher_targets(ids[rows[0], rows[1] + j], lp[rows[0], rows[1] + j], draft.vocab.t2d)
        per_row, st = losses.mtp_loss(draft.head_logits(o[rows]), d_ids, p, label)
        w = math.exp(-(j - 1) / float(unroll))
        total = total + w * per_row.mean()
        weight_sum += w
        stats[f"acc{j}"] = float(st["acc"].mean())
        if j == 1:
            stats["ce1"], stats["kl1"] = float(st["ce"].mean()), float(st["kl"].mean())
    return total / max(weight_sum, 1e-6), stats


# ------------------------------------------------------------------------------- DSpark
def dspark_blocks(draft: DSparkDraft, tokens: torch.Tensor, feats: torch.Tensor, n: torch.Tensor):
    """Blocks at anchors n [B, A] (newest-token positions) of sequences tokens [B, T] with context
    features feats [B, T-1, F] -> (h, U) [B, A*w, H] / [B, A*w, N]; row (a, k) is at position n_a + k."""
    B, T = tokens.shape
    T1, A, w = T - 1, n.shape[1], draft.width
    dev = tokens.device
    c = draft.context(feats)  # [B, T1, H]
    ctx_pos = torch.arange(T1, device=dev)[None, :].expand(B, -1)
    cos, sin = draft.rotary(ctx_pos.reshape(-1), c.dtype)
    cos, sin = cos.view(B, T1, 1, -1), sin.view(B, T1, 1, -1)
    ctx_k, ctx_v = [], []
    for layer in draft.layers:
        k, v = layer.context_kv(c, cos, sin)  # [B, T1, KVH, D]
        ctx_k.append(k.transpose(1, 2)), ctx_v.append(v.transpose(1, 2))
    newest = tokens.gather(1, n)  # t_n [B, A]
    last_c = None
    if draft.direct is not None:  # context row n-1 of each anchor (the newest refreshed row)
        last_c = c.gather(1, (n - 1).clamp(min=0)[:, :, None].expand(-1, -1, c.shape[-1])).reshape(B * A, -1)
    x = draft.block_inputs(newest.reshape(-1), c.dtype, last_c).view(B, A * w, -1)
    positions = (n[:, :, None] + torch.arange(w, device=dev)).reshape(B, A * w)
    # each block sees the context before its own anchor and its own rows only
    ctx_ok = torch.arange(T1, device=dev)[None, None, :] < n[:, :, None]  # [B, A, T1]
    ctx_ok = ctx_ok[:, :, None, :].expand(B, A, w, T1).reshape(B, A * w, T1)
    blk = torch.arange(A, device=dev).repeat_interleave(w)
    own = (blk[:, None] == blk[None, :])[None].expand(B, -1, -1)
    mask = torch.cat([ctx_ok, own], dim=2)[:, None]
    h, U = draft.backbone(x, positions, ctx_k, ctx_v, mask)
    return h, U, positions


def dspark_forward(draft: DSparkDraft, tokens, feats, ids, lp, lens, anchor_frac: float, gen: torch.Generator):
    B, T = tokens.shape
    w = draft.width
    dev = tokens.device
    # anchors n in [1, len-2] per sequence (row 1 needs the teacher row n)
    anchors = []
    for b in range(B):
        cand = torch.arange(1, int(lens[b]) - 1)
        m = max(1, math.ceil(anchor_frac * len(cand))) if len(cand) else 0
        anchors.append(cand[torch.randperm(len(cand), generator=gen)[:m]].sort().values if m else cand)
    A = max(1, max(len(a) for a in anchors))
    n = torch.ones(B, A, dtype=torch.long)
    real = torch.zeros(B, A, dtype=torch.bool)
    for b, a in enumerate(anchors):
        n[b, :len(a)], real[b, :len(a)] = a, True
    n, real = n.to(dev), real.to(dev)
    h, U, positions = dspark_blocks(draft, tokens, feats, n)
    # row k (at position n + k - 1): previous token x_{k-1} = t_{n+k-1}, teacher row n + k - 1
    prev = draft.vocab.t2d[tokens.gather(1, positions.clamp(max=T - 1))]
    valid = real.repeat_interleave(w, dim=1) & (positions <= (lens[:, None] - 2))
    rows = valid.nonzero(as_tuple=True)
    m = draft.markov(prev[rows])
    logits = draft.step_logits(U[rows], m)
    z = draft.conf_logit(h[rows], m)
    d_ids, p, label = losses.teacher_targets(ids[rows[0], positions[rows]], lp[rows[0], positions[rows]], draft.vocab.t2d)
    per_row, st = losses.dspark_loss(logits, z, d_ids, p, label)
    k_of_row = torch.arange(w, device=dev).repeat(A)[None, :].expand(B, -1)[rows]
    loss = losses.weighted_mean(per_row, losses.position_weights(w, float(w), dev)[k_of_row])
    stats = {"ce": float(st["ce"].mean()), "tv": float(st["tv"].mean()), "bce": float(st["bce"].mean())}
    for k in (0, 1, 4):
        sel = k_of_row == k
        if sel.any():
            stats[f"acc{k + 1}"] = float(st["acc"][sel].mean())
    return loss, stats


# ------------------------------------------------------------------------------- loop
def _arch(args) -> dict:
    if args.kind == "mtp":
        return {}
    return {"width": args.width, "num_layers": args.layers, "rank": args.rank}


def train(args, target, cfg, recipe, data_dir: Path, checkpoint: Path, log=print):
    """Train (or resume) a draft; returns (draft, training stats). The draft is bound to `target`."""
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    train_seqs = load_sequences(data_dir, "train")
    if not train_seqs:
        raise SystemExit(f"{data_dir} holds no training sequences; raise --num_prompts / --raw_tokens")
    layers = list(recipe.teacher_layers)
    state = torch.load(checkpoint, weights_only=False) if checkpoint.is_file() else None
    if state is not None:
        if state["kind"] != args.kind or state["arch"] != _arch(args):
            raise SystemExit(
                f"{checkpoint} belongs to another run ({state['kind']} {state['arch']}); pass another --checkpoint or --output"
            )
        d2t = state["d2t"]
    else:
        d2t = select_vocab(train_seqs, cfg.vocab_size, args.draft_vocab, set(cfg.eos_token_ids))
    draft = build_draft(args.kind, cfg, d2t, **_arch(args))
    draft.init_from_target(target)
    if args.kind == "mtp":
        layer_index = [layers.index(cfg.num_layers - 1)]
    else:
        layer_index = [layers.index(i) for i in draft.capture_layers]
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    step, seconds, tokens_seen = 0, 0.0, 0
    if state is not None:
        draft.load_state_dict(state["model"], strict=False)
        opt.load_state_dict(state["optim"])
        step, seconds, tokens_seen = state["step"], state["seconds"], state["tokens_seen"]
        log(f"resuming from {checkpoint} at step {step} ({seconds / 60:.1f} min trained)")
    n_params = sum(p.numel() for p in params)
    log(f"{args.kind}: {n_params / 1e6:.2f}M trainable parameters, draft vocabulary {len(d2t)} "
        f"(covers {vocab_coverage(train_seqs[:300], d2t):.1%} of greedy labels), {len(train_seqs)} training sequences, "
        f"{sum(len(s) for s in train_seqs)} tokens")
    batches = Batches(train_seqs, args.batch_size, args.seed)
    budget = args.max_minutes * 60
    warmup = min(30, max(1, args.steps // 10))

    def save_ckpt():
        tmp = checkpoint.with_suffix(".tmp")
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"kind": args.kind, "arch": _arch(args), "d2t": d2t, "model": draft.state_dict(),
                    "optim": opt.state_dict(), "step": step, "seconds": seconds, "tokens_seen": tokens_seen}, tmp)
        os.replace(tmp, checkpoint)

    draft.train()
    bar = tqdm(total=args.steps, initial=step, desc=f"train {args.kind}", unit="step")
    last_ckpt = time.perf_counter()
    ema: dict[str, float] = {}
    ran = False
    while step < args.steps and seconds < budget:
        ran = True
        t0 = time.perf_counter()
        seqs = [train_seqs[i] for i in batches.indices(step)]
        tokens, feats, ids, lp, lens = collate(seqs, args.seq_len, layer_index)
        lr = losses.cosine_lr(args.lr, max(step / args.steps, seconds / budget), step, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        if args.kind == "mtp":
            loss, stats = mtp_forward(draft, tokens, feats, ids, lp, lens, args.unroll)
        else:
            gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
            loss, stats = dspark_forward(draft, tokens, feats, ids, lp, lens, args.anchor_frac, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        tokens_seen += int(lens.sum())
        seconds += time.perf_counter() - t0
        stats["loss"] = float(loss.detach())
        for key, val in stats.items():
            ema[key] = val if key not in ema else 0.95 * ema[key] + 0.05 * val
        bar.update(1)
        bar.set_postfix({k: f"{v:.3f}" for k, v in ema.items()} | {"lr": f"{lr:.1e}"}, refresh=False)
        if step % 25 == 0:
            log(f"step {step} {seconds / 60:.1f} min " + " ".join(f"{k}={v:.3f}" for k, v in ema.items()))
        if time.perf_counter() - last_ckpt > args.ckpt_minutes * 60:
            save_ckpt()
            last_ckpt = time.perf_counter()
    bar.close()
    if ran or state is None:
        save_ckpt()
    draft.eval()
    stats = {"steps": step, "minutes": round(seconds / 60, 2), "tokens_seen": tokens_seen,
             "trainable_parameters": n_params, "draft_vocab": len(d2t),
             "label_coverage": round(vocab_coverage(train_seqs, d2t), 4),
             "final": {k: round(v, 4) for k, v in ema.items()}}
    return draft, stats


# paths (where, not how) and the command line's own bookkeeping (cli.main: the subcommand, the flags given)
NOT_RECIPE = ("output", "data_dir", "checkpoint", "command", "explicit_flags")


def recipe_command(args) -> str:
    """The train-draft command that reproduces a draft, from its parsed flags (stored in config.json)."""
    def flag_value(v) -> str:  # lists (--curve_points) as the parser reads them
        return ",".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)

    return "adaspec train-draft " + " ".join(f"--{k}={flag_value(v)}" for k, v in sorted(vars(args).items())
                                             if v is not None and k not in NOT_RECIPE)


def train_and_report(args, target, cfg, fingerprint: str, recipe, data_dir: Path, output: Path) -> dict:
    from .evaluate import evaluate_draft

    checkpoint = Path(args.checkpoint) if args.checkpoint else output / "checkpoint.pt"
    log = lambda m: print(f"[train-draft] {m}", flush=True)  # noqa: E731
    draft, stats = train(args, target, cfg, recipe, data_dir, checkpoint, log)
    valid = load_sequences(data_dir, "valid")
    evaluation = evaluate_draft(draft, valid, list(recipe.teacher_layers), args.eval_k, log)
    recipe_json = {"command": recipe_command(args), "data": recipe.to_json()}
    report = {"kind": args.kind, "target_fingerprint": fingerprint, "training": stats, **evaluation}
    save_draft(draft, output, fingerprint, recipe=recipe_json, report=report)
    log(f"saved the draft to {output}")
    return report
