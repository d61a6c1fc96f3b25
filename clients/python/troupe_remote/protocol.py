"""The wire format of docs/protocol.md: the 32-byte header and the frames of each kind."""

import enum
import json
import struct

import numpy as np

PROTOCOL_MAJOR = 1
PROTOCOL_MINOR = 0
MAGIC = b"TRPE"
HEADER = struct.Struct("<4sBBBBQIIQ")  # magic, major, minor, kind, flags, sequence,
                                       # num_envs, reserved, session: 32 bytes
assert HEADER.size == 32

FLAG_TERMINATED = 1
FLAG_TRUNCATED = 2


class Kind(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    STEP = 3
    ACT = 4
    PING = 5
    PONG = 6
    CLOSE = 7
    ERROR = 8


class ErrorCode(enum.IntEnum):
    BAD_HEADER = 1
    BAD_MAGIC = 2
    VERSION_MISMATCH = 3
    UNKNOWN_KIND = 4
    OUT_OF_ORDER = 5
    UNKNOWN_SESSION = 6
    BAD_FRAME_COUNT = 7
    BAD_HANDSHAKE = 8
    SPACE_MISMATCH = 9
    COUNT_MISMATCH = 10
    BAD_ENV_ID = 11
    NON_FINITE = 12
    BAD_SEQUENCE = 13
    TOO_MANY_ERRORS = 14
    TIMEOUT = 15
    SERVER_FULL = 16
    SERVER_CLOSING = 17
    BAD_FLAGS = 18


class RemoteError(Exception):
    """An ERROR from troupe, or a reply that breaks the protocol."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        try:
            name = ErrorCode(code).name.lower()
        except ValueError:
            name = f"code {code}"
        super().__init__(f"troupe refused: {name}: {message}")


class ServerClosed(Exception):
    """troupe ended the session (CLOSE): the run is over or the server stops."""


class ServerTimeout(Exception):
    """Nothing came back from troupe within the time-out: it is gone or stalled."""


def pack_header(kind, sequence, num_envs=0, session=0, minor=PROTOCOL_MINOR,
                major=PROTOCOL_MAJOR):
    return HEADER.pack(MAGIC, major, minor, int(kind), 0, sequence, num_envs, 0, session)


def unpack_header(frame):
    """(kind, sequence, num_envs, session, major, minor) of a header frame."""
    if len(frame) != HEADER.size:
        raise RemoteError(ErrorCode.BAD_HEADER,
                          f"reply header must be {HEADER.size} bytes, got {len(frame)}")
    magic, major, minor, kind, _flags, sequence, num_envs, _reserved, session = \
        HEADER.unpack(frame)
    if magic != MAGIC:
        raise RemoteError(ErrorCode.BAD_MAGIC, f"reply magic must be TRPE, got {magic!r}")
    if major != PROTOCOL_MAJOR:
        raise RemoteError(ErrorCode.VERSION_MISMATCH,
                          f"reply major version must be {PROTOCOL_MAJOR}, got {major}")
    return kind, sequence, num_envs, session, major, minor


def hello_frames(sequence, client, num_envs, obs_dim, action_space):
    """HELLO: action_space is ("discrete", n) or ("box", action_dim)."""
    kind, size = action_space
    if kind == "discrete":
        act = {"type": "discrete", "n": int(size)}
    elif kind == "box":
        act = {"type": "box", "shape": [int(size)]}
    else:
        raise ValueError(f"action_space must be ('discrete', n) or ('box', dim), got {kind!r}")
    body = {"client": client, "num_envs": int(num_envs),
            "observation_space": {"type": "box", "shape": [int(obs_dim)]},
            "action_space": act}
    return [pack_header(Kind.HELLO, sequence, num_envs), json.dumps(body).encode()]


def step_frames(sequence, session, minor, env_ids, obs, rewards, flags, final_obs):
    env_ids = np.ascontiguousarray(env_ids, dtype="<u4")
    return [pack_header(Kind.STEP, sequence, len(env_ids), session, minor),
            env_ids.tobytes(),
            np.ascontiguousarray(obs, dtype="<f4").tobytes(),
            np.ascontiguousarray(rewards, dtype="<f8").tobytes(),
            np.ascontiguousarray(flags, dtype="u1").tobytes(),
            np.ascontiguousarray(final_obs, dtype="<f4").tobytes()]


def error_of(frames):
    if len(frames) != 3 or len(frames[1]) != 4:
        return RemoteError(ErrorCode.BAD_FRAME_COUNT, "a malformed ERROR from troupe")
    (code,) = struct.unpack("<I", frames[1])
    return RemoteError(code, frames[2].decode("utf-8", "replace"))
