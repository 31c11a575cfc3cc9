"""Cost of decoding the whole output per check, and DecodeStream's incremental text (session 35).

    python bench/results/s35/decode_cost.py TOKENIZER_DIR   (the converted bundled model's directory)
"""
import random
import sys
import time

from tokenizers.decoders import DecodeStream

from adaspec.models.tokenizer import Tokenizer

tok = Tokenizer(sys.argv[1])
hf = tok.hf_tokenizer
raw = hf.backend_tokenizer
rng = random.Random(0)
bad = 0
for trial in range(300):
    n = rng.randint(1, 300)
    ids = ([rng.randrange(len(hf)) for _ in range(n)] if trial % 2 else
           hf.encode("def f(x):\n    return x  # naïve café 日本語 🙂 " * 5)[:n])
    stream, text = DecodeStream(skip_special_tokens=True), ""
    for i in ids:
        text += stream.step(raw, i) or ""
    bad += not tok.decode(ids).startswith(text)
print("DecodeStream text not a prefix of the full decode:", bad, "of 300")
ids = [rng.randrange(len(hf)) for _ in range(4096)]
t = time.perf_counter()
for k in range(1, 4097, 16):
    tok.decode(ids[:k])
print(f"256 full decodes of prefixes up to 4096 tokens: {time.perf_counter() - t:.3f} s")
