# syntax=docker/dockerfile:1
# The Jobwarden image: one image runs the operator ("jobwarden operator") and
# the workers ("jobwarden worker"), and the console ("jobwarden console", the
# console extra). Application images extend it with their
# job code (docs/kubernetes.md, "Your application image").
#
#   docker build -t jobwarden:0.1.0 .

ARG PYTHON_VERSION=3.11

# ---- build: every wheel the runtime needs, the project's own included --------
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies ship as binary wheels (psycopg[binary] bundles libpq), so this
# stage needs no compiler; anything that did would be built here, never below.
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --wheel-dir /wheels ".[operator,console]"

# ---- runtime: the wheels installed, nothing else -----------------------------
FROM python:${PYTHON_VERSION}-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/jobwarden
RUN groupadd --system --gid 10001 jobwarden \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/jobwarden \
        --create-home --shell /usr/sbin/nologin jobwarden
# Installed from the build stage's wheels only (--no-index): the runtime layer
# never reaches a package index and never compiles anything.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels "jobwarden[operator,console]" \
 && jobwarden --help > /dev/null
WORKDIR /app
# Numeric so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
EXPOSE 8080
# Exec form: jobwarden is PID 1 and receives SIGTERM itself, so a worker drains
# (stops claiming, finishes what it runs) before the pod goes away. No
# HEALTHCHECK: Kubernetes probes /healthz and /readyz instead.
ENTRYPOINT ["jobwarden"]
CMD ["worker"]
