# syntax=docker/dockerfile:1
# pykueue container image: `pykueue serve` (webhook, scheduler extender, status API, metrics
# over HTTPS on 9443, and the controllers). Build from the repository root:
#   docker build -t pykueue:0.1.0 .
# Base: python:3.11-slim-bookworm pinned by digest (linux/amd64 + arm64 index). To move to a
# newer patch release: `docker buildx imagetools inspect python:3.11-slim-bookworm` and replace
# the digest in BOTH stages (tests/unit/test_dockerfile.py checks they match).

# ---- stage 1: build the wheels (pykueue and its dependencies) --------------------------------
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91 AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --wheel-dir /wheels .

# ---- stage 2: runtime ---------------------------------------------------------------------------
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91 AS runtime
LABEL org.opencontainers.image.title="pykueue" \
      org.opencontainers.image.description="GPU job queueing with fair-share quotas for Kubernetes (Kueue v1beta2 API)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# Install from the wheels only (no index): pip compiles the .pyc files now, so nothing is
# written under the read-only root filesystem at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels pykueue \
    && groupadd --system --gid 65532 pykueue \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin pykueue
# Settings (app/config.py). The certificate files come from a Secret mounted at
# /etc/pykueue/certs (tls.crt, tls.key, ca.crt: `kubectl create secret generic` from
# certs/out, or cert-manager's Certificate in manifests/overlays/cert-manager).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    PYKUEUE_SERVER__HOST=0.0.0.0 \
    PYKUEUE_SERVER__PORT=9443 \
    PYKUEUE_SERVER__CERT_FILE=/etc/pykueue/certs/tls.crt \
    PYKUEUE_SERVER__KEY_FILE=/etc/pykueue/certs/tls.key \
    PYKUEUE_SERVER__CA_FILE=/etc/pykueue/certs/ca.crt
WORKDIR /tmp
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["pykueue", "serve"]
