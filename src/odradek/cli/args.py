"""What every `odradek` command parses with: the one-line-error parser, the argument types
(each refuses a bad value with argparse's ArgumentTypeError, so the user sees one
`odradek: error:` line), the --watch option, and UserError, the error a command raises for
anything the operator can fix."""
from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, NoReturn

from odradek.admin.consumer_group_command import ResetTarget
from odradek.cli.output import check_format, watch


class UserError(Exception):
    """Anything the operator can fix; printed as one line without a traceback."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default where it has a meaningful one (not None, False or [])
    and its help does not already name it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (default in (None, False, [], argparse.SUPPRESS) or "default" in help_text
                or not (action.option_strings or action.nargs in ("?", "*"))):
            return help_text
        return f"{help_text} (default: %(default)s)".lstrip()


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._arg_strings = list(args) if args is not None else None  # for error()
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """One line instead of argparse's usage block, naming the subcommand and its --help.
        A flag this command does not know is named before any argument it misses (argparse
        checks required arguments first, so `up --bogus` would complain of --data-dir)."""
        unknown = self.unknown_options() if message.startswith("the following arguments are required") else []
        if unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}"
        elif message == "one of the arguments --topic NAME is required":  # add_topic_argument's pair
            message = "give the topic: NAME or --topic NAME"
        sub = self.prog.partition(" ")[2]
        where = f"{sub}: " if sub else ""
        self.exit(2, f"odradek: error: {where}{message} (see `{self.prog} --help`)\n")

    def unknown_options(self) -> list[str]:
        """The flags among this parser's arguments that none of its options starts with."""
        known = [s for a in self._actions for s in a.option_strings]
        return [arg for arg in getattr(self, "_arg_strings", None) or []
                if arg.startswith("--") and arg != "--"
                and not any(k.startswith(arg.partition("=")[0]) for k in known)]



def hostport_arg(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def zk_connect_arg(value: str) -> str:
    """A ZooKeeper connect string, HOST:PORT[,HOST:PORT...][/chroot], with ports in range."""
    hosts, _, chroot = value.partition("/")
    for entry in hosts.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not host or not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...][/chroot] with ports 1-65535, "
                                             f"got {value!r}")
    return value


def bootstrap_list_arg(value: str) -> str:
    """HOST:PORT[,HOST:PORT...], each checked as hostport_arg checks one."""
    for entry in value.split(","):
        hostport_arg(entry.strip())
    return value


def directory_arg(value: str) -> Path:
    """A data directory: it may not exist yet, but it may not be a file."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} exists and is not a directory (give a directory path)")
    return path


def offset_start_arg(value: str) -> str | int:
    """`consume --offset`: beginning, end, or an offset N (negative: N before the end, as kcat -o)."""
    if value in ("beginning", "end"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected beginning, end or an offset, got {value!r}") from None


def record_format_arg(value: str) -> str:

    try:
        return check_format(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds_arg(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value!r}")
    return seconds


def positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def port_or_zero_arg(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {value!r}")
    return int(value)


def keyvalue_arg(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def nonnegative_int(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected an offset (0 or more), got {value!r}")
    return int(value)


def timestamp_ms_arg(value: str) -> int:
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)  # naive: local time, as Kafka's tool
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time such as 2026-01-31T12:00:00, "
                                         f"got {value!r}") from None


def reset_to_arg(kind: str, parse: Callable[[str], int]) -> Callable[[str], ResetTarget]:
    def convert(value: str) -> ResetTarget:
        try:
            return ResetTarget(kind, parse(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    return convert


def topic_partitions_arg(value: str) -> tuple[str, list[int] | None]:
    """`T` (every partition) or `T:0,2` (Kafka's reset-offsets --topic syntax)."""
    topic, sep, parts = value.partition(":")
    if not topic or (sep and not all(p.isdigit() for p in parts.split(","))):
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P[,P...], got {value!r}")
    return topic, [int(p) for p in parts.split(",")] if sep else None



def add_watch_option(parser: argparse.ArgumentParser, until: str = "Ctrl-C") -> None:
    parser.add_argument("--watch", type=seconds_arg, nargs="?", const=2.0, metavar="S",
                        help=f"redraw every S seconds (2 if not given) until {until}")



def show_or_watch(render: Callable[[], str], watch_s: float | None) -> None:
    """Print ``render()`` once, or with --watch redraw it until Ctrl-C."""

    if watch_s is None:
        print(render())
    else:
        watch(render, watch_s)


def add_topic_argument(parser: argparse.ArgumentParser, kafka_tool: str = "kafka-topics.sh") -> None:
    """The one topic a command acts on: NAME, or --topic NAME as Kafka's ``kafka_tool`` spells it."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="NAME", help=f"the same as NAME ({kafka_tool}'s spelling)")
    which.add_argument("name", nargs="?", metavar="NAME", help="the topic")


def topic_of(args: argparse.Namespace) -> str:
    """The topic of a command given add_topic_argument (argparse took exactly one of the two);
    both args.name and args.topic hold it afterwards."""
    name = str(args.name if args.name is not None else args.topic)
    args.name = args.topic = name
    return name
