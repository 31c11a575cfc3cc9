#!/bin/bash
# compare decision traces, np.float64(x) written as x
cd /work/s56 && /work/venv/bin/python trace.py /work/main new_trace.txt >/dev/null && diff <(sed -E 's/np\.float64\(([^)]*)\)/\1/g' base_trace.txt) <(sed -E 's/np\.float64\(([^)]*)\)/\1/g' new_trace.txt) >/dev/null && echo SAME || echo DIFF
