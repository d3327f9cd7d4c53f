# One image, three processes: kubegang-operator, kubegang-extender, kubegang-agent (pick with `command`).
#
# Base pinned by tag: python:3.11-slim-bookworm. Pin it by digest in your registry mirror
# (python:3.11-slim-bookworm@sha256:...) — the digest could not be resolved where this file was written
# (no registry access for images), so it is not invented here.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtual environment with kubegang and its dependencies (binary wheels only) -----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/kubegang
COPY pyproject.toml README.md ./
COPY kubegang/ kubegang/
COPY operator/ operator/
COPY extender/ extender/
COPY agent/ agent/
# --only-binary: nothing is compiled, so the build stage needs no compiler either.
RUN /opt/kubegang/bin/pip install --only-binary=:all: . \
 && /opt/kubegang/bin/pip uninstall -y pip setuptools wheel \
 && find /opt/kubegang -name '__pycache__' -prune -exec rm -rf {} + \
 && for p in kubegang-operator kubegang-extender kubegang-agent; do /opt/kubegang/bin/$p --help >/dev/null; done

# --- final: the interpreter and the virtual environment, nothing else --------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kubegang" \
      org.opencontainers.image.description="Gang scheduling, topology-aware placement and GPU quotas for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# pip and setuptools of the base image are not needed at run time.
RUN python -m pip uninstall -y pip setuptools wheel 2>/dev/null; \
    groupadd --system --gid 10001 kubegang \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kubegang
COPY --from=build /opt/kubegang /opt/kubegang
ENV PATH=/opt/kubegang/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Numeric, so runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT []
CMD ["kubegang-operator", "--help"]
