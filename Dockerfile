# syntax=docker/dockerfile:1
# The computedomain controller image. Dependencies come only from uv.lock, hash-checked; the
# runtime stage receives nothing but the virtualenv. The base is pinned by the digest of Docker
# Hub's python:3.11-slim-bookworm manifest list as recorded in August 2026 (`skopeo inspect --raw
# docker://docker.io/library/python:3.11-slim-bookworm` shows today's and its architectures); a
# newer base is a change here. Where Docker Hub cannot be reached, hack/image.sh builds FROM a
# stand-in pinned by its own digest instead.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# uv only turns the lock into a hashed requirements file; pip installs it.
RUN pip install --no-cache-dir uv==0.13.9
COPY pyproject.toml uv.lock ./
RUN uv export --quiet --frozen --no-dev --no-emit-project --format requirements-txt \
        -o /tmp/requirements.txt \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.txt
COPY README.md LICENSE ./
COPY computedomain ./computedomain
COPY crds ./crds
# The project itself, as a wheel, without touching the locked dependencies.
RUN uv build --wheel --out-dir /tmp/dist \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps /tmp/dist/computedomain-*.whl

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080 8081
# Exec form: SIGTERM reaches Python directly for the graceful shutdown.
ENTRYPOINT ["computedomain-controller"]
