"""Calibration A/B: the draft step's start-up table with interleaved windows vs one point after another, alternating.
argv: checkout N"""
import sys, tempfile, functools, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common
import adaspec.engine.control as control
from adaspec.calibration.robust import NoisePolicy
common.setup_threads(1)
common.share_target_weights()
bargs = adaptive.parse_args(["--configs=mtp_step", "--batch_sizes=1", "--dtypes=float32", "--sources=code", "--k_max=3"])
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
res = {True: [], False: []}
for i in range(int(sys.argv[2])):
    for mode in (True, False) if i % 2 == 0 else (False, True):
        control.NoisePolicy = functools.partial(NoisePolicy, interleave=mode)
        engines, calib = adaptive.build_engines(bargs, "float32", files, wd)
        ctl = engines["mtp_step"].engine.control
        m = ctl.measurement
        costs = {s.x: s.cost_s * 1000 for s in m.stats if s.bcap == 1}
        unres = sum(not s.resolved for s in m.stats)
        held = calib["mtp_step"].get("heldout_median") if isinstance(calib.get("mtp_step"), dict) else None
        r = [costs[k] / costs[0] for k in (1, 2, 3)]
        res[mode].append(r)
        print("interleave" if mode else "sequential", " ".join(f"k{k} {costs[k]:.1f}" for k in sorted(costs)),
              "ratios", " ".join(f"{x:.3f}" for x in r), "unresolved", unres, "drift", [round(d.rel, 3) for d in m.drifts if d.corrected], flush=True)
        engines["mtp_step"].close() if hasattr(engines["mtp_step"], "close") else None
        del engines
for mode, rs in res.items():
    k1 = [r[0] for r in rs]
    print("interleave" if mode else "sequential", "k1/k0 median", f"{statistics.median(k1):.3f}", "range", f"{min(k1):.3f}-{max(k1):.3f}",
          "stdev", f"{statistics.pstdev(k1):.3f}", "k2/k0", f"{statistics.median(r[1] for r in rs):.3f}", "k3/k0", f"{statistics.median(r[2] for r in rs):.3f}")
