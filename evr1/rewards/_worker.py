"""The reward helper process: `python -m evr1.rewards._worker`, a clean interpreter of its own.

Why a module entry point and not multiprocessing's spawn: spawn re-imports the caller's main
module in the child, which re-runs a script without `if __name__ == "__main__"` and fails outright
for `python -` (standard input) or a notebook. Here the child imports only evr1 and whatever
module the called function lives in.

Protocol: pickled messages over the child's stdin (requests) and a private duplicate of its
stdout (replies); fd 1 itself is pointed at stderr, so a library that prints cannot corrupt the
channel. The child exits when its stdin closes (its parent died or stopped it). With the argument `pool` it
is a batch pool worker (`batch.serve_pool`), else the time-limit helper (`timeouts.serve`).
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection


def main() -> None:
    replies = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if sys.argv[1:] == ["pool"]:  # a batch pool worker (evr1.rewards.batch)
        from evr1.rewards.batch import serve_pool

        serve_pool(Connection(0, writable=False), replies)
    else:  # the time-limit helper (evr1.rewards.timeouts)
        from evr1.rewards.timeouts import serve

        serve(Connection(0, writable=False), replies)


if __name__ == "__main__":
    main()
