# One image for every kperf process (web, workers, beat, runner); the compose
# file picks the command. Kernel builds need the toolchain, the runner QEMU.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      git make gcc libc6-dev flex bison bc libelf-dev libssl-dev cpio ccache xz-utils bubblewrap \
      gcc-aarch64-linux-gnu qemu-system-x86 qemu-system-arm \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/kperf
COPY requirements.lock requirements-dev.txt ./
COPY runners ./runners
COPY kernel-builds ./kernel-builds
COPY service ./service
RUN pip install --no-cache-dir -c requirements.lock -e runners -e kernel-builds -e service

ENV KPERF_HOME=/var/lib/kperf
VOLUME /var/lib/kperf
EXPOSE 8000
CMD ["kperf-web", "--host", "0.0.0.0", "--port", "8000"]
