"""RequestOutput decodes its text when it is read, once, from the tokens of its own round (R-I2).

The engine makes an output per request per round; decoding the whole output every round was
O(n^2) in the output length for text that offline generation reads once.
"""

from __future__ import annotations

import pickle

from adaspec.engine.request import Request
from adaspec.engine.request_output import request_output
from adaspec.sampling_params import SamplingParams


class CountingTokenizer:
    def __init__(self):
        self.calls = 0

    def decode(self, ids):
        self.calls += 1
        return "".join(chr(ord("a") + i % 26) for i in ids)


def make_request(tokens, stop_text_end=None) -> Request:
    req = Request("r1", "prompt", [1, 2, 3], SamplingParams(max_tokens=16))
    req.output_token_ids = list(tokens)
    req.stop_text_end = stop_text_end
    return req


def test_text_is_decoded_only_when_read_and_only_once():
    tok = CountingTokenizer()
    out = request_output(make_request([0, 1, 2]), tok)
    assert tok.calls == 0
    assert out.text == "abc" and out.text == "abc"
    assert tok.calls == 1


def test_text_is_the_text_of_its_own_round_and_respects_the_stop_cut():
    tok = CountingTokenizer()
    req = make_request([0, 1, 2, 3], stop_text_end=2)
    out = request_output(req, tok)
    req.output_token_ids += [4, 5]  # later rounds must not change an output already handed out
    req.stop_text_end = None
    out.token_ids.append(9)  # nor may a caller's edit of token_ids
    assert out.text == "ab"
    assert request_output(req, tok).text == "abcdef"


def test_pickling_sends_the_text_not_the_tokenizer():
    tok = CountingTokenizer()
    out = request_output(make_request([2, 3]), tok)
    back = pickle.loads(pickle.dumps(out))  # data-parallel shards gather outputs as pickled objects
    assert back.text == "cd" and back.token_ids == [2, 3] and back.request_id == "r1"
    assert "text='cd'" in repr(back)
