"""Stop 38: the attention kernel (attention.cpp + simd.h) before (commit d22d162) and after (the working tree),
compiled with the engine's flags, called through models/native_kernels.attend on the same inputs: one layer of
the bundled model's shape (9 query heads, 3 KV heads, head size 64), B requests of T new rows each at a context
of `ctx` keys. Microseconds per call (minimum of 7 passes of 30 calls; includes the Python wrapper, which the
no-op column measures: the new source returning right after its argument checks), and the largest difference between the two kernels' outputs.
Run: OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s38/attention_rows.py
"""
import ctypes, subprocess, sys, tempfile, time
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from adaspec.kernels import build  # noqa: E402
from adaspec.models import native_kernels as nk  # noqa: E402

CASES = ((200, 1, 1), (400, 1, 1), (400, 2, 1), (400, 3, 1), (400, 6, 1), (400, 1, 4), (400, 2, 4), (800, 1, 1))


def compile_attention(files: dict, tmp: Path):
    for name, text in files.items():
        (tmp / name).write_text(text)
    so = tmp / "attention.so"
    subprocess.check_call([build.compiler(), *build.FLAGS, *build.NATIVE_FLAGS, f"-I{tmp}", str(tmp / "attention.cpp"),
                           "-o", str(so)])
    f = ctypes.CDLL(str(so)).adaspec_ragged_attention_f32
    f.argtypes, f.restype = nk._SIGNATURES["adaspec_ragged_attention_f32"], ctypes.c_int
    return f


def main():
    torch.set_num_threads(1)
    names = ("attention.cpp", "simd.h")
    old = {n: subprocess.check_output(["git", "-C", str(ROOT), "show", f"d22d162:adaspec/kernels/{n}"], text=True)
           for n in names}
    new = {n: (ROOT / "adaspec/kernels" / n).read_text() for n in names}
    assert not isinstance(nk.kernels(), str), nk.kernels()
    H, KVH, D, L = 9, 3, 64, 1024
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, tempfile.TemporaryDirectory() as d3:
        fns = {"before": compile_attention(old, Path(d1)), "after": compile_attention(new, Path(d2))}
        marker = "    // 1. the new keys and values, at their positions"
        assert marker in new["attention.cpp"]
        # the no-op column: the new source returning right after its argument checks (the wrapper's cost)
        noop = compile_attention({**new, "attention.cpp": new["attention.cpp"].replace(marker, "    return 0;\n" + marker)},
                                 Path(d3))
        print("| context | new rows per request | requests | before us | after us | after ÷ before | max abs difference "
              "| no-op us |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for ctx, T, B in CASES:
            ck0, cv0 = torch.randn(8, KVH, L, D, generator=g), torch.randn(8, KVH, L, D, generator=g)
            q, k, v = (torch.randn(B * T, h, D, generator=g) for h in (H, KVH, KVH))
            cos, sin = torch.randn(B * T, 1, D, generator=g), torch.randn(B * T, 1, D, generator=g)
            plan = nk.native_plan(list(range(B)), [ctx - T] * B, [T] * B, None)
            out, t = {}, {}
            for name, f in {**fns, "no-op": noop}.items():
                nk._k.attention = f
                ck, cv = ck0.clone(), cv0.clone()
                out[name] = nk.attend(q, k, v, ck, cv, plan, cos, sin)
                best = 1e9
                for _ in range(7):
                    t0 = time.perf_counter()
                    for _ in range(30):
                        nk.attend(q, k, v, ck, cv, plan, cos, sin)
                    best = min(best, (time.perf_counter() - t0) / 30)
                t[name] = best * 1e6
            diff = (out["before"] - out["after"]).abs().max().item()
            print(f"| {ctx} | {T} | {B} | {t['before']:.0f} | {t['after']:.0f} | **{t['after'] / t['before']:.2f}** | {diff:.1e} "
                  f"| {t['no-op']:.0f} |")


if __name__ == "__main__":
    main()
