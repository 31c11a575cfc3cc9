"""What a verify row and a draft step cost at batch B on this machine (stop 40; bench/batch_policies.py's inputs).

The bundled target as serving loads it (--linear_backend=auto, --layer_kernels=auto: fp16w + native
kernels on this CPU) and the shipped MTP draft readied as the engine readies it. B requests sit at KV
length 300; the target reads r = 1..4 rows per request (a round verifying r - 1 drafts each, logits
of every row included) and the draft is called with k = 0..3 steps for the B requests (k = 0: the
one-entry context refresh only). Medians of 15 calls, ms, one thread.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s40/row_costs.py 1,4,8,16
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from adaspec.drafts.base import DraftBatch  # noqa: E402
from adaspec.drafts.factory import load_drafter, ready_drafter  # noqa: E402
from adaspec.models.attention import build_layout  # noqa: E402
from adaspec.models.loader import load_model, resolve_model, weights_fingerprint  # noqa: E402
from adaspec.runner.kv_cache import KVCache  # noqa: E402

NS, L, REPS = 16, 300, 15


class _ServeFlags:  # what ready_drafter reads of the engine's config
    enable_schedule_overlap, num_draft_tokens, max_seqs_per_batch = False, 3, NS


def _median_ms(fn) -> float:
    out = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return 1000 * statistics.median(out)


def main() -> None:
    torch.set_num_threads(1)
    md = resolve_model(None)
    cfg, target = load_model(md, torch.float32, "cpu", linear_backend="auto", verify_rows=4, layer_kernels="auto")
    native = target.layer_kernels == "native"
    print(f"# target: linear backend {target.linear_backend}, layer kernels {target.layer_kernels}; KV length {L}")
    kv = KVCache(cfg.num_layers, NS, cfg.num_kv_heads, L + 64, cfg.head_dim, torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (NS * L,), generator=torch.Generator().manual_seed(0))
    for s in range(NS):
        target(ids[s * L:(s + 1) * L], build_layout([s], [0], [L], native=native), kv)
    draft = load_drafter(None, "mtp", target, cfg, "cpu", torch.float32, target_fingerprint=weights_fingerprint(md))
    ready_drafter(draft, _ServeFlags(), target.linear_backend, L + 64, target.layer_kernels)
    H = cfg.hidden_size
    for s in range(NS):
        draft.draft(DraftBatch([s], [0], [L - 1], torch.randn(L - 1, H), ids[s * L + 1:(s + 1) * L], 0))

    def target_round(B, r):
        h, _ = target(ids[:B * r], build_layout(list(range(B)), [L] * B, [r] * B, native=native), kv)
        target.logits(h)

    def draft_call(B, k):
        draft.draft(DraftBatch(list(range(B)), [L - 2] * B, [1] * B, torch.randn(B, H), ids[:B], k))

    print("| B | target, 1 row/request | 2 | 3 | 4 | ms per extra row | draft call k = 0 | 1 | 2 | 3 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for B in [int(x) for x in sys.argv[1].split(",")]:
        tt = [_median_ms(lambda: target_round(B, r)) for r in (1, 2, 3, 4)]
        td = [_median_ms(lambda: draft_call(B, k)) for k in (0, 1, 2, 3)]
        per_row = (tt[3] - tt[0]) / (3 * B)
        print(f"| {B} | " + " | ".join(f"{v:.1f}" for v in tt) + f" | {per_row:.2f} | "
              + " | ".join(f"{v:.2f}" for v in td) + " |", flush=True)


if __name__ == "__main__":
    main()
