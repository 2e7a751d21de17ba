"""`python -m mascot.jobs.wrap EXIT_FILE -- COMMAND...`: run a job's command and write its exit status to EXIT_FILE
(atomically), so whoever follows the job learns how it ended even if it did not start it."""

from __future__ import annotations

import subprocess
import sys
import time

from mascot.train.progress import write_json


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m mascot.jobs.wrap EXIT_FILE -- COMMAND...", file=sys.stderr)
        return 2
    started = time.time()
    try:
        code = subprocess.call(argv[2:])
    except OSError as exc:
        print(f"could not start {argv[2]}: {exc}", file=sys.stderr)
        code = 127
    write_json(argv[0], {"returncode": code, "seconds": round(time.time() - started, 1)})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
