"""Two draft-step engines forced to ceiling K (identical decisions), interleaved on mixed B=1: one with the MTP draft's
host-side confidence stop (this checkout), one with it switched off per call (the stop over stacked tensors in the draft,
confident_lengths in the round runner: the code before). args: checkout K reps"""
import sys, tempfile, statistics
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import adaptive, common, adaptive_interleaved as il
import adaspec.drafts.mtp as mtp
K, reps = int(sys.argv[2]), int(sys.argv[3])
common.setup_threads(1)
bargs = adaptive.parse_args(["--configs=mtp_step,mtp_step_alt", "--batch_sizes=1", "--dtypes=float32", "--sources=mixed",
                             "--num_prompts=4", "--max_tokens=256", "--ignore_eos", "--temperature=0", f"--k_max={K}",
                             "--interleave", "--alt_shares_table"])
common.share_target_weights()
wd = Path(tempfile.mkdtemp()); files = adaptive.write_calibration_files(bargs, wd)
engines, _ = adaptive.build_engines(bargs, "float32", files, wd)
sets = common.warmed_prompt_sets(engines, bargs)
def force(ctl):
    st = ctl.step; o = st.plan
    def plan(*a, **k):
        o(*a, **k); st.last_probe = st.last_check = False
        return K
    st.plan = plan
for n in ("mtp_step", "mtp_step_alt"):
    ctl = engines[n].engine.control
    reset = ctl.reset
    def reset2(*a, ctl=ctl, reset=reset, **k):
        reset(*a, **k); force(ctl)
    ctl.reset = reset2
    force(ctl)
old = engines["mtp_step_alt"].engine.drafter
draft = old.draft
NAME = "HostPathStop" if hasattr(mtp, "HostPathStop") else "_HostStop"  # its name in drafts/mtp.py after / at 72ef9a8
real = getattr(mtp, NAME)
def draft_old(batch):
    setattr(mtp, NAME, lambda *a: None)
    try:
        return draft(batch)
    finally:
        setattr(mtp, NAME, real)
old.draft = draft_old
ratios = []
for rep in range(reps):
    order = ["mtp_step", "mtp_step_alt"] if rep % 2 == 0 else ["mtp_step_alt", "mtp_step"]
    for n in order:
        engines[n].engine.control.reset()
    runs = il.serve_interleaved({n: engines[n] for n in order}, sets["mixed"][:4], 1, 256, True, 0.0)
    r = {n: x.tokens / x.wall_s for n, x in runs.items()}
    same = runs["mtp_step"].outputs == runs["mtp_step_alt"].outputs
    ratios.append(r["mtp_step"] / r["mtp_step_alt"])
    print(rep, {n: round(v, 2) for n, v in r.items()}, "host/old %.4f" % ratios[-1], "same outputs", same,
          {n: runs[n].stats["mean_acceptance_length"] for n in r}, flush=True)
print("median host/old %.4f" % statistics.median(ratios))
