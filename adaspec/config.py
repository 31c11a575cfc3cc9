"""Engine configuration: one frozen dataclass, validated once, at the edge.

`EngineConfig.validate()` is the one home of start-up rules; every error names the flag to change.
CLI flags map 1:1 onto these fields (`--max_seqs_per_batch` -> `max_seqs_per_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICES = ("cpu", "cuda")
SPECULATIVE_ALGORITHMS = ("none", "MTP", "DSpark")


class ConfigError(ValueError):
    """A start-up option is wrong; the message names the flag and the fix."""


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = field(default=None, metadata={"help": "HF model directory or .gguf file; default: bundled SmolLM2-135M-Instruct"})
    dtype: str = field(default="float32", metadata={"help": "weights/activations dtype: float32 | bfloat16 | float16 | auto (bfloat16 where the CPU has native bf16)"})
    device: str = field(default="cpu", metadata={"help": "cpu | cuda (cuda:N accepted)"})
    threads: int = field(default=1, metadata={"help": "CPU threads for PyTorch (default 1; >1 sets OMP_WAIT_POLICY=PASSIVE)"})
    max_seqs_per_batch: int = field(default=16, metadata={"help": "request slots: at most this many requests run at once"})
    max_model_len: int | None = field(default=None, metadata={"help": "context limit per request (prompt + output); default min(model limit, 2048)"})
    max_num_batched_tokens: int = field(default=512, metadata={"help": "token rows per step; long prompts are prefilled in chunks of at most this"})
    seed: int = field(default=0, metadata={"help": "seed of the engine's sampling RNG (requests without their own seed)"})
    speculative_algorithm: str = field(default="none", metadata={"help": "speculative decoding: none | MTP | DSpark"})
    draft_model: str | None = field(default=None, metadata={"help": "draft directory (from `adaspec train-draft`); default: the shipped draft for the bundled model"})
    num_speculative_tokens: int | None = field(default=None, metadata={"help": "MTP: draft steps k_max (default 3); DSpark: width w, 5 or 7 (default 7)"})
    enable_probabilistic_draft: bool = field(default=False, metadata={"help": "sample draft tokens instead of argmax; not supported: the draft is always greedy (R-B4)"})

    def validate(self) -> "EngineConfig":
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype={self.dtype}: allowed values are {', '.join(DTYPES)}")
        if self.device.split(":")[0] not in DEVICES:
            raise ConfigError(f"--device={self.device}: allowed values are cpu, cuda, cuda:N")
        for name in ("threads", "max_seqs_per_batch", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name}={getattr(self, name)}: must be >= 1")
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
                raise ConfigError(f"{flag} needs --speculative_algorithm=MTP or DSpark")
        elif k is not None and k < 1:
            raise ConfigError(f"--num_speculative_tokens={k}: must be >= 1")
        elif algo == "DSpark" and k is not None and k not in (5, 7):
            raise ConfigError(f"--num_speculative_tokens={k}: DSpark's width must be 5 or 7")
        return self

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm != "none"

    @property
    def num_draft_tokens(self) -> int:
        """k_max (MTP) or width w (DSpark); 0 without speculation."""
        if not self.speculative:
            return 0
        return self.num_speculative_tokens or (3 if self.speculative_algorithm == "MTP" else 7)

    def replace(self, **changes) -> "EngineConfig":
        return replace(self, **changes)

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}
