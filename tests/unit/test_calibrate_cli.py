"""`adaspec calibrate` (issue 4 item 6): calibrates as serving would, prints the table, plots the fit.

Also R-G1/R-G2 through the command line: the table written by one start is loaded by the next,
which then skips sampling (its output says the source is the saved table).
"""

from __future__ import annotations

import json

import pytest
import torch

from adaspec.cli import main
from adaspec.drafts.factory import build_draft, save_draft
from adaspec.models.loader import load_model, weights_fingerprint

CAL = {"request_buckets": [1, 2], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 200}],
       "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1}


@pytest.fixture(scope="module")
def draft_dir(tiny_llama_dir, tmp_path_factory):
    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = build_draft("dspark", cfg, torch.arange(cfg.vocab_size), width=7, num_layers=1, rank=8)  # a w=7 draft also serves w=5
    draft = draft.init_from_target(target)
    return save_draft(draft, tmp_path_factory.mktemp("dspark7"), weights_fingerprint(tiny_llama_dir))


def test_calibrate_prints_table_and_writes_png(tiny_llama_dir, draft_dir, tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(CAL))
    table, png = tmp_path / "costs.json", tmp_path / "fit.png"
    common = [f"--model={tiny_llama_dir}", "--speculative_algorithm=DSpark", "--num_speculative_tokens=5",
              f"--draft_model={draft_dir}", "--enable_adaptive_target_verify=true", "--max_seqs_per_batch=2",
              "--graph_decode_batch_sizes=1,2", "--max_model_len=256"]
    assert main(["calibrate", *common, f"--adaptive_target_verify_calibration={cal}",
                 f"--adaptive_target_verify_cost_table_output={table}", f"--plot={png}"]) == 0
    out = capsys.readouterr()
    assert "DSpark adaptive effective configuration" in out.err
    report = json.loads(out.out[: out.out.index("\n}\n") + 2])
    assert report["metadata"]["algorithm"] == "DSpark" and report["metadata"]["draft_width"] == 5
    assert report["model"]["kind"] == "additive"
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table.exists()

    assert main(["calibrate", *common, f"--adaptive_target_verify_cost_table={table}", "--plot="]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out[: out.out.index("\n}\n") + 2])["source"] == str(table)
    assert "calibration:" not in out.err  # no sampling or fitting this time

    # a width-7 engine must refuse the width-5 table (R-G3)
    rc = main(["calibrate", *[c.replace("tokens=5", "tokens=7") for c in common],
               f"--adaptive_target_verify_cost_table={table}", "--plot="])
    assert rc == 2 and "draft_width" in capsys.readouterr().err
