"""Acceptance report and confidence calibration of a trained draft (R-B6, R-D2).

Greedy teacher-forced simulation through the Drafter API itself (`allocate` + `draft`, the code
the engine runs): for each validation sequence the draft is refreshed with the target's features
up to the anchor n (every position of the continuation, from the first generated token on) and
proposes k tokens after t_n; a proposal is accepted while it equals the teacher's greedy token
(exactly what a greedy target verifies). Counted per position: n_i = anchors with at least i
accepted; conditional acceptance alpha_i = n_i / n_{i-1}; mean acceptance length 1 + mean accepted
(the 1 is the bonus/replacement token).

That mean is over *anchors*: every position of the continuation counts once. A decode does not
draft from every position: after a round accepting m tokens the next round drafts from m + 1
positions further on, so easy stretches (long accepts) are crossed in few rounds and hard ones in
many, and the tokens per round of a real decode are lower than the anchor mean (on the shipped MTP
draft's held-out code, 1.98 against 2.23). `decode_acceptance_length` walks each sequence as a
greedy decode would, from its first generated position, anchor -> anchor + m + 1, and reports
tokens per round: the quantity `adaspec generate --json` reports as mean_acceptance_length (its
rounds draft from the positions this walk visits, greedy verify accepts the same m).

Sequential Temperature Scaling (DSpark): with z_k the confidence logits and S_k = 1 when the first
k proposals are all accepted, for k = 1..w pick T_k from a log grid minimising the ECE of
prod_{j<=k} sigmoid(z_j / T_j) against S_k, earlier temperatures fixed. Scaling keeps the order of
each position's scores. It is fitted on half of the validation sequences (even indices) and the
ECE before/after is reported on the other half.
"""

from __future__ import annotations

import math

import torch

from ..drafts.base import DraftBatch
from .distill import Sequence

TEMPERATURE_GRID = [math.exp(x) for x in torch.linspace(math.log(0.2), math.log(5.0), 97).tolist()]


def features(seq: Sequence, draft, teacher_layers: list[int]) -> torch.Tensor:
    caps = draft.capture_layers or (draft.cfg.num_layers - 1,)
    idx = [teacher_layers.index(i) for i in caps]
    return seq.feats[:, idx].float().reshape(len(seq.feats), -1)


@torch.inference_mode()
def simulate(draft, seqs: list[Sequence], teacher_layers: list[int], k: int, max_batch: int = 32):
    """-> list of (sequence index, source, accepted m in 0..k, scores [k] float list) per anchor."""
    records = []
    param = next(draft.parameters())
    dtype, dev = param.dtype, param.device
    for g in range(0, len(seqs), max_batch):
        index = [i for i in range(g, min(g + max_batch, len(seqs))) if len(seqs[i]) - 1 - k >= seqs[i].prompt_len]
        group = [seqs[i] for i in index]
        if not group:
            continue
        draft.allocate(len(group), max(len(s) for s in group) + 8)
        feats = [features(s, draft, teacher_layers).to(device=dev, dtype=dtype) for s in group]
        done = [0] * len(group)  # entries given so far (positions 0..done-1)
        n = [s.prompt_len for s in group]  # anchor: newest token position
        while True:
            active = [b for b, s in enumerate(group) if n[b] <= len(s) - 1 - k]
            if not active:
                break
            hidden = torch.cat([feats[b][done[b]:n[b]] for b in active])
            next_tokens = torch.cat([group[b].tokens[done[b] + 1:n[b] + 1] for b in active]).to(dev)
            out = draft.draft(DraftBatch(
                slots=active, entry_starts=[done[b] for b in active], entry_lens=[n[b] - done[b] for b in active],
                hidden=hidden, next_tokens=next_tokens, num_steps=k,
            ))
            drafted, scores = out.tokens.cpu(), out.scores.cpu()
            for row, b in enumerate(active):
                s = group[b]
                labels = s.topk_ids[n[b]:n[b] + k, 0]
                match = (drafted[row] == labels).long()
                m = int(match.cumprod(0).sum())
                records.append((index[b], s.source, m, scores[row].tolist()))
                done[b] = n[b]
                n[b] += 1
    return records


def acceptance_stats(ms: list[int], k: int) -> dict:
    D = len(ms)
    if D == 0:
        return {"anchors": 0}
    n = [D] + [sum(m >= i for m in ms) for i in range(1, k + 1)]
    cond = [round(n[i] / n[i - 1], 4) if n[i - 1] else 0.0 for i in range(1, k + 1)]
    return {
        "anchors": D,
        "conditional_acceptance": cond,
        "survival": [round(n[i] / D, 4) for i in range(1, k + 1)],
        "mean_acceptance_length": round(1 + sum(ms) / D, 4),
    }


def per_sequence(records) -> list[tuple[str, list[tuple[int, list[float]]]]]:
    """`simulate` records grouped by sequence: (source, [(accepted m, scores)] per anchor, in order)."""
    grouped: dict[int, tuple[str, list]] = {}
    for index, source, m, scores in records:
        grouped.setdefault(index, (source, []))[1].append((m, scores))
    return list(grouped.values())


def decode_acceptance_length(records, k: int) -> dict[str, float]:
    """Tokens per round of a greedy decode over the simulated sequences, per source and "all":
    from each sequence's first anchor, a round accepting m (capped at k) moves the anchor m + 1 on.
    `records` as `simulate` returns them (each sequence's anchors in order)."""
    totals: dict[str, list[int]] = {}
    for source, anchors in per_sequence(records):
        tokens = rounds = n = 0
        while n < len(anchors):
            m = min(anchors[n][0], k)
            tokens, rounds, n = tokens + m + 1, rounds + 1, n + m + 1
        for key in (source, "all"):
            t = totals.setdefault(key, [0, 0])
            t[0] += tokens
            t[1] += rounds
    return {key: round(t / r, 4) for key, (t, r) in sorted(totals.items()) if r}


def acceptance_report(records, k: int) -> tuple[dict, dict[str, dict]]:
    """(overall, by source): `acceptance_stats` of the anchors (m capped at k) plus the decode walk's
    `decode_acceptance_length`, from one set of `simulate` records."""
    ms = [min(m, k) for _, _, m, _ in records]
    by_source: dict[str, list[int]] = {}
    for (_, source, _, _), mk in zip(records, ms):
        by_source.setdefault(source, []).append(mk)
    decode = decode_acceptance_length(records, k)
    overall = {**acceptance_stats(ms, k), "decode_acceptance_length": decode.get("all")}
    return overall, {s: {**acceptance_stats(v, k), "decode_acceptance_length": decode.get(s)}
                     for s, v in sorted(by_source.items())}


def ece(pred: torch.Tensor, label: torch.Tensor, bins: int = 10) -> float:
    """Expected calibration error with equal-width bins."""
    if len(pred) == 0:
        return 0.0
    idx = (pred * bins).long().clamp(max=bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            total += float(sel.sum()) / len(pred) * abs(float(pred[sel].mean()) - float(label[sel].mean()))
    return total


def _logits(scores: torch.Tensor) -> torch.Tensor:
    s = scores.double().clamp(1e-9, 1 - 1e-9)
    return torch.log(s) - torch.log1p(-s)


def position_ece(z: torch.Tensor, survive: torch.Tensor, temps: list[float]) -> list[float]:
    """ECE of the cumulative product at each position. z, survive [A, w]."""
    c = torch.sigmoid(z / torch.tensor(temps, dtype=z.dtype))
    prod = torch.cumprod(c, dim=1)
    return [round(ece(prod[:, k], survive[:, k]), 4) for k in range(z.shape[1])]


def sequential_temperature_scaling(z: torch.Tensor, survive: torch.Tensor) -> list[float]:
    temps: list[float] = []
    prefix = torch.ones(len(z), dtype=z.dtype)
    for k in range(z.shape[1]):
        best_t, best_e = 1.0, float("inf")
        for t in TEMPERATURE_GRID:
            e = ece(prefix * torch.sigmoid(z[:, k] / t), survive[:, k])
            if e < best_e - 1e-12:
                best_t, best_e = t, e
        temps.append(best_t)
        prefix = prefix * torch.sigmoid(z[:, k] / best_t)
    return temps


def evaluate_draft(draft, valid: list[Sequence], teacher_layers: list[int], k: int, log=print) -> dict:
    """Acceptance report (k tokens) and, for DSpark, STS calibration (sets draft.conf_temp)."""
    if not valid:
        log("no validation sequences: acceptance report skipped")
        return {"eval": {"anchors": 0}}
    sim_k = draft.width if draft.kind == "dspark" else k
    if draft.kind == "dspark":
        draft.conf_temp.fill_(1.0)
    # even-indexed sequences fit the calibration, odd ones report it
    records = simulate(draft, valid, teacher_layers, sim_k)
    overall, by_source = acceptance_report(records, k)
    result = {"eval": {"k": k, "method": "greedy teacher-forced simulation on validation sequences",
                       "overall": overall, "by_source": by_source}}
    log(f"acceptance (k={k}): {result['eval']['overall']}")
    if draft.kind == "dspark" and records:
        z = _logits(torch.tensor([sc for _, _, _, sc in records]))
        m_all = torch.tensor([m for _, _, m, _ in records])
        survive = (m_all[:, None] >= torch.arange(1, sim_k + 1)[None, :]).double()
        fit = torch.tensor([i % 2 == 0 for i, _, _, _ in records])
        if fit.all() or not fit.any():  # too few sequences to split: fit and report on all
            fit = torch.ones(len(records), dtype=torch.bool)
            held = fit
        else:
            held = ~fit
        temps = sequential_temperature_scaling(z[fit], survive[fit])
        before = position_ece(z[held], survive[held], [1.0] * sim_k)
        after = position_ece(z[held], survive[held], temps)
        draft.conf_temp.copy_(torch.tensor(temps, dtype=draft.conf_temp.dtype))
        result["calibration"] = {
            "method": "sequential temperature scaling, ECE (10 bins) of the cumulative confidence product",
            "temperatures": [round(t, 4) for t in temps],
            "ece_before": before, "ece_after": after,
            "ece_before_mean": round(sum(before) / len(before), 4),
            "ece_after_mean": round(sum(after) / len(after), 4),
            "fit_anchors": int(fit.sum()), "report_anchors": int(held.sum()),
        }
        log(f"calibration: ECE {result['calibration']['ece_before_mean']} -> {result['calibration']['ece_after_mean']}")
    return result
