"""The Python API refuses what it would otherwise convert or ignore (issue 8, R-B5, R-I1).

`LLM(...)` / `LLMEngine(...)`: a wrong keyword, type or value is a ConfigError naming it, raised
before any weights load. `LLM.generate(...)`: prompts are text or token ids (a list of int) and
nothing else -- bytes, floats, bools, None are refused, not turned into ids -- and every request
is checked before any is queued.
"""

from __future__ import annotations

import pytest

from adaspec.config import ConfigError, EngineConfig
from adaspec.errors import RequestError, UserError
from adaspec.sampling_params import SamplingParams
from refusal import no_model_load, raises_user_error

GREEDY = SamplingParams(temperature=0, max_tokens=3)


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    from adaspec import LLM

    return LLM(str(tiny_llama_dir), max_model_len=64)


CONFIG_CASES = [  # LLM keyword arguments -> the param the error must name
    (dict(max_seqs=4), "max_seqs", "did you mean max_seqs_per_batch"),
    (dict(temperature=0.5), "temperature", "SamplingParams"),
    (dict(max_seqs_per_batch="4"), "--max_seqs_per_batch", "expected an integer"),
    (dict(max_seqs_per_batch=4.0), "--max_seqs_per_batch", "expected an integer"),
    (dict(threads=True), "--threads", "expected an integer"),
    (dict(enable_graph="yes"), "--enable_graph", "true or false"),
    (dict(draft_model=123, speculative_algorithm="MTP"), "--draft_model", "expected a path"),
    (dict(graph_decode_batch_sizes="1,2"), "--graph_decode_batch_sizes", "list of integers"),
    (dict(graph_decode_batch_sizes=[1, 2.5]), "--graph_decode_batch_sizes", "list of integers"),
    (dict(dtype=None), "--dtype", "expected a string"),
    (dict(max_model_len=-3), "--max_model_len", ">= 2"),
    (dict(seed=2**70), "--seed", "2**64-1"),
    (dict(device="cuda:x"), "--device", "cuda:N"),
    (dict(adaptive_target_verify_cost_table_output=""), "--adaptive_target_verify_cost_table_output", "empty"),
]


@pytest.mark.parametrize("kwargs, param, text", CONFIG_CASES, ids=[c[1] for c in CONFIG_CASES])
def test_bad_llm_arguments_refused_before_loading(kwargs, param, text, tiny_llama_dir, monkeypatch):
    from adaspec import LLM

    no_model_load(monkeypatch)
    raises_user_error(lambda: LLM(str(tiny_llama_dir), **kwargs), ConfigError, param, contains=[text])


def test_a_drafter_that_would_be_ignored_or_is_not_one(tiny_llama_dir, monkeypatch):
    """Audit (issue 8): LLM(model, drafter) without speculation silently ignored the drafter (and
    LLM(model, 5) took 5 as one); a drafter object beside draft_model ignored draft_model."""
    from adaspec import LLM
    from replay_drafter import ReplayDrafter

    no_model_load(monkeypatch)
    raises_user_error(lambda: LLM(str(tiny_llama_dir), ReplayDrafter([], max_steps=3)), ConfigError, "drafter",
                      contains=["speculative_algorithm"])
    raises_user_error(lambda: LLM(str(tiny_llama_dir), 5, speculative_algorithm="MTP"), ConfigError, "drafter",
                      contains=["not a drafter"])
    raises_user_error(lambda: LLM(str(tiny_llama_dir), ReplayDrafter([], max_steps=3), speculative_algorithm="MTP",
                                  draft_model=str(tiny_llama_dir)), ConfigError, "drafter", contains=["only one"])


def test_model_argument_of_the_wrong_type(monkeypatch):
    from adaspec import LLM

    no_model_load(monkeypatch)
    raises_user_error(lambda: LLM(model=123), ConfigError, "--model", contains=["expected a path"])


def test_llmengine_runs_the_same_checks(tiny_llama_dir, tmp_path, monkeypatch):
    from adaspec.engine.llm_engine import LLMEngine

    no_model_load(monkeypatch)
    out = tmp_path / "t.json"
    out.write_text("keep")
    cfg = EngineConfig(model=str(tiny_llama_dir), speculative_algorithm="DSpark", num_speculative_tokens=5,
                       enable_adaptive_target_verify=True, adaptive_target_verify_cost_table_output=str(out))
    raises_user_error(lambda: LLMEngine(cfg), UserError, "--adaptive_target_verify_cost_table_output",
                      contains=["already exists"])
    assert out.read_text() == "keep"


def test_path_objects_are_accepted(tiny_llama_dir, monkeypatch):
    """os.PathLike is a path (normalised to str), not a type error."""
    cfg = EngineConfig(model=tiny_llama_dir).validate()
    assert cfg.model == str(tiny_llama_dir)


PROMPT_CASES = [  # (prompts, generate kwargs, exception, param, text)
    (b"Hi", {}, RequestError, "prompt", "bytes"),
    ([b"Hi"], {}, RequestError, "prompt", "bytes"),
    ([1.5, 2.0], {}, RequestError, "prompt", "float"),
    ([[72, 105.0]], {}, RequestError, "prompt", "integers"),
    (True, {}, RequestError, "prompt", "bool"),
    ([True, False], {}, RequestError, "prompt", "bool"),
    ([[1, True]], {}, RequestError, "prompt", "integers"),
    (None, {}, RequestError, "prompt", "NoneType"),
    ({"prompt": "hi"}, {}, RequestError, "prompt", "dict"),
    ([[]], {}, RequestError, "prompt", "empty"),
    ("", {}, RequestError, "prompt", "empty"),
    ([[1, 500]], {}, RequestError, "prompt", "outside the vocabulary"),
    ([1, 2, 3], {"chat": True}, RequestError, "chat", "text prompts"),
    ("hi", {"chat": "yes"}, RequestError, "chat", "True or False"),
    ("hi", {"params": {"temperature": 0}}, RequestError, "params", "SamplingParams"),
    (["a", "b", "c"], {"params": [GREEDY, GREEDY]}, RequestError, "params", "2 SamplingParams for 3"),
    ("hi", {"params": SamplingParams(stop_token_ids=[5000])}, RequestError, "stop_token_ids", "vocabulary"),
    ("hi", {"params": SamplingParams(logprobs=3)}, RequestError, "logprobs", "not supported"),
    ("x" * 100, {}, RequestError, "prompt", "context limit 64"),
    # audit (issue 8): text the tokenizer cannot take was a TypeError traceback from inside it
    ("a\ud800b", {}, RequestError, "prompt", "lone surrogate"),
    (["ok", "a\udfffb"], {"chat": True}, RequestError, "prompt", "lone surrogate"),
    ([-1, 5], {}, RequestError, "prompt", "outside the vocabulary"),
    ({"a"}, {}, RequestError, "prompt", "set"), ((x for x in ["a"]), {}, RequestError, "prompt", "generator"),
    ("hi", {"chat": None}, RequestError, "chat", "True or False"),
    ("hi", {"use_tqdm": "yes"}, RequestError, "use_tqdm", "True or False"),
    ("hi", {"params": True}, RequestError, "params", "SamplingParams"),
    (["hi"], {"params": []}, RequestError, "params", "0 SamplingParams"),
]


@pytest.mark.parametrize("prompts, kwargs, exc, param, text", PROMPT_CASES,
                         ids=[f"{c[3]}-{c[4]}" for c in PROMPT_CASES])
def test_bad_generate_inputs_queue_nothing(llm, prompts, kwargs, exc, param, text):
    kwargs = {"params": GREEDY, **kwargs}
    raises_user_error(lambda: llm.generate(prompts, **kwargs), exc, param, contains=[text])
    assert not llm.engine.has_unfinished()  # refused before execution: nothing was queued


def test_valid_prompt_forms_still_work(llm):
    """Text, one token-id list, and a list of either (numpy ints are ints)."""
    import numpy as np

    assert len(llm.generate("hi", GREEDY)) == 1
    assert len(llm.generate([1, 72, 105], GREEDY)) == 1
    assert len(llm.generate([[1, 72], "hi", [np.int64(1), np.int64(80)]], GREEDY)) == 3
    assert llm.generate([], GREEDY) == []


def test_engine_request_fields(llm):
    raises_user_error(lambda: llm.engine.add_request("hi", GREEDY, request_id=5), RequestError, "request_id")


SAMPLING_CASES = [  # field, value, text: SamplingParams refuses instead of converting
    ("temperature", True, "a number"), ("top_k", False, "an integer"), ("max_tokens", "8", "an integer"),
    ("seed", True, "an integer"), ("top_p", float("nan"), "finite"), ("stop", [""], "empty"),
    ("stop_token_ids", [True], "integers"), ("presence_penalty", float("inf"), "finite"),
    # audit (issue 8): lax conversions and aliases that were accepted
    ("max_tokens", 2.0, "an integer"), ("top_k", 3.0, "an integer"), ("seed", -1, "2**64-1"),
    ("seed", 2**64 + 1, "2**64-1"), ("ignore_eos", "yes", "true or false"), ("ignore_eos", 1, "true or false"),
    ("stop", ["ok", "\ud800"], "lone surrogate"),
    ("stop_token_ids", [1.0], "integers"), ("stop_token_ids", ["5"], "integers"),  # audit: 1.0 was read as 1
]


@pytest.mark.parametrize("field, value, text", SAMPLING_CASES, ids=[c[0] for c in SAMPLING_CASES])
def test_sampling_params_refuse_conversions(field, value, text):
    with pytest.raises(RequestError) as e:  # a UserError, one line (no pydantic ValidationError)
        SamplingParams(**{field: value})
    err = e.value
    assert isinstance(err, RequestError) and err.param == field
    assert field in str(err) and text in str(err) and not str(err).startswith("Value error")


@pytest.mark.parametrize("field, value, text", [("temperature", -5, ">= 0"), ("max_tokens", 0, ">= 1"),
                                                ("stop", [""], "empty"), ("seed", True, "an integer"),
                                                ("temprature", 0.5, "not a sampling parameter")])
def test_sampling_params_check_assignments_too(field, value, text, llm):
    """Audit (bad inputs; R-I1): `params.temperature = -5` after construction was accepted silently,
    and generate() then sampled with it; an assignment is now checked as the constructor checks."""
    params = SamplingParams(temperature=0, max_tokens=3)
    with pytest.raises(RequestError) as e:
        setattr(params, field, value)
    assert e.value.param == field and text in str(e.value), str(e.value)
    assert params.temperature == 0 and params.max_tokens == 3 and params.stop == []  # unchanged
    params.temperature = 0.5  # a valid assignment still works
    assert params.temperature == 0.5 and len(llm.generate("hi", params)) == 1


def test_python_api_warns_about_flags_without_effect(tiny_llama_dir):
    from adaspec import LLM

    with pytest.warns(UserWarning, match="--enable_graph=false has no effect"):
        LLM(str(tiny_llama_dir), enable_graph=False)
