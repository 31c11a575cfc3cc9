"""Replays a diag log's draft-step rounds through served pricing's sampler (adaptive/step_served.py): how many samples
of k = 1 over plain the engine could form, and when. Caps are taken as the plan's k (the log does not keep them; only
a request's last few tokens have smaller ones)."""
import gzip, json, sys
sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else ".")
from adaspec.adaptive.step_served import ServedRatio, served_kind, MIN_SAMPLES
d = json.load(gzip.open(sys.argv[1], "rt"))
rep, sr, n_rounds, kinds = -1, None, 0, {}
def report():
    if sr is not None:
        s = sr.samples(1)
        print(f"repeat {rep + 1}: {n_rounds} rounds, plain {kinds.get(0, 0)}, served k = 1 {kinds.get(1, 0)}, "
              f"deeper {sum(v for k, v in kinds.items() if k > 1)}; samples {len(s)}"
              + (f", ratio {sr.ratio(1):.3f}" if len(s) >= MIN_SAMPLES else " (ratio unknown)"))
for e in d["log"]["mtp_step"]:
    if "rep" in e:
        report(); rep, sr, n_rounds, kinds = e["rep"], ServedRatio(), 0, {}
        continue
    if "ms" not in e or e["ms"] is None or not e.get("vl"):
        continue
    k, pure = served_kind(e["k"], [e["k"]] * len(e["vl"]), e["vl"], 0.6 if e["ceiling"] else 0.0, e["dec"],
                          e["probe"], False)
    if pure:
        kinds[k] = kinds.get(k, 0) + 1
    sr.record(e["rid"], e["B"], k, e["ms"], pure)
    n_rounds += 1
report()
