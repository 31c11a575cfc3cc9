"""Model code: config, Llama-family forward, RoPE, attention, loading, GGUF conversion, tokenizer.

Kept import-light on purpose (no torch / transformers import here): import the submodules,
e.g. `from adaspec.models.loader import resolve_model, load_model`.
"""
