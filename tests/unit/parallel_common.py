"""Shared by the tensor- and data-parallel tests: prompts and engine flags (the small calibration:
small_calibration.py)."""

from __future__ import annotations

from adaspec.sampling_params import SamplingParams

PROMPTS = ["Hello there", "a", "The quick brown fox jumps", "1 2 3 4 5 6 7 8 9 10 11 12", "xyz xyz xyz", "Q?"]
COMMON = dict(max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320, linear_backend="fp32")


def params():
    return [SamplingParams(temperature=0, max_tokens=6 + 3 * i, ignore_eos=True) for i in range(len(PROMPTS))]
