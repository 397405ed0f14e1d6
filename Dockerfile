# GPU worker image: joins a Ray cluster and runs the training actors and vLLM rollouts.
# vLLM pins fastapi/torch/transformers differently from Prefect, so this image is the GPU side only;
# the Prefect flow process runs elsewhere (the orchestration environment) and never imports vllm.
#   docker build -t evr1-gpu .
#   docker run --gpus all --shm-size=16g evr1-gpu ray start --address=<head>:6379 --block
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    TOKENIZERS_PARALLELISM=false

RUN apt-get update && apt-get install -y --no-install-recommends \
        python3.11 python3.11-dev python3.11-venv python3-pip git ffmpeg build-essential ninja-build \
    && rm -rf /var/lib/apt/lists/* \
    && ln -sf /usr/bin/python3.11 /usr/local/bin/python

RUN python -m venv /opt/evr1 && /opt/evr1/bin/pip install --upgrade pip setuptools wheel packaging
ENV PATH=/opt/evr1/bin:$PATH

WORKDIR /opt/evr1/src
COPY pyproject.toml README.md ./
COPY evr1 ./evr1
COPY tasks ./tasks
COPY flows ./flows
COPY conf ./conf

# The CUDA build of torch from PyPI first, then vLLM (which brings its own compatible transformers),
# then evr1 itself without re-resolving torch. flash-attn compiles against the installed torch.
RUN pip install "vllm>=0.32,<0.33" \
    && pip install --no-deps -e . \
    && pip install pylance "pyarrow>=25,<26" "av>=18.1,<19" "ray[default]>=2.60,<2.61" "mlflow-skinny>=3.17,<3.18" \
        pydantic jinja2 pyyaml typer rich rouge-score math-verify jiwer psutil \
    && MAX_JOBS=8 pip install --no-build-isolation "flash-attn>=2.8"

CMD ["ray", "start", "--head", "--block"]
