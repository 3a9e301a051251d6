"""The part of a Kubernetes object store the simulator uses (``StorePort``).

Two backends provide it: the emulator's in-process ``Store`` (sandbox/apiserver/store.py) and
``KubeStore`` over a real API server (adapters/kube_store.py). Both raise the emulator's
``ApiError`` subclasses (NotFound, Conflict, AlreadyExists, Invalid, ...), so the simulator's
error handling is the same on either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

Obj = dict[str, Any]


class StorePort(Protocol):
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None if absent; NotFound if the kind is not served."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | dict[str, str] | None = None,
    ) -> list[Obj]: ...

    def create(self, obj: Obj, *, manager: str = ...) -> Obj:
        """Creates ``obj``; a given ``status`` is kept (over a real server: a second write to
        the status subresource)."""
        ...

    def update(self, obj: Obj, *, manager: str = ...) -> Obj:
        """PUT; Conflict when ``metadata.resourceVersion`` is stale."""
        ...

    def update_status(self, obj: Obj, *, manager: str = ...) -> Obj:
        """PUT of the status subresource; same resourceVersion rule."""
        ...

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        *,
        manager: str = ...,
        subresource: str | None = None,
    ) -> Obj: ...

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """The last state (with deletionTimestamp while finalizers hold it), None if absent."""
        ...

    def subscribe(self, callback: Callable[[str, Obj], None]) -> Callable[[], None]:
        """``callback(event_type, obj)`` for changes (ADDED, MODIFIED, DELETED); returns the
        unsubscribe function."""
        ...


@runtime_checkable
class PodBinding(Protocol):
    """What only a real server needs: the scheduler's bind of a pod to a node."""

    def bind(self, namespace: str, name: str, node: str, *, manager: str = ...) -> None: ...
