#!/usr/bin/env bash
# call 1 on the GPU machine: unpack the packages the image lacks, keep the first half of the target,
# and run the CUDA paths of the training pipeline on a tiny random target
set -o pipefail
mkdir -p /tmp/m /tmp/site
tar -C /tmp/site -xJf .dev/a/pkgs.tar.xz && cp .dev/a/m.part1 /tmp/m/ && echo "part1 kept: $(stat -c %s /tmp/m/m.part1) bytes"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
python3 -c "import torch, pydantic, gguf, tokenizers, transformers; print('torch', torch.__version__, torch.cuda.is_available(), 'pydantic', pydantic.VERSION, 'transformers', transformers.__version__)"
nproc
ADASPEC_TEST_TRAIN_DEVICE=cuda timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
    tests/unit/test_train_stream.py tests/unit/test_train_drafts_gpu_script.py -k "cuda or gpu_script" 2>&1 | tee $OUT/smoke.log | tail -40
python3 - <<'PY'
import sysconfig, importlib.util
from pathlib import Path
n = sum(p.stat().st_size for p in Path(sysconfig.get_paths()["stdlib"]).rglob("*.py"))
print("stdlib .py bytes", n)
for name in ("transformers", "sympy", "networkx", "numpy", "scipy", "pandas", "sklearn", "torch", "jax"):
    s = importlib.util.find_spec(name)
    if s and s.submodule_search_locations:
        root = Path(list(s.submodule_search_locations)[0])
        print(name, sum(p.stat().st_size for p in root.rglob("*.py")))
PY
