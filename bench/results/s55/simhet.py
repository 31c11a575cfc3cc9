import sys, runpy
import adaspec.adaptive.step_policy as sp
sp.HETERO_Z = None if sys.argv[1] == "none" else float(sys.argv[1])
sys.argv = ["step_closed_sim.py"] + sys.argv[2:]
runpy.run_path("bench/step_closed_sim.py", run_name="__main__")
