"""OpenAI-compatible HTTP server (`adaspec serve`) and its load generator (`adaspec bench-serve`), issue 9.

app (FastAPI app, /health, /metrics, /version, /v1/models), routes (completions and chat), protocol
(request bodies), sse (response bodies and stream chunks), errors (OpenAI error bodies), cli (the two subcommands), bench_* (the load generator). The
engine loop is engine/async_engine.py; the Prometheus series are metrics/prometheus.py. FastAPI,
uvicorn and prometheus-client come with the `server` extra; nothing here is imported by the rest
of adaspec, so `pip install -e .` alone still runs `adaspec generate`.
"""
