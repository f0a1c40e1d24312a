"""``python -m corpusforge.cli.server_main serve --store S``: the store's local server process (started by
corpusforge.server.client.start_in_background). It wires the server to the CLI whose commands it runs, so that
corpusforge.server (which the CLI imports to hand commands over) does not import the CLI."""

from __future__ import annotations

import sys
from pathlib import Path

from corpusforge.server.process import IDLE_SECONDS, LocalServer


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m corpusforge.cli.server_main")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS)
    args = parser.parse_args(argv)
    store_root = Path(args.store).resolve()
    from corpusforge.settings import configure_environment

    configure_environment(store_root)
    from corpusforge.cli import main as run_command

    return LocalServer(store_root, args.idle, run_command=run_command).run()


if __name__ == "__main__":
    sys.exit(main())
