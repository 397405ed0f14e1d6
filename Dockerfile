# GPU worker image: joins a Ray cluster and runs what evr1 puts on GPU nodes: the training actors
# (FSDP2), vLLM rollouts and eval engines, frame-cache decoding. Its dependency set is
# constraints/gpu-worker.txt, the same file CI installs evr1 under, so the code that runs here is the
# code the tests ran (transformers 5.19, the newest vLLM 0.32 allows). The Prefect flow process runs
# elsewhere (Dockerfile.orchestration) and never imports vllm: vLLM and Prefect 3.8 disagree on fastapi.
#   docker build -t evr1-gpu .                                        # flash-attn for sm_90 (H100/H200)
#   docker build --build-arg FLASH_ATTN_CUDA_ARCHS="80;90" -t evr1-gpu .   # A100 too (a longer build)
#   docker run --rm --gpus all evr1-gpu python -m evr1.cli.smoke          # imports, CUDA, model families
#   docker run --gpus all --shm-size=16g --network host evr1-gpu ray start --address=<head>:6379 --block
# torch 2.13.0 from PyPI is built for CUDA 13.0: the base image's toolkit matches it (flash-attn
# compiles against both); the host driver must support CUDA 13 (R580 or newer).
# `python tools/gpu_worker_resolve.py check` (tests/test_worker_image.py) runs pip's resolver for this
# image's platform and Python over the constraints: it fails on any conflict with the CUDA torch.
#
# Python: one CPython build in this image and the orchestration image (Ray refuses a driver whose Python
# differs at the patch level): uv's python-build-standalone release PYTHON_VERSION, installed by the
# same uv release in both. Change PYTHON_VERSION and UV_VERSION in both Dockerfiles together.
ARG UV_VERSION=0.13.9
ARG PYTHON_VERSION=3.11.18

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

# -- base: the CUDA toolkit, the pinned CPython and the venv ------------------------------------------
FROM nvidia/cuda:13.0.0-cudnn-devel-ubuntu22.04 AS base
ARG PYTHON_VERSION

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    TOKENIZERS_PARALLELISM=false \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed

RUN apt-get update && apt-get install -y --no-install-recommends \
        ca-certificates git ffmpeg build-essential ninja-build bubblewrap \
    && rm -rf /var/lib/apt/lists/*

COPY --from=uv /uv /usr/local/bin/uv
RUN uv python install ${PYTHON_VERSION} \
    && uv venv --seed --python ${PYTHON_VERSION} /opt/evr1 \
    && /opt/evr1/bin/python -c "import platform, sys; v = platform.python_version(); assert v == '${PYTHON_VERSION}', v" \
    && /opt/evr1/bin/pip install --upgrade pip setuptools wheel packaging
ENV PATH=/opt/evr1/bin:$PATH

WORKDIR /opt/evr1/src
COPY constraints/gpu-worker.txt constraints/gpu-worker.txt

# -- deps: every pinned package of the image (vllm, torch's CUDA build, transformers, ray, lance, av,
# cramjam, …) as one resolution; flash-attn (sdist only) comes from its own stage below.
FROM base AS deps
RUN grep -v '^flash-attn' constraints/gpu-worker.txt > /tmp/image-requirements.txt \
    && pip install -r /tmp/image-requirements.txt

# -- flash-attn: compiled once, into a wheel, against the installed torch, for the architectures
# FLASH_ATTN_CUDA_ARCHS names (90: H100/H200; "80;90" adds A100). Each nvcc job takes ~8-9 GB at 4
# nvcc threads: MAX_JOBS is the builder's available memory / 9 GB (at least 1, at most its CPUs) unless
# FLASH_ATTN_MAX_JOBS says otherwise. `sdpa` stays the configs' default attention until a GPU run has
# proven flash_attention_2 (conf/*.yaml `model.attn_implementation`).
FROM deps AS flash-attn
ARG FLASH_ATTN_CUDA_ARCHS=90
ARG FLASH_ATTN_MAX_JOBS=
RUN version=$(sed -n 's/^flash-attn==\([^ #]*\).*/\1/p' constraints/gpu-worker.txt) \
    && jobs=${FLASH_ATTN_MAX_JOBS:-$(awk '/MemAvailable/ {print int($2 / 1024 / 1024 / 9)}' /proc/meminfo)} \
    && jobs=$(( jobs < 1 ? 1 : jobs )) && jobs=$(( jobs > $(nproc) ? $(nproc) : jobs )) \
    && echo "flash-attn ${version}: archs ${FLASH_ATTN_CUDA_ARCHS}, MAX_JOBS=${jobs}" \
    && FLASH_ATTN_CUDA_ARCHS="${FLASH_ATTN_CUDA_ARCHS}" FLASH_ATTENTION_FORCE_BUILD=TRUE MAX_JOBS=${jobs} NVCC_THREADS=4 \
       pip wheel --no-build-isolation --no-deps -w /wheels "flash-attn==${version}"

# -- the image ----------------------------------------------------------------------------------------
FROM deps
COPY --from=flash-attn /wheels /tmp/wheels
# Imported here, so a broken build fails the image build rather than the first forward.
RUN pip install --no-deps /tmp/wheels/flash_attn-*.whl && rm -rf /tmp/wheels \
    && python -c "import flash_attn, flash_attn_2_cuda; print('flash-attn', flash_attn.__version__)"

COPY pyproject.toml README.md ./
COPY evr1 ./evr1
COPY tasks ./tasks
COPY flows ./flows
COPY conf ./conf
# evr1 itself without its flow-side dependencies (prefect, the full mlflow): they are not used here.
RUN pip install --no-deps -e . && python -m evr1.cli.smoke --no-cuda

CMD ["ray", "start", "--head", "--block"]
