"""What `segos` shows on stderr while it works: messages, a progress bar per counted stage (count, rate,
elapsed time) and a per-stage time summary at the end. stdout stays clean for `--json`."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from ..progress import Event, StageDone, Tick


class Reporter:
    """A `progress` callable for the library (see `segos_pipeline.progress`), rendering to stderr."""

    def __init__(self, command: str, quiet: bool = False):
        self.command = command
        self.quiet = quiet
        self.stages: list[StageDone] = []
        self._bar: Any = None
        self._bar_stage: str | None = None
        self._bar_t0 = 0.0
        self._bar_done = 0
        self._counter: str | None = None  # a counted stage without a known total: one rewritten line
        self._since = time.perf_counter()  # end of the previous stage: a first tick reports work done since

    def __call__(self, event: Event) -> None:
        if isinstance(event, Tick):
            self._tick(event)
            return
        if isinstance(event, StageDone):
            self._close_bar()
            self.stages.append(event)
            self._since = time.perf_counter()
            return
        if not self.quiet:
            self._close_bar()
            click.echo(f"[segos] {event}", err=True)

    def _tick(self, tick: Tick) -> None:
        if self.quiet:
            return
        if tick.total is None:
            self._count(tick)
            return
        if tick.stage != self._bar_stage:
            self._close_bar()
            self._bar_stage, self._bar_t0, self._bar_done = tick.stage, self._since, 0
            self._bar = click.progressbar(
                length=tick.total or 0,
                label=f"[segos] {tick.stage}",
                file=sys.stderr,
                show_pos=True,
                show_eta=False,
                item_show_func=self._rate,
            )
            self._bar.__enter__()
        self._bar.update(max(0, tick.done - self._bar_done), current_item=tick.done)
        self._bar_done = tick.done

    def _rate(self, done: int | None) -> str:
        elapsed = time.perf_counter() - self._bar_t0
        if not done or elapsed <= 0:
            return f"{elapsed:.0f}s"
        return f"{done / elapsed:,.0f}/s, {elapsed:.0f}s"

    def _count(self, tick: Tick) -> None:
        if tick.stage != self._counter:
            self._close_bar()
            self._counter, self._bar_t0 = tick.stage, self._since
        if sys.stderr.isatty():  # a log file gets the summary only, not one line per tick
            click.echo(f"\r[segos] {tick.stage}: {tick.done:,}  {self._rate(tick.done)}", err=True, nl=False)

    def _close_bar(self) -> None:
        if self._bar is None and self._counter is None:
            return
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar, self._bar_stage = None, None
        if self._counter is not None and sys.stderr.isatty():
            click.echo("", err=True)
        self._counter = None
        self._since = time.perf_counter()

    def add_timings(self, timings: dict[str, float], prefix: str = "") -> None:
        """Stages timed by the library and recorded in a manifest (`timings_s`)."""
        self.stages.extend(
            StageDone(prefix + name, float(sec)) for name, sec in timings.items() if name != "total"
        )

    def summary(self) -> None:
        """The per-stage times, one line each, and the total (stderr; nothing when quiet)."""
        self._close_bar()
        if self.quiet or not self.stages:
            return
        width = max(len(s.stage) for s in self.stages)
        click.echo(f"[segos] {self.command}: time by stage", err=True)
        for s in self.stages:
            detail = f"  {s.detail}" if s.detail else ""
            click.echo(f"[segos]   {s.stage:<{width}} {s.seconds:8.2f}s{detail}", err=True)
        total = sum(s.seconds for s in self.stages)
        click.echo(f"[segos]   {'total':<{width}} {total:8.2f}s", err=True)
