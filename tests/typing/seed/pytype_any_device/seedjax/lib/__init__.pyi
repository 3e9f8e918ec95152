# Stands for jax._src.lib as pytype sees it: xla_client is opaque.
from typing import Any

xla_client: Any
