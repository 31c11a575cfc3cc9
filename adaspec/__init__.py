"""adaspec: an LLM inference engine with adaptive speculative decoding."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name):  # lazy: `import adaspec` stays cheap (no torch) for the CLI's --help
    if name == "LLM":
        from .engine.llm_engine import LLM

        return LLM
    if name == "SamplingParams":
        from .sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(name)
