"""Client of troupe's remote environment protocol (docs/protocol.md).

A program serves its environments to a troupe run whose config has
``env.id = "remote"``: troupe chooses the actions, the program steps its
environments, and training happens in troupe.

- :class:`Session`: the low-level session (hello, step, ping, close).
- :func:`serve`: steps any number of Gymnasium-style environments
  (``reset(seed) -> (obs, info)``, ``step(action) -> (obs, reward, terminated,
  truncated, info)``), batched into one message per step.
"""

from .protocol import (ErrorCode, Kind, PROTOCOL_MAJOR, PROTOCOL_MINOR, RemoteError,
                       ServerClosed, ServerTimeout)
from .session import Session
from .serve import serve, ServeResult

__all__ = ["Session", "serve", "ServeResult", "RemoteError", "ServerClosed", "ServerTimeout",
           "ErrorCode", "Kind", "PROTOCOL_MAJOR", "PROTOCOL_MINOR"]
