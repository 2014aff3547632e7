# cacheroute-sidecar container image (Debian 12).
#
#   docker build -t cacheroute/cacheroute-sidecar:0.1.0 .
#   docker build --build-arg CR_WITH_CUDA=OFF ...   # no CUDA probe (no GPU info)
#
# The build stage installs the packages of scripts/deps.txt and builds with
# CMake as scripts/setup.sh does; the runtime stage holds the binaries and only the
# shared libraries they need, and runs as uid 65532. The runtime package list
# (CR_RUNTIME_PACKAGES) is checked against the binaries' `ldd` by
# helm/tests/check_image_libs.sh (ctest -L helm).
ARG DEBIAN_IMAGE=debian:12-slim

FROM ${DEBIAN_IMAGE} AS build
# ON: compile the CUDA probe. The sidecar dlopens libcuda at run time (the
# NVIDIA container runtime injects it); only cuda.h is needed to build, taken
# from Debian's non-free nvidia-cuda-dev package without installing it.
ARG CR_WITH_CUDA=ON
ARG DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/deps.txt scripts/
RUN ./scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
RUN set -eu; \
    if [ "$CR_WITH_CUDA" = ON ]; then \
      echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free' \
        > /etc/apt/sources.list.d/non-free.list; \
      apt-get update -q; \
      cd /tmp; \
      apt-get download -q nvidia-cuda-dev; \
      mkdir -p /opt/cuda; \
      dpkg-deb --fsys-tarfile nvidia-cuda-dev_*.deb | tar -x -C /opt/cuda ./usr/include/cuda.h; \
      rm -f nvidia-cuda-dev_*.deb /etc/apt/sources.list.d/non-free.list; \
      rm -rf /var/lib/apt/lists/*; \
    fi
COPY . .
RUN set -eu; \
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
      -DCR_WITH_CUDA="$CR_WITH_CUDA" -DCR_CUDA_INCLUDE_DIR=/opt/cuda/usr/include; \
    cmake --build build -j "$(nproc)" --target cacheroute-sidecar cacheroute; \
    install -D -m 0755 build/server/cacheroute-sidecar /out/usr/local/bin/cacheroute-sidecar; \
    install -D -m 0755 build/client/cacheroute /out/usr/local/bin/cacheroute

FROM ${DEBIAN_IMAGE} AS runtime
# cacheroute runtime packages: the Debian packages of the shared libraries the
# binaries link (their dependencies come along). Keep this on ONE line:
# helm/tests/check_image_libs.sh parses it.
ARG CR_RUNTIME_PACKAGES="libgrpc29 libprotobuf-c1 libmicrohttpd12 libjansson4 libssl3 libhiredis0.14 libzmq5 libc-ares2 libmsgpackc2 libyaml-0-2 libcjson1 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libbrotli1 libsasl2-2"
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends ${CR_RUNTIME_PACKAGES} \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && groupadd --system --gid 65532 cacheroute \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
         --shell /usr/sbin/nologin cacheroute
COPY --from=build /out/ /
# Fails the build if a library is missing, and smoke-tests the binary.
RUN ! ldd /usr/local/bin/cacheroute-sidecar /usr/local/bin/cacheroute | grep 'not found' \
    && cacheroute-sidecar --version
ARG CR_VERSION=0.1.0
LABEL org.opencontainers.image.title="cacheroute-sidecar" \
      org.opencontainers.image.description="cacheroute gRPC sidecar for LLM serving nodes" \
      org.opencontainers.image.version="${CR_VERSION}"
USER 65532:65532
# gRPC (--listen), Prometheus metrics (--metrics-listen), plaintext health
# for the kubelet (--health-listen, which the chart turns on with TLS) and
# the endpoint picker (--epp-listen, the chart's mode epp).
EXPOSE 50051 9090 8081 9002
ENTRYPOINT ["cacheroute-sidecar"]
