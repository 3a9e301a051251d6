"""Requests per second the Kubernetes API emulator serves to the official kubernetes Python
client (gets and lists), against a baseline measured in the same run: a bare stdlib
ThreadingHTTPServer (HTTP/1.1, keep-alive, TCP_NODELAY like the emulator) answering every
request with a fixed, pre-encoded
body of the same shape. The client, its deserialisation and the loopback are identical, so the
ratio is the emulator's own cost. For later load tests (issue 3, part 7).

    python benchmarks/apiserver_bench.py [--seconds 5] [--rounds 5] [--pods 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from kubernetes import client

from gitopsbot.sandbox.apiserver import ApiServer


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": "default", "labels": {"app": "bench"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox:1", "env": [{"name": "I", "value": str(i)}]}
            ]
        },
    }


class _Fixed(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: ClassVar[dict[str, bytes]] = {}

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the emulator

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        body = self.bodies["list" if path.endswith("/pods") else "get"]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _rate(call: Callable[[], object], seconds: float, threads: int) -> float:
    deadline = time.perf_counter() + seconds
    counts = [0] * threads

    def worker(i: int) -> None:
        while time.perf_counter() < deadline:
            call()
            counts[i] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return sum(counts) / (time.perf_counter() - start)


def _core(url: str, threads: int) -> client.CoreV1Api:
    cfg = client.Configuration(host=url)
    cfg.connection_pool_maxsize = max(4, threads)
    return client.CoreV1Api(client.ApiClient(cfg))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring time per case and side")
    ap.add_argument("--pods", type=int, default=100, help="pods in the listed namespace")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    ap.add_argument("--threads", type=int, default=1, help="concurrent client threads")
    args = ap.parse_args()

    with ApiServer(kubelet=False) as api:
        for i in range(args.pods):
            api.store.create(_pod(i))
        core = _core(api.url, args.threads)
        # the baseline answers with exactly what the emulator answers
        _Fixed.bodies = {
            "get": json.dumps(api.store.get("v1", "Pod", "default", "pod-0")).encode(),
            "list": json.dumps(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(api.store.resource_version)},
                    "items": api.store.list("v1", "Pod", "default"),
                }
            ).encode(),
        }
        base = ThreadingHTTPServer(("127.0.0.1", 0), _Fixed)
        base.daemon_threads = True
        threading.Thread(target=base.serve_forever, daemon=True).start()
        try:
            bcore = _core(f"http://127.0.0.1:{base.server_address[1]}", args.threads)
            cases: list[tuple[str, Callable[[client.CoreV1Api], object]]] = [
                ("get pod", lambda c: c.read_namespaced_pod("pod-0", "default")),
                (
                    f"list {args.pods} pods by label",
                    lambda c: c.list_namespaced_pod("default", label_selector="app=bench"),
                ),
            ]
            print(
                f"kubernetes client -> emulator vs fixed-body stdlib server "
                f"({args.seconds:g}s per case and side in {args.rounds} interleaved rounds, "
                f"{args.threads} thread(s); medians)"
            )
            print(f"{'case':<28}{'emulator req/s':>16}{'baseline req/s':>16}{'ratio':>8}")
            for name, fn in cases:
                fn(core), fn(bcore)  # warm up connections
                # Interleaved short rounds, medians: the machine's other load hits both sides.
                emus, refs, ratios = [], [], []
                for _ in range(args.rounds):
                    emu = _rate(lambda fn=fn: fn(core), args.seconds / args.rounds, args.threads)
                    ref = _rate(lambda fn=fn: fn(bcore), args.seconds / args.rounds, args.threads)
                    emus.append(emu)
                    refs.append(ref)
                    ratios.append(emu / ref)
                print(
                    f"{name:<28}{statistics.median(emus):>16.0f}"
                    f"{statistics.median(refs):>16.0f}{statistics.median(ratios):>8.2f}"
                )
        finally:
            base.shutdown()
            base.server_close()


if __name__ == "__main__":
    main()
