"""Saved cost tables (R-G1, R-G2, R-G3) and coverage fallback (R-F7): never-overwrite and atomic
writes, every compatibility mismatch, the version-less-table-counts-as-Draft7 rule, the loaded-table
log block, and the fit plot."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np
import pytest

from adaspec.calibration.config import (EngineFacts, parse_draft_step_config, resolve_draft_step_config,
                                        resolve_verify_calibration)
from adaspec.calibration.cost_table import (
    OUTPUT_FLAG,
    TABLE_FLAG,
    CostTable,
    CostTableCompatibilityError,
    CostTableError,
    TableCompat,
)

W = 5
BUCKETS = (1, 2, 4)


def ladder(b: int, w: int = W) -> tuple[int, ...]:
    return tuple(range(b, b * (w + 1) + 1, b))


def facts(buckets=BUCKETS, w=W) -> EngineFacts:
    return EngineFacts(num_speculative_tokens=w, request_buckets=buckets, model_context_limit=8192,
                       kv_capacity_per_slot=8192, target_rows={b: ladder(b, w) for b in buckets})


COMPAT = TableCompat(algorithm="DSpark", draft_width=W, weights_fingerprint="sha256:abc", dtype="float32",
                     device_type="cpu")


def timings(grid, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    return [(b, x, (0.004 + 0.001 * b + 0.0003 * x) * (1 + noise * rng.standard_normal()), 2500)
            for b, xs in grid.items() for x in xs for _ in range(3)]


@pytest.fixture(scope="module")
def table() -> CostTable:
    eff = resolve_verify_calibration(None, facts())
    return CostTable.build(timings(eff.grid), eff, COMPAT, created_at="2026-01-01T00:00:00+00:00")


# ----------------------------------------------------------------------------- build / save / load

def test_build_records_metadata_and_coverage(table):
    m = table.metadata
    assert (m.version, m.algorithm, m.mode, m.draft_width, m.dtype, m.device_type) == \
        (1, "DSpark", "adaptive_target_verify", W, "float32", "cpu")
    assert m.request_buckets == list(BUCKETS) and m.kv_ranges == [(1, 4096)]
    assert m.calibration["model"] == "additive" and m.calibration["warmup_steps"] == 8
    assert m.grid == {b: list(ladder(b)) for b in BUCKETS}
    assert m.heldout["median_rel_error"] < 0.05
    assert table.axis == "g" and len(table.points) == 3 * sum(len(ladder(b)) for b in BUCKETS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.model = None


def test_save_and_load_round_trip(tmp_path, table):
    """R-G1/R-G2: the saved table loads back with the same model, metadata and points."""
    p = table.save(tmp_path / "costs.json")
    t = CostTable.load(p, COMPAT)
    assert t.model == table.model and t.metadata == table.metadata and t.points == table.points
    assert t.source == str(p)
    assert t.cost_ms(2, 8, 3000) == pytest.approx(table.cost_ms(2, 8, 3000))
    assert not [f for f in os.listdir(tmp_path) if f != "costs.json"]  # no temporary file left


def test_never_overwrites(tmp_path, table):
    """R-G1: the file must not exist; the error names the file and the output flag."""
    p = tmp_path / "costs.json"
    p.write_text("precious")
    with pytest.raises(CostTableError) as e:
        table.save(p)
    assert str(p) in str(e.value) and OUTPUT_FLAG in str(e.value) and "never overwritten" in str(e.value)
    assert p.read_text() == "precious"


def test_directory_must_exist(tmp_path, table):
    with pytest.raises(CostTableError) as e:
        table.save(tmp_path / "missing" / "costs.json")
    assert "does not exist" in str(e.value) and "mkdir -p" in str(e.value) and OUTPUT_FLAG in str(e.value)


def test_failure_mid_write_leaves_no_file(tmp_path, table, monkeypatch):
    """R-G1 atomic write: a crash half-way through writing leaves neither the table nor a temp file."""
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space"):
        table.save(tmp_path / "costs.json")
    assert os.listdir(tmp_path) == []


def test_failure_before_publishing_leaves_no_file(tmp_path, table, monkeypatch):
    def boom(fd):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="I/O error"):
        table.save(tmp_path / "costs.json")
    assert os.listdir(tmp_path) == []


def test_concurrent_writer_is_never_overwritten(tmp_path, table, monkeypatch):
    """R-G1: if another process creates the file between the check and the publish, we fail."""
    p = tmp_path / "costs.json"
    real_link = os.link

    def racing_link(src, dst):
        with open(dst, "w") as f:
            f.write("other writer")
        return real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    with pytest.raises(CostTableError, match="already exists"):
        table.save(p)
    assert p.read_text() == "other writer"
    assert os.listdir(tmp_path) == ["costs.json"]


def test_file_system_without_hard_links(tmp_path, table, monkeypatch):
    def no_link(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    p = table.save(tmp_path / "costs.json")
    assert CostTable.load(p, COMPAT).model == table.model and os.listdir(tmp_path) == ["costs.json"]
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(OSError):
        table.save(tmp_path / "second.json")
    assert os.listdir(tmp_path) == ["costs.json"]
    monkeypatch.setattr(os, "replace", real_replace)


# ----------------------------------------------------------------------------- compatibility (R-G3)

MISMATCHES = [
    ("algorithm", {"algorithm": "MTP"}, "a table of one speculative algorithm never serves another"),
    ("draft_width", {"draft_width": 7}, "Draft5 and Draft7 costs never mix"),
    ("weights_fingerprint", {"weights_fingerprint": "sha256:other"}, "other target/draft weights"),
    ("quantization", {"quantization": "int8"}, "another quantisation"),
    ("dtype", {"dtype": "bfloat16"}, "--dtype=bfloat16"),
    ("linear_backend", {"linear_backend": "fp16w"}, "linear_backend: table 'fp32', engine 'fp16w'"),
    ("layer_kernels", {"layer_kernels": "native"}, "--layer_kernels=native"),
    ("tp_size", {"tp_size": 2}, "--tp_size=2"),
    ("dp_size", {"dp_size": 2}, "a DP=1 table cannot serve DP=2"),
    ("cp_size", {"cp_size": 2}, "--cp_size=2"),
    ("unified", {"unified": True}, "--enable_unified_mtp_graph=true"),
    ("device_type", {"device_type": "cuda"}, "--device=cuda"),
]


@pytest.mark.parametrize("field, change, text", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_every_compatibility_mismatch_is_a_clear_error(tmp_path, table, field, change, text):
    p = table.save(tmp_path / "costs.json")
    with pytest.raises(CostTableCompatibilityError) as e:
        CostTable.load(p, dataclasses.replace(COMPAT, **change))
    msg = str(e.value)
    assert e.value.fields == [field]
    assert f"{field}: table" in msg and text in msg and TABLE_FLAG in msg and str(p) in msg
    assert "fix:" in msg and OUTPUT_FLAG in msg  # how to recalibrate


def test_all_mismatches_are_reported_together(tmp_path, table):
    p = table.save(tmp_path / "costs.json")
    with pytest.raises(CostTableCompatibilityError) as e:
        CostTable.load(p, dataclasses.replace(COMPAT, algorithm="MTP", dtype="bfloat16", dp_size=2))
    assert e.value.fields == ["algorithm", "dtype", "dp_size"]


def _rewrite_metadata(path, **edits):
    d = json.loads(path.read_text())
    for k, v in edits.items():
        if v is None:
            d["metadata"].pop(k, None)
        else:
            d["metadata"][k] = v
    path.write_text(json.dumps(d))


def test_versionless_table_without_draft_width_counts_as_draft7(tmp_path):
    """R-G3: a version-less table that does not record draft_width is a Draft7 table."""
    f7 = facts(w=7)
    eff = resolve_verify_calibration(None, f7)
    p = CostTable.build(timings(eff.grid), eff, dataclasses.replace(COMPAT, draft_width=7),
                        with_heldout=False).save(tmp_path / "legacy.json")
    _rewrite_metadata(p, version=None, draft_width=None)
    assert CostTable.load(p, dataclasses.replace(COMPAT, draft_width=7)).metadata.draft_width == 7
    with pytest.raises(CostTableCompatibilityError) as e:
        CostTable.load(p, COMPAT)  # a Draft5 engine
    assert e.value.mismatches == [("draft_width", 7, 5)]


def test_versionless_table_with_draft_width_keeps_it(tmp_path, table):
    p = table.save(tmp_path / "legacy5.json")
    _rewrite_metadata(p, version=None)
    assert CostTable.load(p, COMPAT).metadata.draft_width == 5


@pytest.mark.parametrize("dtype, backend", [("float32", "fp32"), ("bfloat16", "bf16")])
def test_table_without_linear_backend_was_measured_on_the_dtype_kernels(tmp_path, dtype, backend):
    """Issue 14: tables written before --linear_backend ran nn.Linear in their dtype (fp32 or bf16)."""
    compat = dataclasses.replace(COMPAT, dtype=dtype, linear_backend=backend)
    eff = resolve_verify_calibration(None, facts())
    p = CostTable.build(timings(eff.grid), eff, compat, with_heldout=False).save(tmp_path / "old.json")
    _rewrite_metadata(p, linear_backend=None)
    assert CostTable.load(p, compat).metadata.linear_backend == backend
    with pytest.raises(CostTableCompatibilityError, match="--linear_backend=fp16w.*--linear_backend=" + backend):
        CostTable.load(p, dataclasses.replace(compat, linear_backend="fp16w"))


def test_table_without_layer_kernels_was_measured_on_torch_ops(tmp_path, table):
    """Issue 14: tables written before --layer_kernels ran torch's ops (SDPA); a native engine refuses them."""
    p = table.save(tmp_path / "old.json")
    _rewrite_metadata(p, layer_kernels=None)
    assert CostTable.load(p, COMPAT).metadata.layer_kernels == "torch"
    with pytest.raises(CostTableCompatibilityError, match="layer_kernels: table 'torch', engine 'native'"):
        CostTable.load(p, dataclasses.replace(COMPAT, layer_kernels="native"))


def test_versioned_table_must_record_draft_width(tmp_path, table):
    p = table.save(tmp_path / "t.json")
    _rewrite_metadata(p, draft_width=None)
    with pytest.raises(CostTableError, match="draft_width"):
        CostTable.load(p, COMPAT)


def test_load_errors(tmp_path, table):
    with pytest.raises(CostTableError, match="does not exist"):
        CostTable.load(tmp_path / "nope.json", COMPAT)
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(CostTableError, match="not valid JSON"):
        CostTable.load(bad, COMPAT)
    bad.write_text('{"metadata": {}}')
    with pytest.raises(CostTableError, match="not an adaspec cost table"):
        CostTable.load(bad, COMPAT)
    p = table.save(tmp_path / "t.json")
    with pytest.raises(CostTableError, match="precomputed step cost models is not supported"):
        CostTable.load(p, dataclasses.replace(COMPAT, mode="adaptive_draft_step", algorithm="MTP"))


def test_a_verify_table_never_serves_another_mode(tmp_path, table):
    p = table.save(tmp_path / "t.json")
    _rewrite_metadata(p, mode="adaptive_draft_step")
    with pytest.raises(CostTableCompatibilityError) as e:
        CostTable.load(p, COMPAT)
    assert e.value.fields == ["mode"]


# ----------------------------------------------------------------------------- coverage (R-F7)

def test_lookups_outside_coverage_return_none(table):
    """R-F7: uncalibrated request buckets or KV ranges -> None, so the caller admits full width."""
    assert table.covers(2, 1) and table.covers(2, 4096) and table.covers(4, None)
    assert not table.covers(2, 4097) and not table.covers(8, 100) and not table.covers(3, 100)
    assert table.cost_ms(2, 8, 2000) is not None
    assert table.cost_ms(2, 8, 5000) is None  # KV outside
    assert table.cost_ms(8, 8, 2000) is None  # request bucket not calibrated
    assert table.cost_ms(1, 100, 2000) is None  # G beyond the measured range
    assert table.lookup(2, 8, 2000) == table.cost_ms(2, 8, 2000)


def test_draft_step_table_is_keyed_by_k(tmp_path):
    """R-C3: one table type serves adaptive draft step, keyed by (Bcap, k), k = 0 included."""
    f = facts(w=3)
    eff = resolve_draft_step_config(None, f)
    compat = dataclasses.replace(COMPAT, algorithm="MTP", draft_width=3, mode="adaptive_draft_step")
    t = CostTable.build(timings(eff.grid, noise=0.0), eff, compat)
    assert t.axis == "k" and t.metadata.grid == {b: [0, 1, 2, 3] for b in BUCKETS}
    assert t.cost_ms(2, 3, 100) == pytest.approx(1000 * (0.004 + 0.002 + 0.0009), rel=1e-6)
    assert t.metadata.calibration["policy"]["window_size"] == 20
    assert t.log_block().splitlines()[0] == "MTP adaptive effective configuration"
    sps = resolve_draft_step_config(parse_draft_step_config({"calibration": {"model": "sps"}}), f)
    t = CostTable.build(timings(sps.grid, noise=0.0), sps, compat)
    assert t.model.per_bucket  # every (Bcap, k) keeps its own measured cost
    assert t.cost_ms(4, 2, 100) == pytest.approx(1000 * (0.004 + 0.004 + 0.0006), rel=1e-6)


def test_loaded_table_log_block(tmp_path, table):
    """R-G2/R-F7: source, saved calibration configuration, coverage, prepared buckets not covered."""
    p = table.save(tmp_path / "costs.json")
    t = CostTable.load(p, COMPAT)
    text = t.log_block(facts(buckets=(1, 2, 4, 8)))
    lines = text.splitlines()
    assert lines[0] == "DSpark adaptive effective configuration"
    assert lines[1].startswith(f"source: saved table {p}")
    assert '"warmup_steps": 8' in text and "coverage: request buckets [1, 2, 4]" in text
    assert "prepared request buckets [8] are not in the table: they run at full width" in text
    assert "greedy target requests" in text


def test_host_is_saved_and_compared_on_load(tmp_path, table):
    """calibration/host.py: a table written before tables recorded their host (metadata.host empty)
    loads without a host warning; a recorded host is kept through save/load and only differences are
    named."""
    from adaspec.calibration.host import host_identity, host_note

    here = host_identity("cpu")
    assert table.metadata.host == {} and host_note(table.metadata.host, here, TABLE_FLAG) is None
    eff = resolve_verify_calibration(None, facts())
    hosted = CostTable.build(timings(eff.grid), eff, COMPAT, host=here)
    path = hosted.save(tmp_path / "t.json")
    loaded = CostTable.load(path, COMPAT)
    assert loaded.metadata.host == here and host_note(loaded.metadata.host, here, TABLE_FLAG) is None
    note = host_note(loaded.metadata.host, {**here, "torch": "0.0"}, TABLE_FLAG)
    assert note.count("\n") == 0 and "torch" in note and "threads" not in note and TABLE_FLAG in note


def test_build_rejects_mismatched_compat():
    eff = resolve_verify_calibration(None, facts())
    with pytest.raises(ValueError, match="does not match the calibration"):
        CostTable.build(timings(eff.grid), eff, dataclasses.replace(COMPAT, draft_width=7))


# ----------------------------------------------------------------------------- plot

def test_plot_fit_writes_png(tmp_path, table):
    pytest.importorskip("matplotlib")
    from adaspec.calibration.plot import plot_fit

    out = plot_fit(table, tmp_path / "fit.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(tmp_path, table, monkeypatch):
    from adaspec.calibration.plot import PlotUnavailableError, plot_fit

    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(PlotUnavailableError, match=r"pip install 'adaspec\[plot\]'"):
        plot_fit(table, tmp_path / "fit.png")
