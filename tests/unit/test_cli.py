"""The command line: `--flag=value`, true|false booleans, clear errors, parseable --json."""

from __future__ import annotations

import json

import pytest

from adaspec.cli import build_parser, main


def _sub_parsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_every_flag_has_help():
    for name, sub in _sub_parsers().items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help and action.help.strip(), f"{name} {action.option_strings} has no help"


def test_unknown_flag_names_the_closest(capsys):
    assert main(["generate", "--max_token=5", "--prompt=x"]) == 2
    err = capsys.readouterr().err
    assert "--max_token" in err and "did you mean --max_tokens" in err
    assert "see `adaspec generate --help`" in err  # the subcommand's help, not adaspec's


@pytest.mark.parametrize("argv, flag", [
    (["generate", "--dtype=fp8", "--prompt=x"], "--dtype"),
    (["generate", "--chat=maybe", "--prompt=x"], "--chat"),
    (["generate", "--speculative_algorithm=eagle", "--prompt=x"], "--speculative_algorithm"),
    (["generate", "--threads=two", "--prompt=x"], "--threads"),
    (["generate", "--linear_backend=fp8", "--prompt=x"], "--linear_backend"),
])
def test_bad_values_name_the_flag(capsys, argv, flag):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def test_rule_violations_exit_before_model_work(capsys, monkeypatch):
    import adaspec.engine.llm_engine as eng

    monkeypatch.setattr(eng, "LLMEngine", lambda *a, **k: pytest.fail("model work started"))
    rc = main(["generate", "--prompt=x", "--speculative_algorithm=MTP", "--enable_probabilistic_draft=true"])
    assert rc == 2
    assert "--enable_probabilistic_draft" in capsys.readouterr().err


def test_generate_json_is_the_only_stdout(tiny_llama_dir, capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello"}) + "\n" + json.dumps("bye") + "\n")
    rc = main(["generate", f"--model={tiny_llama_dir}", "--prompt=first", f"--prompts_file={prompts}",
               "--max_tokens=4", "--json", "--chat=false"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["prompt"] for o in out["outputs"]] == ["first", "hello", "bye"]
    for o in out["outputs"]:
        assert set(o) == {"prompt", "token_ids", "text", "finish_reason"}
        assert 1 <= len(o["token_ids"]) <= 4
    assert set(out["stats"]) >= {"output_tokens", "elapsed_s", "tokens_per_s", "linear_backend", "layer_kernels"}
    assert out["stats"]["linear_backend"] in ("fp32", "fp16w", "bf16")  # auto's choice (issue 14)
    assert out["stats"]["layer_kernels"] in ("native", "torch")


def test_native_layer_kernels_that_cannot_run_are_refused_before_the_weights_load(capsys, monkeypatch, tiny_llama_dir):
    import adaspec.engine.llm_engine as eng

    monkeypatch.setattr(eng, "LLMEngine", lambda *a, **k: pytest.fail("model work started"))
    monkeypatch.setenv("ADASPEC_NATIVE_KERNELS", "0")
    rc = main(["generate", f"--model={tiny_llama_dir}", "--prompt=x", "--layer_kernels=native"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--layer_kernels=native cannot run here: ADASPEC_NATIVE_KERNELS=0" in err
    assert len(err.strip().splitlines()) == 1


def test_linear_backend_rule_exits_before_model_work(capsys, monkeypatch):
    import adaspec.engine.llm_engine as eng

    monkeypatch.setattr(eng, "LLMEngine", lambda *a, **k: pytest.fail("model work started"))
    rc = main(["generate", "--prompt=x", "--linear_backend=fp16w", "--device=cuda"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--linear_backend=fp16w is a CPU kernel" in err and len(err.strip().splitlines()) == 1


def test_prompts_file_errors_name_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('"ok"\n{not json\n')
    assert main(["generate", f"--prompts_file={bad}"]) == 2
    assert "line 2" in capsys.readouterr().err
