"""Token sampling: filters (temperature, top-k, top-p, min-p) and vectorised sampling."""

from adaspec.sampling.sampler import SamplingTensors, filtered_logprobs, sample

__all__ = ["SamplingTensors", "filtered_logprobs", "sample"]
