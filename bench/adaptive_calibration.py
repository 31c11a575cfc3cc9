"""bench/adaptive.py's calibration files: the small explicit calibration every adaptive engine of the
bench uses (--calibration_json overrides it; the draft step keeps the product's default windows), and the
adaptive-verify target rows it prepares."""

from __future__ import annotations

import json
from pathlib import Path

from bench.adaptive_configs import VERIFY_FAMILIES


DEFAULT_CALIBRATION = {"model": "additive",
                       "contexts": [{"prefill_tokens": 192, "min_kv_length": 1, "max_kv_length": 512}],
                       "warmup_steps": 2, "window_steps": 8, "windows_per_point": 3}


def default_buckets(batch_sizes) -> list[int]:
    """The batch sizes, plus the request buckets the engine prepares by default on a CPU for as many
    slots (1, 4, 16, ...: geometry.choose_prepared): a batch that is not full (the staggered stream,
    where requests join and leave) is then priced as the product would price it, not only at the
    bucket above it (stop 41)."""
    from adaspec.geometry import CPU_BUCKET_FACTOR, default_request_buckets

    return sorted(set(batch_sizes) | set(default_request_buckets(max(batch_sizes), CPU_BUCKET_FACTOR)))


def calibration_fields(args) -> dict:
    """The calibration fields shared by every adaptive engine (request buckets: `default_buckets`)."""
    data = json.loads(Path(args.calibration_json).read_text()) if args.calibration_json else dict(DEFAULT_CALIBRATION)
    data.setdefault("request_buckets", default_buckets(args.batch_sizes))
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
    try:  # and the product's own sparse rows (at B = 1: 1-4 and full width)
        from adaspec.geometry import sparse_row_ladder
    except ImportError:  # older layout
        sparse_row_ladder = None
    out = {}
    for b in buckets:
        rows = {g for x in (b, 2 * b, 4 * b, b * (width + 1)) if (g := geometry.pad_rows(b, x)) is not None}
        if sparse_row_ladder is not None:
            rows |= set(sparse_row_ladder(b, width))
        out[str(b)] = sorted(rows)
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
        # and its default windows (R-F3: 8 warm-up rounds, 3 windows of 32): with 2 + 3 x 8 rounds a point at B = 1
        # lasts ~0.5 s, and on the 2-vCPU VM one slow stretch priced k = 1 at 1.44x plain against ~1.2x served
        # (a consistent 26.5 ms +-5.8% beside plain at 18.4 ms); the draft step ran plain for a third of a code B = 1
        # run at 0.93x fixed k = 1 (stop 49). The draft step's calibration is small (k = 0..k_max per bucket)
        for name in ("warmup_steps", "window_steps", "windows_per_point"):
            step_fields.pop(name, None)
        # 106 rounds of up to k_max + 1 tokens from the 192-token prefill: the context reaches the engines' limit
        step_fields["contexts"] = [dict(step_fields["contexts"][0], max_kv_length=args.max_model_len)]
    files["step"] = workdir / "draft_step_config.json"
    files["step"].write_text(json.dumps({"version": 1, "calibration": step_fields}, indent=1))
    files["step_sym"] = workdir / "draft_step_config_sym.json"  # the symmetric k = 0 rule (zero_confidence 0)
    files["step_sym"].write_text(json.dumps({"version": 1, "policy": {"zero_confidence": 0.0},
                                             "calibration": step_fields}, indent=1))
    files["step_alt"] = workdir / "draft_step_config_alt.json"  # --alt_step_policy's fields (an A/B of a policy)
    files["step_alt"].write_text(json.dumps({"version": 1, "policy": json.loads(args.alt_step_policy),
                                             "calibration": step_fields}, indent=1))
    return files


def dspark_sync(sources: list[str], batch_size: int = 1, num_prompts: int = 4):
    """(a DSpark w = 7 engine with synchronous adaptive verify for `batch_size` requests, calibrated by this module's
    file, and the namespace of its prompt sets): the engine the record scripts of stops 59-64 build for one-process
    A/Bs."""
    import tempfile
    from types import SimpleNamespace

    from bench import common

    ns = SimpleNamespace(calibration_json=None, batch_sizes=[batch_size], max_model_len=1024, sources=list(sources),
                         num_prompts=num_prompts, prompt_tokens=192, alt_step_policy="{}")
    files = write_calibration_files(ns, Path(tempfile.mkdtemp()))
    engine = common.build_llm("float32", "DSpark", 7, None, max_seqs=batch_size, max_model_len=1024,
                              enable_adaptive_target_verify=True,
                              adaptive_target_verify_calibration=str(files["dspark7"]),
                              graph_decode_batch_sizes=tuple(calibration_fields(ns)["request_buckets"]))
    return engine, ns


def dspark_sync_b1(sources: list[str], num_prompts: int = 4):
    """dspark_sync at one request (stops 59-63's record scripts)."""
    return dspark_sync(sources, 1, num_prompts)
