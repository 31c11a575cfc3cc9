"""`adaspec` command line: flags in the seed's style (`--flag=value`, booleans `true|false`).

Engine flags are generated from `EngineConfig`'s fields, so one flag set serves every subcommand.
Wrong flags and values exit with status 2 and a message that names the flag and the fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import time
from typing import Any, Sequence

from .config import ConfigError, EngineConfig
from .flags import parse_bool


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but an unknown flag is answered with the closest known one."""

    def error(self, message: str):  # noqa: D401 - argparse API
        if "unrecognized arguments" in message:
            from .config import RENAMED_SWITCHES, renamed_switch_message

            known = _all_flags(self)
            hints = []
            for arg in message.split(":", 1)[1].split():
                flag = arg.split("=", 1)[0]
                if flag.lstrip("-") in RENAMED_SWITCHES:
                    super().error(renamed_switch_message(flag.lstrip("-")))
                close = difflib.get_close_matches(flag, known, n=1)
                hints.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
            message = f"unknown flag(s): {', '.join(hints)}; see `{self.prog} --help`"
        super().error(message)


def _all_flags(parser: argparse.ArgumentParser) -> list[str]:
    flags = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                flags += _all_flags(child)
    return flags


def _int_list(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}")


def _choice(allowed: Sequence[str]):
    def check(value: str) -> str:
        if value not in allowed and not (value.startswith("cuda:") and "cuda" in allowed):
            raise argparse.ArgumentTypeError(f"allowed values are {', '.join(allowed)}; got {value!r}")
        return value

    return check


def _add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    parser.add_argument(f"--{name}", type=parse_bool, nargs="?", const=True, default=default,
                        metavar="true|false", help=f"{help} (default {str(default).lower()})")


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per EngineConfig field, typed from the field's default."""
    from .config import DEVICES, DTYPES, SPECULATIVE_ALGORITHMS

    choices = {"dtype": DTYPES, "device": DEVICES, "speculative_algorithm": SPECULATIVE_ALGORITHMS}
    helps = EngineConfig.field_help()
    for f in dataclasses.fields(EngineConfig):
        if isinstance(f.default, bool):
            _add_bool(parser, f.name, f.default, helps[f.name])
            continue
        kwargs: dict[str, Any] = {"default": f.default, "help": helps[f.name]}
        if f.name in choices:
            kwargs["type"] = _choice(choices[f.name])
            kwargs["metavar"] = "|".join(choices[f.name])
        elif f.name == "graph_decode_batch_sizes":
            kwargs["type"] = _int_list
            kwargs["metavar"] = "B1,B2,..."
        elif f.default is None and f.name not in ("max_model_len", "num_speculative_tokens"):
            kwargs["type"] = str
            kwargs["metavar"] = "DIR" if f.name in ("model", "draft_model") else "FILE"
        else:
            kwargs["type"] = int
        parser.add_argument(f"--{f.name}", **kwargs)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(EngineConfig)}).validate()


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="adaspec", allow_abbrev=False, description="adaspec: LLM inference with adaptive speculative decoding")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    gen = sub.add_parser("generate", help="generate completions for prompts and print them",
                         description="Generate completions with the engine (default model: bundled SmolLM2-135M-Instruct).",
                         allow_abbrev=False)
    gen.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    gen.add_argument("--prompts_file", help="JSONL file: one prompt per line, a JSON string or {\"prompt\": ...}")
    gen.add_argument("--max_tokens", type=int, default=64, help="maximum new tokens per prompt (default 64)")
    gen.add_argument("--temperature", type=float, default=0.0, help="sampling temperature, 0 = greedy (default 0)")
    gen.add_argument("--top_k", type=int, default=0, help="keep the k most likely tokens, 0 = off (default 0)")
    gen.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling mass, 1 = off (default 1)")
    gen.add_argument("--min_p", type=float, default=0.0, help="drop tokens below min_p x the top probability (default 0)")
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    _add_bool(gen, "chat", True, "wrap each prompt in the model's chat template")
    _add_bool(gen, "json", False, "print one JSON object (outputs and stats) and nothing else on stdout")
    add_engine_flags(gen)

    cal = sub.add_parser("calibrate", help="run start-up calibration only: print the cost table, plot the fit",
                         description="Warm up and calibrate exactly as serving would (same flags), then print the "
                                     "fitted cost table and write a PNG of measured points vs the model per Bcap. "
                                     "Needs --enable_adaptive_target_verify=true or --enable_adaptive_draft_step=true.",
                         allow_abbrev=False)
    cal.add_argument("--plot", default=None, metavar="FILE",
                     help="PNG of measured points vs the fitted model (default calibration.png when matplotlib is "
                          "installed, else none; empty = no plot)")
    add_engine_flags(cal)

    train = sub.add_parser("train-draft", help="train an MTP or DSpark draft for a target model (R-B6)",
                           description="Distil an MTP or DSpark draft from the target's own continuations.",
                           allow_abbrev=False)
    from .training.cli import add_train_flags

    add_train_flags(train)
    from .server.cli import add_server_commands

    add_server_commands(sub, add_engine_flags)  # serve, bench-serve (issue 9)
    return parser


def _read_prompts(args: argparse.Namespace) -> list[str]:
    prompts = list(args.prompt)
    if args.prompts_file:
        try:
            with open(args.prompts_file) as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise SystemExit(f"--prompts_file: line {n} is not JSON ({e.msg})")
                    if isinstance(item, dict) and isinstance(item.get("prompt"), str):
                        item = item["prompt"]
                    if not isinstance(item, str):
                        raise SystemExit(f"--prompts_file: line {n} must be a string or an object with a \"prompt\" string")
                    prompts.append(item)
        except OSError as e:
            raise SystemExit(f"--prompts_file: cannot read {args.prompts_file}: {e.strerror}")
    if not prompts:
        raise SystemExit("no prompt given: pass --prompt=TEXT (repeatable) or --prompts_file=FILE.jsonl")
    return prompts


def cmd_generate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from .engine.llm_engine import LLM, RequestError
    from .sampling_params import SamplingParams

    prompts = _read_prompts(args)
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                                top_p=args.top_p, min_p=args.min_p, stop=args.stop)
    except ValidationError as e:
        err = e.errors()[0]
        raise SystemExit(f"--{err['loc'][0]}: {err['msg']}")
    llm = LLM(**dataclasses.asdict(engine_config(args)))
    t0 = time.perf_counter()
    try:
        outputs = llm.generate(prompts, params, chat=args.chat, use_tqdm=not args.json and len(prompts) > 1)
    except RequestError as e:
        raise SystemExit(f"error: {e}")
    elapsed = time.perf_counter() - t0
    n_out = sum(len(o.token_ids) for o in outputs)
    stats = {"output_tokens": n_out, "elapsed_s": round(elapsed, 4), "tokens_per_s": round(n_out / elapsed, 3)}
    if llm.engine.config.speculative:
        stats.update(llm.engine.spec_stats.summary())
    if llm.engine.control is not None:
        stats.update(llm.engine.control.summary())
    if args.json:
        print(json.dumps({
            "outputs": [{"prompt": p, "token_ids": o.token_ids, "text": o.text, "finish_reason": o.finish_reason}
                        for p, o in zip(prompts, outputs)],
            "stats": stats,
        }))
    else:
        for p, o in zip(prompts, outputs):
            print(f"### prompt: {p}\n{o.text}\n[finish_reason={o.finish_reason}, tokens={len(o.token_ids)}]\n")
        print(f"{n_out} tokens in {elapsed:.2f} s ({stats['tokens_per_s']} tok/s)", file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .engine.llm_engine import LLMEngine

    config = engine_config(args)
    if not config.adaptive:
        raise ConfigError("calibrate needs --enable_adaptive_target_verify=true or --enable_adaptive_draft_step=true "
                          "(with --speculative_algorithm=MTP or DSpark)")
    from .calibration.plot import plot_target

    plot = plot_target(args.plot)  # checked before any model work: a missing matplotlib never loses a table
    engine = LLMEngine(config)
    table = engine.control.table
    print(json.dumps({"source": table.source or "calibrated now",
                      "calibration_seconds": round(engine.control.calibration_seconds, 2),
                      "metadata": table.metadata.model_dump(mode="json", exclude={"calibration"}),
                      "model": table.model.to_dict()}, indent=1))
    for line in table.coverage_lines():
        print(line)
    if plot:
        from .calibration.plot import plot_fit

        print(f"plot written to {plot_fit(table, plot)}")
    return 0


def cmd_train_draft(args: argparse.Namespace) -> int:
    from .training.cli import run_train

    run_train(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .errors import UserError

    try:
        commands = {"generate": cmd_generate, "calibrate": cmd_calibrate, "train-draft": cmd_train_draft}
        return commands.get(args.command, getattr(args, "run", None))(args)
    except UserError as e:
        print(f"adaspec {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
