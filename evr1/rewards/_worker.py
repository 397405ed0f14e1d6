"""The reward helper process: `python -m evr1.rewards._worker`, a clean interpreter of its own.

Why a module entry point and not multiprocessing's spawn: spawn re-imports the caller's main
module in the child, which re-runs a script without `if __name__ == "__main__"` and fails outright
for `python -` (standard input) or a notebook. Here the child imports only evr1 and whatever
module the called function lives in.

Protocol: pickled messages over the child's stdin (requests) and a private duplicate of its
stdout (replies); fd 1 itself is pointed at stderr, so a library that prints cannot corrupt the
channel. The child exits when its stdin closes (its parent died or stopped it).
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection

from evr1.rewards.timeouts import serve


def main() -> None:
    replies = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(Connection(0, writable=False), replies)


if __name__ == "__main__":
    main()
