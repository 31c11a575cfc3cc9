"""Build the held-out replay set of bench/step_policies.py and bench/batch_policies.py without training.

heldout_eval.pt: the float32 target's greedy continuations (128 tokens) of the held-out code, chat and
prose prompts, with the teacher signals the drafts read, as `adaspec train-draft --kind=both` builds it
(~250 s on one core here).

    OMP_NUM_THREADS=1 python bench/results/s40/build_heldout.py runs/heldout_s40
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from adaspec.drafts.dspark import default_capture_layers  # noqa: E402
from adaspec.models.loader import load_model, resolve_model, weights_fingerprint  # noqa: E402
from adaspec.preflight.model import load_tokenizer  # noqa: E402
from adaspec.training.selfdistill import heldout_eval_set  # noqa: E402

if __name__ == "__main__":
    torch.set_num_threads(1)
    model_dir = resolve_model(None)
    cfg, target = load_model(model_dir, torch.float32, "cpu")
    layers = sorted(set(default_capture_layers(cfg.num_layers)) | {cfg.num_layers - 1})
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    heldout_eval_set(target, load_tokenizer(model_dir, cfg), weights_fingerprint(model_dir), tuple(layers), out,
                     gen_tokens=128)
