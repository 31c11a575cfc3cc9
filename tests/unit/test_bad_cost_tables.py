"""Bad saved cost tables, cost-table outputs and calibrate's --plot: refused before any model work (R-G1..R-G3, issue 8).

A valid table for the tiny target + a tiny DSpark draft is written by hand, checked to pass
preflight (positive control), then broken one field at a time. Hand-edited tables are sanity-
checked: well-formed points, positive finite costs, KV ranges ordered and inside the context.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from adaspec.config import EngineConfig
from refusal import refused

TABLE_FLAG = "--adaptive_target_verify_cost_table"
OUT_FLAG = "--adaptive_target_verify_cost_table_output"


@pytest.fixture(scope="module")
def dspark_dir(tiny_llama_dir, tmp_path_factory):
    from adaspec.drafts.factory import build_draft, save_draft
    from adaspec.models.loader import load_model, weights_fingerprint

    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = build_draft("dspark", cfg, torch.arange(cfg.vocab_size), width=5, num_layers=1, rank=8).init_from_target(target)
    return save_draft(draft, tmp_path_factory.mktemp("dspark5t"), weights_fingerprint(tiny_llama_dir))


@pytest.fixture(scope="module")
def good_table(tiny_llama_dir, dspark_dir):
    from adaspec.models.loader import weights_fingerprint
    from adaspec.preflight.model import draft_fingerprint

    from adaspec.models.loader import read_model_config
    from adaspec.models.native_kernels import resolve

    fp = f"{weights_fingerprint(tiny_llama_dir)}+draft:{draft_fingerprint(dspark_dir)}"
    kernels = resolve("auto", "cpu", torch.float32, read_model_config(tiny_llama_dir))[0]  # what auto runs
    grid = {"1": [1, 4, 6], "2": [2, 4, 12]}
    points = [[int(b), g, 0.001 + 0.0001 * g + 0.0005 * (b == "2"), 10] for b, gs in grid.items() for g in gs]
    return {"format": "adaspec-cost-table",
            "metadata": {"version": 1, "algorithm": "DSpark", "mode": "adaptive_target_verify", "draft_width": 5,
                         "weights_fingerprint": fp, "quantization": "none", "dtype": "float32", "tp_size": 1,
                         "dp_size": 1, "cp_size": 1, "unified": False, "device_type": "cpu",
                         "layer_kernels": kernels, "request_buckets": [1, 2], "kv_ranges": [[1, 200]], "grid": grid},
            "model": {"kind": "additive", "bias_s": 0.001, "bcaps": [1, 2], "alpha_s": [0.0, 0.0005],
                      "x_values": [1, 2, 4, 6, 12], "theta_s": [0.0, 0.0001, 0.0003, 0.0005, 0.0011]},
            "points": points}


def flags(tiny_llama_dir, dspark_dir):
    return ["generate", f"--model={tiny_llama_dir}", "--prompt=hi", "--speculative_algorithm=DSpark",
            "--num_speculative_tokens=5", f"--draft_model={dspark_dir}", "--enable_adaptive_target_verify=true",
            "--max_seqs_per_batch=2", "--graph_decode_batch_sizes=1,2", "--max_model_len=256"]


def test_good_table_passes_preflight(tiny_llama_dir, dspark_dir, good_table, tmp_path):
    """Positive control: the table broken below is valid for this engine."""
    from adaspec.preflight import preflight

    path = tmp_path / "t.json"
    path.write_text(json.dumps(good_table))
    preflight(EngineConfig(model=str(tiny_llama_dir), speculative_algorithm="DSpark", num_speculative_tokens=5,
                           draft_model=str(dspark_dir), enable_adaptive_target_verify=True, max_seqs_per_batch=2,
                           graph_decode_batch_sizes=(1, 2), max_model_len=256, adaptive_target_verify_cost_table=str(path)))


def _set(d, path, value):
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        d = d[k]
    if value is _DEL:
        del d[keys[-1]]
    else:
        d[keys[-1]] = value


_DEL = object()
TABLE_CASES = [  # (edit path, new value, text the message must contain)
    ("format", "something-else", "not an adaspec cost table"),
    ("metadata", _DEL, "metadata"),
    ("points", "not a list", "points"),
    ("points.0", [1, "a", 0.1, 3], "points[0]"),
    ("points.1", [1, 4], "points[1]"),
    ("points.2", [1, 6, -0.002, 5], "cost_s must be a positive"),
    ("points.0", [0, 1, 0.001, 5], "bcap must be an integer >= 1"),
    ("model.bias_s", -0.01, "bias_s"),
    ("model.theta_s", [0.0, float("nan"), 0.0003, 0.0005, 0.0011], "non-finite"),
    ("model", _DEL, "model"),
    ("model.kind", "cubic", "cubic"),
    ("model.alpha_s", [0.0], "alpha_s"),
    ("metadata.kv_ranges", [[300, 100]], "kv_ranges"),
    ("metadata.kv_ranges", [[1, 100], [50, 150]], "overlap"),
    ("metadata.kv_ranges", [], "covers nothing"),
    ("metadata.grid", {"1": [1, 4, 6], "2": [2, 4, 40]}, "impossible"),
    ("metadata.grid", {"1": [1, 4, 6]}, "metadata.grid"),
    ("metadata.algorithm", "MTP", "algorithm"),  # R-G3
    ("metadata.draft_width", 7, "draft_width"),
    ("metadata.dp_size", 2, "dp_size"),
    ("metadata.unified", True, "unified"),
    ("metadata.device_type", "cuda", "device_type"),
    ("metadata.dtype", "bfloat16", "dtype"),
    ("metadata.mode", "adaptive_draft_step", "mode"),
    ("metadata.weights_fingerprint", "hf-sha256:other", "weights_fingerprint"),  # needs the model dir, not weights
    ("metadata.kv_ranges", [[1, 4000]], "context limit 256"),  # needs config.json, not weights
    ("metadata.draft_width", "five", "draft_width"),
]


@pytest.mark.parametrize("path, value, text", TABLE_CASES, ids=[f"{p}-{t[:18]}" for p, _, t in TABLE_CASES])
def test_bad_saved_table(path, value, text, tiny_llama_dir, dspark_dir, good_table, capsys, monkeypatch, tmp_path):
    table = copy.deepcopy(good_table)
    _set(table, path, value)
    f = tmp_path / "t.json"
    f.write_text(json.dumps(table))
    refused([*flags(tiny_llama_dir, dspark_dir), f"{TABLE_FLAG}={f}"], capsys, monkeypatch, f"{TABLE_FLAG}={f}",
            contains=[text])


@pytest.mark.parametrize("content, text", [(None, "does not exist"), ("DIR", "directory"), ("{broken", "invalid JSON"),
                                           (b"\xff\xfe", "UTF-8"), ("", "empty"), ("null", "cost table"),
                                           ('{"format": "adaspec-cost-table", "format": "x"}', "appears twice")])
def test_unreadable_saved_table(content, text, tiny_llama_dir, dspark_dir, capsys, monkeypatch, tmp_path):
    f = tmp_path / "t.json"
    if content == "DIR":
        f.mkdir()
    elif isinstance(content, bytes):
        f.write_bytes(content)
    elif content is not None:
        f.write_text(content)
    refused([*flags(tiny_llama_dir, dspark_dir), f"{TABLE_FLAG}={f}"], capsys, monkeypatch, f"{TABLE_FLAG}={f}",
            contains=[text])


def test_bad_table_outputs_are_refused_before_calibration(tiny_llama_dir, dspark_dir, capsys, monkeypatch, tmp_path):
    """R-G1, issue 8: the output path is checked at start, so a finished calibration is never lost."""
    base = flags(tiny_llama_dir, dspark_dir)
    refused([*base, f"{OUT_FLAG}={tmp_path / 'missing' / 't.json'}"], capsys, monkeypatch, OUT_FLAG,
            contains=["does not exist", "mkdir -p"])
    (tmp_path / "dir").mkdir()
    refused([*base, f"{OUT_FLAG}={tmp_path / 'dir'}"], capsys, monkeypatch, OUT_FLAG, contains=["a directory"])
    (tmp_path / "file").write_text("x")
    refused([*base, f"{OUT_FLAG}={tmp_path / 'file' / 't.json'}"], capsys, monkeypatch, OUT_FLAG,
            contains=["is a file, not a directory"])
    refused([*base, f"{OUT_FLAG}={tmp_path}/"], capsys, monkeypatch, OUT_FLAG, contains=["file name"])


def test_existing_table_output_is_never_modified(tiny_llama_dir, dspark_dir, capsys, monkeypatch, tmp_path):
    """R-G1: an existing file is refused at start-up and left byte-for-byte (and mtime) unchanged."""
    out = tmp_path / "costs.json"
    out.write_bytes(b"precious calibration\n")
    before = out.stat()
    for command in ("generate", "calibrate"):
        argv = [command if a == "generate" else a for a in flags(tiny_llama_dir, dspark_dir)]
        if command == "calibrate":
            argv = [a for a in argv if a != "--prompt=hi"] + ["--plot="]
        refused([*argv, f"{OUT_FLAG}={out}"], capsys, monkeypatch, OUT_FLAG, contains=["already exists"])
    assert out.read_bytes() == b"precious calibration\n"
    assert out.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["costs.json"]  # nothing else written


CAL_ARGS = ["--speculative_algorithm=DSpark", "--num_speculative_tokens=5", "--enable_adaptive_target_verify=true",
            "--max_seqs_per_batch=2", "--graph_decode_batch_sizes=1,2", "--max_model_len=256"]


def test_calibrate_refusals(tiny_llama_dir, dspark_dir, capsys, monkeypatch, tmp_path):
    base = ["calibrate", f"--model={tiny_llama_dir}", f"--draft_model={dspark_dir}", *CAL_ARGS]
    refused(["calibrate", f"--model={tiny_llama_dir}"], capsys, monkeypatch, "--enable_adaptive_target_verify")
    refused([*base, f"--plot={tmp_path / 'fit.jpg'}"], capsys, monkeypatch, "--plot", contains=[".png"])
    (tmp_path / "old.png").write_bytes(b"old plot")
    refused([*base, f"--plot={tmp_path / 'old.png'}"], capsys, monkeypatch, "--plot", contains=["already exists"])
    assert (tmp_path / "old.png").read_bytes() == b"old plot"
    refused([*base, f"--plot={tmp_path / 'nodir' / 'fit.png'}"], capsys, monkeypatch, "--plot",
            contains=["does not exist"])
    same = tmp_path / "same.png"
    refused([*base, f"--plot={same}", f"{OUT_FLAG}={same}"], capsys, monkeypatch, "--plot", contains=["same file"])
