"""The two Event types Kubernetes knows (core/v1 and events.k8s.io/v1 `type`). Their own module,
free of I/O, so pure decision code can name them without importing the recorder."""

from typing import Final

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
