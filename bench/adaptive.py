"""Adaptive control vs every fixed setting, with an oracle ceiling (issue 5, item 6; R-I3).

In one process, on held-out prompts (code, chat, prose, and a mixed stream interleaving the three;
`adaspec.training.corpus.heldout_prompts`, text the draft trainer never reads), greedy:

- MTP draft step: adaptive (`enable_adaptive_draft_step`) vs every fixed k = 1..k_max and plain;
- adaptive target verify for DSpark w=7 and MTP w=5: synchronous (`enable_adaptive_target_verify`)
  and asynchronous (`+ enable_schedule_overlap`) vs full width, vs every fixed verify length
  L < w (the draft still proposes w tokens, the target verifies min(L, cap) of them), and vs an
  **oracle** that verifies exactly the draft tokens that the target will accept.

Configuration names (--configs): `plain`, `mtp_k1`..`mtp_kK` (fixed k; `mtp_kK` with K = w = 5 is
also MTP w=5 full width), `mtp_step` (adaptive draft step), and per verify family F in
{`dspark7`, `mtp5`}: `F_full`, `F_L1`..`F_L{w-1}`, `F_sync`, `F_async`, `F_oracle`
(`mtp5_full` is the `mtp_k5` engine, measured once).

Bench-side hooks (nothing in adaspec/ is changed):
- fixed verify length L: the full-width engine's `plan` is wrapped to return
  `RoundPlan(w, min(L, cap) per request)`;
- oracle: first the plain engine serves the stream (the greedy reference continuation of every
  prompt); then the full-width engine runs with `RoundPlan(w, caps, "sync")`, a drafter wrapper that
  records the round's drafted tokens, and an admission object with the `admit(P, round_id=,
  max_lens=, kv_len=)` method `RoundRunner._admit` calls in "sync" mode, which verifies exactly the
  longest drafted prefix that matches the reference (so every verified row is accepted, in float32);
- controller time: the adaptive engine's `control.plan`, `control.observe` and the verify
  controller's `admit` / `allocate` are wrapped with timers; share = their time / run time;
- controllers are rebuilt fresh (same table and policy) before every run (--reset_controllers),
  so a run does not start from another stream's feedback.

Calibration: adaptive engines calibrate at start-up. The bench gives them a small explicit
calibration (--calibration_json; default written by the bench: request buckets = batch sizes, one
context range, few steps), calibrates each adaptive-verify (algorithm, width, dtype) once, saves
the table (`adaptive_target_verify_cost_table_output`) and loads it for the asynchronous engine
(`adaptive_target_verify_cost_table`). Adaptive draft step cannot load tables (R-C3): it calibrates
with the same small calibration through `adaptive_draft_step_config`. Calibration time and the
table's held-out error (`table.metadata.heldout`) are reported.

Timing: one measurement = a whole prompt stream (max(--num_prompts, B) prompts, prefill included)
with continuous batching, at most B requests running. Configurations alternate order across
repeats; medians. Wall and process-CPU clocks; ratios use --clock. TPOT = (finish - first token) /
(tokens - 1) per request, median over requests (wall clock).

    taskset -c 0 python bench/adaptive.py --batch_sizes=1,4,8,16 --dtypes=float32 --sources=mixed \
        --num_prompts=6 --max_tokens=48 --repeats=1 --json_out=bench/results/adaptive.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import fmt, fmt_hist, fmt_ratio, log, markdown_table, median  # noqa: E402

VERIFY_FAMILIES = {"dspark7": ("DSpark", 7), "mtp5": ("MTP", 5)}


# ---- configuration names ----------------------------------------------------------------------------
def all_configs(k_max: int) -> list[str]:
    names = ["plain"] + [f"mtp_k{k}" for k in range(1, k_max + 1)] + ["mtp_step"]
    for fam, (_, w) in VERIFY_FAMILIES.items():
        names += [f"{fam}_full"] + [f"{fam}_L{L}" for L in range(1, w)] + [f"{fam}_sync", f"{fam}_async", f"{fam}_oracle"]
    return names


def config_kind(name: str) -> dict:
    """What a configuration name means: engine, hook, family."""
    if name == "plain":
        return {"engine": "plain", "hook": None, "family": None}
    if name.startswith("mtp_k"):
        return {"engine": name, "hook": None, "family": "mtp_step"}
    if name == "mtp_step":
        return {"engine": "mtp_step", "hook": None, "family": "mtp_step"}
    fam, _, rest = name.partition("_")
    if fam not in VERIFY_FAMILIES:
        raise SystemExit(f"--configs: unknown configuration {name!r}")
    w = VERIFY_FAMILIES[fam][1]
    full_engine = f"mtp_k{w}" if fam == "mtp5" else f"{fam}_full"
    if rest == "full":
        return {"engine": full_engine, "hook": None, "family": fam}
    if rest in ("sync", "async"):
        return {"engine": name, "hook": None, "family": fam}
    if rest == "oracle":
        return {"engine": full_engine, "hook": ("oracle", None), "family": fam}
    if rest.startswith("L") and rest[1:].isdigit() and 1 <= int(rest[1:]) < w:
        return {"engine": full_engine, "hook": ("prefix", int(rest[1:])), "family": fam}
    raise SystemExit(f"--configs: unknown configuration {name!r}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="adaptive draft step / adaptive target verify vs every fixed setting, plain and an oracle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="all",
                   help="comma-separated configuration names (see the module docstring) or 'all'; plain is always "
                        "added (baseline and greedy reference)")
    p.add_argument("--k_max", type=int, default=5, help="MTP k_max of the draft-step family (fixed k = 1..k_max)")
    p.add_argument("--batch_sizes", default="1,4,8,16", help="comma-separated: most requests running at once")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    p.add_argument("--sources", default="code,chat,prose,mixed",
                   help="comma-separated held-out prompt streams: code, chat, prose, mixed (interleaves the three)")
    p.add_argument("--num_prompts", type=int, default=6,
                   help="prompts per stream; a stream has max(num_prompts, B) prompts")
    p.add_argument("--max_tokens", type=int, default=48, help="new tokens per request at most (greedy)")
    p.add_argument("--ignore_eos", action="store_true", help="generate exactly --max_tokens tokens per request")
    p.add_argument("--repeats", type=int, default=1,
                   help="measurements per configuration and cell, alternating the order; medians are reported")
    p.add_argument("--prompt_tokens", type=int, default=192, help="prompts are cut to this many tokens")
    p.add_argument("--chat_template", default="auto", choices=("auto", "all", "none"),
                   help="auto: chat prompts with the chat template, code/prose raw (as in draft training)")
    p.add_argument("--mtp_draft", default=None, help="MTP draft directory (default: the shipped draft)")
    p.add_argument("--dspark_draft", default=None, help="DSpark draft directory (default: the shipped draft)")
    p.add_argument("--calibration_json", default=None,
                   help="calibration fields (R-F3 subset: model, request_buckets, contexts, warmup_steps, "
                        "window_steps, windows_per_point, token_seed) used for every adaptive engine; default: "
                        "a small calibration the bench writes (request buckets = batch sizes, one context "
                        "range prefill 192 / KV 1..512, 1 warm-up round, 2 windows of 6 rounds per point; adaptive-verify "
                        "target rows per bucket B: the prepared buckets covering B, 2B, 4B and B(w+1))")
    p.add_argument("--table_dir", default=None,
                   help="directory for the saved adaptive-verify cost tables (default: a fresh temporary directory)")
    p.add_argument("--reset_controllers", default="true", choices=("true", "false"),
                   help="rebuild the adaptive controllers (same table and policy) before every run")
    p.add_argument("--max_model_len", type=int, default=512,
                   help="context limit per request (KV cache size); must cover the calibration's max_kv_length")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 recommended, see NOTES.md)")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                   help="clock for tokens/s ratios: process CPU time (robust on a shared core) or wall time")
    p.add_argument("--plot_dir", default=str(common.RESULTS_DIR),
                   help="PNG plots (tokens/s per configuration per batch size) go here; empty: no plots")
    p.add_argument("--json_out", default=None, help="write every measurement and the summary to this JSON file")
    args = p.parse_args(argv)
    names = all_configs(args.k_max) if args.configs == "all" else common.parse_list(args.configs, str, name="configs")
    for n in names:
        config_kind(n)
        if n.startswith("mtp_k") and not (n[5:].isdigit() and 1 <= int(n[5:]) <= args.k_max):
            p.error(f"--configs: {n} is outside k = 1..--k_max ({args.k_max})")
    names = ["mtp_k5" if n == "mtp5_full" else n for n in names]  # one engine, one measurement
    names = ["plain"] + [n for n in dict.fromkeys(names) if n != "plain"]
    if any(n.startswith("mtp5") for n in names) and args.k_max < 5:
        p.error("the mtp5 family needs --k_max >= 5 (its full-width engine is mtp_k5)")
    # the oracle needs its full-width engine, measured or not
    args.configs = names
    args.batch_sizes = sorted(common.parse_list(args.batch_sizes, int, name="batch_sizes"))
    args.dtypes = common.parse_list(args.dtypes, str, ("float32", "bfloat16"), name="dtypes")
    args.sources = common.parse_list(args.sources, str, ("code", "chat", "prose", "mixed"), name="sources")
    for name in ("num_prompts", "max_tokens", "repeats", "threads", "prompt_tokens", "k_max"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    args.reset_controllers = args.reset_controllers == "true"
    return args


# ---- calibration files --------------------------------------------------------------------------------
DEFAULT_CALIBRATION = {"model": "additive",
                       "contexts": [{"prefill_tokens": 192, "min_kv_length": 1, "max_kv_length": 512}],
                       "warmup_steps": 1, "window_steps": 6, "windows_per_point": 2}


def calibration_fields(args) -> dict:
    """The calibration fields shared by every adaptive engine (request buckets default to the batch sizes)."""
    data = json.loads(Path(args.calibration_json).read_text()) if args.calibration_json else dict(DEFAULT_CALIBRATION)
    data.setdefault("request_buckets", list(args.batch_sizes))
    return data


def sparse_target_rows(buckets, width: int) -> dict[str, list[int]]:
    """Per request bucket B, the prepared target-row buckets covering B, 2B, 4B and B(w+1) (the R-F6
    bindings): the additive model interpolates theta(G) between them, and the grid stays connected
    through shared G values. Used only with the bench's default calibration."""
    try:
        from adaspec.geometry import PreparedGeometry
    except ImportError:  # older layout
        from adaspec.runner.buckets import PreparedGeometry

    geometry = PreparedGeometry.build(list(buckets), width)
    out = {}
    for b in buckets:
        out[str(b)] = sorted({g for x in (b, 2 * b, 4 * b, b * (width + 1))
                              if (g := geometry.pad_rows(b, x)) is not None})
    return out


def write_calibration_files(args, workdir: Path) -> dict:
    """{"step": draft-step config file, fam: verify calibration file per verify family}."""
    fields = calibration_fields(args)
    files = {}
    for fam, (_, w) in VERIFY_FAMILIES.items():
        data = dict(fields)
        if not args.calibration_json:
            data["target_graph_rows"] = sparse_target_rows(data["request_buckets"], w)
        files[fam] = workdir / f"verify_calibration_{fam}.json"
        files[fam].write_text(json.dumps(data, indent=1))
    step_fields = {k: v for k, v in fields.items() if k not in ("draft_width", "target_graph_rows")}
    if not args.calibration_json:
        step_fields.pop("model", None)  # the engine's draft-step default (per-bucket sps)
    files["step"] = workdir / "draft_step_config.json"
    files["step"].write_text(json.dumps({"version": 1, "calibration": step_fields}, indent=1))
    return files


# ---- engines -----------------------------------------------------------------------------------------
def build_engines(args, dtype: str, files: dict, table_dir: Path) -> tuple[dict, dict]:
    """{engine name: LLM}, {engine name: calibration record}."""
    need = {config_kind(n)["engine"] for n in args.configs}
    engines, calib = {}, {}
    base = dict(max_seqs=max(args.batch_sizes), max_model_len=args.max_model_len, threads=args.threads)
    adaptive_geometry = dict(graph_decode_batch_sizes=tuple(args.batch_sizes))

    def add(name, algo, width, **flags):
        draft = args.mtp_draft if algo == "MTP" else args.dspark_draft if algo == "DSpark" else None
        t0 = time.perf_counter()
        engines[name] = common.build_llm(dtype, algo, width, draft, **base, **flags)
        took = time.perf_counter() - t0
        ctl = engines[name].engine.control
        if ctl is not None:
            heldout = ctl.table.metadata.heldout or {}
            calib[name] = {"startup_s": took, "calibration_seconds": ctl.calibration_seconds,
                           "source": ctl.table.source or "calibrated now",
                           "heldout_median_rel_error": heldout.get("median_rel_error"),
                           "heldout_max_rel_error": heldout.get("max_rel_error"),
                           "model": ctl.table.model.kind if hasattr(ctl.table.model, "kind") else None,
                           "coverage": ctl.table.coverage_lines()}
            err = calib[name]["heldout_median_rel_error"]
            log(f"[bench] {dtype} {name}: start-up incl. warm-up/calibration {took:.1f} s "
                f"(control {ctl.calibration_seconds:.1f} s, {calib[name]['source']}), held-out median error "
                f"{'n/a' if err is None else f'{100 * err:.1f}%'}")
        else:
            log(f"[bench] {dtype} {name}: engine ready in {took:.1f} s")

    if "plain" in need:
        add("plain", "none", None)
    for k in range(1, args.k_max + 1):
        if f"mtp_k{k}" in need:
            add(f"mtp_k{k}", "MTP", k)
    if "mtp_step" in need:
        add("mtp_step", "MTP", args.k_max, enable_adaptive_draft_step=True,
            adaptive_draft_step_config=str(files["step"]), **adaptive_geometry)
    for fam, (algo, w) in VERIFY_FAMILIES.items():
        if fam == "dspark7" and f"{fam}_full" in need:
            add(f"{fam}_full", algo, w)
        table = table_dir / f"{fam}_{dtype}.json"
        for mode in ("sync", "async"):
            name = f"{fam}_{mode}"
            if name not in need:
                continue
            flags = dict(enable_adaptive_target_verify=True, **adaptive_geometry)
            if mode == "async":
                flags["enable_schedule_overlap"] = True
            if table.exists():
                flags["adaptive_target_verify_cost_table"] = str(table)
            else:
                flags["adaptive_target_verify_calibration"] = str(files[fam])
                flags["adaptive_target_verify_cost_table_output"] = str(table)
            add(name, algo, w, **flags)
    return engines, calib


# ---- bench-side hooks -----------------------------------------------------------------------------------
class RecordingDrafter:
    """Delegates to the engine's drafter and keeps the last round's (DraftBatch, DraftOutput)."""

    def __init__(self, inner):
        self.inner = inner
        self.last = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, batch):
        out = self.inner.draft(batch)
        self.last = (batch, out)
        return out


class OracleAdmission:
    """Sync-mode admission that verifies exactly the drafted prefix matching the greedy reference."""

    def __init__(self, engine, recorder: RecordingDrafter, reference: dict[tuple, list[int]]):
        self.engine, self.recorder, self.reference = engine, recorder, reference
        self.missing = 0

    def admit(self, P, round_id=None, max_lens=None, kv_len=None) -> list[int]:
        batch, out = self.recorder.last
        drafted = out.tokens.tolist()
        by_slot = {r.slot: r for r in self.engine.requests.values() if r.slot is not None and not r.finished}
        lens = []
        for b, slot in enumerate(batch.slots):
            req = by_slot[slot]
            ref = self.reference.get(tuple(req.prompt_token_ids))
            cap = len(drafted[b]) if max_lens is None else int(max_lens[b])
            j0, m = len(req.output_token_ids), 0  # next output index: the first drafted token's place
            if ref is None:
                self.missing += 1
            else:
                while m < cap and j0 + m < len(ref) and drafted[b][m] == ref[j0 + m]:
                    m += 1
            lens.append(m)
        return lens


class Hook:
    """Install a fixed-prefix or oracle plan on a full-width engine for one run (context manager)."""

    def __init__(self, llm, kind: str, L: int | None = None, reference: dict | None = None):
        self.llm, self.kind, self.L, self.reference = llm, kind, L, reference

    def __enter__(self):
        from adaspec.rounds import RoundPlan

        eng = self.llm.engine
        orig = type(eng).plan
        if self.kind == "prefix":
            L = self.L

            def plan(batch, round_id=None):
                p = orig(eng, batch, round_id)
                if not p.num_steps:
                    return p
                return RoundPlan(p.num_steps, tuple(min(L, c) for c in p.verify_lens), round_id=p.round_id)
        else:
            self.recorder = RecordingDrafter(eng.rounds.drafter)
            eng.rounds.drafter = self.recorder
            self.oracle = OracleAdmission(eng, self.recorder, self.reference)
            eng.rounds.verify_controller = self.oracle

            def plan(batch, round_id=None):
                p = orig(eng, batch, round_id)
                if not p.num_steps:
                    return p
                return RoundPlan(p.num_steps, p.verify_lens, "sync", round_id=p.round_id)
        eng.plan = plan
        return self

    def __exit__(self, *exc):
        eng = self.llm.engine
        del eng.plan
        if self.kind == "oracle":
            eng.rounds.drafter = self.recorder.inner
            eng.rounds.verify_controller = None
        return False


class ControllerTimer:
    """Wraps the adaptive controller's entry points (plan, observe, admit, allocate) with timers."""

    def __init__(self, llm):
        self.seconds, self.calls = 0.0, 0
        ctl = llm.engine.control
        self._wrap(ctl, "plan")
        self._wrap(ctl, "observe")
        if ctl.verify is not None:
            self._wrap(ctl.verify, "admit")
            self._wrap(ctl.verify, "allocate")

    def _wrap(self, obj, name):
        f = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        setattr(obj, name, timed)


def fresh_controllers(llm) -> None:
    """New controllers with the same table, policy, geometry and lag (no feedback from earlier runs)."""
    from adaspec.adaptive.step_controller import DraftStepController
    from adaspec.adaptive.verify_controller import VerifyController

    eng = llm.engine
    ctl = eng.control
    if ctl.step is not None:
        s = ctl.step
        ctl.step = DraftStepController(s.k_max, s.policy, s.cost_ms, s.pad_requests, allow_zero=s.allow_zero,
                                       lag=ctl.lag, probe_interval=s.probe_interval, covers=s.covers)
    if ctl.verify is not None:
        v = ctl.verify
        ctl.verify = VerifyController(v.width, v.cost_ms, v.pad_requests, v.target_buckets, v.pad_rows,
                                      mode=v.mode, lag=ctl.lag, covers=v.covers)
        eng.rounds.verify_controller = ctl.verify

def unwrap_timers(llm) -> None:
    """Drop the timer wrappers of an earlier run (instance attributes shadowing the methods)."""
    ctl = llm.engine.control
    for obj, attrs in ((ctl, ("plan", "observe")), (ctl.verify, ("admit", "allocate"))):
        if obj is not None:
            for attr in attrs:
                obj.__dict__.pop(attr, None)


def measure(args, llm, name: str, stream, B: int, reference: dict | None):
    kind = config_kind(name)
    ctl = llm.engine.control
    timer = None
    if ctl is not None:
        unwrap_timers(llm)
        if args.reset_controllers:
            fresh_controllers(llm)
        before = Counter(ctl.step.k_histogram if ctl.step is not None else ctl.verify.g_histogram)
        timer = ControllerTimer(llm)
    hook = kind["hook"]
    if hook is None:
        run = common.serve(llm, stream, B, args.max_tokens, args.ignore_eos)
    elif hook[0] == "prefix":
        with Hook(llm, "prefix", L=hook[1]):
            run = common.serve(llm, stream, B, args.max_tokens, args.ignore_eos)
    else:
        with Hook(llm, "oracle", reference=reference) as h:
            run = common.serve(llm, stream, B, args.max_tokens, args.ignore_eos)
        run.extra["oracle_missing_reference"] = h.oracle.missing
    run.config = name
    if ctl is not None:
        after = Counter(ctl.step.k_histogram if ctl.step is not None else ctl.verify.g_histogram)
        run.extra["chosen"] = {str(k): v for k, v in sorted((after - before).items())}
        run.extra["chosen_axis"] = "k" if ctl.step is not None else "G"
        run.extra["controller_s"] = timer.seconds
        run.extra["controller_calls"] = timer.calls
        run.extra["controller_share"] = timer.seconds / run.wall_s if run.wall_s else None
    return run


# ---- summary ------------------------------------------------------------------------------------------
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


def family_members(fam: str, names, k_max: int) -> dict:
    """fixed settings, full width, oracle and adaptive configurations of a family that were measured."""
    names = set(names)
    if fam == "mtp_step":
        fixed = ["plain"] + [f"mtp_k{k}" for k in range(1, k_max + 1)]
        return {"fixed": [n for n in fixed if n in names], "full": f"mtp_k{k_max}", "oracle": "mtp5_oracle",
                "adaptive": [n for n in ("mtp_step",) if n in names]}
    w = VERIFY_FAMILIES[fam][1]
    full = f"mtp_k{w}" if fam == "mtp5" else f"{fam}_full"
    fixed = [full] + [f"{fam}_L{L}" for L in range(1, w)]
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
        for fam in ("mtp_step", "dspark7", "mtp5"):
            m = family_members(fam, measured, args.k_max)
            fixed = [rows[n] for n in m["fixed"] if n in rows]
            for a in m["adaptive"]:
                if a not in rows:
                    continue
                r = rows[a]
                best = max(fixed, key=lambda x: x["tok_s"]) if fixed else None
                full = rows.get(m["full"])
                oracle = rows.get(m["oracle"])
                out.append({
                    "dtype": dtype, "source": source, "batch_size": B, "adaptive": a,
                    "tok_s": r["tok_s"], "best_fixed": best["config"] if best else None,
                    "best_fixed_tok_s": best["tok_s"] if best else None,
                    "vs_best_fixed": r["tok_s"] / best["tok_s"] if best else None,
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
                        "rows/req", "chosen k / G", "ctrl time", "= plain"]
                body = []
                for n, r in cells[k].items():
                    eq = r["equal_to_plain"]
                    body.append([display_name(n), fmt(r["wall_tok_s"]), fmt(r["cpu_tok_s"]), fmt_ratio(r["ratio_to_plain"]),
                                 fmt(r["tpot_ms"]), fmt(r["acceptance_rate"], 2), fmt(r["acceptance_length"], 2),
                                 fmt(r["rows_per_request"], 2),
                                 (f"{r['chosen_axis']} " + fmt_hist(r["chosen"])) if r["chosen"] else "–",
                                 fmt(100 * r["controller_share"], 2, "%") if r["controller_share"] is not None else "–",
                                 f"{eq['equal']}/{eq['sequences']}"])
                print(markdown_table(head, body, "l" + "r" * 7 + "lrr"))
    if targets:
        print(f"\n### adaptive vs best fixed (in hindsight, per batch size), full width and oracle ({clock} clock)\n")
        head = ["dtype", "source", "B", "adaptive", "tok/s", "best fixed", "÷ best fixed", "÷ full width", "÷ oracle",
                "× plain", "ctrl time"]
        body = [[t["dtype"], t["source"], t["batch_size"], t["adaptive"], fmt(t["tok_s"]),
                 f"{display_name(t['best_fixed'])} {fmt(t['best_fixed_tok_s'])}" if t["best_fixed"] else "–",
                 fmt_ratio(t["vs_best_fixed"]), fmt_ratio(t["vs_full_width"]), fmt_ratio(t["vs_oracle"]),
                 fmt_ratio(t["vs_plain"]),
                 fmt(100 * t["controller_share"], 2, "%") if t["controller_share"] is not None else "–"]
                for t in targets]
        print(markdown_table(head, body, "llrl" + "r" * 7))
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
            fams = [f for f in ("mtp_step", "dspark7", "mtp5")
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
                lines += [(m["full"], dict(color="C0", lw=1.5)), (m["oracle"], dict(color="C2", ls="--", lw=1.5))]
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
                ax.set_title({"mtp_step": "MTP adaptive draft step", "dspark7": "DSpark w=7 adaptive verify",
                              "mtp5": "MTP w=5 adaptive verify"}[fam], fontsize=9)
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=6, loc="upper left")
            fig.tight_layout()
            path = out_dir / f"adaptive_{dtype}_{source}.png"
            fig.savefig(path, format="png")
            written.append(str(path))
    return written


# ---- main ---------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    args = parse_args(argv)
    common.setup_threads(args.threads)
    common.share_target_weights()
    info = common.run_info(args)
    print(f"# adaptive control bench: {info['machine']}; torch {info['torch']}; {info['date']}", flush=True)
    print(f"# configs={','.join(args.configs)}", flush=True)
    print(f"# batch_sizes={args.batch_sizes} dtypes={args.dtypes} sources={args.sources} num_prompts={args.num_prompts} "
          f"max_tokens={args.max_tokens} repeats={args.repeats} clock={args.clock}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="adaspec_bench_"))
    table_dir = Path(args.table_dir) if args.table_dir else workdir
    table_dir.mkdir(parents=True, exist_ok=True)
    files = write_calibration_files(args, workdir)
    for key, f in files.items():
        print(f"# calibration file ({key}): {json.dumps(json.loads(f.read_text()))}", flush=True)
    print(f"# cost tables saved to / loaded from {table_dir}", flush=True)
    t_start = time.perf_counter()
    cells: dict = {}
    calib_all: dict = {}
    needs_reference = any(config_kind(n)["hook"] and config_kind(n)["hook"][0] == "oracle" for n in args.configs)
    for dtype in args.dtypes:
        engines, calib = build_engines(args, dtype, files, table_dir)
        calib_all.update({(dtype, n): c for n, c in calib.items()})
        tok = engines["plain"].tokenizer
        n_max = max(args.num_prompts, max(args.batch_sizes))
        sets = common.prompt_sets(tok, args.sources, n_max, args.prompt_tokens, args.chat_template)
        warm = sets[args.sources[0]][: max(args.batch_sizes)]
        for name, llm in engines.items():
            common.serve(llm, warm, max(args.batch_sizes), 4)
        for B in args.batch_sizes:
            for source in args.sources:
                stream = sets[source][: max(args.num_prompts, B)]
                runs: dict[str, list] = {n: [] for n in args.configs}
                reference = None
                for rep in range(args.repeats):
                    order = args.configs if rep % 2 == 0 else args.configs[::-1]
                    if reference is None and needs_reference and order[0] != "plain":
                        order = ["plain"] + [n for n in order if n != "plain"]
                    for name in order:
                        llm = engines[config_kind(name)["engine"]]
                        run = measure(args, llm, name, stream, B, reference)
                        runs[name].append(run)
                        if name == "plain" and reference is None:
                            reference = {p.ids: o for p, o in zip(stream, run.outputs)}
                        acc = run.stats["mean_acceptance_length"]
                        extra = ""
                        if "chosen" in run.extra:
                            extra = (f", {run.extra['chosen_axis']} {fmt_hist(run.extra['chosen'])}, controller "
                                     f"{100 * run.extra['controller_share']:.2f}%")
                        log(f"  [{time.perf_counter() - t_start:6.0f} s] {dtype} B={B} {source} rep {rep + 1} "
                            f"{name:14s} {run.tokens} tok {run.wall_s:6.2f} s wall / {run.cpu_s:6.2f} s CPU = "
                            f"{run.tokens / run.cpu_s:6.1f} tok/s CPU" + (f", acc. length {acc:.2f}" if acc else "")
                            + extra)
                cells[(dtype, source, B)] = summarize_cell(args, dtype, B, source, runs)
        del engines
        common.drop_shared_weights()

    targets = target_rows(args, cells)
    print_tables(args, cells, targets, calib_all)
    plots = plot(args, cells, Path(args.plot_dir)) if args.plot_dir else []
    for pth in plots:
        print(f"plot: {pth}")
    mism = [r for c in cells.values() for r in c.values() if r["dtype"] == "float32" and r["config"] != "plain"
            and r["equal_to_plain"]["equal"] != r["equal_to_plain"]["sequences"]]
    print(f"\nfloat32 exactness: {'all runs equal plain greedy' if not mism else f'{len(mism)} MISMATCH cells'}; "
          f"total time {time.perf_counter() - t_start:.0f} s")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        payload = {"info": info, "calibration_files": {k: json.loads(f.read_text()) for k, f in files.items()},
                   "calibration": [{"dtype": d, "engine": n, **c} for (d, n), c in calib_all.items()],
                   "results": [r for c in cells.values() for r in c.values()], "targets": targets, "plots": plots}
        Path(args.json_out).write_text(json.dumps(payload, indent=1, default=str))
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
