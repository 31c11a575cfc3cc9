"""Statistics, JSON and plot of `adaspec bench-serve`, with `vllm bench serve`'s key names.

Per load level: `duration`, `completed`, `failed`, `total_input_tokens`, `total_output_tokens`,
`request_throughput`, `output_throughput`, `total_token_throughput`, `max_concurrency`,
`request_rate`, and `{mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms`. From the server's /metrics
scraped before and after the level (differences): `spec_decode_num_drafts`,
`spec_decode_draft_tokens`, `spec_decode_accepted_tokens`, `spec_decode_acceptance_rate`,
`spec_decode_acceptance_length` (1 + accepted / drafts), `spec_decode_per_position_acceptance_rates`
(survival per position / drafts), and `server_cpu_seconds` (process_cpu_seconds_total, where the
server exports it) next to the wall `duration`.
"""

from __future__ import annotations

import re

import numpy as np

from .bench_client import RequestResult

SPEC = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def _stats(name: str, values_s: list[float]) -> dict:
    v = np.asarray(values_s, dtype=np.float64) * 1000.0
    if not len(v):
        return {f"{k}_{name}_ms": None for k in ("mean", "median", "std", "p90", "p99")}
    return {f"mean_{name}_ms": float(v.mean()), f"median_{name}_ms": float(np.median(v)),
            f"std_{name}_ms": float(v.std()), f"p90_{name}_ms": float(np.percentile(v, 90)),
            f"p99_{name}_ms": float(np.percentile(v, 99))}


def summarise(results: list[RequestResult], duration: float, concurrency: int | None, request_rate: float) -> dict:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    row = {
        "duration": duration, "completed": len(ok), "failed": len(results) - len(ok),
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "output_throughput": out_tokens / duration if duration else 0.0,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration else 0.0,
        "max_concurrency": concurrency, "request_rate": "inf" if request_rate == float("inf") else request_rate,
    }
    row.update(_stats("ttft", [r.ttft for r in ok]))
    row.update(_stats("tpot", tpots))
    row.update(_stats("itl", [g for r in ok for g in r.itl]))
    row.update(_stats("e2el", [r.latency for r in ok]))
    row["input_lens"] = [r.prompt_tokens for r in results]
    row["output_lens"] = [r.output_tokens for r in results]
    row["errors"] = [r.error for r in results if not r.ok]
    return row


def _total(m: dict[str, float], part: str) -> float:
    """vllm bench serve's rule: add every *spec_decode*_total series whose name contains `part`."""
    return sum(v for k, v in m.items()
               if "spec_decode" in k and k.split("{")[0].endswith("_total") and part in k.split("{")[0]
               and "per_pos" not in k)


def acceptance(before: dict | None, after: dict | None) -> dict:
    if before is None or after is None:
        return {"spec_decode_acceptance_rate": None, "spec_decode_acceptance_length": None}
    drafts = _total(after, "num_drafts") - _total(before, "num_drafts")
    draft_tokens = _total(after, "num_draft_tokens") - _total(before, "num_draft_tokens")
    accepted = _total(after, "num_accepted_tokens") - _total(before, "num_accepted_tokens")
    per_pos = {}
    for k, v in after.items():
        m = re.search(r"spec_decode_num_accepted_tokens_per_pos_total\{.*position=(\d+)", k)
        if m:
            per_pos[int(m.group(1))] = v - before.get(k, 0.0)
    row = {"spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
           "spec_decode_accepted_tokens": accepted,
           "spec_decode_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
           "spec_decode_acceptance_length": 1 + accepted / drafts if drafts else None,
           "spec_decode_per_position_acceptance_rates": [per_pos[i] / drafts for i in sorted(per_pos)] if drafts else []}
    cpu = [k for k in after if k == "process_cpu_seconds_total"]
    row["server_cpu_seconds"] = (after[cpu[0]] - before.get(cpu[0], 0.0)) if cpu else None
    # adaspec's own: measured / predicted time of the rounds the cost table covered (cost-model error)
    pred = sum(v - before.get(k, 0.0) for k, v in after.items() if k.endswith(":round_predicted_seconds_total"))
    meas = sum(v - before.get(k, 0.0) for k, v in after.items() if k.endswith(":round_measured_seconds_total"))
    row["adaspec_round_time_measured_over_predicted"] = meas / pred if pred > 0 else None
    return row


def table(rows: list[dict]) -> str:
    head = ("| label | conc. | done/failed | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | ITL p50 ms "
            "| accept. rate | accept. len | server CPU s / wall s |")
    lines = [head, "|" + "---|" * 10]

    def f(x, nd=1):
        return "–" if x is None else f"{x:.{nd}f}"

    for r in rows:
        lines.append(f"| {r.get('label', '')} | {r['max_concurrency']} | {r['completed']}/{r['failed']} "
                     f"| {f(r['output_throughput'])} | {f(r['median_ttft_ms'], 0)} / {f(r['p99_ttft_ms'], 0)} "
                     f"| {f(r['median_tpot_ms'])} / {f(r['p99_tpot_ms'])} | {f(r['median_itl_ms'])} "
                     f"| {f(r.get('spec_decode_acceptance_rate'), 3)} | {f(r.get('spec_decode_acceptance_length'), 2)} "
                     f"| {f(r.get('server_cpu_seconds'))} / {f(r['duration'])} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> str:
    """Output tok/s, TPOT p50 and TTFT p50 against concurrency, one line per label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8), dpi=100)
    FigureCanvasAgg(fig)
    panels = [("output_throughput", "output tok/s"), ("median_tpot_ms", "TPOT p50 (ms)"),
              ("median_ttft_ms", "TTFT p50 (ms)")]
    labels = list(dict.fromkeys(r.get("label", "") for r in rows))
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        for label in labels:
            pts = [(r["max_concurrency"], r[key]) for r in rows if r.get("label", "") == label and r[key] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label or "run")
        ax.set_xscale("log", base=2)
        levels = sorted({r["max_concurrency"] for r in rows if r["max_concurrency"]})
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    fig.tight_layout()
    import io

    from ..outputs import replace_file

    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # rendered in memory, then published atomically: never a half-written PNG
    replace_file(path, buf.getvalue())
    return path
