"""Ray and process plumbing: start or join Ray, reap a local instance, forward worker logs, process identity.

Floor 1: imports nothing from evr1, so every package (cache, tracking, train, eval, cli) may use it.
"""

from evr1.cluster.processes import peak_rss_mb, pid_alive, same_process, started

__all__ = ["peak_rss_mb", "pid_alive", "same_process", "started"]
