"""`adaspec bench-serve` against the in-process tiny server (issue 9, R-I3): keys, JSON, plot."""

from __future__ import annotations

import json

import pytest

from adaspec.cli import main
from adaspec.config import EngineConfig
from adaspec.engine.async_engine import AsyncEngine
from adaspec.engine.llm_engine import LLMEngine
from adaspec.server.app import ServerSettings, build_app
from server_harness import serving

VLLM_KEYS = ["duration", "completed", "failed", "request_throughput", "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p99")]


@pytest.fixture(scope="module")
def url(tiny_llama_dir):
    config = EngineConfig(model=str(tiny_llama_dir), max_seqs_per_batch=4, max_num_batched_tokens=256, max_model_len=640)
    app = build_app(AsyncEngine(lambda: LLMEngine(config)), ServerSettings("tiny"))
    with serving(app) as u:
        yield u


def test_bench_serve_writes_vllm_keys_json_and_plot(url, tmp_path, capsys):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    # chat only: the copy-heavy prompts (hundreds of tokens with SmolLM2's tokenizer) exceed this tiny
    # server's 640-token context under the tiny character-level tokenizer; their loading is tested below
    rc = main(["bench-serve", f"--base_url={url}", "--prompts=chat", "--endpoint=completions", "--num_prompts=6",
               "--concurrency=1,3", "--max_tokens=8", "--ignore_eos=true", "--num_warmups=1", "--progress=false",
               "--label=tiny", f"--json_out={out}", f"--plot={png}"])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["max_concurrency"] for r in rows] == [1, 3]
    for r in rows:
        for key in VLLM_KEYS:
            assert r[key] is not None, key
        assert r["completed"] == 6 and r["failed"] == 0 and r["total_output_tokens"] == 6 * 8
        assert r["output_lens"] == [8] * 6 and r["mean_tpot_ms"] > 0
        assert r["spec_decode_acceptance_rate"] is None  # no speculation: nothing drafted
        assert r["server_cpu_seconds"] is not None and r["server_cpu_seconds"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    captured = capsys.readouterr()
    assert "| tiny | 1 | 6/0 |" in captured.out


def test_bench_serve_copy_prompt_set_loads():
    """Issue 10: the held-out copy-heavy set is a bench-serve prompt set, multi-turn chats as conversations."""
    from adaspec.server.bench_client import load_prompts

    prompts, notes = load_prompts(["copy"], 32)
    assert not notes and len({p.id for p in prompts}) == 32
    assert sum(p.messages is not None for p in prompts) == 8  # the multi-turn quarter
    assert all(p.chat for p in prompts)


def test_bench_serve_poisson_arrivals(url, tmp_path):
    out = tmp_path / "poisson.json"
    assert main(["bench-serve", f"--base_url={url}", "--prompts=chat", "--endpoint=chat", "--num_prompts=4",
                 "--concurrency=2", "--request_rate=40", "--max_tokens=4", "--num_warmups=0", "--progress=false",
                 f"--json_out={out}"]) == 0
    (row,) = json.loads(out.read_text())
    assert row["request_rate"] == 40 and row["completed"] == 4 and row["max_concurrency"] == 2


def test_bench_serve_refuses_bad_flags_before_sending(capsys):
    assert main(["bench-serve", "--prompts=poetry"]) == 2
    assert "--prompts=poetry" in capsys.readouterr().err
    assert main(["bench-serve", "--base_url=http://127.0.0.1:9", "--prompts=chat", "--num_prompts=1"]) == 2
    assert "cannot read /v1/models" in capsys.readouterr().err


def test_failed_requests_are_explained_not_only_counted(url, capsys):
    """Audit (issue 8/9): a wrong --model failed every request and printed only "0/2"."""
    assert main(["bench-serve", f"--base_url={url}", "--model=wrong", "--prompts=chat", "--num_prompts=2",
                 "--concurrency=1", "--max_tokens=4", "--num_warmups=0", "--progress=false"]) == 1
    err = capsys.readouterr().err
    assert "2 request(s) failed" in err and "model 'wrong' is not served here" in err


def test_a_server_that_wants_a_key_is_named_in_one_line(tiny_llama_dir, capsys):
    """A 401 from /v1/models said "start the server first"; it names --api_key now."""
    config = EngineConfig(model=str(tiny_llama_dir), max_seqs_per_batch=1, max_model_len=64)
    with serving(build_app(AsyncEngine(lambda: LLMEngine(config)), ServerSettings("tiny", "s3cret"))) as u:
        for flags, extra in (([], ""), (["--api_key=wrong"], "the one given was refused")):
            assert main(["bench-serve", f"--base_url={u}", "--prompts=chat", "--num_prompts=1", "--progress=false",
                         *flags]) == 2
            err = capsys.readouterr().err.strip().splitlines()[-1]
            assert "401" in err and "--api_key" in err and extra in err and "start the server" not in err
