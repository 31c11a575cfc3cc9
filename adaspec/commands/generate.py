"""`adaspec generate`: read and check every prompt and flag, then load, then generate.

Order (issue 8): sampling flags -> prompts (files read and parsed) -> engine flags -> preflight
(every named file, output path, model config, tokenizer, calibration) -> the prompts tokenised and
checked against the context limit and chat template -> only then the weights load, warm-up and
calibration run, and the checked requests are generated.
"""

from __future__ import annotations

import json
import sys
import time

from ..errors import RequestError, UserError
from ..models.tokenizer import NoChatTemplateError
from ..preflight import preflight
from ..preflight.requests import check_prompt
from ..sampling_params import SamplingParams, SamplingParamsError, params_error
from .prompts import prompt_ids, read_prompts

SAMPLING_FLAGS = {f: f"--{f}" for f in ("temperature", "top_k", "top_p", "min_p", "max_tokens", "stop")}


def sampling_params(args) -> SamplingParams:
    try:
        return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p, min_p=args.min_p, stop=args.stop)
    except SamplingParamsError as e:
        raise params_error(e.validation_error, SAMPLING_FLAGS) from None


def sampling_warnings(params: SamplingParams) -> list[str]:
    """Sampling flags that greedy decoding ignores (README: warned, not refused)."""
    if not params.is_greedy:
        return []
    ignored = [f"--{name}={getattr(params, name)}" for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0))
               if getattr(params, name) != off]
    return [f"{', '.join(ignored)} has no effect with --temperature=0 (greedy takes the most likely token)"] \
        if ignored else []


def warn(command: str, lines) -> None:
    for line in lines:
        print(f"adaspec {command}: warning: {line}", file=sys.stderr)


# flags that fix the prepared geometry or its costs: with any of them the slots stay as asked
_GEOMETRY_FLAGS = ("graph_decode_batch_sizes", "adaptive_target_verify_calibration",
                   "adaptive_draft_step_config", "adaptive_target_verify_cost_table",
                   "adaptive_target_verify_cost_table_output")


def slots_for_prompts(config, num_prompts: int) -> tuple[int | None, str | None]:
    """(slots, note): a generate run never has more requests at once than it has prompts, so with
    fewer prompts than --max_seqs_per_batch the engine gets one slot per prompt (preflight checks the
    flags as given, then builds the engine with these). Fewer slots mean a smaller KV cache and, with
    adaptive speculation on a CPU, fewer request buckets to calibrate at start-up (one prompt: bucket
    1 only, issue 13). Outputs do not depend on the slot count (R-B5). (None, None) = the slots as
    asked: as many prompts as slots, or a flag or file that names the geometry or its costs."""
    slots = config.max_seqs_per_batch
    if num_prompts >= slots or any(getattr(config, f, None) for f in _GEOMETRY_FLAGS):
        return None, None
    note = (f"{num_prompts} prompt{'s' if num_prompts > 1 else ''}: the engine runs {num_prompts} request "
            f"slot{'s' if num_prompts > 1 else ''}, not --max_seqs_per_batch={slots} (no more requests ever run at "
            "once, and fewer slots mean a smaller KV cache and fewer request buckets to calibrate)")
    return num_prompts, note


def cmd_generate(args, engine_config) -> int:
    params = sampling_params(args)
    prompts = read_prompts(args.prompt, args.prompts_file, args.chat)
    config = engine_config(args)
    run_slots, slots_note = slots_for_prompts(config, len(prompts))
    checked = preflight(config, sampling=[params], sampling_names=SAMPLING_FLAGS, run_slots=run_slots)
    if slots_note and config.adaptive:
        print(f"adaspec generate: {slots_note}", file=sys.stderr)
    warn("generate", [*checked.warnings, *sampling_warnings(params)])
    tok = checked.tokenizer
    if args.chat and not tok.has_chat_template:
        raise NoChatTemplateError(f"--chat=true (the default) but the model at {checked.model_dir} has no chat "
                                  "template; pass --chat=false to send the prompts as plain text", param="--chat")
    encoded = []
    for p in prompts:  # every prompt checked before the weights load
        ids, raw = prompt_ids(p, tok, args.chat)
        try:
            check_prompt(ids, checked.max_model_len, checked.model_config.vocab_size, template_tokens=raw,
                         what="prompt")
        except RequestError as e:
            raise UserError(f"{p.origin}: {str(e).removeprefix('prompt: ')}", param=p.flag) from None
        encoded.append((ids, raw))
    longest = max(len(ids) for ids, _ in encoded)
    if longest + params.max_tokens > checked.max_model_len:  # per prompt: a long prompt leaves less room
        warn("generate", [f"--max_tokens={params.max_tokens} does not fit the context limit {checked.max_model_len} "
                          f"(--max_model_len) after the longest prompt ({longest} tokens): outputs stop at the limit "
                          "(finish_reason=length)"])
    from ..engine.llm_engine import LLM

    llm = LLM(checked=checked)
    requests = [llm.engine.make_request(ids, params, prompt_text=p.text, template_tokens=raw)
                for p, (ids, raw) in zip(prompts, encoded)]
    t0 = time.perf_counter()
    outputs = llm.run(requests, use_tqdm=not args.json and len(prompts) > 1)
    elapsed = time.perf_counter() - t0
    n_out = sum(len(o.token_ids) for o in outputs)
    stats = {"output_tokens": n_out, "elapsed_s": round(elapsed, 4), "tokens_per_s": round(n_out / elapsed, 3),
             "linear_backend": llm.engine.linear_backend, "layer_kernels": llm.engine.layer_kernels}
    if llm.engine.config.speculative:
        stats.update(llm.engine.spec_stats.summary())
    if llm.engine.control is not None:
        stats.update(llm.engine.control.summary())
    if hasattr(llm.engine.drafter, "stats"):  # Suffix, MTP+Suffix (issue 10): the drafter's host time and choices
        stats["drafter"] = llm.engine.drafter.stats()
        stats["drafter"]["draft_host_share"] = round(stats["drafter"]["draft_host_seconds"] / elapsed, 5)
    if args.json:
        print(json.dumps({
            "outputs": [{"prompt": p.shown, "token_ids": o.token_ids, "text": o.text, "finish_reason": o.finish_reason}
                        for p, o in zip(prompts, outputs)],
            "stats": stats,
        }))
    else:
        for p, o in zip(prompts, outputs):
            shown = p.text if p.messages is None else json.dumps(p.shown)
            print(f"### prompt: {shown}\n{o.text}\n[finish_reason={o.finish_reason}, tokens={len(o.token_ids)}]\n")
        print(f"{n_out} tokens in {elapsed:.2f} s ({stats['tokens_per_s']} tok/s)", file=sys.stderr)
    return 0
