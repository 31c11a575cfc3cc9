"""The draft-step engine forced to k = 0 (no probes), the engine as it runs, and plain, in one process
(3 alternating repeats): what the step engine's plain rounds and its probes cost.

    OMP_NUM_THREADS=1 taskset -c 0 python bench/results/s36/k0cost.py 16 chat
"""
import sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
exec(open(__import__('pathlib').Path(__file__).with_name('stepdbg.py')).read().split("for rep in range(2):")[0])
import statistics
res = {"plain": [], "step_k0": [], "step": []}
for rep in range(3):
    for name in (["plain", "step_k0", "step"] if rep % 2 == 0 else ["step", "step_k0", "plain"]):
        llm = engines["plain" if name == "plain" else "mtp_step"]
        if name != "plain":
            llm.engine.control.reset()
            if name == "step_k0":
                st = llm.engine.control.step
                st.k, st._cold, st.probe_interval = 0, False, 0
        run = common.serve(llm, stream, B, toks, ignore_eos=True)
        res[name].append(sum(map(len, run.outputs)) / run.cpu_s)
        if name != "plain":
            print(name, dict(llm.engine.control.step.k_histogram), round(res[name][-1], 1), flush=True)
for k, v in res.items():
    print(k, [round(x, 1) for x in v], "median ratio to plain", round(statistics.median(v) / statistics.median(res["plain"]), 3))
