"""Bad command-line flags, JSON configs and cost tables: refused in one line, before any model work.

Bad prompts and prompts files are in test_bad_prompts.py.

Issue 8 / ground rule 4, R-B5, R-E1..R-E4, R-F5, R-G1..R-G3. Every case runs `adaspec generate` (or
`calibrate`) in-process; `refused()` checks exit status 2, exactly one error line naming the
flag or field, no traceback, no weights loaded and an answer within a few seconds.
"""

from __future__ import annotations

import json

import pytest
import torch

from refusal import refused

TINY = None  # set by the autouse fixture: the tiny model directory


@pytest.fixture(autouse=True)
def _tiny(tiny_llama_dir):
    global TINY
    TINY = str(tiny_llama_dir)


def gen(*flags, prompt="--prompt=hi"):
    return ["generate", f"--model={TINY}", *([prompt] if prompt else []), *flags]


# ------------------------------------------------------------------------------------ flags
FLAG_CASES = [
    (["--max_tokenz=5"], "--max_tokenz", ["did you mean --max_tokens", "adaspec generate --help"]),
    (["--max_tokens=abc"], "--max_tokens", ["expected an integer"]),
    (["--max_tokens=0"], "--max_tokens", [">= 1"]),
    (["--temperature=-1"], "--temperature", [">= 0"]),
    (["--temperature=inf"], "--temperature", ["finite"]),
    (["--top_p=1.5"], "--top_p", ["(0, 1]"]),
    (["--min_p=nan"], "--min_p", ["finite"]),
    (["--top_k=-5"], "--top_k", [">= 1"]),
    (["--stop="], "--stop", ["empty"]),
    (["--threads=0"], "--threads", [">= 1"]),
    (["--max_seqs_per_batch=0"], "--max_seqs_per_batch", [">= 1"]),
    (["--max_seqs_per_batch=8", "--max_num_batched_tokens=4"], "--max_num_batched_tokens", []),
    (["--max_model_len=1"], "--max_model_len", [">= 2"]),
    (["--max_model_len=999999"], "--max_model_len", ["context limit 1024"]),  # needs config.json, not weights
    (["--device=cuda:abc"], "--device", ["cuda:N"]),
    (["--device=tpu"], "--device", []),
    (["--dtype=int8"], "--dtype", ["allowed values"]),
    (["--seed=-1"], "--seed", []),
    (["--seed=1.5"], "--seed", ["expected an integer"]),
    (["--speculative_algorithm=eagle"], "--speculative_algorithm", ["allowed values"]),
    (["--num_speculative_tokens=3"], "--num_speculative_tokens", ["--speculative_algorithm"]),
    (["--speculative_algorithm=MTP", "--num_speculative_tokens=0"], "--num_speculative_tokens", []),
    (["--speculative_algorithm=DSpark", "--num_speculative_tokens=6"], "--num_speculative_tokens", ["5 or 7"]),
    (["--graph_decode_batch_sizes=0,2"], "--graph_decode_batch_sizes", []),
    (["--graph_decode_batch_sizes=a,b"], "--graph_decode_batch_sizes", ["integers"]),
    (["--chat=maybe"], "--chat", ["true or false"]),
    (["--json=perhaps"], "--json", ["true or false"]),
    (["--dp_size=0"], "--dp_size", [">= 1"]),
    (["--tp_size=2", "--dp_size=2"], "--dp_size", ["not implemented"]),
    (["--dp_size=2", "--speculative_algorithm=MTP", "--enable_adaptive_draft_step=true"], "--dp_size", ["R-E2"]),
    (["--tp_size=2", "--nnodes=2"], "--master_port", ["same port on every node"]),
    (["--tp_size=2", "--node_rank=3", "--nnodes=2", "--master_port=29555"], "--node_rank", ["0..1"]),
    (["--tp_size=3", "--nnodes=2", "--master_port=29555"], "--nnodes", ["does not divide"]),
    (["--master_node_addr="], "--master_node_addr", ["empty"]),
    (["--enable_adaptive_spec_prune=true"], "enable_adaptive_target_verify", ["not accepted as an alias"]),
    (["--speculative_algorithm=MTP", "--num_speculative_tokens=3", "--enable_adaptive_target_verify=true"],
     "--num_speculative_tokens", ["5 or 7"]),
    (["--speculative_algorithm=MTP", "--enable_unified_mtp_graph=true", "--temperature=0.5"], "--temperature",
     ["--enable_unified_mtp_graph"]),  # R-E3: both known at start-up
    (["--speculative_algorithm=DSpark", "--num_speculative_tokens=5", "--enable_adaptive_target_verify=true",
      "--adaptive_target_verify_cost_table=a.json", "--adaptive_target_verify_cost_table_output=b.json"],
     "--adaptive_target_verify_cost_table_output", ["only one"]),
    (["--draft_model=/nonexistent/draft", "--speculative_algorithm=MTP"], "--draft_model", ["does not exist"]),
    (["--adaptive_draft_step_config=x.json"], "--adaptive_draft_step_config", ["--enable_adaptive_draft_step"]),
    (["--max_seqs_per_batch=100000000", "--max_num_batched_tokens=100000000"], "--max_seqs_per_batch",
     ["GiB"]),  # a KV cache that cannot fit: refused before the allocation fails
    # audit (issue 8): a flag given twice used to keep the last value silently
    (["--max_tokens=3", "--max_tokens=4"], "--max_tokens", ["given twice"]),
    (["--json", "--json=false"], "--json", ["given twice"]),
    (["--graph_decode_batch_sizes="], "--graph_decode_batch_sizes", ["is empty"]),  # was "empty outside 1..16"
    (["--graph_decode_batch_sizes=2,2"], "--graph_decode_batch_sizes", ["more than once"]),
    (["--stop=a", "--stop="], "--stop", ["empty"]),
    (["--stop=\udcff"], "--stop", ["Unicode"]),  # a command-line byte that is not UTF-8
    (["--temperature=1e400"], "--temperature", ["finite"]), (["--temperature="], "--temperature", ["a number"]),
    (["--top_k=99999999999999999999999"], "--top_k", ["at most"]), (["--max_tokens=1e3"], "--max_tokens", ["integer"]),
    (["--seed=18446744073709551616"], "--seed", ["2**64-1"]), (["--device=cuda:-1"], "--device", ["cuda:N"]),
    (["--device=cuda:0:1"], "--device", ["cuda:N"]), (["--device=CPU"], "--device", ["allowed values"]),
    (["--device="], "--device", ["allowed values"]), (["--dtype="], "--dtype", ["allowed values"]),
    (["--speculative_algorithm=mtp"], "--speculative_algorithm", ["MTP"]),
    (["--linear_backend=int4"], "--linear_backend", ["allowed values"]),
    (["--linear_backend=fp16w", "--dtype=bfloat16"], "--linear_backend", ["--dtype=float32"]),
    (["--layer_kernels=fast"], "--layer_kernels", ["allowed values"]),
    (["--layer_kernels=native", "--dtype=bfloat16"], "--layer_kernels", ["--dtype=float32"]),
    (["--layer_kernels=native", "--device=cuda"], "--layer_kernels", ["CPU"]),
    (["--tp_size=0"], "--tp_size", [">= 1"]), (["--cp_size=0"], "--cp_size", ["only 1"]),
    (["--max_num_batched_tokens=-5"], "--max_num_batched_tokens", [">= 1"]),
    (["--enable_unified_mtp_graph=true"], "--enable_unified_mtp_graph", ["--speculative_algorithm"]),
    (["--speculative_algorithm=DSpark", "--num_speculative_tokens=5", "--enable_adaptive_draft_step=true"],
     "--enable_adaptive_draft_step", ["MTP"]),
    (["--speculative_algorithm=MTP", "--enable_adaptive_draft_step=true", "--enable_adaptive_target_verify=true"],
     "--enable_adaptive_target_verify", ["cannot be combined"]),
    (["--prompt"], "--prompt", ["needs a value"]), (["hello"], "hello", ["--name=value"]),
    # audit (bad inputs): --threads=99999 crashed the process (OpenMP, segfault) after loading; --dp_size=99999
    # spawned processes until the OOM killer ended them
    (["--threads=99999"], "--threads", ["at most 1024"]),
    (["--dp_size=99999"], "--dp_size", ["99999 processes", "GiB"]),
]


@pytest.mark.parametrize("flags, name, contains", FLAG_CASES, ids=[c[1] + str(i) for i, c in enumerate(FLAG_CASES)])
def test_bad_flag(flags, name, contains, capsys, monkeypatch):
    refused(gen(*flags), capsys, monkeypatch, name, contains=contains)


@pytest.mark.parametrize("model, text", [("", "empty"), ("/dev/null", "neither a file nor a directory"),
                                         ("~/no_such_model_dir", "does not exist")])
def test_bad_model_flag(model, text, capsys, monkeypatch):
    refused(["generate", f"--model={model}", "--prompt=hi"], capsys, monkeypatch, "--model", contains=[text])


def test_no_command_and_unknown_command(capsys, monkeypatch):
    refused([], capsys, monkeypatch, "adaspec generate")
    refused(["generat"], capsys, monkeypatch, "generat", contains=["generate"])


def test_unknown_flag_of_calibrate_points_at_its_help(capsys, monkeypatch):
    refused(["calibrate", "--plott=x.png"], capsys, monkeypatch, "--plott", contains=["adaspec calibrate --help"])


# ------------------------------------------------------------------------------------ JSON configs
VERIFY = ["--speculative_algorithm=DSpark", "--num_speculative_tokens=5", "--enable_adaptive_target_verify=true",
          "--max_seqs_per_batch=2", "--graph_decode_batch_sizes=1,2", "--max_model_len=256"]
STEP = ["--speculative_algorithm=MTP", "--num_speculative_tokens=3", "--enable_adaptive_draft_step=true",
        "--max_seqs_per_batch=2", "--graph_decode_batch_sizes=1,2", "--max_model_len=256"]
GOOD_CAL = {"request_buckets": [1, 2], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 200}],
            "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1}


@pytest.fixture(scope="module")
def dspark_dir(tiny_llama_dir, tmp_path_factory):
    from adaspec.drafts.factory import build_draft, save_draft
    from adaspec.models.loader import load_model, weights_fingerprint

    cfg, target = load_model(tiny_llama_dir, torch.float32, "cpu")
    draft = build_draft("dspark", cfg, torch.arange(cfg.vocab_size), width=5, num_layers=1, rank=8).init_from_target(target)
    return save_draft(draft, tmp_path_factory.mktemp("dspark5"), weights_fingerprint(tiny_llama_dir))


CAL_CASES = [
    (VERIFY, "--adaptive_target_verify_calibration", None, "--adaptive_target_verify_calibration", "does not exist"),
    (VERIFY, "--adaptive_target_verify_calibration", "DIR", "--adaptive_target_verify_calibration", "not a file"),
    (VERIFY, "--adaptive_target_verify_calibration", '{"request_buckets": [1, 2]', "line 1 column", "invalid JSON"),
    (VERIFY, "--adaptive_target_verify_calibration", {"request_bucket": [1]}, "request_bucket", "unknown key"),
    (VERIFY, "--adaptive_target_verify_calibration", {"request_buckets": "1,2"}, "request_buckets", "valid list"),
    (VERIFY, "--adaptive_target_verify_calibration", {"request_buckets": [1, 4]}, "request_buckets", "not prepared"),
    (VERIFY, "--adaptive_target_verify_calibration", {"draft_width": 7}, "draft_width", "--num_speculative_tokens=5"),
    (VERIFY, "--adaptive_target_verify_calibration",
     {"contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 5000}]}, "contexts[0].max_kv_length",
     "context limit 256"),  # needs the context limit: still before the weights
    (VERIFY, "--adaptive_target_verify_calibration", {"warmup_steps": -1}, "warmup_steps", "greater than or equal to 0"),
    (VERIFY, "--adaptive_target_verify_calibration", {"enable_adaptive_spec_prune": True}, "enable_adaptive_spec_prune",
     "enable_adaptive_target_verify"),
    (VERIFY, "--adaptive_target_verify_calibration", [1, 2], "(root)", "JSON object"),
    (STEP, "--adaptive_draft_step_config", {"version": 2}, "version", "1"),
    (STEP, "--adaptive_draft_step_config", {"policy": {"switch_min_gain": -1}}, "policy.switch_min_gain", "greater than or equal to 0"),
    (STEP, "--adaptive_draft_step_config", {"step_cost_models": {}}, "step_cost_models", "not supported"),
    # audit (issue 8): a duplicate key kept the last value silently
    (VERIFY, "--adaptive_target_verify_calibration", '{"warmup_steps": 1, "warmup_steps": 2}', "warmup_steps",
     "appears twice"),
    (VERIFY, "--adaptive_target_verify_calibration", '{"warmup_steps": NaN}', "warmup_steps", "integer"),
    (VERIFY, "--adaptive_target_verify_calibration", {"warmup_steps": 1.5}, "warmup_steps", "integer"),
    (VERIFY, "--adaptive_target_verify_calibration", {"request_buckets": [2, 1, 2]}, "request_buckets", "duplicate"),
    (VERIFY, "--adaptive_target_verify_calibration",
     {"contexts": [{"prefill_tokens": 8, "min_kv_length": 100, "max_kv_length": 50}]}, "contexts[0]", "greater than"),
    (VERIFY, "--adaptive_target_verify_calibration", {"contexts": []}, "contexts", "at least one"),
    (VERIFY, "--adaptive_target_verify_calibration", "null", "(root)", "JSON object"),
    (STEP, "--adaptive_draft_step_config", '{"policy": {"switch_min_gain": NaN}}', "policy.switch_min_gain", "finite"),
    (STEP, "--adaptive_draft_step_config", {"policy": {"window_size": 0}}, "policy.window_size", "greater than"),
]


@pytest.mark.parametrize("mode, flag, content, field, text", CAL_CASES,
                         ids=[f"{c[1][2:12]}-{c[3]}" for c in CAL_CASES])
def test_bad_calibration_json(mode, flag, content, field, text, dspark_dir, capsys, monkeypatch, tmp_path):
    path = tmp_path / "cal.json"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        path.write_text(json.dumps(content))
    draft = [f"--draft_model={dspark_dir}"] if mode is VERIFY else []
    refused(gen(*mode, *draft, f"{flag}={path}"), capsys, monkeypatch, [flag, field], contains=[text])


def test_good_calibration_json_passes_preflight(tiny_llama_dir, dspark_dir, tmp_path):
    """Positive control: the files mutated above are valid, so each refusal is the mutation's."""
    from adaspec.config import EngineConfig
    from adaspec.preflight import preflight

    path = tmp_path / "cal.json"
    path.write_text(json.dumps(GOOD_CAL))
    checked = preflight(EngineConfig(model=str(tiny_llama_dir), speculative_algorithm="DSpark", num_speculative_tokens=5,
                                     enable_adaptive_target_verify=True, max_seqs_per_batch=2,
                                     graph_decode_batch_sizes=(1, 2), max_model_len=256, draft_model=str(dspark_dir),
                                     adaptive_target_verify_calibration=str(path)))
    assert checked.effective.request_buckets == (1, 2) and checked.max_model_len == 256


def test_context_fix_never_suggests_a_negative_prefill(dspark_dir, capsys, monkeypatch, tmp_path):
    """The fix used to read "prefill_tokens at most -79008"; it must propose something possible."""
    import re

    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"contexts": [{"prefill_tokens": 100, "min_kv_length": 1, "max_kv_length": 120}]}))
    line = refused(gen(*VERIFY, f"--draft_model={dspark_dir}", f"--adaptive_target_verify_calibration={path}"),
                   capsys, monkeypatch, "contexts[0].prefill_tokens", contains=["raise contexts[0].max_kv_length"])
    assert not re.search(r"at most -\d", line), line


def test_calibration_file_that_is_not_utf8(dspark_dir, capsys, monkeypatch, tmp_path):
    path = tmp_path / "cal.json"
    path.write_bytes(b'{"model": "\xff"}')
    refused(gen(*VERIFY, f"--draft_model={dspark_dir}", f"--adaptive_target_verify_calibration={path}"),
            capsys, monkeypatch, "--adaptive_target_verify_calibration", contains=["UTF-8"])


def test_flags_without_effect_are_warned_in_one_line_and_the_run_goes_on(capsys):
    """README: unused flags are warned about, once each, and generation still runs (exit 0)."""
    from adaspec.cli import main

    rc = main(gen("--top_p=0.5", "--min_p=0.1", "--seed=4", "--graph_decode_batch_sizes=1,2",
                  "--max_model_len=32", "--max_tokens=40", "--json"))
    out = capsys.readouterr()
    assert rc == 0 and json.loads(out.out)["outputs"]
    warnings = [line for line in out.err.splitlines() if ": warning: " in line]
    for text in ("--graph_decode_batch_sizes has no effect", "--seed=4 has no effect",
                 "--top_p=0.5, --min_p=0.1 has no effect with --temperature=0",
                 "--max_tokens=40 does not fit the context limit 32"):
        assert sum(text in w for w in warnings) == 1, (text, warnings)
    assert "Traceback" not in out.err


def test_more_threads_than_cores_is_warned():
    import os

    from adaspec.config import EngineConfig
    from adaspec.preflight import no_effect_warnings

    cores = os.cpu_count() or 1
    assert any(f"--threads={cores + 1}" in w for w in no_effect_warnings(EngineConfig(threads=cores + 1)))
    assert not no_effect_warnings(EngineConfig(threads=1))


def test_rendezvous_flags_of_a_single_process_are_warned():
    """Audit (bad inputs): --master_node_addr / --master_port were silently ignored with one process."""
    from adaspec.config import EngineConfig
    from adaspec.preflight import no_effect_warnings

    (line,) = no_effect_warnings(EngineConfig(master_node_addr="10.0.0.1", master_port=29500))
    assert line.startswith("--master_node_addr, --master_port have no effect with --tp_size=1 --dp_size=1"), line
    assert not no_effect_warnings(EngineConfig(tp_size=2, master_port=29500))


def test_unknown_flag_suggests_only_this_subcommands_flags(capsys, monkeypatch):
    line = refused(gen("--plott=x.png"), capsys, monkeypatch, "--plott")
    assert "--plot" not in line.replace("--plott", "")  # --plot belongs to calibrate, not generate


def test_version_flag_answers_instead_of_no_command(capsys):
    """`adaspec --version` used to be refused as "no command given" (misleading)."""
    from adaspec import __version__
    from adaspec.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"adaspec {__version__}"
