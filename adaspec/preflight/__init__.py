"""The edge-validation layer: every bad input is refused before any model work (issue 8).

`preflight(config, ...)` (startup.py) is the one start-up check that `adaspec generate`,
`adaspec calibrate`, `adaspec serve` and `LLMEngine` itself (the Python API) call; it returns a
`Checked` with what it resolved. `requests.py` holds the per-request checks shared by the engine's
admission, the CLI and the server; `paths.py` the input-file checks; `model.py` the model
directory, tokenizer, draft and memory checks. Everything raises `adaspec.errors.UserError`
subclasses naming the flag or field (`param`).
"""

from .startup import Checked, check_device, check_sampling, no_effect_warnings, preflight, resolve_dtype

__all__ = ["Checked", "check_device", "check_sampling", "no_effect_warnings", "preflight", "resolve_dtype"]
