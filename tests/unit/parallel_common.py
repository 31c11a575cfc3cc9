"""Shared by the tensor- and data-parallel tests: prompts, the small calibration, engine flags."""

from __future__ import annotations

from adaspec.sampling_params import SamplingParams

PROMPTS = ["Hello there", "a", "The quick brown fox jumps", "1 2 3 4 5 6 7 8 9 10 11 12", "xyz xyz xyz", "Q?"]
CAL = {"request_buckets": [1, 2, 4], "contexts": [{"prefill_tokens": 8, "min_kv_length": 1, "max_kv_length": 300}],
       "warmup_steps": 1, "window_steps": 2, "windows_per_point": 1, "token_seed": 3}
COMMON = dict(max_seqs_per_batch=4, max_num_batched_tokens=32, max_model_len=320, linear_backend="fp32")


def params():
    return [SamplingParams(temperature=0, max_tokens=6 + 3 * i, ignore_eos=True) for i in range(len(PROMPTS))]
