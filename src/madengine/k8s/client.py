"""The calls a cluster run makes, through the official ``kubernetes`` Python client (the ``k8s``
extra, imported here only: ``madengine --help`` never loads it).

Objects go in and come out as plain dicts (the API's JSON): nothing here depends on the client's
model classes, and what the API server said is what the caller reads. Every failure of the API is
a :class:`~madengine.core.errors.ServiceError` naming the object and the server's one-line reason.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator, Mapping

from madengine.core.errors import ServiceError
from madengine.core.redact import redact
from madengine.k8s.kubeconfig import ClusterTarget

#: kind → (API group object, the snake-case suffix of its namespaced methods)
_KINDS = {"ConfigMap": ("core", "namespaced_config_map"), "Secret": ("core", "namespaced_secret"),
          "Service": ("core", "namespaced_service"), "Job": ("batch", "namespaced_job")}
#: how long a replaced Job may take to go (its pods are stopped first)
JOB_GONE_WAIT = 120.0


class Missing(ServiceError):
    """The API server has no such object (404)."""


class Expired(ServiceError):
    """A watch's resource version is too old (410): list again."""


def _message(exc: Any) -> str:
    """The API server's reason: its Status message when there is one, else the HTTP reason."""
    body = getattr(exc, "body", None)
    try:
        data = json.loads(body) if body else {}
    except (TypeError, ValueError):
        data = {}
    message = data.get("message") if isinstance(data, dict) else None
    return redact(str(message or getattr(exc, "reason", "") or exc)).splitlines()[0][:400] if (message or str(exc)) \
        else "no answer"


class KubeApi:
    """One cluster's API, as a run uses it."""

    def __init__(self, target: ClusterTarget) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise ServiceError("--executor k8s needs the official Kubernetes client, which is not installed",
                               path="--executor", hint="pip install 'madengine[k8s]'") from None

        try:
            if target.in_cluster:
                config.load_incluster_config()
                self.api_client = client.ApiClient()
            else:
                self.api_client = config.new_client_from_config(config_file=target.kubeconfig, context=target.context)
        except Exception as exc:  # the client's own errors: a kubeconfig it cannot use
            raise ServiceError(f"cannot use the cluster of context '{target.context}': {redact(str(exc))[:300]}",
                               path=target.kubeconfig or "in-cluster", field="k8s.context") from None
        self.core = client.CoreV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.target = target
        self.server = self.api_client.configuration.host

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, what: str, method: Any, *args: Any, raw: bool = False, **kwargs: Any) -> Any:
        """One API call; its JSON as a dict, or (``raw``) the response to read."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs["_preload_content"] = False
        try:
            response = method(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise Missing(f"{what}: not found", path=self.server) from None
            raise ServiceError(f"{what}: the API server answered {exc.status}: {_message(exc)}",
                               path=self.server) from None
        except (HTTPError, OSError) as exc:
            raise ServiceError(f"{what}: cannot reach the API server ({type(exc).__name__}: "
                               f"{redact(str(exc))[:200]})", path=self.server, hint="check k8s.kubeconfig/context") \
                from None
        if raw:
            return response
        data = response.data
        return json.loads(data) if data else {}

    def _method(self, verb: str, kind: str) -> Any:
        group, suffix = _KINDS[kind]
        return getattr(self.core if group == "core" else self.batch, f"{verb}_{suffix}")

    def read(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return self._call(f"read {kind} {name}", self._method("read", kind), name, namespace)
        except Missing:
            return None

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self._call(f"create {obj['kind']} {meta['name']}", self._method("create", obj["kind"]),
                          meta["namespace"], obj)

    def replace(self, obj: Mapping[str, Any], resource_version: str = "") -> dict[str, Any]:
        meta = dict(obj["metadata"])
        if resource_version:
            meta["resourceVersion"] = resource_version
        return self._call(f"replace {obj['kind']} {meta['name']}", self._method("replace", obj["kind"]),
                          meta["name"], meta["namespace"], {**obj, "metadata": meta})

    def delete(self, kind: str, name: str, namespace: str, propagation: str = "Foreground") -> bool:
        """Delete an object (its dependents first, with Foreground); False when it was not there."""
        try:
            self._call(f"delete {kind} {name}", self._method("delete", kind), name, namespace,
                       body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation})
            return True
        except Missing:
            return False

    def wait_gone(self, kind: str, name: str, namespace: str, seconds: float, poll: float = 0.5) -> bool:
        deadline = time.monotonic() + seconds
        while self.read(kind, name, namespace) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll)
        return True

    def apply(self, obj: Mapping[str, Any]) -> str:
        """Create, or replace what a run before left of the same name: 'created' or 'replaced'.
        A Job cannot be changed once made: the old one (and its pods) goes first."""
        kind, meta = obj["kind"], obj["metadata"]
        current = self.read(kind, meta["name"], meta["namespace"])
        if current is None:
            self.create(obj)
            return "created"
        if kind == "Job":
            self.delete(kind, meta["name"], meta["namespace"])
            if not self.wait_gone(kind, meta["name"], meta["namespace"], JOB_GONE_WAIT):
                raise ServiceError(f"the Job {meta['name']} of an earlier run did not go within {JOB_GONE_WAIT:.0f} s",
                                   path=self.server, hint=f"kubectl delete job {meta['name']} -n {meta['namespace']}")
            self.create(obj)
        else:  # a Service's update must name the version it replaces
            self.replace(obj, str(current.get("metadata", {}).get("resourceVersion", "")))
        return "replaced"

    # -- pods ----------------------------------------------------------------------------------
    def list_pods(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        data = self._call("list pods", self.core.list_namespaced_pod, namespace, label_selector=selector)
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def watch_pods(self, namespace: str, selector: str, resource_version: str, seconds: int) \
            -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, pod) as they happen, for at most ``seconds``."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        stream = watch.Watch()
        try:
            for event in stream.stream(self.core.list_namespaced_pod, namespace, label_selector=selector,
                                       resource_version=resource_version, timeout_seconds=seconds,
                                       allow_watch_bookmarks=False, deserialize=False):
                if event.get("type") == "ERROR":  # the client's own handling of it needs deserialize
                    raise Expired(f"watch pods: {(event.get('object') or {}).get('message', 'expired')}",
                                  path=self.server)
                yield str(event.get("type")), event.get("object") or {}
        except KeyError:  # an ERROR event, as the client reads it without deserializing
            raise Expired("watch pods: expired", path=self.server) from None
        except ApiException as exc:
            if exc.status == 410:
                raise Expired("watch pods: expired", path=self.server) from None
            raise ServiceError(f"watch pods: the API server answered {exc.status}: {_message(exc)}",
                               path=self.server) from None
        except (HTTPError, OSError) as exc:
            raise ServiceError(f"watch pods: the connection broke ({type(exc).__name__})", path=self.server) from None
        finally:
            stream.stop()

    def log_stream(self, namespace: str, pod: str) -> Any:
        """The pod's log as it is written (a urllib3 response to read in chunks; it ends with the container)."""
        return self._call(f"log of pod {pod}", self.core.read_namespaced_pod_log, pod, namespace, follow=True,
                          raw=True)

    def log_text(self, namespace: str, pod: str) -> bytes:
        response = self._call(f"log of pod {pod}", self.core.read_namespaced_pod_log, pod, namespace,
                              raw=True)
        try:
            return response.data or b""
        finally:
            response.release_conn()

    def check_access(self, namespace: str, selector: str) -> None:
        """The API server answers and lets this user list pods of ``namespace`` (what every run
        does first): a ServiceError (exit 2) before anything is built or sent."""
        try:
            self.list_pods(namespace, selector)
        except ServiceError as exc:
            raise ServiceError(f"namespace {namespace}: {exc.message}", path=self.server, field="k8s.namespace",
                               hint="check k8s.kubeconfig/context; grant the Role 'madengine k8s rbac' prints") \
                from None

    def gpu_allocatable(self, resource: str, node_selector: Mapping[str, str]) -> int | None:
        """The most GPUs one node (of those the selector picks) can give a pod, or None when the
        cluster does not tell (no right to list nodes)."""
        selector = ",".join(f"{k}={v}" for k, v in node_selector.items())
        try:
            data = self._call("list nodes", self.core.list_node, label_selector=selector)
        except ServiceError as exc:
            if " 403" in str(exc) or " 401" in str(exc):
                return None
            raise
        best = 0
        for node in data.get("items") or []:
            value = (node.get("status") or {}).get("allocatable", {}).get(resource, "0")
            try:
                best = max(best, int(str(value)))
            except ValueError:
                continue
        return best


__all__ = ["Expired", "KubeApi", "Missing"]
