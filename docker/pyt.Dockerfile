# CONTEXT {'gpu_vendor': 'CPU'}
# Image of the pyt_* models: the CPU build of PyTorch and Hugging Face transformers on the local base
# image. Build context: wheels/pyt/ (the models' "dockercontext"), filled by scripts/pyt-wheels.sh.
# Nothing is downloaded: pip installs from those wheels alone (--no-index), each checked against its
# hash in requirements.txt, run from its own wheel (the base image has no pip). --ignore-installed:
# the locked numpy goes to /usr/local beside Debian's, which pip cannot uninstall. The wheels stay in
# the first stage; the image gets only what was installed.
ARG BASE_DOCKER=madengine-base:bookworm
FROM ${BASE_DOCKER} AS install
COPY . /tmp/wheels/
RUN test -f /tmp/wheels/.complete || { echo "no wheels in the build context: run scripts/pyt-wheels.sh" >&2; exit 1; } \
 && pip_wheel=$(echo /tmp/wheels/pip-*.whl) \
 && python3 "$pip_wheel/pip" install --no-index --find-links /tmp/wheels --no-cache-dir \
      --require-hashes --ignore-installed --break-system-packages --root-user-action=ignore \
      --disable-pip-version-check --progress-bar off -r /tmp/wheels/requirements.txt

FROM ${BASE_DOCKER}
COPY --from=install /usr/local/ /usr/local/
# offline: nothing may be fetched from the Hugging Face Hub; caches in a folder any uid can write
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HOME=/tmp/huggingface
