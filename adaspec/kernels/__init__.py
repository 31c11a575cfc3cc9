"""adaspec's own C++ kernels (built on first use with the system compiler; see build.py)."""
