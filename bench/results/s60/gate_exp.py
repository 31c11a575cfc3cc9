"""Same process, same table: DSpark w = 7 sync at B = 1 with variants of the plain floor's gate, against plain and fixed L."""
import os, sys
from pathlib import Path
sys.path.insert(0, os.environ.get("CHECKOUT", str(Path(__file__).resolve().parents[3])))
from bench import common
from bench.adaptive_calibration import dspark_sync_b1
from bench.adaptive_hooks import Hook
from adaspec.adaptive.floor import PlainFloor
import adaspec.adaptive.verify_controller as vc
from adaspec.adaptive.verify_served import ServedRows
import adaspec.adaptive.verify_served as vs
common.setup_threads(1)
srcs = sys.argv[1].split(",")
variants = sys.argv[2].split(",")
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
DEFAULT_REALISED = vs.REALISED_REQUESTS, vs.REALISED_MARGIN
TEMP = float(os.environ.get("TEMP", "0"))  # stop 62: sampled runs (seeded per request, compared with plain's)
d, ns = dspark_sync_b1(srcs)
f = common.build_llm("float32", "DSpark", 7, None, max_seqs=1, max_model_len=1024, graph_decode_batch_sizes=(1,))
p = common.build_llm("float32", "none", None, None, max_seqs=1, max_model_len=1024)
sets = common.warmed_prompt_sets({"d": d, "p": p, "f": f}, ns)
ref = {}
def run(v, src):
    ctl = d.engine.control
    if v == "plain":
        r = common.serve(p, sets[src][:4], 1, 256, ignore_eos=True, temperature=TEMP); return r, ""
    if v.startswith("L"):
        with Hook(f, "prefix", int(v[1:])):
            r = common.serve(f, sets[src][:4], 1, 256, ignore_eos=True, temperature=TEMP)
        return r, ""
    ctl.reset()
    v, _, real = v.partition("+")  # stop 62: VARIANT+realN[_M] (or realN[_M] alone: the default + it)
    if v.startswith("real"):
        v, real = "served", v
    if real:  # the realised-gain window of N request-rounds and margin M% (default 3)
        n, _, m = real[4:].partition("_")
        vs.REALISED_REQUESTS, vs.REALISED_MARGIN = int(n), (int(m) / 100 if m else 0.03)
    else:  # stop 63: the module's own (was stop 61's 16 and 3%, the default until f83137a)
        vs.REALISED_REQUESTS, vs.REALISED_MARGIN = DEFAULT_REALISED
    vc.GATE_REQUESTS = 1 if v in ("gate", "ratio") else 16
    if v in ("gate", "window", "noratio"):  # noratio (stop 61): served pricing on, the confidence ratio off
        ctl.verify.confidence = None
    if v in ("gate", "window", "calwin"):  # stop 61: served pricing (verify_served.py) off, the table prices
        ctl.verify.served, ctl.verify.cost_ms = None, ctl.verify.table_ms
    if v.startswith(("up", "servedup", "pricedup")):  # stop 61: the table's drafted rounds raised by N%
        # upN: the table prices; servedupN: served prices and the realised-gain check; pricedupN: served prices only
        table, up = ctl.verify.table_ms, 1 + int(v.split("up")[1]) / 100
        ctl.verify.table_ms = lambda bcap, G: None if table(bcap, G) is None else up * table(bcap, G)
        ctl.verify.served = ServedRows(ctl.verify.table_ms, ctl.verify.served.plain_ms) if not v.startswith("up") else None
        ctl.verify.cost_ms = ctl.verify.served.cost_ms if ctl.verify.served is not None else ctl.verify.table_ms
    if v == "norealised" or v.startswith("pricedup"):  # stop 61: served prices without the realised-gain check
        ctl.verify.served.realised_gain = lambda bcap, B: False
    vs.POOLED = v != "perG"  # stop 63: perG = a served correction per G (stop 61's rule)
    vs.SETTLED_ONLY = v != "unsettled"  # stop 63: unsettled = plain references from every pure round (stop 62)
    if v == "nocold":  # stop 63: no cold-start drafting before the realised check's first judgement
        ctl.verify.served.cold_draft = lambda bcap, B: False
    if v == "nofloor":
        ctl.floor = None
    elif v.startswith("probe"):
        a, b = v[5:].split("_")
        ctl.floor = PlainFloor(probe_interval=int(a), max_probe_interval=int(b))
    r = common.serve(d, sets[src][:4], 1, 256, ignore_eos=True, temperature=TEMP)
    return r, str(ctl.summary())[-260:] + f" ratio {ctl.verify.confidence_ratio():.2f}"
for src in srcs:
    res = {v: [] for v in variants}
    for rep in range(reps):
        for v in (variants if rep % 2 == 0 else variants[::-1]):
            r, s = run(v, src)
            ref.setdefault(src, r.outputs) if v == "plain" else None
            eq = "" if src not in ref else (" =plain" if r.outputs == ref[src] else " MISMATCH")
            res[v].append(r.tokens / r.cpu_s)
            print(f"{src} rep {rep} {v}: {r.tokens / r.cpu_s:.1f} tok/s{eq} {s[:200]}", flush=True)
    pl = res["plain"]
    for v in variants:
        xs = sorted(a / b for a, b in zip(res[v], pl))
        print(f"== {src} {v}: x plain " + ", ".join(f"{a / b:.3f}" for a, b in zip(res[v], pl)) + f"  median {xs[len(xs)//2]:.3f}", flush=True)
