"""`adaspec` command line: flags in the seed's style (`--flag=value`, booleans `true|false`).

Engine flags are generated from `EngineConfig`'s fields, so one flag set serves every subcommand.
Errors (README "Errors"): a user's mistake -- a wrong flag or value, a bad file, model directory,
prompt or request -- is one line on stderr, `adaspec COMMAND: error: ...`, naming the flag or field
and the fix, and exit status 2, before any model work where it is knowable then. A failure of the
machine (disk full, permission denied while writing) is one line and status 1. Anything else is a
bug in adaspec: its traceback is shown, with one line saying so, and status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import re
import sys
import traceback
from typing import Any, Sequence

from .config import EngineConfig
from .errors import BUG_REPORT, FlagError, UserError
from .flags import finite_float, integer, parse_bool


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but every error is a one-line FlagError naming the flag (no usage dump, no exit)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise flag_error(message, self.prog)


def flag_error(message: str, prog: str) -> FlagError:
    """argparse's message as one line: `--flag=value: what is wrong; see `adaspec generate --help``."""
    see = f"see `{prog} --help`"
    m = re.match(r"argument (--[\w-]+)(?:/\S+)?: (.*)", message)
    if m:
        flag, why = m.group(1), m.group(2)
        why = re.sub(r"invalid (?:int|integer|_int_list|integer) value: (.*)", r"expected an integer, got \1", why)
        why = re.sub(r"invalid (?:float|finite_float) value: (.*)", r"expected a number, got \1", why)
        why = re.sub(r"invalid choice: (.*) \(choose from (.*)\)", lambda c: f"allowed values are "
                     f"{c.group(2).replace(chr(39), '')}; got {c.group(1)}", why)
        why = why.replace("expected one argument", "needs a value: write " + flag + "=VALUE")
        return FlagError(f"{flag}: {why}; {see}", param=flag)
    m = re.match(r"argument COMMAND: invalid choice: (.*) \(choose from (.*)\)", message)
    if m:
        return FlagError(f"unknown command {m.group(1)}: the commands are {m.group(2).replace(chr(39), '')}; {see}",
                         param="COMMAND")
    if message == "the following arguments are required: COMMAND":
        return FlagError("no command given: run `adaspec generate`, `adaspec calibrate`, `adaspec serve`, "
                         f"`adaspec bench-serve` or `adaspec train-draft`; {see}", param="COMMAND")
    m = re.match(r"the following arguments are required: (.*)", message)
    if m:
        first = m.group(1).split(",")[0].strip()
        return FlagError(f"missing required flag(s) {m.group(1)}; {see}", param=first if first.startswith("--") else None)
    return FlagError(f"{message}; {see}")


def unknown_flags_error(extras: list[str], parser: argparse.ArgumentParser, prog: str) -> FlagError:
    from .config import RENAMED_SWITCHES, renamed_switch_message

    known = _all_flags(parser)
    hints = []
    for arg in extras:
        flag = arg.split("=", 1)[0]
        if flag.lstrip("-") in RENAMED_SWITCHES:
            return FlagError(renamed_switch_message(flag.lstrip("-")), param=flag)
        if not flag.startswith("-"):
            hints.append(f"{arg!r} (flags are written --name=value)")
            continue
        close = difflib.get_close_matches(flag, known, n=1)
        hints.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
    first = extras[0].split("=", 1)[0]
    return FlagError(f"unknown flag(s): {', '.join(hints)}; see `{prog} --help`", param=first)


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
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


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
    from .config import LAYER_KERNELS, DEVICES, DTYPES, LINEAR_BACKENDS, SPECULATIVE_ALGORITHMS

    choices = {"dtype": DTYPES, "device": DEVICES, "speculative_algorithm": SPECULATIVE_ALGORITHMS,
               "linear_backend": LINEAR_BACKENDS, "layer_kernels": LAYER_KERNELS}
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
        elif isinstance(f.default, str):
            kwargs["type"] = str
        elif f.default is None and f.name not in ("max_model_len", "num_speculative_tokens"):
            kwargs["type"] = str
            kwargs["metavar"] = "DIR" if f.name in ("model", "draft_model") else "FILE"
        else:
            kwargs["type"] = integer
        parser.add_argument(f"--{f.name}", **kwargs)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(EngineConfig)}).validate()


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="adaspec", allow_abbrev=False, description="adaspec: LLM inference with adaptive speculative decoding")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"adaspec {__version__}",
                        help="print adaspec's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    gen = sub.add_parser("generate", help="generate completions for prompts and print them",
                         description="Generate completions with the engine (default model: bundled SmolLM2-135M-Instruct).",
                         allow_abbrev=False)
    gen.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    gen.add_argument("--prompts_file", help="JSONL file: one prompt per line, a JSON string, {\"prompt\": ...} or "
                                            "{\"messages\": [...]} (chat)")
    gen.add_argument("--max_tokens", type=integer, default=64, help="maximum new tokens per prompt (default 64)")
    gen.add_argument("--temperature", type=finite_float, default=0.0, help="sampling temperature, 0 = greedy (default 0)")
    gen.add_argument("--top_k", type=integer, default=0, help="keep the k most likely tokens, 0 = off (default 0)")
    gen.add_argument("--top_p", type=finite_float, default=1.0, help="nucleus sampling mass, 1 = off (default 1)")
    gen.add_argument("--min_p", type=finite_float, default=0.0, help="drop tokens below min_p x the top probability (default 0)")
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    _add_bool(gen, "chat", True, "wrap each prompt in the model's chat template")
    _add_bool(gen, "json", False, "print one JSON object (outputs and stats) and nothing else on stdout")
    add_engine_flags(gen)

    cal = sub.add_parser("calibrate", help="run start-up calibration only: print the cost table, plot the fit",
                         description="Warm up and calibrate exactly as serving would (same flags), then print the "
                                     "fitted cost table and write a PNG of measured points vs the model per Bcap. "
                                     "Needs --enable_adaptive_target_verify=true or --enable_adaptive_draft_step=true.",
                         allow_abbrev=False)
    cal.add_argument("--plot", default="calibration.png", metavar="FILE",
                     help="PNG of measured points vs the fitted model; never overwritten (default calibration.png; "
                          "empty = no plot)")
    add_engine_flags(cal)

    train = sub.add_parser("train-draft", help="train an MTP or DSpark draft for a target model (R-B6)",
                           description="Distil an MTP or DSpark draft from the target's own continuations.",
                           allow_abbrev=False)
    from .training.cli import add_train_flags

    add_train_flags(train)
    from .server.cli import add_server_commands

    add_server_commands(sub, add_engine_flags)  # serve, bench-serve (issue 9)
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    from .commands.generate import cmd_generate as run

    return run(args, engine_config)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .commands.calibrate import cmd_calibrate as run

    return run(args, engine_config)


def cmd_train_draft(args: argparse.Namespace) -> int:
    from .training.cli import run_train

    run_train(args)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .server.cli import cmd_serve as run

    return run(args)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from .server.bench_cli import cmd_bench_serve as run

    return run(args)


COMMANDS = {"generate": cmd_generate, "calibrate": cmd_calibrate, "train-draft": cmd_train_draft,
            "serve": cmd_serve, "bench-serve": cmd_bench_serve}
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EPIPE, errno.EIO}


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    return next((a.choices[command] for a in parser._actions
                 if isinstance(a, argparse._SubParsersAction) and command in a.choices), parser)


def _refuse_repeated_flags(argv: Sequence[str], parser: argparse.ArgumentParser, prog: str) -> None:
    """A flag that takes one value, given twice with different values: argparse would silently keep
    the last one. Repeatable flags (--prompt, --stop) are exempt."""
    repeatable = {o for a in parser._actions if isinstance(a, argparse._AppendAction) for o in a.option_strings}
    seen: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]  # `--flag value`
        if flag in repeatable:
            continue
        if flag in seen and seen[flag] != value:
            raise FlagError(f"{flag} is given twice ({flag}={seen[flag]} and {flag}={value}); give it once; see "
                            f"`{prog} --help`", param=flag)
        seen[flag] = value


def _command_of(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def one_line(message: str) -> str:
    return re.sub(r"\s*\n\s*", "; ", str(message).strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the exit status (0 ok, 2 user error, 1 system error or bug)."""
    if argv is None:  # the command line itself (not a caller's list): huge pages first (adaspec/hugepages.py)
        from .hugepages import reexec_with_hugepages

        reexec_with_hugepages()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv) if _command_of(argv) in COMMANDS else None
    prog = f"adaspec {command}" if command else "adaspec"
    try:
        parser = build_parser()
        args, extras = parser.parse_known_args(argv)
        if extras:  # the closest flag of this subcommand (another subcommand's flag would not help)
            raise unknown_flags_error(extras, _subparser(parser, command), prog)
        _refuse_repeated_flags(argv, _subparser(parser, command), prog)
        args.explicit_flags = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
        return COMMANDS[args.command](args)
    except SystemExit as e:  # --help, or a legacy SystemExit("message")
        if isinstance(e.code, str):
            print(f"{prog}: error: {one_line(e.code)}", file=sys.stderr)
            return 2
        return 0 if e.code is None else int(e.code)
    except UserError as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno not in _ENVIRONMENT_ERRNOS:
            traceback.print_exc()
            print(f"{prog}: internal error: {BUG_REPORT}", file=sys.stderr)
            return 1
        where = f": {e.filename}" if e.filename else ""
        print(f"{prog}: error: {e.strerror or e}{where} (a problem of this machine, not of the input; free space "
              "or fix permissions and run again)", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - not the user's fault: show everything
        traceback.print_exc()
        print(f"{prog}: internal error: {BUG_REPORT}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
