"""Learning experiments: does RL through the pipeline lift a small model, and what limits it.

Research, not library: run from the repository root as modules (`python -m research.learning.run`),
import only evr1's public names, and nothing in evr1 imports them. `docs/learning.md` holds the
findings each script backs.
"""
