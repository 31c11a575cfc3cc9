"""Stop 59: the MTP draft step against MTP+Suffix (fixed and adaptive draft step) on a held-out stream, interleaved.

Every engine shares one copy of the target weights and serves the same stream at once, one round of each in turn
(bench/adaptive_interleaved.serve_interleaved), each timed by its own rounds; controllers and the Suffix drafters'
feedback reset before every repeat; order alternating across repeats. Prints per repeat each configuration's tok/s
(process CPU) over plain's, and the medians.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/results/s59/mixed_hybrid.py --source=mixed --batch_size=1 --repeats=3
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import common  # noqa: E402
from bench.adaptive_calibration import calibration_fields, write_calibration_files  # noqa: E402
from bench.adaptive_interleaved import serve_interleaved  # noqa: E402

FIXED = {"plain": ("none", None), "mtp_k1": ("MTP", 1), "mtp_k2": ("MTP", 2), "mtp_k3": ("MTP", 3),
         "hyb_k1": ("MTP+Suffix", 1), "hyb_k2": ("MTP+Suffix", 2), "hyb_k3": ("MTP+Suffix", 3),
         "hyb_k5": ("MTP+Suffix", 5), "hyb_k8": ("MTP+Suffix", 8), "mtp_k5": ("MTP", 5)}
STEP = {"mtp_step": "MTP", "hyb_step": "MTP+Suffix", "hyb_step_alt": "MTP+Suffix"}  # _alt: --alt_policy (stop 61)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default="mixed")
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--num_prompts", type=int, default=4)
    p.add_argument("--max_tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--k_max", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--alt_policy", default="{}", help="JSON policy of the *_alt draft step (stop 61)")
    p.add_argument("--configs", default="plain,mtp_k1,mtp_k2,mtp_k3,hyb_k2,hyb_k3,hyb_k5,mtp_step,hyb_step")
    a = p.parse_args()
    names = a.configs.split(",")
    common.setup_threads(1)
    common.share_target_weights()
    ns = SimpleNamespace(calibration_json=None, batch_sizes=[a.batch_size], max_model_len=1024, sources=[a.source],
                         num_prompts=a.num_prompts, prompt_tokens=192, alt_step_policy=a.alt_policy)
    files = write_calibration_files(ns, Path(tempfile.mkdtemp(prefix="s59_")))
    llms = {}
    for n in names:
        base = dict(max_seqs=a.batch_size, max_model_len=1024)
        fixed, _, costs = n.partition("@")  # stop 61: hyb_kK@ROW_STEP sets the hybrid's value-rule costs
        if fixed in FIXED:
            algo, k = FIXED[fixed]
            llms[n] = common.build_llm("float32", algo, k, None, **base)
            if costs:
                drafter = llms[n].engine.drafter
                drafter.verify_row_cost, drafter.mtp_step_cost = (float(x) for x in costs.split("_"))
        else:
            llms[n] = common.build_llm("float32", STEP[n], a.k_max, None, **base, enable_adaptive_draft_step=True,
                                       adaptive_draft_step_config=str(files["step_alt" if n.endswith("_alt") else "step"]),
                                       graph_decode_batch_sizes=tuple(calibration_fields(ns)["request_buckets"]))
        print(f"built {n}", file=sys.stderr, flush=True)
    for n in names:  # an A/B of a policy is priced by the same start-up table (stop 61)
        if n.endswith("_alt") and n[:-4] in llms:
            llms[n].engine.control.install_table(llms[n[:-4]].engine.control.table)
    stream = common.warmed_prompt_sets(llms, ns)[a.source][: max(a.num_prompts, a.batch_size)]
    ratios: dict[str, list[float]] = {n: [] for n in names if n != "plain"}
    for rep in range(a.repeats):
        order = common.alternating(names, rep)
        before = {}
        for n in order:
            eng = llms[n].engine
            if eng.control is not None:
                eng.control.reset()
                before[n] = Counter(eng.control.step.k_histogram)
            if hasattr(eng.drafter, "reset_feedback"):
                eng.drafter.reset_feedback()
        runs = serve_interleaved({n: llms[n] for n in order}, stream, a.batch_size, a.max_tokens, True, a.temperature)
        plain = runs["plain"]
        line = []
        for n in names:
            r = runs[n]
            assert r.outputs == plain.outputs, f"{n} differs from plain"
            rate = r.tokens / r.cpu_s
            if n != "plain":
                ratios[n].append(rate / (plain.tokens / plain.cpu_s))
            extra = ""
            if n in before:
                h = Counter(llms[n].engine.control.step.k_histogram) - before[n]
                tot = sum(h.values())
                extra = " k " + " ".join(f"{k}:{100 * v / tot:.0f}%" for k, v in sorted(h.items()))
            line.append(f"{n} {rate:.1f} tok/s acc {r.stats.get('mean_acceptance_length') or 0:.2f}{extra}")
        print(f"rep {rep + 1}: " + "; ".join(line), flush=True)
    best = max((n for n in ratios if n not in STEP), key=lambda n: statistics.median(ratios[n]))
    print(f"\n{a.source} B = {a.batch_size}, T = {a.temperature}, {a.repeats} repeats, x plain per repeat (median):")
    for n, rs in ratios.items():
        vs = [x / y for x, y in zip(rs, ratios[best])]
        print(f"  {n:9s} " + ", ".join(f"{x:.3f}" for x in rs) + f" ({statistics.median(rs):.3f});  x best fixed "
              f"({best}) " + ", ".join(f"{x:.3f}" for x in vs) + f" ({statistics.median(vs):.3f})")


if __name__ == "__main__":
    main()
