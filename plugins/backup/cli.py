"""``hermes backup [FILE] [--with-secrets]`` and ``hermes restore FILE [--home DIR] [--force]``."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from hermes.cli import echo_json, pass_state

_JSON = click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")


@click.command("backup")
@click.argument("file", required=False, type=click.Path(dir_okay=True))
@click.option("--with-secrets", is_flag=True,
              help="Include .env (API keys). Keep such an archive as safe as the keys.")
@_JSON
@pass_state
def backup(state: Any, file: str | None, with_secrets: bool, as_json: bool) -> None:
    """Write one archive of this home: memory and its history, sessions, skills, SOUL.md,
    config.yaml (and .env only with --with-secrets). Safe while chats run."""
    from .archive import create_backup

    kernel = state.kernel()
    dest = Path(file) if file else Path(f"hermes-backup-{datetime.now():%Y%m%d-%H%M%S}.tar.gz")
    start = time.monotonic()
    manifest = create_backup(kernel, dest, with_secrets=with_secrets)
    if as_json:
        echo_json({"archive": str(dest.absolute()), "seconds": round(time.monotonic() - start, 3), **manifest})
        return
    files = manifest["files"]
    total = sum(f["bytes"] for f in files.values())
    click.echo(f"Wrote {dest} ({dest.stat().st_size / 1e6:,.1f} MB, {len(files)} files, "
               f"{total / 1e6:,.1f} MB before compression) from {kernel.home}"
               + ("" if with_secrets else "; .env not included (use --with-secrets)"))


@click.command("restore")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--home", "target", type=click.Path(file_okay=False),
              help="Restore into this directory (default: the Hermes home, ~/.hermes or $HERMES_HOME).")
@click.option("--force", is_flag=True, help="Restore over a home that is not empty.")
@_JSON
@pass_state
def restore(state: Any, file: str, target: str | None, force: bool, as_json: bool) -> None:
    """Check an archive from `hermes backup` (format, checksums, databases) and restore it
    into an empty or new home; never over a non-empty one without --force. Stop Hermes
    in that home first."""
    from .archive import restore_backup

    home = Path(target or state.home or os.environ.get("HERMES_HOME") or "~/.hermes").expanduser()
    start = time.monotonic()
    manifest = restore_backup(file, home, force=force)
    if as_json:
        echo_json({"home": str(home.absolute()), "seconds": round(time.monotonic() - start, 3), **manifest})
        return
    click.echo(f"Restored {len(manifest['files'])} files from {file} (made {manifest['created']} by Hermes "
               f"{manifest['hermes_version']}) into {home}")
