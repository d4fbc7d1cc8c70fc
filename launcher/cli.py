"""The ``reports-pipeline`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from launcher.system import AlreadyRunning, UpOptions, data_dir_lock, run_up
from pipeline.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reports-pipeline", description=__doc__)
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run the whole system on one machine")
    up.add_argument("--data-dir", type=Path, required=True,
                    help="where ClickHouse data, TLS files and the kubeconfig live")
    up.add_argument("--host", default="127.0.0.1", help="address the frontend listens on")
    up.add_argument("--port", type=int, default=0, help="frontend port (0: any free one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except ValueError as err:
        print(f"reports-pipeline: {err}", file=sys.stderr)
        return 2
    if args.command == "up":
        try:
            with data_dir_lock(args.data_dir):
                asyncio.run(run_up(settings, UpOptions(args.data_dir, args.host, args.port)))
        except AlreadyRunning as err:
            print(f"reports-pipeline: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
