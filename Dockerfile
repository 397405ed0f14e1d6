# GPU worker image: joins a Ray cluster and runs what evr1 puts on GPU nodes: the training actors
# (FSDP2), vLLM rollouts and eval engines, frame-cache decoding. Its dependency set is
# constraints/gpu-worker.txt, the same file CI installs evr1 under, so the code that runs here is the
# code the tests ran (transformers 5.19, the newest vLLM 0.32 allows). The Prefect flow process runs
# elsewhere (Dockerfile.orchestration) and never imports vllm: vLLM and Prefect 3.8 disagree on fastapi.
#   docker build -t evr1-gpu .
#   docker run --rm --gpus all evr1-gpu python -m evr1.cli.smoke          # imports, CUDA, model families
#   docker run --gpus all --shm-size=16g --network host evr1-gpu ray start --address=<head>:6379 --block
# torch 2.13.0 from PyPI is built for CUDA 13.0: the base image's toolkit matches it (flash-attn
# compiles against both); the host driver must support CUDA 13 (R580 or newer).
FROM nvidia/cuda:13.0.0-cudnn-devel-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    TOKENIZERS_PARALLELISM=false

RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-dev python3.11-venv python3-pip git ffmpeg build-essential ninja-build \
        bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && ln -sf /usr/bin/python3.11 /usr/local/bin/python

RUN python -m venv /opt/evr1 && /opt/evr1/bin/pip install --upgrade pip setuptools wheel packaging
ENV PATH=/opt/evr1/bin:$PATH

WORKDIR /opt/evr1/src
COPY constraints/gpu-worker.txt constraints/gpu-worker.txt
# Every pinned package of the image (vllm, torch's CUDA build, transformers, ray, lance, av, cramjam, …)
# as one resolution; flash-attn (sdist only) afterwards, compiled against the installed torch.
RUN grep -v '^flash-attn' constraints/gpu-worker.txt > /tmp/image-requirements.txt \
    && pip install -r /tmp/image-requirements.txt \
    && MAX_JOBS=8 pip install --no-build-isolation -c constraints/gpu-worker.txt flash-attn

COPY pyproject.toml README.md ./
COPY evr1 ./evr1
COPY tasks ./tasks
COPY flows ./flows
COPY conf ./conf
# evr1 itself without its flow-side dependencies (prefect, the full mlflow): they are not used here.
RUN pip install --no-deps -e . && python -m evr1.cli.smoke --no-cuda

CMD ["ray", "start", "--head", "--block"]
