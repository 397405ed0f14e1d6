"""`python -m evr1.cli.smoke`: does this environment run what evr1 puts on it? Imports, not a test suite.

Run in a freshly built image (the Dockerfiles do, at build time) or on a new GPU node: it imports the
engines, the frame cache's codec (and round-trips a block through it), each model family's
transformers class and processor, and — unless told not to — vLLM, flash-attn and a CUDA device.
Prints one JSON line of versions; exits non-zero naming the first thing missing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys


def check(cuda: bool = True, vllm: bool = True) -> dict[str, str]:
    """The versions found; raises naming what is missing or broken."""
    import numpy as np
    import torch
    import transformers

    import evr1.cache.codec as codec
    import evr1.engines.hf  # noqa: F401 - the CPU/GPU transformers engine
    import evr1.engines.vllm_engine  # noqa: F401 - imports vllm lazily, on construction
    from evr1.models.families import FAMILIES

    found = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    frames = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    payload, sizes = codec.encode_frames(frames)
    if not np.array_equal(codec.decode_frames(payload, sizes, frames.shape, "smoke"), frames):
        raise RuntimeError("evr1.cache.codec: a frame block did not round-trip")
    found["cramjam"] = importlib.import_module("cramjam").__version__
    for family in FAMILIES.values():
        getattr(transformers, family.model_class)  # AttributeError names the missing class
    if vllm:
        found["vllm"] = importlib.import_module("vllm").__version__
    if cuda:
        if not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA device visible to torch {torch.__version__} (built for CUDA {torch.version.cuda})")
        found["cuda"] = str(torch.version.cuda)
        found["gpu"] = torch.cuda.get_device_name(0)
        found["flash_attn"] = importlib.import_module("flash_attn").__version__
    return found


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-cuda", action="store_true", help="skip the GPU and flash-attn (e.g. during docker build)")
    p.add_argument("--no-vllm", action="store_true", help="skip vLLM (the orchestration image has none)")
    args = p.parse_args(argv)
    print(json.dumps(check(cuda=not args.no_cuda, vllm=not args.no_vllm)))


if __name__ == "__main__":
    main()
