"""Streaming training of the MTP and DSpark drafts together, from one teacher pass per step (issue 11).

`adaspec train-draft --kind=both --data=stream`. Each step:
1. the sampler takes a batch of token windows: about `gen_share` of its tokens from the
   self-distilled answers (re-read from `<data_dir>/gen_*.pt` every 50 steps, so training can start
   while generation still runs on the other core), the rest from the raw code/prose windows, each
   in a fixed seeded order; positions are counted once per window on its first visit;
2. the target (teacher dtype, stream.Teacher) reads the batch in prefill mode;
3. every student (MTP: unrolled training-time test; DSpark: blocks at sampled anchors; the losses
   of trainer.py) takes an AdamW step on the same teacher signals.

Learning curve: at `curve_points` (distinct positions seen) both drafts are evaluated on a held-out
set (the float32 target's greedy continuations of held-out prompts, selfdistill.heldout_eval_set;
float32 features, as serving feeds them): per-position conditional acceptance, mean acceptance
length over anchors, and the tokens per round of a greedy decode (`decode_acceptance_length`,
evaluate.py: what the engine reports) per source. The points go to `<output>/curve.json` and the
checkpoint; the drafts are saved to their output directories at each point (DSpark after STS
calibration on the validation split), so an interrupted run leaves usable drafts. The checkpoint (`--checkpoint`, outside the package)
holds both students, their optimizers, the sampler's pointers and the curve; rerunning resumes.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path

import torch

from ..drafts.factory import build_draft, save_draft
from ..outputs import replace_file
from . import losses
from .distill import Sequence
from .evaluate import acceptance_report, evaluate_draft, simulate
from .sampler import Sampler
from .trainer import dspark_forward, mtp_forward, recipe_command, vocab_from_counts

CURVE_POINTS = (0, 100_000, 250_000, 500_000, 1_000_000, 1_500_000, 2_000_000, 3_000_000, 4_000_000,
                5_000_000, 6_000_000, 8_000_000, 10_000_000)


def token_vocab(windows: list, vocab_size: int, n: int, always: set[int]) -> torch.Tensor:
    """d2t from token frequencies of the training windows (the target's greedy labels of natural
    text are mostly its next tokens); EOS included; ties by id."""
    counts = Counter()
    for _, w in windows:
        counts.update(w.tolist())
    return vocab_from_counts([counts], vocab_size, n, always)


def teacher_forced(teacher, rows: list[dict], layers) -> list[Sequence]:
    """Validation sequences with teacher signals from `teacher` (the float32 target)."""
    out = []
    for g in range(0, len(rows), 8):
        part = rows[g:g + 8]
        tokens, feats, ids, lp, lens = teacher([r["tokens"] for r in part])
        H = feats.shape[-1] // len(layers)
        for b, r in enumerate(part):
            L = int(lens[b])
            out.append(Sequence(r["source"], r["id"], "valid", int(r["prompt_len"]), tokens[b, :L].cpu(),
                                feats[b, :L - 1].view(L - 1, len(layers), H).half().cpu(), ids[b, :L - 1].cpu(),
                                lp[b, :L - 1].half().cpu()))
    return out


def curve_point(draft, seqs: list[Sequence], layers: list[int], k: int) -> dict:
    sim_k = draft.width if draft.kind == "dspark" else k
    return acceptance_report(simulate(draft, seqs, layers, sim_k), k)[1]


class Student:
    def __init__(self, kind: str, cfg, d2t, arch: dict, target, layers: list[int], lr: float):
        self.kind = kind
        self.device = next(target.parameters()).device
        self.draft = build_draft(kind, cfg, d2t, **arch).to(self.device).init_from_target(target)
        caps = self.draft.capture_layers if kind == "dspark" else (cfg.num_layers - 1,)
        H = cfg.hidden_size
        self.cols = torch.cat([torch.arange(layers.index(i) * H, (layers.index(i) + 1) * H) for i in caps]).to(self.device)
        self.params = [p for p in self.draft.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
        self.ema: dict[str, float] = {}

    def step(self, batch, lr: float, args, step: int) -> None:
        tokens, feats, ids, lp, lens = batch
        f = feats.index_select(-1, self.cols)
        for g in self.opt.param_groups:
            g["lr"] = lr
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=args.student_bf16):
            if self.kind == "mtp":
                loss, stats = mtp_forward(self.draft, tokens, f, ids, lp, lens, args.unroll)
            else:
                gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
                loss, stats = dspark_forward(self.draft, tokens, f, ids, lp, lens, args.anchor_frac, gen)
        self.opt.zero_grad(set_to_none=True)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        stats["loss"] = float(loss.detach())
        for key, val in stats.items():
            self.ema[key] = val if key not in self.ema else 0.95 * self.ema[key] + 0.05 * val


def _arch(kind: str, args) -> dict:
    if kind == "mtp":
        return {}
    return {"width": args.width, "num_layers": args.layers, "rank": args.rank, "direct_input": True}


def train_joint(args, model_dir: Path, tokenizer, cfg, fingerprint: str, outputs: dict, log=print) -> dict:
    """Train both drafts (resumable); returns the report. `outputs`: kind -> output directory."""
    from tqdm import tqdm

    from ..drafts.dspark import default_capture_layers
    from ..models.loader import load_model
    from .selfdistill import heldout_eval_set
    from .stream import StreamRecipe, Teacher, load_or_build_windows

    data_dir, checkpoint = Path(args.data_dir), Path(args.checkpoint)
    layers = sorted(set(default_capture_layers(cfg.num_layers)) | {cfg.num_layers - 1})
    recipe = StreamRecipe(fingerprint, seq_len=args.seq_len, code_tokens=args.code_tokens,
                          prose_tokens=args.prose_tokens, topk=args.topk, teacher_layers=tuple(layers), seed=args.seed)
    t_start = time.perf_counter()
    wall_end = None if args.wall_minutes is None else t_start + args.wall_minutes * 60
    _, target = load_model(model_dir, torch.float32, args.device)  # students' shared weights, evaluation
    _, tmodel = load_model(model_dir, torch.bfloat16, args.device, linear_backend="bf16")
    teacher = Teacher(tmodel, args.topk, tuple(layers), 64, max(args.seq_len, 512))
    raw = load_or_build_windows(tokenizer, recipe, data_dir, [], log)
    heldout = heldout_eval_set(target, tokenizer, fingerprint, tuple(layers), data_dir, gen_tokens=min(128, args.gen_tokens),
                               per_source=args.curve_prompts, log=log)
    sampler = Sampler(raw, data_dir, args.batch_tokens, args.gen_share, args.gen_repeats)
    sampler.reload()
    state = torch.load(checkpoint, weights_only=False, map_location=args.device) if checkpoint.is_file() else None
    d2t = state["d2t"] if state else token_vocab(raw[:4000] + [("gen", t) for t in sampler.gen],
                                                  cfg.vocab_size, args.draft_vocab, set(cfg.eos_token_ids))
    students = {k: Student(k, cfg, d2t, _arch(k, args), target, layers, args.lr) for k in ("mtp", "dspark")}
    step, positions, seconds, curve = 0, 0, 0.0, []
    if state:
        for k, st in students.items():
            missing, unexpected = st.draft.load_state_dict(state["students"][k]["model"], strict=False)
            if missing or unexpected:
                raise SystemExit(f"{checkpoint}: the {k} student does not fit this architecture (missing {missing[:3]}, "
                                 f"unexpected {unexpected[:3]}); pass another --checkpoint")
            st.opt.load_state_dict(state["students"][k]["optim"])
        step, positions, seconds, curve = state["step"], state["positions"], state["seconds"], state["curve"]
        if state["recipe"] != recipe.to_json():
            raise SystemExit(f"{checkpoint} was trained on another data recipe ({state['recipe']}); pass another "
                             "--checkpoint or the same data flags")
        sampler.restore(state)
        log(f"resuming from {checkpoint} at step {step}, {positions} positions, {seconds / 60:.1f} min")
    tf32 = Teacher(target, args.topk, tuple(layers), 8, 512)

    def save_ckpt():
        tmp = checkpoint.with_suffix(".tmp")
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"d2t": d2t, "recipe": recipe.to_json(), "step": step, "positions": positions, "seconds": seconds,
                    "curve": curve, **sampler.state(),
                    "students": {k: {"model": s.draft.state_dict(), "optim": s.opt.state_dict()} for k, s in students.items()}},
                   tmp)
        os.replace(tmp, checkpoint)

    eval_seconds = 0.0  # the last evaluation's duration: the wall budget keeps that much for the final one

    def evaluate_and_save(final: bool = False):
        nonlocal eval_seconds
        t_eval = time.perf_counter()
        point = {"positions": positions, "step": step, "minutes": round(seconds / 60, 2)}
        valid = teacher_forced(tf32, sampler.valid[:96], layers)
        for k, s in students.items():
            s.draft.eval()
            report = evaluate_draft(s.draft, valid, layers, args.eval_k, log=lambda m: None)  # STS for DSpark
            point[k] = {"heldout": curve_point(s.draft, heldout, layers, args.eval_k),
                        "valid": report["eval"].get("overall")}
            if "calibration" in report:
                point[k]["calibration"] = report["calibration"]
            recipe_json = {"command": recipe_command(args), "data": recipe.to_json()}
            save_draft(s.draft, outputs[k], fingerprint, recipe=recipe_json,
                       report={"kind": k, "target_fingerprint": fingerprint, "curve_point": point[k],
                               "training": {"steps": step, "positions": positions, "minutes": round(seconds / 60, 2)}})
            s.draft.train()
        curve.append(point)
        summary = " ".join(f"{k} " + "/".join(f"{v['mean_acceptance_length']:.2f}" for v in point[k]["heldout"].values())
                           + " (decode " + "/".join(f"{v['decode_acceptance_length']:.2f}" for v in point[k]["heldout"].values())
                           + ")" for k in students)
        log(f"curve @ {positions} positions: held-out mean acceptance length over anchors "
            f"({'/'.join(point['mtp']['heldout'])}) {summary}")
        for k in students:
            replace_file(outputs[k] / "curve.json", (json.dumps(curve, indent=1) + "\n").encode())
        save_ckpt()
        eval_seconds = time.perf_counter() - t_eval

    next_points = [p for p in (args.curve_points or CURVE_POINTS) if p > positions] + [math.inf]
    if not curve:
        evaluate_and_save()
    budget, target_pos = args.max_minutes * 60, args.positions
    bar = tqdm(total=target_pos, initial=min(positions, target_pos), desc="train mtp+dspark", unit="pos", unit_scale=True)
    last_ckpt = loop_start = time.perf_counter()
    for st in students.values():
        st.draft.train()

    def wall_left() -> float:
        """Seconds the loop may still train: to the wall budget's end, less the final evaluation."""
        return math.inf if wall_end is None else wall_end - 1.5 * eval_seconds - 5 - time.perf_counter()

    while positions < target_pos and seconds < budget and step < args.steps and wall_left() > 0:
        t0 = time.perf_counter()
        if step % 50 == 0:
            sampler.reload()
        windows, new = sampler.next()
        batch = teacher(windows)
        progress = max(positions / target_pos, seconds / budget)
        if wall_end is not None:  # the wall budget's share already used by the loop
            progress = max(progress, (t0 - loop_start) / max(1.0, t0 - loop_start + wall_left()))
        lr = losses.cosine_lr(args.lr, progress, step, 50)
        for s in students.values():
            s.step(batch, lr, args, step)
        step += 1
        positions += new
        seconds += time.perf_counter() - t0
        bar.update(min(new, max(0, target_pos - bar.n)))
        if step % 25 == 0:
            log(f"step {step} {positions} pos {seconds / 60:.1f} min gen {len(sampler.gen)} seqs | " + " | ".join(
                f"{k} " + " ".join(f"{a}={v:.3f}" for a, v in s.ema.items()) for k, s in students.items()))
        if positions >= next_points[0]:
            while positions >= next_points[0]:
                next_points.pop(0)
            evaluate_and_save()
            last_ckpt = time.perf_counter()
        elif time.perf_counter() - last_ckpt > args.ckpt_minutes * 60:
            save_ckpt()
            last_ckpt = time.perf_counter()
    bar.close()
    if wall_end is not None and wall_left() <= 0:
        log(f"wall budget ({args.wall_minutes} min) reached at step {step}, {positions} positions")
    if not curve or curve[-1]["positions"] != positions:
        evaluate_and_save(final=True)
    return {"curve": curve, "windows": {"raw": len(raw), "gen": len(sampler.gen), "valid": len(sampler.valid)}}
