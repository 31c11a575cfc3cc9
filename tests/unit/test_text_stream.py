"""The incremental output decoder (models/tokenizer.TextStream): stop strings and streamed deltas read
an output's text every round; decoding it whole every time was O(n^2) in the output length.

Its text must be the whole-output decode (without a trailing incomplete character) at every length,
for the tokenizers the engine meets: the tiny test tokenizer and the bundled SmolLM2 one.
"""

from __future__ import annotations

import random
import threading

import pytest

from adaspec.engine.llm_engine import LLM
from adaspec.models.tokenizer import TextStream, Tokenizer
from adaspec.sampling_params import SamplingParams


def _check_prefix_consistent(tok: Tokenizer, sequences) -> None:
    for ids in sequences:
        stream = tok.text_stream()
        assert stream.incremental
        for n in range(len(ids) + 1):
            got, full = stream.text(ids[:n]), tok.decode(ids[:n])
            # a prefix of the whole decode, equal unless that ends in an incomplete character (U+FFFD),
            # which the stream holds back with the rest of its token's text
            assert full.startswith(got), (ids[:n], got, full)
            assert got == full or full.endswith("\ufffd"), (ids[:n], got, full)
        assert stream.text(ids[: len(ids) // 2]) == stream.text(ids)[: len(stream.text(ids[: len(ids) // 2]))]


def _sequences(tok: Tokenizer, texts, vocab: int, seed: int = 0):
    rng = random.Random(seed)
    out = [tok.encode(t) for t in texts]  # real text (with the BOS the model adds: a special token, skipped)
    out += [[rng.randrange(vocab) for _ in range(rng.randint(1, 60))] for _ in range(40)]  # any ids at all
    return out


TEXTS = ["Hello world, ça va? 日本語 テキスト 🎉 end\n", "def f(x):\n    return x  # done\n\n", "  leading spaces"]


def test_tiny_tokenizer_stream_equals_the_whole_decode(tiny_llama_dir):
    tok = Tokenizer(tiny_llama_dir)
    _check_prefix_consistent(tok, _sequences(tok, TEXTS, len(tok.hf_tokenizer)))


@pytest.mark.bundled
def test_bundled_tokenizer_stream_equals_the_whole_decode():
    from adaspec.models.loader import resolve_model

    tok = Tokenizer(resolve_model(None))
    _check_prefix_consistent(tok, _sequences(tok, TEXTS, len(tok.hf_tokenizer)))


def test_without_an_incremental_decoder_every_call_decodes_in_full(tiny_llama_dir):
    tok = Tokenizer(tiny_llama_dir)
    tok.hf_tokenizer.clean_up_tokenization_spaces = True  # transformers rewrites decoded text: no stream
    try:
        stream = TextStream(tok)
        ids = tok.encode("a b . c")
        assert not stream.incremental and stream.text(ids) == tok.decode(ids)
    finally:
        tok.hf_tokenizer.clean_up_tokenization_spaces = False


def test_stop_strings_decode_the_output_once_not_per_token(tiny_llama_dir, monkeypatch):
    """A 200-token greedy request with a stop string that never matches: the whole output is decoded
    when it has finished, not once per token; the text and tokens are those of the run without it."""
    llm = LLM(str(tiny_llama_dir), max_seqs_per_batch=2, max_model_len=320)
    plain = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))[0]
    calls = []
    real = Tokenizer.decode
    monkeypatch.setattr(Tokenizer, "decode", lambda self, ids, **k: calls.append(len(list(ids))) or real(self, ids, **k))
    never = "\x00never"  # the tiny vocabulary cannot write it
    out = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True, stop=[never]))[0]
    assert out.token_ids == plain.token_ids and out.text == plain.text and out.finish_reason == "length"
    # whole decodes of the finished output only (the last stop check, the final text), not one per token
    assert calls and len(calls) <= 3 and set(calls) == {200}, calls
    # a stop string that does match cuts the text where the whole decode would
    stop = plain.text[50:53]
    cut = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True, stop=[stop]))[0]
    assert cut.finish_reason == "stop" and cut.text == plain.text[: plain.text.index(stop)]


def test_a_reader_thread_and_the_feeding_thread_agree(tiny_llama_dir):
    tok = Tokenizer(tiny_llama_dir)
    ids = tok.encode("the quick brown fox jumps over the lazy dog " * 20)
    stream, errors = tok.text_stream(), []

    def read():
        for n in range(0, len(ids), 7):
            if stream.text(ids[:n]) != tok.decode(ids[:n]):
                errors.append(n)
    t = threading.Thread(target=read)
    t.start()
    for n in range(len(ids) + 1):
        stream.text(ids[:n])
    t.join()
    assert not errors and stream.text(ids) == tok.decode(ids)


@pytest.mark.bundled
def test_a_stop_string_before_a_held_back_character_is_found_at_the_last_token(tiny_llama_dir):
    """The bundled vocabulary's token 5549 is a space and the first byte of a two-byte character: the
    stream holds the space back, so when it is the request's last token only the whole decode (the
    final check) sees the stop string ", " that the final text contains."""
    from adaspec.models.loader import resolve_model

    eng = LLM(str(tiny_llama_dir), max_seqs_per_batch=2, max_model_len=320).engine
    eng.tokenizer = tok = Tokenizer(resolve_model(None))
    body = tok.encode("Hello world,") + [5549]
    assert tok.decode(body).endswith(", \ufffd") and tok.text_stream().text(body).endswith(",")
    req = eng.make_request([5, 6, 7], SamplingParams(stop=[", "], max_tokens=len(body)))
    eng._append_tokens(req, body)
    assert req.finish_reason == "stop" and tok.decode(req.output_token_ids)[: req.stop_text_end] == "Hello world"
