"""Same process, same table: DSpark w = 7 sync at B = 4 (four prompts: a closed batch) against plain and fixed L,
with the closed batch's token weights as variants, and a tally of which gate opinion let each drafted round draft.

Variants: plain, L1..L7 (fixed), sync (the checkout's rules), old (stop 63: one weight for the batch, the
first-to-leave value, in the gate and the admission), norealised / nocold (sync without that gate opinion),
gateold (the checkout's admission, stop 63's single weight in the gate). Stop 64 ran it against each gate variant's
commit (bench/results/s64/README.md); at the final commit `sync` and `gateold` gate alike.
usage: OMP_NUM_THREADS=1 taskset -c N python bench/results/s64/closed_exp.py SOURCES VARIANTS REPEATS [B]
"""
import collections
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common  # noqa: E402
from bench.adaptive_calibration import calibration_fields, dspark_sync  # noqa: E402
from bench.adaptive_hooks import Hook  # noqa: E402

common.setup_threads(1)
srcs = sys.argv[1].split(",")
variants = sys.argv[2].split(",")
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
B = int(sys.argv[4]) if len(sys.argv) > 4 else 4
TEMP = float(os.environ.get("TEMP", "0"))
d, ns = dspark_sync(srcs, B, B)
buckets = tuple(calibration_fields(ns)["request_buckets"])
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=B, max_model_len=1024, graph_decode_batch_sizes=buckets)
p = common.build_llm("float32", "none", None, None, max_seqs=B, max_model_len=1024)
sets = common.warmed_prompt_sets({"d": d, "p": p, "f": f}, ns)
ctl = d.engine.control
verify_cls_gain = type(ctl.verify).predicts_gain
tally = collections.Counter()


def instrumented(self, B_, round_id=None, max_lens=None, kv_len=None, token_value=1.0, _scalar=None, **served):
    value = _scalar(B_) if _scalar is not None else token_value
    if _scalar is not None:  # stop 63's gate: the served opinions at a token value of 1 only
        served.pop("served", None)
    out = verify_cls_gain(self, B_, round_id=round_id, max_lens=max_lens, kv_len=kv_len, token_value=value, **served)
    if out:
        bcap = self.pad_requests(B_)
        cap = self._cap_sum(max_lens, B_)
        if bcap is None or bcap not in self.target_buckets:
            tally["no bucket"] += 1
        elif self._budget(B_, bcap, cap, kv_len, value, early_stop=True).reason.startswith(("early stop", "fallback")):
            tally["model"] += 1
        elif self._window_gains(B_, bcap, cap, kv_len, value):
            tally["window"] += 1
        elif self.served is not None and self.served.realised_gain(bcap, B_):
            tally["realised"] += 1
        else:
            tally["cold"] += 1
    return out


def run(v, src):
    if v == "plain":
        return common.serve(p, sets[src][:B], B, 256, ignore_eos=True, temperature=TEMP), ""
    if v.startswith("L"):
        with Hook(f, "prefix", int(v[1:])):
            return common.serve(f, sets[src][:B], B, 256, ignore_eos=True, temperature=TEMP), ""
    ctl.reset()
    verify = ctl.verify
    for name in ("request_values",):
        ctl.__dict__.pop(name, None)
    scalar = None
    if v in ("old", "gateold"):
        scalar = (lambda n: 1.0 if ctl.engine.scheduler.waiting else ctl.token_value_closed(n))
    if v == "old":
        ctl.request_values = lambda decoding: scalar(len(decoding))
    if v == "norealised":
        verify.served.realised_gain = lambda bcap, B_: False
    if v == "nocold":
        verify.served.cold_draft = lambda bcap, B_: False
    verify.predicts_gain = lambda *a, **k: instrumented(verify, *a, _scalar=scalar, **k)
    tally.clear()
    r = common.serve(d, sets[src][:B], B, 256, ignore_eos=True, temperature=TEMP)
    ratio = verify.served.realised_ratio(B, B) if verify.served is not None else None
    return r, f"gate: {dict(tally)} realised {ratio} " + str(ctl.summary())[-200:]


ref = {}
for src in srcs:
    res = {v: [] for v in variants}
    for rep in range(reps):
        for v in (variants if rep % 2 == 0 else variants[::-1]):
            r, s = run(v, src)
            ref.setdefault(src, r.outputs) if v == "plain" else None
            eq = "" if src not in ref else (" =plain" if r.outputs == ref[src] else " MISMATCH")
            res[v].append(r.tokens / r.cpu_s)
            print(f"{src} rep {rep} {v}: {r.tokens / r.cpu_s:.1f} tok/s{eq} {s[:320]}", flush=True)
    pl = res["plain"]
    for v in variants:
        xs = sorted(a / b for a, b in zip(res[v], pl))
        print(f"== {src} {v}: x plain " + ", ".join(f"{a / b:.3f}" for a, b in zip(res[v], pl))
              + f"  median {xs[len(xs) // 2]:.3f}", flush=True)
