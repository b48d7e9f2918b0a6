# PYTHON_ARGCOMPLETE_OK  (argcomplete: `eval "$(odradek completion bash)"`)
"""main(): parse the command line, run the command's handler, and turn every failure into one
`odradek: error:` line and an exit status."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from confluent_kafka import KafkaException

from odradek.admin.admin_client import kafka_error_text
from odradek.admin.errors import AdminError, ClusterError
from odradek.cli.args import (
    UserError,
    directory_arg,
    hostport_arg,
    keyvalue_arg,
    nonnegative_int,
    positive_int,
    seconds_arg,
)
from odradek.cli.bootstrap import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, resolve_bootstrap
from odradek.cli.parser import build_parser, leaf_parser
from odradek.common.errors import os_error_text
from odradek.security.client_security import SecurityConfigError
from odradek.security.sasl import SaslAuthenticationError

# the names tests reach through this module (tests/cli/test_cli_bad_input.py)
__all__ = ["BOOTSTRAP_ENV", "DEFAULT_BOOTSTRAP", "INTERNAL_ERROR", "UserError", "directory_arg", "hostport_arg",
           "keyvalue_arg", "nonnegative_int", "positive_int", "resolve_bootstrap", "seconds_arg", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    _autocomplete(parser)
    args, extras = parser.parse_known_args(argv)
    if extras:  # named by the command that got them, pointing to its own --help
        leaf_parser(parser, _command_path(args)).error(f"unrecognized arguments: {' '.join(extras)}")
    try:
        if getattr(args, "resolve_bootstrap", False):
            resolve_bootstrap(args)
        args.func(args)
    except (UserError, AdminError, ClusterError) as exc:
        message = str(exc) or type(exc).__name__
        if message.startswith("cannot reach") and "bootstrap-server" not in message and "ZooKeeper" not in message:
            message += f" (is the cluster up? give --bootstrap-server, --data-dir or ${BOOTSTRAP_ENV})"
        return _error(message)
    except KafkaException as exc:  # a client call the command did not expect to fail
        return _error(f"{kafka_error_text(exc)}")
    except SaslAuthenticationError as exc:  # odradek's own connection refused by a SASL listener
        return _error(f"authentication failed: {exc.message} (check --command-config)")
    except SecurityConfigError as exc:
        return _error(f"--command-config: {exc}")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `odradek consume ... | head`
        return 0
    except TimeoutError:  # a future not done in time (concurrent.futures.TimeoutError is this one)
        return _error(f"odradek {' '.join(_command_path(args))}: no answer in time (is the cluster up and "
                      f"reachable? a longer --timeout-s may help)")
    except OSError as exc:  # a path that is a file, a directory not writable, a port taken
        return _error(os_error_text(exc))
    except Exception as exc:  # noqa: BLE001 - a bug; still one line (ODRADEK_TRACEBACK=1 for the whole)
        if os.environ.get("ODRADEK_TRACEBACK"):
            raise
        return _error(f"{INTERNAL_ERROR} {type(exc).__name__}: {exc} (please report it; "
                      f"ODRADEK_TRACEBACK=1 shows where)")
    return 0


def _command_path(args: argparse.Namespace) -> list[str]:
    """The subcommand names the user typed, e.g. ['topics', 'describe']."""
    return [v for k, v in vars(args).items() if k == "command" or k.endswith("_command")]


#: How main() words an exception no command expected: tests look for it as for a traceback.
INTERNAL_ERROR = "internal error:"


def _error(message: str) -> int:
    """One `odradek: error:` line; more lines (e.g. the tail of a broker log) follow as context."""
    lines = message.splitlines() or [message]
    print(f"odradek: error: {lines[0]}", file=sys.stderr)
    if len(lines) > 1:
        print("\n".join(lines[1:]), file=sys.stderr)
    return 1


def _autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete sets _ARGCOMPLETE) and exit."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)
