"""The GPU check's parts, by job; bench/gpu_check.py runs them (see its docstring and README.md here)."""
