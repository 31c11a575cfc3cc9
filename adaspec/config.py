"""Engine configuration: one frozen dataclass, validated once, at the edge.

`EngineConfig.validate()` is the one home of the rules that need nothing but the flags: types (the
Python API can pass anything), ranges and the switch rules; every error names the flag to change
(`param`). It returns a normalised copy (paths as str, bucket lists as tuples). What needs the file
system or the model's config.json is checked by `adaspec.preflight` before any model work.
CLI flags map 1:1 onto these fields (`--max_seqs_per_batch` -> `max_seqs_per_batch`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace

from .errors import UserError

DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICES = ("cpu", "cuda")
SPECULATIVE_ALGORITHMS = ("none", "MTP", "DSpark", "Suffix", "MTP+Suffix")
SUFFIX_ALGORITHMS = ("Suffix", "MTP+Suffix")  # issue 10: the model-free draft, alone or beside MTP
MAX_SUFFIX_GLOBAL_CACHE = 4096
LINEAR_BACKENDS = ("auto", "fp32", "fp16w", "bf16", "int8")
LAYER_KERNELS = ("auto", "native", "torch")  # models/native_kernels.py (issue 14)
# the backend that is plain nn.Linear in each dtype (models/linear.py)
NATIVE_LINEAR_BACKEND = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


RENAMED_SWITCHES = {
    "enable_adaptive_spec_prune": "enable_adaptive_target_verify",
    "enable_adaptive_speculative_decode": "enable_adaptive_target_verify",
}


class ConfigError(UserError, ValueError):
    """A start-up option is wrong; the message names the flag and the fix. `param` is the flag; when
    not given it is the first `--flag` the message names."""

    def __init__(self, message: str = "", *, param: str | None = None):
        if param is None:
            m = re.search(r"--[a-z_]+", message)
            param = m.group(0) if m else None
        super().__init__(message, param=param)


PATH_FIELDS = ("model", "draft_model", "adaptive_draft_step_config", "adaptive_target_verify_calibration",
               "adaptive_target_verify_cost_table", "adaptive_target_verify_cost_table_output")
OPTIONAL_INT_FIELDS = ("max_model_len", "num_speculative_tokens")
MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed's range
MAX_THREADS = 1024  # far past any CPU's cores; OpenMP fails to start ~16k threads and the process crashes


def renamed_switch_message(old: str) -> str:
    """R-D6: old switch names are not aliases."""
    return (f"{old} was renamed to {RENAMED_SWITCHES[old]} and is not accepted as an alias; "
            f"use --{RENAMED_SWITCHES[old]}=true")


def check_linear_backend(backend: str, dtype: str, device_type: str) -> None:
    """--linear_backend against the resolved --dtype and --device (ConfigError naming the flag)."""
    flag = "--linear_backend"
    if backend not in LINEAR_BACKENDS:
        raise ConfigError(f"{flag}={backend}: allowed values are {', '.join(LINEAR_BACKENDS)}", param=flag)
    native = NATIVE_LINEAR_BACKEND.get(dtype)
    if backend in ("auto", native):
        return
    alternatives = "auto" + (f" or {native}" if native in LINEAR_BACKENDS else "")
    if device_type != "cpu":
        raise ConfigError(f"{flag}={backend} is a CPU kernel; with --device={device_type} the linear layers run in the "
                          f"dtype's own kernels: use {flag}={alternatives}", param=flag)
    if dtype != "float32":
        raise ConfigError(f"{flag}={backend} needs --dtype=float32 (float32 activations); with --dtype={dtype} use "
                          f"{flag}={alternatives}", param=flag)


def check_layer_kernels(choice: str, dtype: str, device_type: str) -> None:
    """--layer_kernels against the resolved --dtype and --device (ConfigError naming the flag).
    Whether the kernels build on this machine is known once the model's config is read
    (preflight, models/native_kernels.resolve)."""
    flag = "--layer_kernels"
    if choice not in LAYER_KERNELS:
        raise ConfigError(f"{flag}={choice}: allowed values are {', '.join(LAYER_KERNELS)}", param=flag)
    if choice != "native":
        return
    if device_type != "cpu":
        raise ConfigError(f"{flag}=native are CPU kernels; with --device={device_type} use {flag}=auto or torch",
                          param=flag)
    if dtype != "float32":
        raise ConfigError(f"{flag}=native compute in float32: they need --dtype=float32; with --dtype={dtype} use "
                          f"{flag}=auto or torch", param=flag)


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = field(default=None, metadata={"help": "HF model directory or .gguf file; default: bundled SmolLM2-135M-Instruct"})
    dtype: str = field(default="float32", metadata={"help": "weights/activations dtype: float32 | bfloat16 | float16 | auto (bfloat16 where the CPU has native bf16)"})
    device: str = field(default="cpu", metadata={"help": "cpu | cuda (cuda:N accepted)"})
    linear_backend: str = field(default="auto", metadata={"help": (
        "kernel of every linear layer (target, drafts, LM heads), fixed at load and part of the cost-table "
        "identity: auto (measure the model's own shapes at 1 and verify-sized rows, take the fastest of fp32 / "
        "fp16w, bf16 only where it wins at both, preferring kernels whose rows do not depend on the batch) | "
        "fp32 | fp16w (float16 weights, float32 compute, near-lossless) | bf16 | int8 (int8 weights and "
        "activations: changes the model's outputs, opt-in only). CPU with --dtype=float32; on CUDA or with "
        "other dtypes only auto or the dtype's own")})
    layer_kernels: str = field(default="auto", metadata={"help": (
        "kernels of everything in a decoder layer but its linear products (attention over the KV cache with "
        "rotary embedding, RMSNorm with the residual add, SiLU-and-multiply), in the target and the MTP draft; "
        "fixed at load and part of the cost-table identity: auto (native where it can run, else torch) | native "
        "(adaspec's C++ kernels, built once per machine with the system C++ compiler; CPU, --dtype=float32) | "
        "torch (torch ops, scaled_dot_product_attention). Both give a row the same bits whatever shares its "
        "forward")})
    threads: int = field(default=1, metadata={"help": "CPU threads for PyTorch (default 1; >1 sets OMP_WAIT_POLICY=PASSIVE)"})
    max_seqs_per_batch: int = field(default=16, metadata={"help": "request slots: at most this many requests run at once"})
    max_model_len: int | None = field(default=None, metadata={"help": "context limit per request (prompt + output); default min(model limit, 2048)"})
    max_num_batched_tokens: int = field(default=512, metadata={"help": "token rows per step; long prompts are prefilled in chunks of at most this"})
    seed: int = field(default=0, metadata={"help": "seed of the engine's sampling RNG (requests without their own seed)"})
    speculative_algorithm: str = field(default="none", metadata={"help": (
        "speculative decoding: none | MTP | DSpark | Suffix (model-free: copies the continuation of the longest "
        "earlier n-gram of the request's own tokens; for text that repeats its context) | MTP+Suffix (per request "
        "and round, whichever of the two predicts more tokens per unit cost)")})
    draft_model: str | None = field(default=None, metadata={"help": "draft directory (from `adaspec train-draft`); default: the shipped draft for the bundled model"})
    num_speculative_tokens: int | None = field(default=None, metadata={"help": "MTP, MTP+Suffix: draft steps k_max (default 3); DSpark: width w, 5 or 7 (default 7); Suffix: tokens proposed at most (default 5, at most 16)"})
    suffix_global_cache: int = field(default=0, metadata={"help": "Suffix, MTP+Suffix: also match against the outputs of the last N finished requests (0 = only the request's own prompt and output; at most 4096)"})
    enable_probabilistic_draft: bool = field(default=False, metadata={"help": "sample draft tokens instead of argmax; not supported: the draft is always greedy (R-B4)"})
    # -- prepared geometry (issue 4) --
    enable_graph: bool = field(default=True, metadata={"help": "run on prepared shapes (request buckets x target-row buckets); on CPU these are warmed shapes, on CUDA the seam for graph capture"})
    disable_graph_warmup: bool = field(default=False, metadata={"help": "skip running every prepared shape once at start-up"})
    graph_decode_batch_sizes: tuple[int, ...] | None = field(default=None, metadata={"help": "request buckets to prepare, comma separated (default: 1,2,4,... up to --max_seqs_per_batch)"})
    enable_unified_mtp_graph: bool = field(default=False, metadata={"help": "prepare the whole adaptive round as one unit per request count (R-E3, R-F6): DP=1 and temperature 0 only"})
    # -- adaptive control (issue 5) --
    enable_adaptive_draft_step: bool = field(default=False, metadata={"help": "MTP, Suffix, MTP+Suffix: choose the draft step count k per batch from measured cost and acceptance (R-C)"})
    enable_adaptive_target_verify: bool = field(default=False, metadata={"help": "MTP/DSpark/Suffix/MTP+Suffix: choose per request how many drafted tokens the target verifies (R-D)"})
    enable_schedule_overlap: bool = field(default=False, metadata={"help": "plan round n while round n-1 runs; adaptive verify then uses lag-2 feedback (R-D4)"})
    adaptive_draft_step_config: str | None = field(default=None, metadata={"help": "JSON file with policy/calibration for --enable_adaptive_draft_step (R-C5); optional"})
    adaptive_target_verify_calibration: str | None = field(default=None, metadata={"help": "JSON file overriding start-up calibration fields for adaptive verify (R-F3); optional"})
    adaptive_target_verify_cost_table: str | None = field(default=None, metadata={"help": "load a saved cost table instead of calibrating (R-G2)"})
    adaptive_target_verify_cost_table_output: str | None = field(default=None, metadata={"help": "write the fitted cost table here; the directory must exist, the file must not (R-G1)"})
    # -- parallelism --
    dp_size: int = field(default=1, metadata={"help": "data-parallel shards: processes with their own requests and KV (torch.distributed; R-H1)"})
    cp_size: int = field(default=1, metadata={"help": "context-parallel size (only 1 is implemented)"})
    tp_size: int = field(default=1, metadata={"help": "tensor-parallel ranks of the target: heads, MLP and vocabulary split across processes (torch.distributed; R-H2)"})
    nnodes: int = field(default=1, metadata={"help": "nodes of the launch (R-H3); the ranks tp_size x dp_size are split evenly across them"})
    node_rank: int = field(default=0, metadata={"help": "this node's index, 0..nnodes-1; node 0 runs rank 0 (the one that serves and prints)"})
    master_node_addr: str = field(default="127.0.0.1", metadata={"help": "address of node 0 for the process-group rendezvous (R-H3)"})
    master_port: int = field(default=0, metadata={"help": "rendezvous port on node 0; 0 picks a free one (single node only)"})

    def validate(self) -> "EngineConfig":
        """Check every flag-only rule; returns the normalised config (raises ConfigError)."""
        self = self._normalised()
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype={self.dtype}: allowed values are {', '.join(DTYPES)}")
        if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", self.device):
            raise ConfigError(f"--device={self.device}: allowed values are cpu, cuda and cuda:N (N a device index, "
                              "e.g. cuda:0)", param="--device")
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"--seed={self.seed}: must be between 0 and 2**64-1", param="--seed")
        if self.dtype != "auto":
            check_linear_backend(self.linear_backend, self.dtype, self.device.split(":")[0])
        elif self.linear_backend not in LINEAR_BACKENDS:
            check_linear_backend(self.linear_backend, "float32", "cpu")
        # with --dtype=auto the dtype is known in preflight, which checks again
        check_layer_kernels(self.layer_kernels, "float32" if self.dtype == "auto" else self.dtype,
                            self.device.split(":")[0])
        for name in ("threads", "max_seqs_per_batch", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name}={getattr(self, name)}: must be >= 1")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"--threads={self.threads}: must be at most {MAX_THREADS} (more threads than CPU cores "
                              "only oversubscribe them; use at most this machine's core count)", param="--threads")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"--max_model_len={self.max_model_len}: must be >= 2")
        if self.max_num_batched_tokens < self.max_seqs_per_batch:
            raise ConfigError(
                f"--max_num_batched_tokens={self.max_num_batched_tokens} is smaller than "
                f"--max_seqs_per_batch={self.max_seqs_per_batch}: every running request needs a row per step; "
                "raise --max_num_batched_tokens or lower --max_seqs_per_batch"
            )
        algo = self.speculative_algorithm
        if algo not in SPECULATIVE_ALGORITHMS:
            raise ConfigError(
                f"--speculative_algorithm={algo}: allowed values are {', '.join(SPECULATIVE_ALGORITHMS)}"
            )
        if self.enable_probabilistic_draft:
            raise ConfigError(
                "--enable_probabilistic_draft=true is not supported: adaspec drafts greedily and verifies "
                "with point-mass acceptance (R-B4); remove the flag or set it to false"
            )
        k = self.num_speculative_tokens
        if algo == "none":
            if k is not None or self.draft_model is not None:
                flag = "--num_speculative_tokens" if k is not None else "--draft_model"
                raise ConfigError(f"{flag} needs --speculative_algorithm=MTP, DSpark, Suffix or MTP+Suffix"
                                  if k is not None else f"{flag} needs --speculative_algorithm=MTP, DSpark or MTP+Suffix")
        elif k is not None and k < 1:
            raise ConfigError(f"--num_speculative_tokens={k}: must be >= 1")
        elif algo == "DSpark" and k is not None and k not in (5, 7):
            raise ConfigError(f"--num_speculative_tokens={k}: DSpark's width must be 5 or 7")
        self._validate_suffix()
        if self.graph_decode_batch_sizes is not None:
            bad = [b for b in self.graph_decode_batch_sizes if not 1 <= b <= self.max_seqs_per_batch]
            if not self.graph_decode_batch_sizes:
                raise ConfigError("--graph_decode_batch_sizes= is empty: list request buckets (e.g. 1,2,4), or leave "
                                  "the flag out for the default", param="--graph_decode_batch_sizes")
            twice = sorted({b for b in self.graph_decode_batch_sizes if self.graph_decode_batch_sizes.count(b) > 1})
            if twice:
                raise ConfigError(f"--graph_decode_batch_sizes: {twice} listed more than once; list each bucket once",
                                  param="--graph_decode_batch_sizes")
            if bad:
                raise ConfigError(
                    f"--graph_decode_batch_sizes: {bad} outside 1..--max_seqs_per_batch "
                    f"({self.max_seqs_per_batch}); list request buckets between 1 and {self.max_seqs_per_batch}"
                )
        self._validate_parallel()
        self._validate_adaptive()
        return self

    def _validate_suffix(self) -> None:
        """Issue 10: the Suffix draft has no weights and proposes at most 16 tokens; its cache flag needs it."""
        algo, k, n = self.speculative_algorithm, self.num_speculative_tokens, self.suffix_global_cache
        if algo == "Suffix" and self.draft_model is not None:
            raise ConfigError("--draft_model is not used by --speculative_algorithm=Suffix (a model-free draft); drop "
                              "it, or use --speculative_algorithm=MTP+Suffix to add an MTP draft", param="--draft_model")
        if algo in SUFFIX_ALGORITHMS and k is not None and k > 16:
            raise ConfigError(f"--num_speculative_tokens={k}: {algo} proposes at most 16 tokens per round")
        if n < 0 or n > MAX_SUFFIX_GLOBAL_CACHE:
            raise ConfigError(f"--suffix_global_cache={n}: must be between 0 and {MAX_SUFFIX_GLOBAL_CACHE} (finished "
                              "requests whose outputs the Suffix draft matches against; 0 = none)")
        if n and algo not in SUFFIX_ALGORITHMS:
            raise ConfigError(f"--suffix_global_cache={n} needs --speculative_algorithm=Suffix or MTP+Suffix (got "
                              f"{algo}); drop the flag or change the algorithm")
        if algo == "Suffix" and self.enable_unified_mtp_graph:
            raise ConfigError("--enable_unified_mtp_graph=true prepares an MTP draft graph, and "
                              "--speculative_algorithm=Suffix has no draft model; set --enable_unified_mtp_graph=false")

    def _validate_parallel(self) -> None:
        if self.cp_size != 1:
            raise ConfigError(f"--cp_size={self.cp_size}: only 1 is implemented in this version; use --cp_size=1",
                              param="--cp_size")
        for name in ("dp_size", "tp_size", "nnodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name}={getattr(self, name)}: must be >= 1", param=f"--{name}")
        if self.tp_size > 1 and self.dp_size > 1:
            raise ConfigError("--tp_size>1 together with --dp_size>1 is not implemented; use one of them",
                              param="--dp_size")
        world = self.tp_size * self.dp_size
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(f"--node_rank={self.node_rank}: must be in 0..{self.nnodes - 1} (--nnodes={self.nnodes})",
                              param="--node_rank")
        if world % self.nnodes:
            raise ConfigError(f"--nnodes={self.nnodes} does not divide the {world} ranks (--tp_size x --dp_size)",
                              param="--nnodes")
        if not 0 <= self.master_port <= 65535:
            raise ConfigError(f"--master_port={self.master_port}: must be a port number 0..65535", param="--master_port")
        if self.nnodes > 1 and self.master_port == 0:
            raise ConfigError("--nnodes>1 needs --master_port (the same port on every node)", param="--master_port")
        if not self.master_node_addr.strip():
            raise ConfigError("--master_node_addr= is empty: give node 0's address", param="--master_node_addr")
        if self.dp_size > 1 and self.enable_adaptive_draft_step:  # R-E2
            raise ConfigError("--enable_adaptive_draft_step=true requires --dp_size=1 (R-E2)", param="--dp_size")
        if self.dp_size > 1 and self.enable_adaptive_target_verify and self.speculative_algorithm != "DSpark":
            raise ConfigError("--enable_adaptive_target_verify=true with --dp_size>1 requires "
                              "--speculative_algorithm=DSpark (R-E2: MTP adaptive verify needs DP=1)", param="--dp_size")

    def _validate_adaptive(self) -> None:
        """Switch rules R-E1..R-E4 (and R-B4 above); each refusal names the flag to change."""
        step, verify = self.enable_adaptive_draft_step, self.enable_adaptive_target_verify
        algo, k = self.speculative_algorithm, self.num_draft_tokens
        if step and verify:
            raise ConfigError(
                "--enable_adaptive_draft_step=true and --enable_adaptive_target_verify=true cannot be combined; "
                "set one of them to false"
            )
        if step:
            if algo not in ("MTP", *SUFFIX_ALGORITHMS):
                raise ConfigError("--enable_adaptive_draft_step=true requires --speculative_algorithm=MTP, Suffix or "
                                  "MTP+Suffix")
            if self.enable_unified_mtp_graph:
                raise ConfigError(
                    "--enable_adaptive_draft_step=true does not support --enable_unified_mtp_graph=true; "
                    "set --enable_unified_mtp_graph=false"
                )
        if verify:
            if algo not in ("MTP", "DSpark", *SUFFIX_ALGORITHMS):
                raise ConfigError("--enable_adaptive_target_verify=true requires --speculative_algorithm=MTP, DSpark, "
                                  "Suffix or MTP+Suffix")
            if k not in (5, 7):
                raise ConfigError(
                    f"--enable_adaptive_target_verify=true requires --num_speculative_tokens=5 or 7 (got {k})"
                )
        if self.enable_unified_mtp_graph and self.dp_size > 1:
            raise ConfigError("--enable_unified_mtp_graph=true supports --dp_size=1 only; set --enable_unified_mtp_graph=false")
        if self.enable_unified_mtp_graph and not self.speculative:
            raise ConfigError("--enable_unified_mtp_graph=true needs --speculative_algorithm=MTP, DSpark or MTP+Suffix")
        if step or verify:
            flag = "--enable_adaptive_draft_step" if step else "--enable_adaptive_target_verify"
            if not self.enable_graph:
                raise ConfigError(f"{flag}=true requires prepared shapes: set --enable_graph=true")
            if self.disable_graph_warmup:
                raise ConfigError(f"{flag}=true requires graph warm-up: set --disable_graph_warmup=false")
        for name in ("adaptive_target_verify_calibration", "adaptive_target_verify_cost_table",
                     "adaptive_target_verify_cost_table_output"):
            if getattr(self, name) is not None and not verify:
                if step:
                    raise ConfigError(f"--{name} is not supported with --enable_adaptive_draft_step=true: every step "
                                      "count is measured at start-up (R-C3); use --adaptive_draft_step_config instead")
                raise ConfigError(f"--{name} needs --enable_adaptive_target_verify=true")
        if self.adaptive_draft_step_config is not None and not step:
            raise ConfigError("--adaptive_draft_step_config needs --enable_adaptive_draft_step=true")
        if self.adaptive_target_verify_cost_table and self.adaptive_target_verify_calibration:
            raise ConfigError(
                "--adaptive_target_verify_cost_table loads a saved table, so --adaptive_target_verify_calibration "
                "would be ignored; pass only one of them"
            )
        if self.adaptive_target_verify_cost_table and self.adaptive_target_verify_cost_table_output:
            raise ConfigError(
                "--adaptive_target_verify_cost_table loads a saved table, so nothing is calibrated and "
                "--adaptive_target_verify_cost_table_output would never be written; pass only one of them",
                param="--adaptive_target_verify_cost_table_output")

    def _normalised(self) -> "EngineConfig":
        """Types first (the Python API can pass anything): bools are not numbers, paths become str."""
        changes = {}
        for f in fields(self):
            v, flag = getattr(self, f.name), f"--{f.name}"
            if isinstance(f.default, bool):
                if not isinstance(v, bool):
                    raise ConfigError(f"{flag}={v!r}: expected true or false", param=flag)
            elif isinstance(f.default, int) or f.name in OPTIONAL_INT_FIELDS:
                if not (v is None and f.name in OPTIONAL_INT_FIELDS) and (isinstance(v, bool) or not isinstance(v, int)):
                    raise ConfigError(f"{flag}={v!r}: expected an integer", param=flag)
            elif f.name in PATH_FIELDS:
                if v is not None and not isinstance(v, (str, os.PathLike)):
                    raise ConfigError(f"{flag}={v!r}: expected a path (str or os.PathLike)", param=flag)
                if v is not None and str(os.fspath(v)).strip() == "":
                    raise ConfigError(f"{flag}= is empty: pass a path, or leave the flag out", param=flag)
                if v is not None and os.path.expanduser(os.fspath(v)) != v:  # Path -> str, ~ expanded
                    changes[f.name] = os.path.expanduser(os.fspath(v))
            elif f.name == "graph_decode_batch_sizes":
                if v is not None:
                    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                        raise ConfigError(f"{flag}={v!r}: expected a list of integers", param=flag)
                    v = tuple(v)
                    if any(isinstance(b, bool) or not isinstance(b, int) for b in v):
                        raise ConfigError(f"{flag}={list(v)!r}: expected a list of integers", param=flag)
                    changes[f.name] = v
            elif not isinstance(v, str):
                raise ConfigError(f"{flag}={v!r}: expected a string", param=flag)
        return replace(self, **changes) if changes else self

    @property
    def adaptive(self) -> bool:
        return self.enable_adaptive_draft_step or self.enable_adaptive_target_verify

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm != "none"

    @property
    def num_draft_tokens(self) -> int:
        """k_max (MTP, MTP+Suffix), width w (DSpark) or the most tokens a Suffix round proposes; 0 without speculation."""
        if not self.speculative:
            return 0
        default = {"MTP": 3, "MTP+Suffix": 3, "Suffix": 5}.get(self.speculative_algorithm, 7)
        return self.num_speculative_tokens or default

    def replace(self, **changes) -> "EngineConfig":
        return replace(self, **changes)

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}
