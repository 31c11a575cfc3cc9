"""Resolution of a calibration file against the prepared geometry, with the R-F4/R-F5 checks (R-F3..R-F6, R-C5).

A resolver combines a (possibly absent) parsed file with `EngineFacts` into an immutable
`EffectiveCalibration`. Explicit buckets or G values that were not prepared, overlapping context
ranges, ranges that do not fit the model, the KV capacity or the worst-case progress: each fails
here, before any sampling, with the field, the offending values and the fix.
"""

from __future__ import annotations

from ..geometry import unified_row_buckets
from .cost_points import describe_components, grid_components
from .facts import EffectiveCalibration, EngineFacts, worst_case_progress_tokens
from .schema import (DEFAULT_MAX_KV, DEFAULT_MAX_REQUEST_BUCKET, DEFAULT_MIN_KV, DEFAULT_MODEL,
                     DEFAULT_PREFILL_TOKENS, DEFAULT_TOKEN_SEED, DEFAULT_WARMUP_STEPS, DEFAULT_WINDOW_STEPS,
                     DEFAULT_WINDOWS_PER_POINT, DRAFT_STEP_DEFAULT_MODEL, DRAFT_STEP_FLAG, IN_FLIGHT_ROUNDS,
                     VERIFY_FLAG, CalibrationConfigError, ContextRange, DraftStepConfig, VerifyCalibrationConfig,
                     _CalibrationFields)


def _fail(source: str, field: str, problem: str, fix: str):
    raise CalibrationConfigError(field, problem, fix, source)


def _resolve_buckets(requested: list[int] | None, facts: EngineFacts, source: str) -> tuple[tuple[int, ...], bool]:
    prepared = list(facts.request_buckets)
    if requested is None:
        buckets = [b for b in prepared if b <= DEFAULT_MAX_REQUEST_BUCKET] or prepared[:1]
        return tuple(buckets), True
    missing = sorted(b for b in requested if b not in prepared)
    if missing:
        _fail(source, "request_buckets",
              f"{missing} were not prepared at warm-up (prepared request buckets: {prepared}); nothing was sampled",
              "list only prepared buckets in request_buckets, or prepare more (--graph_decode_batch_sizes, "
              "--max_seqs_per_batch)")
    return tuple(sorted(requested)), False


def _resolve_rows(requested, buckets: tuple[int, ...], facts: EngineFacts, source: str) -> dict[int, tuple[int, ...]]:
    for b in buckets:
        if not facts.target_rows.get(b):
            raise ValueError(f"EngineFacts.target_rows has no prepared target rows for request bucket {b}")
    prepared = {b: facts.target_rows[b] for b in buckets}
    if requested is None:
        return dict(prepared)
    if isinstance(requested, list):
        nowhere = sorted(g for g in requested if not any(g in prepared[b] for b in buckets))
        if nowhere:
            _fail(source, "target_graph_rows",
                  f"{nowhere} were not prepared for any calibrated request bucket "
                  f"(prepared: {', '.join(f'Bcap {b}: {list(prepared[b])}' for b in buckets)}); nothing was sampled",
                  "list only prepared target rows")
        grid = {b: tuple(g for g in prepared[b] if g in requested) for b in buckets}
        where = lambda b: "target_graph_rows"  # noqa: E731
    else:
        extra = sorted(b for b in requested if b not in buckets)
        if extra:
            _fail(source, "target_graph_rows",
                  f"keys {extra} are not calibrated request buckets (request_buckets: {list(buckets)})",
                  "use request buckets from request_buckets as keys, or add them to request_buckets")
        grid = {}
        for b in buckets:
            if b not in requested:
                grid[b] = prepared[b]
                continue
            bad = sorted(g for g in requested[b] if g not in prepared[b])
            if bad:
                _fail(source, f"target_graph_rows.{b}",
                      f"{bad} were not prepared for request bucket {b} (prepared: {list(prepared[b])}); "
                      "nothing was sampled", f"list only prepared target rows for request bucket {b}")
            grid[b] = tuple(sorted(requested[b]))
        where = lambda b: f"target_graph_rows.{b}" if b in requested else "target_graph_rows"  # noqa: E731
    for b in buckets:
        full, least = max(prepared[b]), min(prepared[b])
        if least not in grid[b]:
            # without the cost of G = Bcap (no candidate verified) no budget can be compared with verifying
            # nothing: the controller's costs are not covered and every round would run at full width (issue 13)
            _fail(source, where(b),
                  f"the smallest bucket G={least} of request bucket {b} (one row per request, nothing verified) is "
                  "missing; adaptive verify needs it to choose any budget, and would run at full width forever",
                  f"add {least} to {where(b)}")
        if full not in grid[b]:
            _fail(source, where(b),
                  f"the full-width bucket G={full} of request bucket {b} is missing; full width must stay covered",
                  f"add {full} to {where(b)}")
    return grid


def _resolve_contexts(requested: list[ContextRange] | None, facts: EngineFacts, progress: int,
                      progress_text: str, source: str) -> tuple[tuple[ContextRange, ...], bool]:
    ctx_limit, kv_cap = facts.model_context_limit, facts.kv_capacity_per_slot
    limit = min(ctx_limit, kv_cap)
    limit_name = (f"the model context limit {ctx_limit} (--max_model_len)" if ctx_limit <= kv_cap
                  else f"the KV capacity per slot {kv_cap}")
    if requested is None:
        max_kv = min(DEFAULT_MAX_KV, limit)
        prefill = min(DEFAULT_PREFILL_TOKENS, max_kv - progress)
        if prefill < 1:
            _fail(source, "contexts",
                  f"the default context range does not fit: {limit_name} leaves {max_kv} KV tokens, but the "
                  f"worst-case calibration progress alone needs {progress} ({progress_text})",
                  "pass a smaller explicit config (fewer warmup_steps, window_steps or windows_per_point) "
                  "in the calibration file, or raise the context limit")
        return (ContextRange(prefill_tokens=prefill, min_kv_length=min(DEFAULT_MIN_KV, prefill),
                             max_kv_length=max_kv),), True
    for i, c in enumerate(requested):
        p = f"contexts[{i}]"
        if c.max_kv_length > ctx_limit:
            _fail(source, f"{p}.max_kv_length",
                  f"{c.max_kv_length} exceeds the model context limit {ctx_limit} (--max_model_len)",
                  f"lower {p}.max_kv_length to at most {ctx_limit}")
        if c.max_kv_length > kv_cap:
            _fail(source, f"{p}.max_kv_length", f"{c.max_kv_length} exceeds the KV capacity per slot {kv_cap}",
                  f"lower {p}.max_kv_length to at most {kv_cap}")
        if c.prefill_tokens < c.min_kv_length:
            _fail(source, f"{p}.prefill_tokens",
                  f"{c.prefill_tokens} is below min_kv_length {c.min_kv_length}: measurements would start "
                  "outside the claimed KV range",
                  f"raise {p}.prefill_tokens to at least {c.min_kv_length} or lower min_kv_length")
        if c.prefill_tokens + progress > c.max_kv_length:
            room = c.max_kv_length - progress  # the largest prefill that still fits, if any
            lower = (f"lower {p}.prefill_tokens to at most {room}, " if room >= max(1, c.min_kv_length) else
                     f"(no prefill fits: the worst-case progress alone is {progress} tokens) ")
            _fail(source, f"{p}.prefill_tokens",
                  f"prefill_tokens {c.prefill_tokens} + worst-case progress {progress} ({progress_text}) = "
                  f"{c.prefill_tokens + progress} exceeds max_kv_length {c.max_kv_length}",
                  f"{lower}raise {p}.max_kv_length to at least {c.prefill_tokens + progress}, "
                  "or use fewer warmup_steps, window_steps or windows_per_point")
    order = sorted(range(len(requested)), key=lambda i: requested[i].min_kv_length)
    for i, j in zip(order, order[1:]):
        a, b = requested[i], requested[j]
        if b.min_kv_length <= a.max_kv_length:
            _fail(source, f"contexts[{j}]",
                  f"KV range [{b.min_kv_length}, {b.max_kv_length}] overlaps contexts[{i}] "
                  f"[{a.min_kv_length}, {a.max_kv_length}]",
                  "make the context ranges disjoint")
    return tuple(sorted(requested, key=lambda c: c.min_kv_length)), False


def _resolve_common(cfg: _CalibrationFields, facts: EngineFacts, width: int, source: str,
                    default_model: str = DEFAULT_MODEL) -> dict:
    defaulted = []

    def pick(name, default):
        v = getattr(cfg, name)
        if v is None:
            defaulted.append(name)
            return default
        return v

    model = pick("model", default_model)
    warmup = pick("warmup_steps", DEFAULT_WARMUP_STEPS)
    window = pick("window_steps", DEFAULT_WINDOW_STEPS)
    windows = pick("windows_per_point", DEFAULT_WINDOWS_PER_POINT)
    seed = pick("token_seed", DEFAULT_TOKEN_SEED)
    buckets, d = _resolve_buckets(cfg.request_buckets, facts, source)
    if d:
        defaulted.append("request_buckets")
    progress = worst_case_progress_tokens(warmup, window, windows, width)
    text = (f"({warmup} warm-up + {windows} x {window} measured + {IN_FLIGHT_ROUNDS} in-flight rounds) "
            f"x {width + 1} tokens")
    contexts, d = _resolve_contexts(cfg.contexts, facts, progress, text, source)
    if d:
        defaulted.append("contexts")
    return dict(model=model, request_buckets=buckets, contexts=contexts, warmup_steps=warmup, window_steps=window,
                windows_per_point=windows, token_seed=seed, defaulted=defaulted)


def _default_source(flag: str, source: str | None) -> str:
    return source if source else f"{flag} (built-in defaults)"


def resolve_verify_calibration(cfg: VerifyCalibrationConfig | None, facts: EngineFacts,
                               source: str | None = None) -> EffectiveCalibration:
    """Fill the R-F3 defaults and check R-F4/R-F5 before any sampling.

    `source` is used in error messages, e.g. "--adaptive_target_verify_calibration=/cfg.json"."""
    src = _default_source(VERIFY_FLAG, source)
    cfg = cfg if cfg is not None else VerifyCalibrationConfig()
    w = facts.num_speculative_tokens
    if cfg.draft_width is not None and cfg.draft_width != w:
        _fail(src, "draft_width",
              f"{cfg.draft_width} in the calibration file but --num_speculative_tokens={w}",
              f"remove draft_width (it is derived from --num_speculative_tokens) or set it to {w}")
    common = _resolve_common(cfg, facts, w, src)
    defaulted = common.pop("defaulted")
    if cfg.draft_width is None:
        defaulted.insert(1, "draft_width")
    if cfg.target_graph_rows is None:
        defaulted.append("target_graph_rows")
    grid = _resolve_rows(cfg.target_graph_rows, common["request_buckets"], facts, src)
    if common["model"] == "additive":
        comps = grid_components((b, g) for b, gs in grid.items() for g in gs)
        if len(comps) > 1:
            _fail(src, "target_graph_rows",
                  f"the additive model needs a grid connected through shared G values, but it splits into "
                  f"{describe_components(comps)}",
                  "add a G value shared between these request buckets (prepared for both) or use \"model\": \"sps\"")
    return EffectiveCalibration(mode="adaptive_target_verify", draft_width=w, grid=grid, facts=facts,
                                defaulted=tuple(defaulted), **common)


def resolve_draft_step_config(cfg: DraftStepConfig | None, facts: EngineFacts,
                              source: str | None = None) -> EffectiveCalibration:
    """Defaults of R-C5 (policy) and R-F3 (calibration); every k = 1..k_max is measured at every bucket."""
    src = _default_source(DRAFT_STEP_FLAG, source)
    cfg = cfg if cfg is not None else DraftStepConfig()
    k_max = facts.num_speculative_tokens
    # A k-step round verifies Bcap*(k+1) rows, so its cost depends on Bcap and k jointly, which
    # bias + alpha(Bcap) + theta(k) cannot represent (held-out error 14-39% measured on the bundled
    # model). The default is therefore one SPS curve per request bucket, i.e. every (Bcap, k)
    # measured independently is kept as measured (R-C3); "additive" stays available.
    common = _resolve_common(cfg.calibration, facts, k_max, src, default_model=DRAFT_STEP_DEFAULT_MODEL)
    defaulted = ["calibration." + n for n in common.pop("defaulted")]
    if "policy" not in cfg.model_fields_set:
        defaulted.insert(0, "policy")
    # k = 0 (a plain round that only refreshes the draft) is measured too, so the controller can
    # choose not to speculate when the table says speculation does not pay (issue 5)
    ks = tuple(range(0, k_max + 1))
    grid = {b: ks for b in common["request_buckets"]}
    return EffectiveCalibration(mode="adaptive_draft_step", draft_width=k_max, grid=grid, facts=facts,
                                policy=cfg.policy, defaulted=tuple(defaulted), **common)


unified_bindings = unified_row_buckets  # R-F6, defined once in adaspec/geometry.py
