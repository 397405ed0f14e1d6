"""evr1: reinforcement-learning post-training for video vision-language models.

The library computes; Prefect lives in `tasks/` and `flows/` only, so every stage is also a
plain function and an `evr1` command.
"""

__version__ = "0.1.0"
