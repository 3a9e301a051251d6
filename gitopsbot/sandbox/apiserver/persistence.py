"""Optional persistence: the store's objects and resourceVersion as one JSON file in
``state_dir``, written (atomically) shortly after changes and on stop, read on start."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitopsbot.sandbox.apiserver.store import Store

FILENAME = "apiserver-state.json"


class Persistence:
    def __init__(self, store: Store, state_dir: Path, *, interval: float = 0.2) -> None:
        self.store = store
        self.path = state_dir / FILENAME
        self.interval = interval
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] = lambda: None

    def load(self) -> None:
        if not self.path.is_file():
            return
        data = json.loads(self.path.read_text())
        self.store.load(data["objects"], int(data["resourceVersion"]))

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._unsubscribe = self.store.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._run, name="apiserver-persist", daemon=True)
        self._thread.start()

    def _on_event(self, _etype: str, _obj: dict[str, Any]) -> None:
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._dirty.is_set():
                self._dirty.clear()
                self.save()

    def save(self) -> None:
        objects, rv = self.store.dump()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"resourceVersion": rv, "objects": objects}))
        os.replace(tmp, self.path)

    def stop(self) -> None:
        self._unsubscribe()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.save()
