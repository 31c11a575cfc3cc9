"""SamplingParams validation (R-I1) and refusal of unsupported features before execution (R-B5)."""

from __future__ import annotations

import pytest
from adaspec.errors import RequestError
from adaspec.sampling_params import SamplingParams, SamplingParamsError


def test_defaults_and_stop_forms():
    """R-I1: defaults; `stop` accepts a single string or a list."""
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.max_tokens) == (1.0, 0, 1.0, 0.0, 16)
    assert p.stop == [] and p.stop_token_ids == [] and not p.ignore_eos and p.seed is None
    assert SamplingParams(stop="\n\n").stop == ["\n\n"]
    assert SamplingParams(stop=["a", "b"]).stop == ["a", "b"]
    assert SamplingParams(stop=None).stop == []
    assert SamplingParams(top_k=-1).top_k == -1
    assert SamplingParams(logit_bias={"50": 1.5}).logit_bias == {50: 1.5}


def test_is_greedy():
    """R-I1: temperature 0 means greedy."""
    assert SamplingParams(temperature=0).is_greedy
    assert not SamplingParams(temperature=0.01).is_greedy


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("temperature", -0.1, ">= 0"),
        ("temperature", float("nan"), "finite"),
        ("top_p", float("nan"), "finite"),
        ("min_p", float("inf"), "finite"),
        ("temperature", True, "a number"),
        ("max_tokens", "16", "an integer"),
        ("top_k", 2**40, "at most"),
        ("stop", ["x", ""], "must not be empty"),
        ("stop_token_ids", [-3], ">= 0"),
        ("top_k", -2, ">= 1"),
        ("top_p", 0.0, "(0, 1]"),
        ("top_p", 1.5, "(0, 1]"),
        ("min_p", -0.1, "[0, 1]"),
        ("min_p", 1.1, "[0, 1]"),
        ("max_tokens", 0, ">= 1"),
        ("min_tokens", -1, ">= 0"),
        ("repetition_penalty", 0.0, "> 0"),
    ],
)
def test_validation_error_names_field_and_range(field, value, allowed):
    """R-I1: an out-of-range value is an error naming the field and the allowed range."""
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**{field: value})
    (err,) = e.value.validation_error.errors()
    assert err["loc"] == (field,)
    assert field in err["msg"] and allowed in err["msg"]


@pytest.mark.parametrize("field, value", [("top_k", 1.5), ("max_tokens", "many"), ("stop", 3)])
def test_type_errors_name_field(field, value):
    """R-I1: a wrongly typed value is an error located at the field."""
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**{field: value})
    assert e.value.validation_error.errors()[0]["loc"][0] == field
    assert field in str(e.value) and e.value.param == field


def test_errors_are_one_line_request_errors():
    """Issue 8: the Python API raises a UserError (RequestError) naming the field, in one line, not
    pydantic's multi-line ValidationError with its "Value error," prefix."""
    with pytest.raises(RequestError) as e:
        SamplingParams(top_p=2)
    assert e.value.param == "top_p" and "\n" not in str(e.value) and not str(e.value).startswith("Value error")


def test_unknown_field_is_an_error_naming_it():
    """R-B5: unknown fields are not silently ignored."""
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(best_of=2)
    (err,) = e.value.validation_error.errors()
    assert err["loc"] == ("best_of",) and err["type"] == "extra_forbidden"
    assert "best_of" in str(e.value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("logprobs", 0),
        ("logprobs", 5),
        ("min_tokens", 3),
        ("logit_bias", {1: -100.0}),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -0.5),
        ("repetition_penalty", 1.1),
        ("guided_json", {"type": "object"}),
        ("guided_regex", "[a-z]+"),
        ("guided_grammar", "root ::= 'x'"),
        ("response_format", {"type": "json_object"}),
    ],
)
@pytest.mark.parametrize("speculative", [False, True])
def test_unsupported_features_are_refused_with_field_name(field, value, speculative):
    """R-B5: each unsupported feature yields a message naming the field and what to change."""
    reason = SamplingParams(**{field: value}).unsupported_reason(speculative=speculative)
    assert reason is not None
    assert reason.startswith(field)
    assert "not supported" in reason and "remove it" in reason


def test_seed_is_supported_with_and_without_speculation():
    """R-B5: a per-request seed is exactly reproducible under speculation too (test_seeded_speculation.py),
    so it is not refused anywhere."""
    p = SamplingParams(seed=42)
    assert p.unsupported_reason(speculative=False) is None
    assert p.unsupported_reason(speculative=True) is None


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"logprobs": None},
        {"logprobs": False},  # chat clients' "not requested"
        {"min_tokens": 0},
        {"logit_bias": {}},
        {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0},
        {"response_format": {"type": "text"}},
        {"temperature": 0.0, "top_k": 5, "top_p": 0.9, "min_p": 0.1, "stop": ["x"]},
    ],
)
@pytest.mark.parametrize("speculative", [False, True])
def test_neutral_values_are_accepted(kw, speculative):
    """R-B5: neutral values of the refusable fields are not refused."""
    assert SamplingParams(**kw).unsupported_reason(speculative=speculative) is None
