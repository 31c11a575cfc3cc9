"""bench/adaptive.py's command line: its flags, their help, and every check that refuses a wrong combination before
any engine is built (split out of bench/adaptive.py to keep both files short; `bench.adaptive.parse_args` re-exports
it)."""

from __future__ import annotations

import argparse
import json

from adaspec.calibration.schema import DraftStepPolicy
from bench import common
from bench.adaptive_configs import STEP_FAMILIES, all_configs, config_kind
from bench.adaptive_interleaved import interleave_error


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="adaptive draft step / adaptive target verify vs every fixed setting, plain and an oracle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", default="all",
                   help="comma-separated configuration names (see the module docstring) or 'all'; plain is always "
                        "added (baseline and greedy reference)")
    p.add_argument("--k_max", type=int, default=5,
                   help="k_max of the draft-step families, MTP and MTP+Suffix (fixed k = 1..k_max)")
    p.add_argument("--batch_sizes", default="1,4,8,16", help="comma-separated: most requests running at once")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    p.add_argument("--sources", default="code,chat,prose,mixed",
                   help="comma-separated held-out prompt streams: code, chat, prose, mixed (interleaves the three), "
                        "copy (the held-out copy-heavy set), staggered (the mixed stream with staggered arrivals, "
                        "--arrival_gap)")
    p.add_argument("--arrival_gap", type=float, default=2.0,
                   help="the staggered stream: request i arrives i x this many seconds of process CPU time after "
                        "the start, so requests join and leave a batch of changing size")
    p.add_argument("--num_prompts", type=int, default=6,
                   help="prompts per stream; a stream has max(num_prompts, B) prompts")
    p.add_argument("--max_tokens", type=int, default=48, help="new tokens per request at most (greedy)")
    p.add_argument("--ignore_eos", action="store_true", help="generate exactly --max_tokens tokens per request")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy; > 0: random sampling with per-request seeds (seeded output is reproduced "
                        "exactly under speculation, so '= plain' and the oracle still apply)")
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
                        "a small calibration the bench writes (request buckets = batch sizes and the CPU default buckets 1, 4, 16, ... "
                        "below them, one context "
                        "range prefill 192 / KV 1..512, 2 warm-up rounds, 3 windows of 8 rounds per point (2 x 6 until 12-04: too few to price k = 1 at B = 16 the same way in every process); adaptive-verify "
                        "target rows per bucket B: the prepared buckets covering B, 2B, 4B and B(w+1))")
    p.add_argument("--table_dir", default=None,
                   help="directory for the saved adaptive-verify cost tables (default: a fresh temporary directory)")
    p.add_argument("--reset_controllers", default="true", choices=("true", "false"),
                   help="rebuild the adaptive controllers (same table and policy) before every run")
    p.add_argument("--max_model_len", type=int, default=1024,
                   help="context limit per request (KV cache size); must cover the calibration's max_kv_length (the draft "
                        "step's default calibration runs 106 rounds of k_max + 1 tokens from a 192-token prefill, up to it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 recommended, see NOTES.md)")
    p.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                   help="clock for tokens/s ratios: process CPU time (robust on a shared core) or wall time")
    p.add_argument("--plot_dir", default=str(common.RESULTS_DIR),
                   help="PNG plots (tokens/s per configuration per batch size) go here; empty: no plots")
    p.add_argument("--json_out", default=None, help="write every measurement and the summary to this JSON file")
    p.add_argument("--isolate", action="store_true",
                   help="run every measurement in a fresh child process (in one process, which engine was built "
                        "when moves a run by up to ~7%%; bench/adaptive_isolated.py)")
    p.add_argument("--paired", action="store_true",
                   help="with --isolate: each child builds plain and one other configuration (build order "
                        "alternating), serves them A B B A, and the tables add the median over children of each "
                        "child's ratio to its own plain runs (--repeats children per configuration and cell)")
    p.add_argument("--alt_step_policy", default="{}",
                   help="JSON object of draft-step policy fields (--adaptive_draft_step_config's \"policy\") for the "
                        "`mtp_step_alt` configuration, e.g. '{\"closed_batch\": true}': a policy change against the default "
                        "`mtp_step` in one run")
    p.add_argument("--alt_shares_table", action="store_true",
                   help="price `mtp_step_alt` by `mtp_step`'s start-up table (its own policy kept): a policy A/B "
                        "without the tables' variance between engines (needs both in --configs)")
    p.add_argument("--interleave", action="store_true",
                   help="serve every configuration of a repeat at once, one round of each in turn, each timed by its "
                        "own rounds; the paired table's ratios are then per repeat (bench/adaptive_interleaved.py)")
    p.add_argument("--child_spec", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.paired and not args.isolate:
        p.error("--paired needs --isolate (the pairs are fresh child processes)")
    names = all_configs(args.k_max) if args.configs == "all" else common.parse_list(args.configs, str, name="configs")
    for n in names:
        config_kind(n)
        for fam in STEP_FAMILIES.values():
            k = n[len(fam.fixed):]
            if n.startswith(fam.fixed) and not (k.isdigit() and 1 <= int(k) <= args.k_max):
                p.error(f"--configs: {n} is outside k = 1..--k_max ({args.k_max})")
    names = ["mtp_k5" if n == "mtp5_full" else n for n in names]  # one engine, one measurement
    names = ["plain"] + [n for n in dict.fromkeys(names) if n != "plain"]
    oracles = [n for n in names if (config_kind(n)["hook"] or ("",))[0] == "oracle"]
    if args.paired and oracles:
        p.error(f"--paired does not measure oracle configurations ({', '.join(oracles)}: their reference is the "
                "plain run of the cell); measure them with --isolate alone")
    if any(n.startswith("mtp5") for n in names) and args.k_max < 5:
        p.error("the mtp5 family needs --k_max >= 5 (its full-width engine is mtp_k5)")
    # the oracle needs its full-width engine, measured or not
    args.configs = names
    args.batch_sizes = sorted(common.parse_list(args.batch_sizes, int, name="batch_sizes"))
    args.dtypes = common.parse_list(args.dtypes, str, ("float32", "bfloat16"), name="dtypes")
    args.sources = common.parse_list(args.sources, str, ("code", "chat", "prose", "mixed", "copy", "staggered"),
                                     name="sources")
    if not (0 < args.arrival_gap < float("inf")):
        p.error(f"--arrival_gap must be a finite number of seconds > 0, got {args.arrival_gap}")
    if not (args.temperature >= 0 and args.temperature < float("inf")):
        p.error(f"--temperature must be a finite number >= 0, got {args.temperature}")
    for name in ("num_prompts", "max_tokens", "repeats", "threads", "prompt_tokens", "k_max"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    args.reset_controllers = args.reset_controllers == "true"
    try:
        alt = json.loads(args.alt_step_policy)
        if not isinstance(alt, dict):
            raise ValueError("not a JSON object of policy fields")
        DraftStepPolicy.model_validate(alt)  # the config file's schema: a wrong field is named here, before any engine
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        p.error(f"--alt_step_policy: {e}")
    if args.interleave and (why := interleave_error(args)):
        p.error(why)
    if args.alt_shares_table and not {"mtp_step", "mtp_step_alt"} <= set(names):
        p.error("--alt_shares_table prices mtp_step_alt by mtp_step's table: add both to --configs, or drop the flag")
    if args.alt_shares_table and args.isolate:
        p.error("--alt_shares_table shares a table between engines of one process: drop --isolate (or the flag)")
    return args
