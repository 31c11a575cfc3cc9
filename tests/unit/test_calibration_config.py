"""Calibration configuration files, defaults and validation (R-F3, R-F4, R-F5, R-F6, R-F7, R-C5, R-D6).

Every rule is checked with its message: the field (JSON path), the offending values and the fix."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from adaspec.calibration.config import (
    DEFAULT_MAX_REQUEST_BUCKET,
    GREEDY_NOTE,
    CalibrationConfigError,
    DraftStepConfig,
    EngineFacts,
    VerifyCalibrationConfig,
    load_draft_step_config,
    load_verify_calibration,
    parse_draft_step_config,
    parse_verify_calibration,
    resolve_draft_step_config,
    resolve_verify_calibration,
    unified_bindings,
    worst_case_progress_tokens,
)

W = 5
BUCKETS = (1, 2, 4, 8, 16)


def ladder(b: int, w: int = W) -> tuple[int, ...]:
    return tuple(range(b, b * (w + 1) + 1, b))


def facts(w: int = W, buckets=BUCKETS, ctx: int = 8192, kv: int = 8192, dp: int = 1, rows=None) -> EngineFacts:
    return EngineFacts(num_speculative_tokens=w, request_buckets=buckets, model_context_limit=ctx,
                       kv_capacity_per_slot=kv, target_rows=rows or {b: ladder(b, w) for b in buckets}, dp_size=dp)


def write(tmp_path, data, name="cfg.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def verify_error(data, f=None) -> CalibrationConfigError:
    with pytest.raises(CalibrationConfigError) as e:
        resolve_verify_calibration(parse_verify_calibration(data), f or facts(), source="--x=cfg.json")
    return e.value


# ----------------------------------------------------------------------------- file parsing

def test_documented_examples_parse(tmp_path):
    """R-F3 / R-C5: the examples of the product documentation load unchanged."""
    v = load_verify_calibration(write(tmp_path, {
        "model": "additive", "request_buckets": [1, 2, 4, 8, 16],
        "contexts": [{"prefill_tokens": 1868, "min_kv_length": 1800, "max_kv_length": 4096}],
        "warmup_steps": 8, "window_steps": 32, "windows_per_point": 3, "token_seed": 1}))
    assert v.contexts[0].prefill_tokens == 1868 and v.target_graph_rows is None
    d = load_draft_step_config(write(tmp_path, {
        "version": 1, "policy": {"window_size": 20, "update_interval": 5, "switch_min_gain": 0.05},
        "calibration": {"model": "additive", "request_buckets": [1, 2, 4, 8, 16],
                        "contexts": [{"prefill_tokens": 2048, "min_kv_length": 1, "max_kv_length": 4096}],
                        "warmup_steps": 8, "window_steps": 32, "windows_per_point": 3, "token_seed": 1}},
        "step.json"))
    assert d.policy.switch_min_gain == 0.05 and d.calibration.request_buckets == [1, 2, 4, 8, 16]


def test_either_part_of_the_draft_step_config_may_be_omitted():
    """R-C5: policy and calibration are optional; version must be 1."""
    d = parse_draft_step_config({"version": 1, "policy": {"window_size": 10}})
    assert (d.policy.window_size, d.policy.update_interval, d.policy.switch_min_gain) == (10, 5, 0.05)
    assert d.calibration.model is None
    assert parse_draft_step_config({"version": 1, "calibration": {"model": "sps"}}).policy.window_size == 20
    with pytest.raises(CalibrationConfigError) as e:
        parse_draft_step_config({"version": 2})
    assert e.value.field == "version" and "got 2" in str(e.value)


def test_the_plain_floor_is_a_policy_field_with_a_strict_bool():
    """Issue 13: policy.plain_floor (default true) switches the draft step's plain floor; a non-bool is
    refused naming the field, and the controller gets what the file says."""
    from adaspec.adaptive.step_controller import StepPolicy

    assert parse_draft_step_config({"version": 1}).policy.plain_floor is True
    off = parse_draft_step_config({"version": 1, "policy": {"plain_floor": False}}).policy
    assert StepPolicy(**off.model_dump()).plain_floor is False
    with pytest.raises(CalibrationConfigError, match="plain_floor"):
        parse_draft_step_config({"version": 1, "policy": {"plain_floor": "no"}})


def test_explore_overhead_is_a_positive_policy_field_and_the_two_policies_share_defaults():
    """Issue 13: policy.explore_overhead (default 0.25) reaches the controller; 0 or a string is
    refused naming the field. The file's policy and the controller's StepPolicy spell every field and
    default twice (the import direction keeps them apart), so this holds them equal."""
    import dataclasses

    from adaspec.adaptive.step_controller import StepPolicy

    d = parse_draft_step_config({"version": 1, "policy": {"explore_overhead": 0.5}}).policy
    assert StepPolicy(**d.model_dump()).explore_overhead == 0.5
    for bad in (0, -1.0, "high"):
        with pytest.raises(CalibrationConfigError, match="explore_overhead"):
            parse_draft_step_config({"version": 1, "policy": {"explore_overhead": bad}})
    file_defaults = parse_draft_step_config({"version": 1}).policy.model_dump()
    assert file_defaults == {f.name: f.default for f in dataclasses.fields(StepPolicy)}


def test_invalid_json_names_file_position_and_flag(tmp_path):
    p = write(tmp_path, '{"model": "sps",\n "warmup_steps": }')
    with pytest.raises(CalibrationConfigError) as e:
        load_verify_calibration(p)
    msg = str(e.value)
    assert "--adaptive_target_verify_calibration=" in msg and str(p) in msg
    assert "line 2 column" in msg and "Fix:" in msg


def test_missing_file(tmp_path):
    with pytest.raises(CalibrationConfigError, match="does not exist"):
        load_draft_step_config(tmp_path / "nope.json")


def test_unknown_keys_name_path_file_and_allowed_keys(tmp_path):
    p = write(tmp_path, {"model": "sps", "windows": 3})
    with pytest.raises(CalibrationConfigError) as e:
        load_verify_calibration(p)
    msg = str(e.value)
    assert e.value.field == "windows" and "unknown key 'windows'" in msg and str(p) in msg
    assert "windows_per_point" in msg  # allowed keys listed in the fix
    p = write(tmp_path, {"contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv": 9}]}, "b.json")
    with pytest.raises(CalibrationConfigError) as e:
        load_verify_calibration(p)
    assert e.value.field.startswith("contexts[0]")
    assert "contexts[0].max_kv" in str(e.value) and "max_kv_length" in str(e.value)
    with pytest.raises(CalibrationConfigError) as e:
        parse_draft_step_config({"version": 1, "policy": {"window": 3}})
    assert e.value.field == "policy.window" and "update_interval" in str(e.value)


def test_draft_step_rejects_verify_only_fields_and_step_cost_models():
    """R-C3 / R-C5: every k is measured; precomputed step cost models cannot be loaded."""
    with pytest.raises(CalibrationConfigError) as e:
        parse_draft_step_config({"version": 1, "calibration": {"target_graph_rows": [4]}})
    assert e.value.field == "calibration.target_graph_rows" and "not a draft-step calibration field" in str(e.value)
    with pytest.raises(CalibrationConfigError) as e:
        parse_draft_step_config({"version": 1, "step_cost_models": {}})
    assert "precomputed step cost models is not supported" in str(e.value)


@pytest.mark.parametrize("data", [
    {"enable_adaptive_spec_prune": True},
    {"enable_adaptive_speculative_decode": True, "model": "sps"},
    {"contexts": [{"enable_adaptive_spec_prune": 1}]},
])
def test_old_switch_names_fail_naming_the_new_switch(tmp_path, data):
    """R-D6: the old switch names are not aliases, anywhere in the JSON."""
    with pytest.raises(CalibrationConfigError) as e:
        load_verify_calibration(write(tmp_path, data))
    msg = str(e.value)
    assert "enable_adaptive_target_verify" in msg and "not an alias" in msg
    with pytest.raises(CalibrationConfigError, match="enable_adaptive_target_verify"):
        load_draft_step_config(write(tmp_path, {"version": 1, "policy": data}, "s.json"))
    # also when the schema is used directly
    with pytest.raises(ValidationError, match="enable_adaptive_target_verify"):
        VerifyCalibrationConfig.model_validate(data)


@pytest.mark.parametrize("data, field", [
    ({"warmup_steps": "8"}, "warmup_steps"),  # strict: no string -> int coercion
    ({"window_steps": True}, "window_steps"),  # no bool -> int
    ({"window_steps": 0}, "window_steps"),
    ({"windows_per_point": -1}, "windows_per_point"),
    ({"model": "linear"}, "model"),
    ({"request_buckets": []}, "request_buckets"),
    ({"request_buckets": [2, 2]}, "request_buckets"),
    ({"contexts": [{"prefill_tokens": 10, "min_kv_length": 9, "max_kv_length": 5}]}, "contexts[0]"),
    ({"contexts": [{"prefill_tokens": 10, "min_kv_length": 1}]}, "contexts[0].max_kv_length"),
    ({"target_graph_rows": {"8": []}}, "target_graph_rows"),
    ({"target_graph_rows": {"x": [8]}}, "target_graph_rows"),
])
def test_schema_errors_name_the_field(data, field):
    with pytest.raises(CalibrationConfigError) as e:
        parse_verify_calibration(data, source="--adaptive_target_verify_calibration=f.json")
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith("--adaptive_target_verify_calibration=f.json: ") and "Fix:" in str(e.value)
    assert isinstance(e.value, ValueError)


# ----------------------------------------------------------------------------- defaults (R-F3)

def test_verify_defaults_fill_every_field():
    """R-F3: additive; draft_width = --num_speculative_tokens; prepared buckets; every prepared G incl.
    full width; prefill 2048 with KV 1-4096; warm-up 8; window 32; 3 windows; token seed 1."""
    e = resolve_verify_calibration(None, facts())
    assert e.model == "additive" and e.draft_width == W
    assert e.request_buckets == BUCKETS
    assert all(e.grid[b] == ladder(b) and b * (W + 1) in e.grid[b] for b in BUCKETS)
    assert e.context_tuples() == [(2048, 1, 4096)]
    assert (e.warmup_steps, e.window_steps, e.windows_per_point, e.token_seed) == (8, 32, 3, 1)
    assert e.axis == "g" and e.num_points == sum(len(ladder(b)) for b in BUCKETS)
    assert {"model", "draft_width", "request_buckets", "target_graph_rows", "contexts"} <= set(e.defaulted)
    cfg = e.to_config_dict()
    assert cfg["target_graph_rows"]["16"] == list(ladder(16)) and cfg["draft_width"] == W


def test_default_request_buckets_stop_at_128():
    big = (64, 128, 256)
    e = resolve_verify_calibration(None, facts(buckets=big, ctx=65536, kv=65536))
    assert e.request_buckets == tuple(b for b in big if b <= DEFAULT_MAX_REQUEST_BUCKET)


def test_effective_config_round_trips_through_a_file(tmp_path):
    """R-F7: the logged effective configuration is itself a valid configuration file."""
    e = resolve_verify_calibration(parse_verify_calibration({"model": "sps", "warmup_steps": 2}), facts())
    again = resolve_verify_calibration(load_verify_calibration(write(tmp_path, e.to_config_dict())), facts())
    assert again.to_config_dict() == e.to_config_dict() and again.defaulted == ()
    d = resolve_draft_step_config(None, facts(w=3))
    again = resolve_draft_step_config(load_draft_step_config(write(tmp_path, d.to_config_dict(), "d.json")),
                                      facts(w=3))
    assert again.to_config_dict() == d.to_config_dict()


def test_json_draft_width_must_equal_num_speculative_tokens():
    """R-F3: a JSON draft_width must equal --num_speculative_tokens."""
    err = verify_error({"draft_width": 7})
    assert err.field == "draft_width" and "--num_speculative_tokens=5" in str(err) and "remove draft_width" in err.fix
    assert resolve_verify_calibration(parse_verify_calibration({"draft_width": 5}), facts()).draft_width == 5


# ----------------------------------------------------------------------------- R-F4 context defaults

def test_default_context_never_exceeds_the_model_context():
    """R-F4: a shorter context lowers the KV bound and shortens prefill, reserving worst-case progress
    (all drafts accepted) plus two in-flight rounds."""
    progress = worst_case_progress_tokens(8, 32, 3, W)
    assert progress == (8 + 3 * 32 + 2) * (W + 1)
    e = resolve_verify_calibration(None, facts(ctx=2048, kv=8192))
    assert e.context_tuples() == [(2048 - progress, 1, 2048)]
    e = resolve_verify_calibration(None, facts(ctx=8192, kv=1500))  # KV capacity is the tighter limit
    assert e.context_tuples() == [(1500 - progress, 1, 1500)]
    assert e.worst_case_progress == progress


def test_default_context_that_cannot_fit_asks_for_a_smaller_explicit_config():
    with pytest.raises(CalibrationConfigError) as e:
        resolve_verify_calibration(None, facts(ctx=600, kv=600))
    msg = str(e.value)
    assert e.value.field == "contexts" and "600" in msg and "smaller explicit config" in msg
    # ...which works
    small = parse_verify_calibration({"warmup_steps": 2, "window_steps": 8, "windows_per_point": 2})
    e = resolve_verify_calibration(small, facts(ctx=600, kv=600))
    assert e.context_tuples()[0][2] == 600 and e.context_tuples()[0][0] == 600 - (2 + 16 + 2) * 6


# ----------------------------------------------------------------------------- R-F5 explicit values

def test_unprepared_request_buckets_fail_naming_them_and_the_prepared_ones():
    err = verify_error({"request_buckets": [1, 3, 32]})
    msg = str(err)
    assert err.field == "request_buckets" and "[3, 32] were not prepared" in msg
    assert "prepared request buckets: [1, 2, 4, 8, 16]" in msg and "nothing was sampled" in msg


def test_unprepared_target_rows_fail_per_bucket():
    err = verify_error({"target_graph_rows": {"8": [8, 12, 48]}})
    assert err.field == "target_graph_rows.8" and "[12] were not prepared for request bucket 8" in str(err)
    assert "prepared: [8, 16, 24, 32, 40, 48]" in str(err)
    err = verify_error({"target_graph_rows": [4, 7, 6]})
    assert err.field == "target_graph_rows" and "[7] were not prepared for any" in str(err)
    err = verify_error({"request_buckets": [1, 2], "target_graph_rows": {"4": [4, 24]}})
    assert "keys [4] are not calibrated request buckets" in str(err)


def test_explicit_target_rows_must_keep_full_width():
    err = verify_error({"target_graph_rows": {"8": [8, 16]}})
    assert err.field == "target_graph_rows.8" and "full-width bucket G=48" in str(err) and "add 48" in err.fix


def test_target_rows_list_applies_to_every_bucket_where_prepared():
    e = resolve_verify_calibration(parse_verify_calibration(
        {"request_buckets": [1, 2], "target_graph_rows": [1, 2, 4, 6, 12]}), facts())
    assert e.grid == {1: (1, 2, 4, 6), 2: (2, 4, 6, 12)}
    e = resolve_verify_calibration(parse_verify_calibration(
        {"request_buckets": [2, 4], "target_graph_rows": {"4": [4, 8, 24]}}), facts())
    assert e.grid == {2: ladder(2), 4: (4, 8, 24)}  # buckets without an entry keep every prepared G


@pytest.mark.parametrize("rows, field", [([2, 4, 6, 12], "target_graph_rows"),
                                         ({"4": [8, 24]}, "target_graph_rows.4")])
def test_grid_without_g_equal_bcap_is_refused_before_sampling(rows, field):
    """Issue 13 item 4: without G = Bcap no budget can be costed and adaptive verify would run at full
    width forever; the grid is refused at start-up, naming the field and the missing G."""
    err = verify_error({"request_buckets": [1, 2, 4], "target_graph_rows": rows})
    assert err.field == field
    assert "smallest bucket G=" in str(err) and "full width forever" in str(err)
    assert "Fix: add " in str(err)


def test_additive_grid_must_be_connected_before_sampling():
    """R-F1/R-F5: a grid that is not connected through shared G fails before sampling; sps accepts it."""
    data = {"request_buckets": [1, 8], "target_graph_rows": {"1": [1, 6], "8": [8, 48]}}
    err = verify_error(data)
    assert err.field == "target_graph_rows" and "Bcap [1]" in str(err) and "Bcap [8]" in str(err)
    assert "sps" in err.fix
    e = resolve_verify_calibration(parse_verify_calibration({**data, "model": "sps"}), facts())
    assert e.grid == {1: (1, 6), 8: (8, 48)}


@pytest.mark.parametrize("ctx, field, text", [
    ({"prefill_tokens": 100, "min_kv_length": 1, "max_kv_length": 9000}, "contexts[0].max_kv_length",
     "model context limit 8192"),
    ({"prefill_tokens": 100, "min_kv_length": 1, "max_kv_length": 5000}, "contexts[0].max_kv_length",
     "KV capacity per slot 4096"),
    ({"prefill_tokens": 3800, "min_kv_length": 1, "max_kv_length": 4096}, "contexts[0].prefill_tokens",
     "worst-case progress 636"),
    ({"prefill_tokens": 100, "min_kv_length": 200, "max_kv_length": 4096}, "contexts[0].prefill_tokens",
     "below min_kv_length 200"),
])
def test_contexts_must_fit_model_kv_capacity_and_progress(ctx, field, text):
    err = verify_error({"contexts": [ctx]}, facts(ctx=8192, kv=4096))
    assert err.field == field and text in str(err), str(err)


def test_contexts_must_not_overlap():
    err = verify_error({"contexts": [
        {"prefill_tokens": 2000, "min_kv_length": 1800, "max_kv_length": 4096},
        {"prefill_tokens": 10, "min_kv_length": 1, "max_kv_length": 1800}]})
    assert err.field == "contexts[0]" and "overlaps contexts[1]" in str(err) and "disjoint" in err.fix
    e = resolve_verify_calibration(parse_verify_calibration({"contexts": [
        {"prefill_tokens": 2000, "min_kv_length": 1801, "max_kv_length": 4096},
        {"prefill_tokens": 10, "min_kv_length": 1, "max_kv_length": 1800}]}), facts())
    assert e.kv_ranges == ((1, 1800), (1801, 4096))


# ----------------------------------------------------------------------------- draft step (R-C5)

def test_draft_step_defaults_measure_every_k():
    """R-C3/R-C5: policy 20/5/0.05; every k = 0..k_max at every request bucket (k = 0: plain round,
    so the controller can stop speculating); progress uses k_max + 1."""
    e = resolve_draft_step_config(None, facts(w=3))
    assert e.mode == "adaptive_draft_step" and e.axis == "k"
    assert e.grid == {b: (0, 1, 2, 3) for b in BUCKETS}
    # per-bucket SPS by default: a k-step round's cost depends on Bcap and k jointly
    assert e.model == "sps"
    assert (e.policy.window_size, e.policy.update_interval, e.policy.switch_min_gain) == (20, 5, 0.05)
    assert e.worst_case_progress == (8 + 96 + 2) * 4
    cfg = e.to_config_dict()
    assert cfg["version"] == 1 and set(cfg) == {"version", "policy", "calibration"}
    assert "target_graph_rows" not in cfg["calibration"] and "draft_width" not in cfg["calibration"]


def test_draft_step_calibration_is_validated_like_verify():
    cfg = parse_draft_step_config({"version": 1, "calibration": {"request_buckets": [3]}}, source="--s=f")
    with pytest.raises(CalibrationConfigError) as e:
        resolve_draft_step_config(cfg, facts(w=3), source="--adaptive_draft_step_config=f")
    assert e.value.field == "request_buckets" and str(e.value).startswith("--adaptive_draft_step_config=f")


# ----------------------------------------------------------------------------- log and geometry

def test_effective_configuration_log_block():
    """R-F7 / R-F2: first line, source, every default, prepared geometry, the greedy-calibration note."""
    e = resolve_verify_calibration(None, facts(dp=2))
    text = e.log_block("DSpark", "built-in")
    lines = text.splitlines()
    assert lines[0] == "DSpark adaptive effective configuration"
    assert lines[1] == "source: built-in"
    for key in ("model", "draft_width", "request_buckets", "target_graph_rows", "contexts", "warmup_steps",
                "window_steps", "windows_per_point", "token_seed"):
        assert f'"{key}"' in text
    assert "prepared geometry" in text and "Bcap 16: prepared G [16, 32, 48, 64, 80, 96]" in text
    assert GREEDY_NOTE in text and "random sampling" in text and "greedy target requests" in text
    assert e.synthetic_requests(4) == 8  # buckets are per DP shard (R-H1)
    step = resolve_draft_step_config(None, facts(w=3)).log_block("MTP", "file /cfg/steps.json")
    assert step.splitlines()[0] == "MTP adaptive effective configuration"
    assert "source: file /cfg/steps.json" in step and '"switch_min_gain": 0.05' in step


def test_unified_bindings():
    """R-F6: per request count B the first prepared buckets covering B, 2B, 4B and B*(w+1)."""
    prepared = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96]
    assert unified_bindings(8, 5, prepared) == (8, 16, 32, 48)
    assert unified_bindings(1, 5, prepared) == (1, 2, 4, 6)
    assert unified_bindings(3, 7, [4, 8, 16, 24]) == (4, 8, 16, 24)


def test_frozen_configs():
    cfg = parse_verify_calibration({"model": "sps"})
    with pytest.raises(ValidationError):
        cfg.model = "additive"
    assert isinstance(DraftStepConfig().policy.window_size, int)
