"""scripts/train_drafts_gpu.sh (issue 11's GPU run) as a dry run: DEVICE=cpu, a tiny random target,
tiny sizes. The script's own logic is what is checked: generation in the background beside
training, the wall budget (the train stage ends in time and saves both drafts with their curve at
the listed points), the logs in LOG_DIR, and nothing but the drafts in OUT_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_script_dry_run_on_cpu(tiny_llama_dir, tmp_path):
    # ADASPEC_TEST_TRAIN_DEVICE=cuda runs the same dry run on a GPU machine
    env = dict(os.environ, DEVICE=os.environ.get("ADASPEC_TEST_TRAIN_DEVICE", "cpu"), MODEL=str(tiny_llama_dir), MINUTES="0.5", OUT_DIR=str(tmp_path / "drafts"),
               DATA_DIR=str(tmp_path / "data"), CKPT=str(tmp_path / "ckpt.pt"), LOG_DIR=str(tmp_path / "logs"),
               CHAT_PROMPTS="8", CODE_PROMPTS="4", PROSE_PROMPTS="2", CODE_TOKENS="3000", PROSE_TOKENS="600",
               GEN_TOKENS="12", GEN_BATCH="4", BATCH_TOKENS="256", SEQ_LEN="64", CURVE_POINTS="0,500",
               EXTRA="--draft_vocab=64 --width=5 --rank=8 --curve_prompts=2 --prompt_tokens=24",
               TRAIN=f"{sys.executable} -m adaspec.training.cli", OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    done = subprocess.run(["bash", str(REPO / "scripts" / "train_drafts_gpu.sh")], env=env, capture_output=True,
                          text=True, timeout=240)
    elapsed = time.perf_counter() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / "logs" / "train.log").read_text()
    assert "wall budget (0.25 min) reached" in log
    assert "self-distilling" in (tmp_path / "logs" / "gen.log").read_text()
    assert elapsed < 0.5 * 60 + 60  # the budget plus start-up; never the 10**9 positions asked for
    for kind in ("mtp", "dspark"):
        files = sorted(p.name for p in (tmp_path / "drafts" / kind).iterdir())
        assert files == ["config.json", "curve.json", "model.safetensors"], files
        curve = json.loads((tmp_path / "drafts" / kind / "curve.json").read_text())
        assert curve[0]["positions"] == 0 and curve[-1][kind]["heldout"]
