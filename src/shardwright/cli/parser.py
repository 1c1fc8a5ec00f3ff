"""The command line's parser: every command, its options with their defaults, and errors of
three lines (a short usage, the problem with the option meant for a typo, where the full list
is). The conversion options come from `ConvertOptions`' fields (options/: a section of
`--help` per group), `convert`'s run options from `RunOptions`' (run_options.py)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from collections.abc import Callable
from typing import Any, NoReturn

from shardwright.common.flags import (
    Flag,
    command_line_fields,
    default_of,
    format_size,
    option_groups,
    parse_json_object,
    parse_port,
    parse_positive_int,
    parse_size,
    parse_xyz,
)
from shardwright.errors import within
from shardwright.lifecycle.run_options import RunOptions
from shardwright.options import ConvertOptions
from shardwright.version import __version__


class _HelpWithDefaults(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none (None, False) or the
    help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS, {})
            or "%(default)" in text
            or "(default" in text
            or isinstance(
                action, argparse._VersionAction | argparse._HelpAction | argparse._StoreConstAction
            )
        ):
            return action.help
        shown = ",".join(map(str, default)) if isinstance(default, tuple | list) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are three lines: a short usage, the problem (with the
    option meant, for a typo) and where the full list is; not the whole usage of 60 options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # argparse.ArgumentParser's
        kwargs.setdefault("formatter_class", _HelpWithDefaults)
        super().__init__(*args, **kwargs)

    def short_usage(self) -> str:
        positionals = [a.metavar or a.dest for a in self._actions if not a.option_strings]
        subcommands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        words = [str(p).upper() for p in positionals if not subcommands]
        return " ".join([self.prog, "COMMAND" if subcommands else "[options]", *words])

    def option_names(self) -> list[str]:
        return [name for action in self._actions for name in action.option_strings]

    def error(self, message: str) -> NoReturn:
        hint = _suggestion(message, self)
        self.exit(
            2,
            f"usage: {self.short_usage()}\n{self.prog}: error: {message}{hint}\n"
            f"('{self.prog} --help' lists every option)\n",
        )


def _suggestion(message: str, parser: _Parser) -> str:
    """'; did you mean ...?' for a mistyped option, command or choice in an argparse error."""
    if message.startswith("unrecognized arguments:"):
        candidates = parser.option_names()
        words = message.split(":", 1)[1].split()
        wrong = [w.split("=")[0] for w in words if w.startswith("-")]
    elif "invalid choice: '" in message and "(choose from " in message:
        wrong = [message.split("invalid choice: '", 1)[1].split("'", 1)[0]]
        listed = message.rsplit("(choose from ", 1)[1].rstrip(")")
        candidates = [c.strip(" '") for c in listed.split(",")]
    else:
        return ""
    close = [m for w in wrong for m in difflib.get_close_matches(w, candidates, n=1, cutoff=0.6)]
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _add_conversion_options(p: argparse.ArgumentParser, *, dest_alone: bool = False) -> None:
    """SOURCE, DEST and a flag for every ConvertOptions field the command line offers;
    `dest_alone`: DEST may come alone (a finished dataset that options add to)."""
    p.add_argument(
        "source",
        help="a .npy file, zarr array or OME-Zarr group, N5, precomputed volume, TIFF file or "
        "directory/glob of slices, file.h5#/dataset, a TensorStore spec (.json), or a table "
        "(.csv, .parquet) of annotations"
        + ("; alone: a precomputed segmentation that --generate-meshes, "
           "--generate-skeletons and --segment-properties add to in place"
           if dest_alone else ""),
    )  # fmt: skip
    p.add_argument(
        "dest",
        nargs="?" if dest_alone else None,
        help="output directory or URL (path, file://, memory://, gs://, s3://)",
    )
    _add_flags(p, ConvertOptions)


def _add_flags(p: argparse.ArgumentParser, cls: type) -> None:
    """A flag for every field of options dataclass `cls` the command line offers, a section
    of `--help` per group of options it is made of."""
    for title, offered in option_groups(cls):
        where = p.add_argument_group(title) if title else p
        for f, flag in offered:
            _add_flag(where, f, flag)


def _add_flag(p: argparse._ActionsContainer, f: dataclasses.Field[Any], flag: Flag) -> None:
    """One field's flag: a switch, or a value (appended to where it repeats)."""
    if flag.switch is not None:
        p.add_argument(
            flag.name,
            action="store_const",
            const=flag.switch,
            default=default_of(f),
            dest=f.name,
            help=flag.help,
        )
    else:
        default = default_of(f)
        text = flag.help
        if flag.parse is parse_size:  # 1 GiB, not 1073741824
            text = f"{text} (default: {format_size(default)})"
        p.add_argument(
            flag.name,
            type=flag.parse or str,
            choices=flag.choices,
            metavar=flag.metavar,
            default=None if flag.repeat else default,  # appended to: the field's default
            dest=f.name,
            help=text,
            action="append" if flag.repeat else "store",
        )


def options_from(args: argparse.Namespace) -> ConvertOptions:
    """The ConvertOptions a `plan` or `convert` command line asks for; a value none can take
    is a PlanError naming its flag."""
    return _built(ConvertOptions, args)


def run_options_from(args: argparse.Namespace) -> RunOptions:
    """The RunOptions a `convert` command line asks for (PlanError as options_from)."""
    return _built(RunOptions, args)


def _built(cls: type, args: argparse.Namespace) -> Any:
    try:
        return cls(**{f.name: getattr(args, f.name) for f, _ in command_line_fields(cls)})
    except ValueError as exc:
        raise within(exc) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="shardwright",
        description="Convert volumes to sharded Neuroglancer precomputed and sharded Zarr v3.",
    )
    parser.add_argument("--version", action="version", version=f"shardwright {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    talk = _Parser(add_help=False)
    talk.add_argument(
        "--verbose",
        action="store_true",
        help="also print each step and the warnings kept quiet otherwise (a job's: those of "
        "its cluster and workers too)",
    )
    talk.add_argument(
        "--debug", action="store_true", help="as --verbose, and print the traceback of errors"
    )
    for command in COMMANDS:
        command(sub, talk)
    return parser


def _plan_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "plan", parents=[talk], help="print the plan of a conversion; writes nothing"
    )
    _add_conversion_options(p, dest_alone=True)
    p.add_argument("--json", action="store_true", help="machine-readable plan")


def _convert_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    c = sub.add_parser(
        "convert",
        parents=[talk],
        help="convert SOURCE to sharded output at DEST, or add to DEST in place",
    )
    _add_conversion_options(c, dest_alone=True)
    _add_flags(c, RunOptions)
    c.add_argument("--dry-run", action="store_true", help="same as `plan`")


def _verify_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    v = sub.add_parser(
        "verify", parents=[talk], help="check DEST's shards (and voxels against a source)"
    )
    v.add_argument("dest", help="the dataset to check (path or URL)")
    v.add_argument(
        "--against",
        metavar="SOURCE",
        help="also compare voxels with this source, or annotations with their table: every "
        "entry of every index (default: no)",
    )
    v.add_argument("--full", action="store_true", help="compare every chunk, not a sample")
    v.add_argument("--sample", type=parse_positive_int, default=64, help="chunks to compare")
    v.add_argument("--source-axes", help="as for convert")
    v.add_argument("--source-scale", help="as for convert")
    v.add_argument(
        "--storage-options", type=parse_json_object, default={}, metavar="JSON",
        help="as for convert",
    )  # fmt: skip
    v.add_argument(
        "--source-storage-options",
        type=parse_json_object,
        default={},
        metavar="JSON",
        help="as for convert",
    )
    v.add_argument("--timeout", type=float, metavar="SECONDS", help="as for convert")


def _status_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    t = sub.add_parser(
        "status",
        parents=[talk],
        help="where the job writing DEST stands: running, stopped or finished, shards, rate",
    )
    t.add_argument("dest", help="the destination a job writes or wrote (path or URL)")
    t.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=float,
        metavar="SECONDS",
        help="say it again every SECONDS (default 2) until the job is finished or stopped",
    )
    t.add_argument("--json", action="store_true", help="machine-readable status")
    t.add_argument(
        "--storage-options", type=parse_json_object, default={}, metavar="JSON",
        help="as for convert",
    )  # fmt: skip


def _serve_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "serve", parents=[talk], help="serve a directory over HTTP with CORS and Range support"
    )
    s.add_argument("directory", help="the folder to serve")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on")
    s.add_argument("--port", type=parse_port, default=8000, help="port to listen on")
    s.add_argument("--log", action="store_true", help="print a line per request")


def _view_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    w = sub.add_parser(
        "view",
        parents=[talk],
        help="serve datasets with the Neuroglancer client; print the URL that shows them",
    )
    w.add_argument(
        "dest",
        nargs="+",
        help="datasets and sources Neuroglancer reads: local folders, gs://, s3://, http(s)://",
    )
    w.add_argument(
        "--storage-options",
        type=parse_json_object,
        default=None,
        metavar="JSON",
        help="fsspec options for remote datasets (an S3 or GCS endpoint_url: layers read there)",
    )
    w.add_argument("--host", default="127.0.0.1", help="address to listen on")
    w.add_argument(
        "--port", type=parse_port, default=0, help="the viewer's port (default: 0, any free one)"
    )
    w.add_argument("--open", action="store_true", help="open the URL in a web browser")
    w.add_argument(
        "--screenshot",
        metavar="FILE.png",
        help="render the view in a headless Chromium into FILE.png and exit",
    )
    w.add_argument("--log", action="store_true", help="print a line per request")


def _demo_command(sub: Any, talk: argparse.ArgumentParser) -> None:
    d = sub.add_parser(
        "demo", parents=[talk], help="make a demo volume, convert it both ways, verify"
    )
    d.add_argument("--out", default="demo-output", help="folder for the demo's files")
    d.add_argument(
        "--size",
        type=parse_xyz(int),
        default=(512, 512, 128),
        metavar="X,Y,Z",
        help="demo volume size",
    )
    d.add_argument("--scheduler", help="as for convert (default: local)")
    d.add_argument("--workers", type=parse_positive_int, help="as for convert")


# The commands, in the order `shardwright` lists them.
COMMANDS: tuple[Callable[[Any, argparse.ArgumentParser], None], ...] = (
    _plan_command,
    _convert_command,
    _verify_command,
    _status_command,
    _serve_command,
    _view_command,
    _demo_command,
)


def commands_listing(parser: argparse.ArgumentParser) -> str:
    """What bare `shardwright` prints: each command and what it does, and where help is."""
    rows = [
        (choice.dest, choice.help or "")
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"  {name.ljust(width)}  {what}" for name, what in rows]
    return "\n".join([
        "usage: shardwright COMMAND ...", "", "commands:", *lines, "",
        "'shardwright COMMAND --help' lists a command's options; 'shardwright demo' shows it "
        "all on a small volume",
    ])  # fmt: skip


def subparser(parser: argparse.ArgumentParser, command: str) -> _Parser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices[command]
            assert isinstance(found, _Parser)
            return found
    raise AssertionError(command)
