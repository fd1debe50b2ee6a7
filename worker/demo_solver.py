"""The demo solver `jobforge dev` registers for type `demo`.

Called as `demo_solver --params '{"n": 10}'`; prints `{"n": 10, "sum_of_squares": 385}`.
`{"fail": true}` makes it exit 3, to show a failed attempt; `{"sleep_s": 5}` makes it take
that long first, to show a running job (and, on the one-core dev worker, one waiting
behind it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    """Parse --params, print the result as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="{}")
    params = json.loads(parser.parse_args().params)
    time.sleep(float(params.get("sleep_s", 0)))
    if params.get("fail"):
        sys.stderr.write("demo solver asked to fail\n")
        return 3
    n = int(params.get("n", 10))
    sys.stdout.write(json.dumps({"n": n, "sum_of_squares": sum(i * i for i in range(n + 1))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
