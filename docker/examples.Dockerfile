# Example image for the bundled CPU models: Debian with Python 3 and NumPy.
# No CONTEXT header: it matches every host (CPU, AMD, NVIDIA).
ARG BASE_DOCKER=madengine-base:bookworm
FROM ${BASE_DOCKER}
ENV PYTHONUNBUFFERED=1
