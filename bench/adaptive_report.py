"""Summaries, tables and plots of bench/adaptive.py's measurements."""

from __future__ import annotations

from pathlib import Path

from bench import common
from bench.adaptive_configs import FAMILIES, STEP_FAMILIES, VERIFY_FAMILIES
from bench.common import fmt, fmt_hist, fmt_ratio, log, markdown_table, median

def summarize_cell(args, dtype, B, source, runs: dict) -> dict:
    clock = "cpu_s" if args.clock == "cpu" else "wall_s"
    ref = runs["plain"][0].outputs
    rows = {}
    for name, rs in runs.items():
        st = rs[0].stats
        cmp = common.compare_tokens(rs[0].outputs, ref)
        row = {
            "dtype": dtype, "batch_size": B, "source": source, "config": name, "requests": len(ref),
            "tokens": rs[0].tokens,
            "wall_tok_s": median([r.tokens / r.wall_s for r in rs]),
            "cpu_tok_s": median([r.tokens / r.cpu_s for r in rs]),
            "tpot_ms": median([median(r.tpot_ms) for r in rs]),
            "acceptance_rate": st["acceptance_rate"], "acceptance_length": st["mean_acceptance_length"],
            "per_position_acceptance": st["per_position_acceptance"],
            "rows_per_request": st["mean_rows_per_request"], "mean_batch": st["mean_batch"],
            "equal_to_plain": cmp,
            "chosen": rs[0].extra.get("chosen"), "chosen_axis": rs[0].extra.get("chosen_axis"),
            "controller_share": median([r.extra.get("controller_share") for r in rs]),
            "controller_calls": rs[0].extra.get("controller_calls"),
            "probe_share": median([r.extra["probe_share"] for r in rs]) if "probe_share" in rs[0].extra else None,
            "raw": [{"wall_s": r.wall_s, "cpu_s": r.cpu_s, "tokens": r.tokens, **{k: v for k, v in r.extra.items()
                                                                                  if k != "chosen"}} for r in rs],
        }
        row["tok_s"] = row["cpu_tok_s"] if clock == "cpu_s" else row["wall_tok_s"]
        if name != "plain" and cmp["equal"] != cmp["sequences"]:
            where = cmp["first_difference"]
            tag = "MISMATCH" if dtype == "float32" else "note"
            why = "" if dtype == "float32" else " (bfloat16 rounding)"
            print(f"{tag}: {dtype} B={B} {source} {name}: {cmp['sequences'] - cmp['equal']}/{cmp['sequences']} "
                  f"sequences differ from plain greedy{why}; first at prompt {where[0]}, token {where[1]}", flush=True)
        rows[name] = row
    plain = rows["plain"]["tok_s"]
    for r in rows.values():
        r["ratio_to_plain"] = r["tok_s"] / plain if plain else None
    return rows


def add_paired(rows: dict, ratios: dict) -> None:
    """--paired: each row gets the per-child ratios to plain (plain: 1.0 by definition) and their median."""
    for name, row in rows.items():
        rs = [1.0] if name == "plain" else ratios.get(name, [])
        row["paired"] = {"ratios": rs, "n": len(rs), "median": median(rs), "min": min(rs, default=None),
                         "max": max(rs, default=None)}


def family_members(fam: str, names, k_max: int) -> dict:
    """fixed settings, full width, oracle and adaptive configurations of a family that were measured."""
    names = set(names)
    if fam in STEP_FAMILIES:
        f = STEP_FAMILIES[fam]
        fixed = ["plain"] + [f"{f.fixed}{k}" for k in range(1, k_max + 1)]
        return {"fixed": [n for n in fixed if n in names], "full": f"{f.fixed}{k_max}", "oracle": f.oracle,
                "adaptive": [n for n in f.adaptive if n in names]}
    w = VERIFY_FAMILIES[fam][1]
    full = f"mtp_k{w}" if fam == "mtp5" else f"{fam}_full"
    fixed = ["plain", full] + [f"{fam}_L{L}" for L in range(1, w)]  # plain included (issue 13: the floor)
    if fam == "mtp5":  # a fixed MTP verify length L is also served by drafting only L (mtp_kL): cheaper, same rows
        fixed += [f"mtp_k{L}" for L in range(1, w)]
    return {"fixed": [n for n in fixed if n in names], "full": full, "oracle": f"{fam}_oracle",
            "adaptive": [n for n in (f"{fam}_sync", f"{fam}_async") if n in names]}


def display_name(name: str) -> str:
    return {"mtp_k5": "mtp_k5 (= mtp5_full)"}.get(name, name)


def target_rows(args, cells: dict) -> list[dict]:
    out = []
    measured = set(args.configs)
    for (dtype, source, B), rows in cells.items():
        for fam in FAMILIES:
            m = family_members(fam, measured, args.k_max)
            fixed = [rows[n] for n in m["fixed"] if n in rows]
            for a in m["adaptive"]:
                if a not in rows:
                    continue
                r = rows[a]
                best = max(fixed, key=lambda x: x["tok_s"]) if fixed else None
                any_fixed = [x for n, x in rows.items() if not n.endswith(("_sync", "_async", "_oracle", "_step"))]
                best_any = max(any_fixed, key=lambda x: x["tok_s"])
                full = rows.get(m["full"])
                oracle = rows.get(m["oracle"]) if m["oracle"] else None
                paired = {}
                if "paired" in r:  # the same comparison on the medians of per-child ratios to plain
                    pbest = max(fixed, key=lambda x: x["paired"]["median"])
                    paired = {"paired_vs_plain": r["paired"]["median"], "paired_best_fixed": pbest["config"],
                              "paired_vs_best_fixed": r["paired"]["median"] / pbest["paired"]["median"],
                              "paired_range": [r["paired"]["min"], r["paired"]["max"]], "paired_n": r["paired"]["n"]}
                out.append({**paired,
                    "dtype": dtype, "source": source, "batch_size": B, "adaptive": a,
                    "tok_s": r["tok_s"], "best_fixed": best["config"] if best else None,
                    "best_fixed_tok_s": best["tok_s"] if best else None,
                    "vs_best_fixed": r["tok_s"] / best["tok_s"] if best else None,
                    "best_any_fixed": best_any["config"], "best_any_fixed_tok_s": best_any["tok_s"],
                    "vs_best_any_fixed": r["tok_s"] / best_any["tok_s"],
                    "vs_full_width": r["tok_s"] / full["tok_s"] if full else None,
                    "vs_oracle": r["tok_s"] / oracle["tok_s"] if oracle else None,
                    "vs_plain": r["ratio_to_plain"],
                    "controller_share": r["controller_share"],
                    "chosen": r["chosen"], "chosen_axis": r["chosen_axis"],
                })
    return out


def print_tables(args, cells: dict, targets: list[dict], calib: dict) -> None:
    clock = "CPU" if args.clock == "cpu" else "wall"
    for dtype in args.dtypes:
        for source in args.sources:
            keys = [(dtype, source, B) for B in args.batch_sizes if (dtype, source, B) in cells]
            if not keys:
                continue
            print(f"\n### {dtype}, {source}: output tokens/s ({clock} clock), by batch size\n")
            names = [n for n in cells[keys[0]]]
            head = ["config"] + [f"B={k[2]}" for k in keys]
            body = [[display_name(n)] + [fmt(cells[k][n]["tok_s"]) if n in cells[k] else "–" for k in keys] for n in names]
            print(markdown_table(head, body))
            for k in keys:
                print(f"\n{dtype}, {source}, B={k[2]} (TPOT: wall clock, median over requests; rows/req: verified "
                      f"target rows per request per round incl. the bonus row)\n")
                head = ["config", "tok/s wall", "tok/s CPU", "× plain", "TPOT ms", "acc. rate", "acc. length",
                        "rows/req", "chosen k / G", "probe rounds", "ctrl time", "= plain"]
                body = []
                for n, r in cells[k].items():
                    eq = r["equal_to_plain"]
                    body.append([display_name(n), fmt(r["wall_tok_s"]), fmt(r["cpu_tok_s"]), fmt_ratio(r["ratio_to_plain"]),
                                 fmt(r["tpot_ms"]), fmt(r["acceptance_rate"], 2), fmt(r["acceptance_length"], 2),
                                 fmt(r["rows_per_request"], 2),
                                 (f"{r['chosen_axis']} " + fmt_hist(r["chosen"])) if r["chosen"] else "–",
                                 fmt(100 * r["probe_share"], 1, "%") if r.get("probe_share") is not None else "–",
                                 fmt(100 * r["controller_share"], 2, "%") if r["controller_share"] is not None else "–",
                                 f"{eq['equal']}/{eq['sequences']}"])
                print(markdown_table(head, body, "l" + "r" * 7 + "lrrr"))
    if targets:
        print(f"\n### adaptive vs best fixed (in hindsight, per batch size), full width and oracle ({clock} clock)\n")
        head = ["dtype", "source", "B", "adaptive", "tok/s", "best fixed (family + plain)", "÷ best fixed",
                "best fixed (any)", "÷ best any", "÷ full width", "÷ oracle", "× plain", "ctrl time"]
        body = [[t["dtype"], t["source"], t["batch_size"], t["adaptive"], fmt(t["tok_s"]),
                 f"{display_name(t['best_fixed'])} {fmt(t['best_fixed_tok_s'])}" if t["best_fixed"] else "–",
                 fmt_ratio(t["vs_best_fixed"]),
                 f"{display_name(t['best_any_fixed'])} {fmt(t['best_any_fixed_tok_s'])}",
                 fmt_ratio(t["vs_best_any_fixed"]), fmt_ratio(t["vs_full_width"]), fmt_ratio(t["vs_oracle"]),
                 fmt_ratio(t["vs_plain"]),
                 fmt(100 * t["controller_share"], 2, "%") if t["controller_share"] is not None else "–"]
                for t in targets]
        print(markdown_table(head, body, "llrlrlrlr" + "r" * 4))
        paired = [t for t in targets if "paired_vs_plain" in t]
        if paired:
            print("\n### paired (--paired): medians over children of each child's ratio to its own plain runs\n")
            head = ["dtype", "source", "B", "adaptive", "children", "× plain (paired)", "range",
                    "best fixed (paired)", "÷ best fixed (paired)"]
            body = [[t["dtype"], t["source"], t["batch_size"], t["adaptive"], t["paired_n"],
                     f"{t['paired_vs_plain']:.3f}×", f"{t['paired_range'][0]:.3f}-{t['paired_range'][1]:.3f}",
                     display_name(t["paired_best_fixed"]), f"{t['paired_vs_best_fixed']:.3f}×"] for t in paired]
            print(markdown_table(head, body, "llrlrrllr"))
    rows = [r for c in cells.values() for r in c.values() if "paired" in r and r["config"] != "plain"]
    if rows:
        print("\n### paired ratios to plain, every configuration (per child: tok/s over its own plain runs)\n")
        head = ["dtype", "source", "B", "config", "children", "median", "per child"]
        body = [[r["dtype"], r["source"], r["batch_size"], display_name(r["config"]), r["paired"]["n"],
                 f"{r['paired']['median']:.3f}×", " ".join(f"{x:.3f}" for x in r["paired"]["ratios"])] for r in rows]
        print(markdown_table(head, body, "llrlrrl"))
    if calib:
        print("\n### calibration of the adaptive engines (start-up)\n")
        head = ["dtype", "engine", "start-up s", "warm-up + calibration s", "table", "held-out median error",
                "held-out max error"]
        body = [[d, n, fmt(c["startup_s"]), fmt(c["calibration_seconds"]), c["source"],
                 fmt(None if c["heldout_median_rel_error"] is None else 100 * c["heldout_median_rel_error"], 1, "%"),
                 fmt(None if c["heldout_max_rel_error"] is None else 100 * c["heldout_max_rel_error"], 1, "%")]
                for (d, n), c in calib.items()]
        print(markdown_table(head, body, "llrrlrr"))


def plot(args, cells: dict, out_dir: Path) -> list[str]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        log("[bench] matplotlib not installed: no plots")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    measured = set(args.configs)
    for dtype in args.dtypes:
        for source in args.sources:
            keys = [(dtype, source, B) for B in args.batch_sizes if (dtype, source, B) in cells]
            if not keys:
                continue
            fams = [f for f in FAMILIES
                    if family_members(f, measured, args.k_max)["adaptive"]]
            if not fams:
                continue
            fig = Figure(figsize=(5.2 * len(fams), 4.0), dpi=100)
            FigureCanvasAgg(fig)
            fig.suptitle(f"{dtype}, {source} prompts: output tokens/s ({args.clock} clock)", fontsize=10)
            for i, fam in enumerate(fams):
                ax = fig.add_subplot(1, len(fams), i + 1)
                m = family_members(fam, measured, args.k_max)
                lines = [("plain", dict(color="black", lw=1.5))]
                lines += [(n, dict(color="0.6", lw=0.8, alpha=0.8)) for n in m["fixed"] if n not in ("plain", m["full"])]
                lines += [(m["full"], dict(color="C0", lw=1.5))]
                lines += [(m["oracle"], dict(color="C2", ls="--", lw=1.5))] if m["oracle"] else []
                lines += [(a, dict(color="C1" if a.endswith("_async") else "C3", lw=2.2, marker="o"))
                          for a in m["adaptive"]]
                for n, style in lines:
                    xs = [k[2] for k in keys if n in cells[k]]
                    ys = [cells[k][n]["tok_s"] for k in keys if n in cells[k]]
                    if xs:
                        ax.plot(xs, ys, label=display_name(n), **style)
                        if style.get("color") == "0.6":
                            ax.annotate(n.split("_")[-1], (xs[-1], ys[-1]), fontsize=6, color="0.4")
                ax.set_xscale("log", base=2)
                ax.set_xticks(args.batch_sizes)
                ax.set_xticklabels([str(b) for b in args.batch_sizes])
                ax.set_xlabel("batch size (most running requests)")
                ax.set_ylabel("output tokens/s")
                ax.set_title({"mtp_step": "MTP adaptive draft step", "hyb_step": "MTP+Suffix adaptive draft step",
                              "dspark7": "DSpark w=7 adaptive verify",
                              "mtp5": "MTP w=5 adaptive verify"}[fam], fontsize=9)
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=6, loc="upper left")
            fig.tight_layout()
            path = out_dir / f"adaptive_{dtype}_{source}.png"
            fig.savefig(path, format="png")
            written.append(str(path))
    return written
