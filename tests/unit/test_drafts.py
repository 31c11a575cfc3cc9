"""MTP and DSpark drafts behind the Drafter protocol (R-B1, R-B4, R-D2, R-B6).

Every test runs on the tiny random target of `tests/conftest.py` with randomised draft weights, so
what is pinned is the contract (drafts/base.py), not the quality of a trained draft:
- shapes/dtypes of DraftOutput, scores in [0, 1] (R-D2: MTP's score is the draft probability of
  the selected token, DSpark's the calibrated confidence), determinism (the draft is greedy, R-B4);
- refresh consistency: entries fed over several rounds, with proposals written into the draft's
  cache in between and later overwritten by the refresh, give the same proposal as all entries fed
  at once into a fresh cache;
- a w=7 DSpark draft asked for 5 tokens proposes the first 5 of its 7 (R-B1); num_steps=0 only
  refreshes;
- what training computes is what `draft()` serves (train/serve parity);
- save/load round trip; a draft made for another target is refused with a clear error.
"""

from __future__ import annotations

import pytest
import torch

from adaspec.drafts.base import DraftBatch
from adaspec.drafts.factory import DraftLoadError, build_draft, load_drafter, save_draft
from adaspec.models.attention import build_layout
from adaspec.models.loader import load_model, weights_fingerprint
from adaspec.runner.kv_cache import KVCache

KINDS = ["mtp", "dspark"]


@pytest.fixture(scope="module")
def target(tiny_llama_dir):
    cfg, model = load_model(tiny_llama_dir, torch.float32, "cpu")
    return cfg, model, weights_fingerprint(tiny_llama_dir)


def make_draft(kind, cfg, model, width=7, seed=0, direct_input=True):
    """DSpark drafts have the direct input of the newest context row (issue 11) unless told not."""
    g = torch.Generator().manual_seed(seed)
    d2t = torch.randperm(cfg.vocab_size, generator=g)[:96]
    draft = build_draft(kind, cfg, d2t, width=width, num_layers=2, rank=16,
                        direct_input=direct_input).init_from_target(model)
    with torch.no_grad():  # random weights large enough that proposals depend on the context
        for name, p in draft.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "norm" not in name else 0.1) + (1.0 if "norm" in name else 0.0))
        if kind == "dspark":
            draft.conf_temp.copy_(torch.linspace(0.8, 1.5, draft.width))
    return draft.eval().requires_grad_(False)


def sequences(cfg, model, lengths, seed=1):
    """Random token sequences and the target's features h_p (the draft's capture layers)."""
    g = torch.Generator().manual_seed(seed)
    toks = [torch.randint(3, cfg.vocab_size, (n,), generator=g) for n in lengths]
    kv = KVCache(cfg.num_layers, len(lengths), cfg.num_kv_heads, max(lengths) + 4, cfg.head_dim, torch.float32)
    layout = build_layout(list(range(len(lengths))), [0] * len(lengths), list(lengths))
    hidden, captured = model(torch.cat(toks), layout, kv, tuple(range(cfg.num_layers)))
    return toks, hidden, captured


def features(draft, hidden, captured):
    if draft.capture_layers:
        return torch.cat([captured[i] for i in draft.capture_layers], dim=-1)
    return hidden


def batch(toks, feats, slots, starts, ends, k):
    """Entries p in [starts[b], ends[b]) of request b: (p, h_p, t_{p+1})."""
    offs = [0]
    for t in toks:
        offs.append(offs[-1] + len(t))
    hidden = torch.cat([feats[offs[b] + s:offs[b] + e] for b, (s, e) in enumerate(zip(starts, ends))])
    nxt = torch.cat([toks[b][s + 1:e + 1] for b, (s, e) in enumerate(zip(starts, ends))])
    return DraftBatch(slots, list(starts), [e - s for s, e in zip(starts, ends)], hidden, nxt, k)


@pytest.mark.parametrize("kind", KINDS)
def test_output_shapes_scores_and_determinism(kind, target):
    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [9, 14, 6])
    outs = []
    for _ in range(2):
        draft = make_draft(kind, cfg, model)
        draft.allocate(4, 32)
        feats = features(draft, hidden, captured)
        outs.append(draft.draft(batch(toks, feats, [3, 0, 1], [0, 0, 0], [8, 13, 5], 5)))
    out = outs[0]
    assert out.tokens.shape == (3, 5) and out.tokens.dtype == torch.int64
    assert out.scores.shape == (3, 5) and out.scores.dtype == torch.float32
    assert ((out.scores >= 0) & (out.scores <= 1)).all()
    assert set(out.tokens.flatten().tolist()) <= set(draft.vocab.d2t.tolist())
    assert torch.equal(outs[0].tokens, outs[1].tokens) and torch.equal(outs[0].scores, outs[1].scores)


@pytest.mark.parametrize("kind", KINDS)
def test_refresh_in_rounds_equals_refresh_at_once(kind, target):
    cfg, model, _ = target
    lengths = [23, 17]
    toks, hidden, captured = sequences(cfg, model, lengths)
    draft = make_draft(kind, cfg, model)
    feats = features(draft, hidden, captured)
    slots = [2, 0]
    final_ends = [n - 1 for n in lengths]  # the newest token is the last one of each sequence
    # incremental: rounds of different sizes; proposals write draft rows past the committed
    # context, which the next round's refresh overwrites; a refresh-only round in the middle
    draft.allocate(3, 40)
    cuts = [[0, 5, 9, 14, final_ends[0]], [0, 3, 4, 11, final_ends[1]]]
    steps = [5, 0, 3, 5]
    for r, k in enumerate(steps):
        out_inc = draft.draft(batch(toks, feats, slots, [c[r] for c in cuts], [c[r + 1] for c in cuts], k))
        assert out_inc.tokens.shape == (2, k)
    # at once, into a fresh cache (a fresh copy of the same weights)
    fresh = make_draft(kind, cfg, model)
    fresh.allocate(3, 40)
    out_all = fresh.draft(batch(toks, feats, slots, [0, 0], final_ends, 5))
    assert torch.equal(out_inc.tokens, out_all.tokens)
    torch.testing.assert_close(out_inc.scores, out_all.scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_num_steps_zero_only_refreshes(kind, target):
    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [12])
    draft = make_draft(kind, cfg, model)
    feats = features(draft, hidden, captured)
    draft.allocate(1, 24)
    out = draft.draft(batch(toks, feats, [0], [0], [7], 0))
    assert out.tokens.shape == (1, 0) and out.scores.shape == (1, 0)
    after = draft.draft(batch(toks, feats, [0], [7], [11], 4))
    fresh = make_draft(kind, cfg, model)
    fresh.allocate(1, 24)
    ref = fresh.draft(batch(toks, feats, [0], [0], [11], 4))
    assert torch.equal(after.tokens, ref.tokens)


def test_dspark_width7_proposing_5_is_the_prefix_of_7(target):
    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [15, 10])
    outs = {}
    for k in (5, 7):
        draft = make_draft("dspark", cfg, model, width=7)
        draft.allocate(2, 32)
        outs[k] = draft.draft(batch(toks, features(draft, hidden, captured), [0, 1], [0, 0], [14, 9], k))
    assert torch.equal(outs[5].tokens, outs[7].tokens[:, :5])
    assert torch.equal(outs[5].scores, outs[7].scores[:, :5])
    with pytest.raises(ValueError, match="proposes 0..7"):
        draft.draft(batch(toks, features(draft, hidden, captured), [0, 1], [14, 9], [14, 9], 8))


def test_mtp_training_levels_match_draft_steps(target):
    """Train/serve parity: the unrolled training levels compute what draft() step 1 and 2 compute."""
    from adaspec.training.trainer import mtp_levels

    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [13])
    draft = make_draft("mtp", cfg, model)
    draft.allocate(1, 32)
    n = 11  # newest token t_11; entries 0..10
    out = draft.draft(batch(toks, hidden, [0], [0], [n], 2))
    seq = toks[0].clone()
    seq[n + 1] = out.tokens[0, 0]  # level 2 is fed the real token = the accepted step-1 draft
    levels = mtp_levels(draft, seq[None, :n + 2], hidden[None, :n + 1], 2)
    for j, o in enumerate(levels):
        probs = torch.softmax(draft.head_logits(o[0, n - 1]), dim=-1)
        assert draft.vocab.d2t[probs.argmax()] == out.tokens[0, j]
        torch.testing.assert_close(probs.max(), out.scores[0, j], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("direct_input", [True, False])
def test_dspark_training_blocks_match_draft(target, direct_input):
    """Train/serve parity: packed training blocks give the base logits/confidence draft() uses,
    with and without the direct input of the newest context row (issue 11)."""
    from adaspec.training.trainer import dspark_blocks

    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [16])
    draft = make_draft("dspark", cfg, model, width=5, direct_input=direct_input)
    assert (draft.direct is not None) == direct_input
    feats = features(draft, hidden, captured)
    anchors = [4, 9]
    h, U, _ = dspark_blocks(draft, toks[0][None], feats[None, :15], torch.tensor([anchors]))
    for a, n in enumerate(anchors):
        draft.allocate(1, 24)
        out = draft.draft(batch(toks, feats, [0], [0], [n], 5))
        prev = draft.vocab.t2d[toks[0][n]]
        rows = slice(a * 5, a * 5 + 5)
        for k in range(5):
            m = draft.markov(prev[None])
            best = draft.step_logits(U[0, rows][k:k + 1], m).argmax(-1)
            z = draft.conf_logit(h[0, rows][k:k + 1], m) / draft.conf_temp[k]
            assert draft.vocab.d2t[best] == out.tokens[0, k]
            torch.testing.assert_close(torch.sigmoid(z)[0], out.scores[0, k], rtol=1e-5, atol=1e-6)
            prev = best[0]


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_roundtrip(kind, target, tmp_path):
    cfg, model, fingerprint = target
    draft = make_draft(kind, cfg, model, width=5)
    with torch.no_grad():  # stored in half precision: compare against the same rounding
        for t in draft.state_dict().values():  # what is stored (the head is rebuilt from the target)
            if t.is_floating_point():
                t.copy_(t.half().float())
    save_draft(draft, tmp_path / kind, fingerprint, recipe={"test": True})
    loaded = load_drafter(tmp_path / kind, kind, model, cfg, "cpu", torch.float32, target_fingerprint=fingerprint)
    assert loaded.kind == kind and loaded.max_steps == draft.max_steps
    toks, hidden, captured = sequences(cfg, model, [10])
    feats = features(draft, hidden, captured)
    outs = []
    for d in (draft, loaded):
        d.allocate(1, 16)
        outs.append(d.draft(batch(toks, feats, [0], [0], [9], 5)))
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    torch.testing.assert_close(outs[0].scores, outs[1].scores)
    assert (tmp_path / kind / "model.safetensors").stat().st_size < 2_000_000


def test_wrong_target_is_refused(target, tmp_path, monkeypatch):
    from dataclasses import replace

    import adaspec.drafts.factory as factory

    cfg, model, fingerprint = target
    save_draft(make_draft("mtp", cfg, model), tmp_path / "d", fingerprint)
    with pytest.raises(DraftLoadError, match="another target"):
        load_drafter(tmp_path / "d", "mtp", model, replace(cfg, hidden_size=cfg.hidden_size * 2), target_fingerprint=fingerprint)
    with pytest.raises(DraftLoadError, match="vocab_size"):
        load_drafter(tmp_path / "d", "mtp", model, replace(cfg, vocab_size=cfg.vocab_size + 1))
    with pytest.raises(DraftLoadError, match="other target weights"):
        load_drafter(tmp_path / "d", "mtp", model, cfg, target_fingerprint="hf-sha256:something-else")
    with pytest.raises(DraftLoadError, match="'mtp' draft"):
        load_drafter(tmp_path / "d", "dspark", model, cfg)
    monkeypatch.setattr(factory, "SHIPPED_DIR", tmp_path / "nothing")
    with pytest.raises(DraftLoadError, match="--draft_model"):
        load_drafter(None, "dspark", model, cfg)


def test_load_with_the_target_directory_checks_the_fingerprint(target, tiny_llama_dir, tmp_path):
    """The engine passes the target's model directory: config and fingerprint come from it."""
    cfg, model, fingerprint = target
    save_draft(make_draft("mtp", cfg, model), tmp_path / "ok", fingerprint)
    assert load_drafter(tmp_path / "ok", "mtp", model, tiny_llama_dir).kind == "mtp"
    save_draft(make_draft("mtp", cfg, model), tmp_path / "other", "gguf-sha256:0123")
    with pytest.raises(DraftLoadError, match="other target weights"):
        load_drafter(tmp_path / "other", "mtp", model, tiny_llama_dir)


def test_mtp_drafts_its_full_step_count_at_the_end_of_the_context(target):
    """The draft's layouts read keys in whole KEY_BLOCKs (models/attention.py), so its cache is
    allocated to a multiple of them: proposing max_steps tokens from the last position of a slot
    allocated for exactly that many positions must not read past the cache."""
    cfg, model, _ = target
    toks, hidden, captured = sequences(cfg, model, [19])
    draft = make_draft("mtp", cfg, model)
    for positions in (17, 18):  # the last draft step reads positions + max_steps - 1 keys
        draft.allocate(1, positions)
        out = draft.draft(batch(toks, features(draft, hidden, captured), [0], [0], [positions], draft.max_steps))
        assert out.tokens.shape == (1, draft.max_steps)


@pytest.mark.parametrize("cut", [0.05, 0.3, 0.5, 0.7, 0.95])
def test_mtp_confidence_stop_on_the_host_is_confident_lengths(target, cut):
    """The MTP draft applies the confidence stop itself on the CPU (issue 13): its `confident` lengths are exactly
    adaptive/scoring.confident_lengths of the scores it returns, it stops drafting once every request has fallen
    below (the later columns filler with score 0), and every request's drafts up to its length are those of the
    same draft without the stop. The threshold sits at a quantile (`cut`) of the unstopped draft's path
    probabilities, so requests stop at different steps."""
    from adaspec.adaptive.scoring import confident_lengths, path_probabilities

    cfg, model, _ = target
    lengths = [9, 14, 6, 11]
    toks, hidden, captured = sequences(cfg, model, lengths, seed=3)

    def run(stop):
        draft = make_draft("mtp", cfg, model, seed=2)
        draft.allocate(4, 40)
        b = batch(toks, features(draft, hidden, captured), [0, 1, 2, 3], [0] * 4, [n - 1 for n in lengths], 6)
        b.stop_below = stop
        return draft.draft(b)

    free = run(0.0)
    assert free.confident is None
    paths = path_probabilities(free.scores)[:, :5].flatten().sort().values
    stop_below = float(paths[int(cut * (len(paths) - 1))]) * 1.0001
    stopped = run(stop_below)
    assert stopped.confident == confident_lengths(stopped.scores, stop_below)
    assert stopped.confident == confident_lengths(free.scores, stop_below)
    drafted = int((stopped.scores > 0).any(dim=0).sum())  # columns drafted before every request had stopped
    assert drafted == max(stopped.confident)
    for row, n in enumerate(stopped.confident):
        assert torch.equal(stopped.tokens[row, :n], free.tokens[row, :n])
        assert torch.equal(stopped.scores[row, :n], free.scores[row, :n])
