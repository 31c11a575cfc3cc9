"""Stop-string checks over one 4096-token output: the whole-output decode per token (before) vs the
request's incremental decoder (models/tokenizer.TextStream), with the bundled tokenizer.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s36/stop_stream_cost.py
"""
import statistics
import time

from adaspec.engine.request import Request
from adaspec.engine.request_output import append_tokens
from adaspec.models.loader import resolve_model
from adaspec.models.tokenizer import Tokenizer
from adaspec.sampling_params import SamplingParams

tok = Tokenizer(resolve_model(None))
text = open(__import__("adaspec").__file__.replace("__init__.py", "engine/llm_engine.py")).read() * 4
ids = tok.encode(text)[:4096]
assert len(ids) == 4096


class WholeDecode:  # the tokenizer as the engine used it before: no text_stream, so every check decodes in full
    def __init__(self, tok):
        self.decode, self.eos_token_ids = tok.decode, tok.eos_token_ids


def run(tokenizer) -> float:
    req = Request("r", None, [1], SamplingParams(max_tokens=4096, ignore_eos=True, stop=["\x00never"]))
    t0 = time.perf_counter()
    for t in ids:
        assert append_tokens(req, [t], tokenizer, 10**6) in (None, "length")
    return time.perf_counter() - t0


rows = {"whole decode per token": [], "incremental (TextStream)": []}
for rep in range(3):
    rows["whole decode per token"].append(run(WholeDecode(tok)))
    rows["incremental (TextStream)"].append(run(tok))
for k, v in rows.items():
    print(f"{k:28s} median {statistics.median(v):.3f} s for 4096 tokens ({[round(x, 3) for x in v]})")
