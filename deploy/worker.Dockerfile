# GPU worker image: specfarm plus llama-server builds made by `farm build` (the image holds
# no build logic of its own). Build from the repository root:
#   docker build -f deploy/worker.Dockerfile --build-arg LLAMA_REF=b11434 \
#     --build-arg CUDA_ARCH=86 -t specfarm/worker:latest .
# A TurboQuant fork is one more build: --build-arg TURBOQUANT_REF=feature/turboquant-kv-cache
ARG CUDA_VERSION=12.6.3
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04

ARG LLAMA_REPO=https://github.com/ggml-org/llama.cpp
ARG LLAMA_REF=master
ARG TURBOQUANT_REPO=https://github.com/TheTom/llama-cpp-turboquant
ARG TURBOQUANT_REF=
ARG CUDA_ARCH=86;89;90

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv git cmake g++ ccache \
    bubblewrap libseccomp2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The same folders as compose.yaml and the systemd unit: data, cache (source builds,
# ccache, downloads), the operator's models read-only.
ENV FARM_DATA_DIR=/var/lib/specfarm \
    FARM_CACHE_DIR=/var/cache/specfarm \
    FARM_DOWNLOADS_DIR=/var/cache/specfarm/models \
    FARM_MODELS_DIR=/models \
    CUDA_DEVICE_ORDER=PCI_BUS_ID \
    PATH=/opt/specfarm/.venv/bin:$PATH

COPY pyproject.toml README.md /opt/specfarm/src/
COPY farm /opt/specfarm/src/farm
COPY workers /opt/specfarm/src/workers
COPY migrations /opt/specfarm/src/migrations
RUN python3 -m venv /opt/specfarm/.venv \
 && /opt/specfarm/.venv/bin/pip install --no-cache-dir /opt/specfarm/src

# The worker runs as an unprivileged user: a job's llama-server (and anything a build's
# code does) cannot write outside the farm's own directories. The video group opens the
# GPU's device files where the host gives them to that group; the NVIDIA container runtime
# usually makes /dev/nvidia* world-accessible. Unverified on a GPU node yet: see
# docs/deployment.md.
RUN useradd --system --uid 10001 --gid nogroup --groups video --home-dir /var/lib/specfarm \
      --create-home specfarm \
 && mkdir -p /opt/specfarm/image /var/cache/specfarm \
 && chown -R specfarm:nogroup /opt/specfarm/image /var/cache/specfarm /var/lib/specfarm
USER specfarm

# The image's own builds, outside the cache volume (which an upgraded image would not
# refresh): /opt/specfarm/image/builds/NAME/bin/llama-server, read-only in a container.
RUN FARM_CACHE_DIR=/opt/specfarm/image farm build master --source "${LLAMA_REPO}" \
    --ref "${LLAMA_REF}" --backend cuda --cuda-arch "${CUDA_ARCH}"
RUN if [ -n "${TURBOQUANT_REF}" ]; then \
      FARM_CACHE_DIR=/opt/specfarm/image farm build turboquant --source "${TURBOQUANT_REPO}" \
      --ref "${TURBOQUANT_REF}" --backend cuda --cuda-arch "${CUDA_ARCH}"; \
    fi

CMD ["farm", "worker", "--config", "/etc/specfarm/worker.yaml"]
