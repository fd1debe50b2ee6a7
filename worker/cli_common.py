"""What the `jobforge` command modules share (worker/cli.py, worker/cli_scheduling.py): the
help style, the exit-code scheme, the one-line errors and the REST client (docs/cli.md)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from worker.hub_client import HubClient, HubError, HubSettings

T = TypeVar("T")
# How often a command that follows a stream looks up from it (for a Ctrl-C).
INTERRUPT_POLL_S = 0.25


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:  # noqa: ARG002 - Typer's signature
        return None

    def _usage_display_name(self) -> str:
        return self.display_name_raw if self.required else f"[{self.display_name_raw}]"


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:  # noqa: ARG002 - Typer's signature
        if self.is_flag or self.count:
            return None
        return self.metavar or (self.name or "value").upper()


def _plain(params: list[Any]) -> list[Any]:
    # Typer labels every value with its Python type (`<str>`, `<bool>` even for --help)
    # and wraps required arguments in braces; show metavars instead.
    for param in params:
        if isinstance(param, TyperArgument) and not isinstance(param, _Argument):
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and not isinstance(param, _Option):
            param.__class__ = _Option
    return params


# Click's UsageError (a bad option, argument or value), which Typer vendors without
# exporting it: the base of the BadParameter it does export.
USAGE_ERROR: type[Any] = typer.BadParameter.__mro__[1]
assert USAGE_ERROR.__name__ == "UsageError", USAGE_ERROR


class CliCommand(TyperCommand):
    """A command whose help names values by metavar (`--params JSON`), and whose bad
    option or argument is one line on stderr (exit 2), as every other error."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            parsed: list[str] = super().parse_args(ctx, args)
        except USAGE_ERROR as err:
            fail(err.format_message(), 2)
        return parsed


class CliGroup(TyperGroup):
    """The command group, with the same help style, and the same one line (exit 2) for
    an unknown command or option."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            parsed: list[str] = super().parse_args(ctx, args)
        except USAGE_ERROR as err:
            fail(f"{err.format_message()} ({ctx.command_path} --help lists them)", 2)
        return parsed

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except USAGE_ERROR as err:
            fail(f"{err.format_message()} ({ctx.command_path} --help lists them)", 2)


# One scheme for every command (docs/cli.md); an error is one line on stderr.
EXIT_CODES = (
    "Exit codes: 0 done; 1 the API refused the request (HTTP 4xx or 5xx: 404 unknown, "
    "409 conflict, 422 a bad value, named) or could not be reached; 2 a bad option, "
    "argument or setting, refused before any call."
)


def sub_app(help_text: str) -> typer.Typer:
    """A `jobforge` sub-command group (`jobforge pool …`): the shared help and exit codes."""
    return typer.Typer(cls=CliGroup, no_args_is_help=True, help=help_text, epilog=EXIT_CODES)


def exit_with(code: int) -> NoReturn:
    """End a command that speaks to the API only, with exit status `code`."""
    raise typer.Exit(code)


def exit_process(code: int) -> NoReturn:
    """End a command that ran a Temporal client or worker (`api`, `worker`, `agent`,
    `setup`, `dev`): at once, with exit status `code`. Short-lived Temporal clients can
    crash at interpreter exit (sdk-python#300)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(message: str, code: int = 1, *, process: bool = False) -> NoReturn:
    """One line on stderr naming what to fix, then exit `code` (`process`: as
    exit_process)."""
    typer.echo(f"error: {message}", err=True)
    if process:
        exit_process(code)
    exit_with(code)


@contextlib.contextmanager
def settings_or_exit(what: str) -> Iterator[None]:
    """Settings read inside the block; a bad one is one line naming it, exit 2."""
    try:
        yield
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        fail(f"bad {what} setting: {where}: {first['msg']}", 2)


@contextlib.contextmanager
def api_client(options: Mapping[str, str] | None = None) -> Iterator[HubClient]:
    """A client from HUB_URL and FORGE_INGEST_SECRET; a failed call is one line, exit 1.
    `options` maps the API's field names to the options that set them, for the line."""
    try:
        with settings_or_exit("API"):
            settings = HubSettings()
        with HubClient(settings) as api:
            yield api
    except HubError as err:
        option = (options or {}).get(err.field or "")
        fail(f"{err} (set by {option})" if option else str(err))


# Every read command takes it (docs/cli.md, "Command pattern").
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the API's answer as JSON (one document), for jq.")
]


def print_json(document: Any) -> None:
    """One JSON document on stdout: the API's answer as it came."""
    typer.echo(json.dumps(document, indent=2))


def print_fields(console: Console, rows: Iterable[tuple[str, str | Text]]) -> None:
    """`Name         value` lines, the name in bold."""
    for name, value in rows:
        console.print(Text.assemble((f"{name:<13}", "bold"), value), soft_wrap=True)


def interruptible(items: Iterable[T]) -> Iterator[T]:
    """`items` (a stream that blocks between its items), read in a daemon thread and
    handed over through a queue that this thread waits on in turns of INTERRUPT_POLL_S.

    Only the main thread takes a Ctrl-C, and a SIGINT that lands just before a blocking
    socket read is seen only when the read returns: an SSE stream's next event or
    keep-alive, up to 15 s later. Waiting here, it is seen within a turn. An error of
    the reading is raised here; the caller ends the process on Ctrl-C (`exit_process`),
    which ends the thread too."""
    handed: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1000)
    end = object()

    def read() -> None:
        try:
            for item in items:
                handed.put((True, item))
        except BaseException as err:  # handed over, raised in the caller
            handed.put((False, err))
        else:
            handed.put((True, end))

    threading.Thread(target=read, name="stream", daemon=True).start()
    while True:
        try:
            ok, value = handed.get(timeout=INTERRUPT_POLL_S)
        except queue.Empty:
            continue
        if not ok:
            raise value
        if value is end:
            return
        yield value
