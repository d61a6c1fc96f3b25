"""One session with troupe over a DEALER socket (docs/protocol.md)."""

import json

import numpy as np
import zmq

from .protocol import (ErrorCode, FLAG_TERMINATED, FLAG_TRUNCATED, Kind, PROTOCOL_MINOR,
                       RemoteError, ServerClosed, ServerTimeout, error_of, hello_frames,
                       pack_header, step_frames, unpack_header)


class Session:
    """A session: ``hello()``, then ``step()`` as often as the environments step, ``close()``.

    ``action_space`` is ``("discrete", n)`` or ``("box", action_dim)``. Every wait is
    bounded: ``hello_timeout_ms`` for WELCOME (troupe may hold it until
    ``remote.min_envs`` environments have asked), then the server's ``timeout_ms`` (or
    ``timeout_ms`` when given) for each reply; a reply that does not come raises
    :class:`ServerTimeout`.

    ``curve_keys`` = ``(server_public_key, public_key, secret_key)``, each 40 Z85
    characters (str or bytes), makes the connection CURVE-encrypted and authenticated
    (troupe's ``remote.curve_secret_key_file``); ``None``: plaintext.
    """

    def __init__(self, endpoint, num_envs, obs_dim, action_space, client="python",
                 hello_timeout_ms=60000, timeout_ms=None, context=None, curve_keys=None):
        self.endpoint = endpoint
        self.num_envs = int(num_envs)
        self.obs_dim = int(obs_dim)
        self.action_space = action_space
        self.discrete = action_space[0] == "discrete"
        self.action_width = 1 if self.discrete else int(action_space[1])
        self.client = client
        self.hello_timeout_ms = hello_timeout_ms
        self.timeout_ms = timeout_ms
        self._context = context or zmq.Context.instance()
        self._socket = None
        self.sequence = 0
        self.session = 0
        self.minor = PROTOCOL_MINOR
        self.welcome = None
        self.policy_version = 0
        self.curve_keys = None
        if curve_keys is not None:
            keys = tuple(k.encode() if isinstance(k, str) else bytes(k) for k in curve_keys)
            if len(keys) != 3 or any(len(k) != 40 for k in keys):
                raise ValueError("curve_keys: (server_public_key, public_key, secret_key), "
                                 "each 40 Z85 characters")
            self.curve_keys = keys

    # -- transport ------------------------------------------------------------------

    def _open(self):
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if self.curve_keys is not None:
            server, public, secret = self.curve_keys
            self._socket.curve_serverkey = server
            self._socket.curve_publickey = public
            self._socket.curve_secretkey = secret
        self._socket.connect(self.endpoint)

    def _next(self):
        self.sequence += 1
        return self.sequence

    def _receive(self, timeout_ms, expected):
        if not self._socket.poll(timeout_ms, zmq.POLLIN):
            raise ServerTimeout(f"no {expected} from troupe at {self.endpoint} within "
                                f"{timeout_ms} ms")
        frames = self._socket.recv_multipart()
        kind, sequence, num_envs, session, _major, minor = unpack_header(frames[0])
        if kind == Kind.ERROR:
            raise error_of(frames)
        if kind == Kind.CLOSE:
            self.session = 0
            raise ServerClosed(f"troupe at {self.endpoint} ended the session")
        return kind, sequence, num_envs, session, minor, frames

    # -- the session ----------------------------------------------------------------

    def hello(self):
        """Opens the session; returns WELCOME's settings (a dict)."""
        if self._socket is None:
            self._open()
        seq = self._next()
        self._socket.send_multipart(hello_frames(seq, self.client, self.num_envs,
                                                 self.obs_dim, self.action_space))
        kind, sequence, _n, session, minor, frames = self._receive(self.hello_timeout_ms,
                                                                   "WELCOME")
        if kind != Kind.WELCOME or sequence != seq:
            raise RemoteError(ErrorCode.OUT_OF_ORDER,
                              f"expected WELCOME of HELLO {seq}, got kind {kind} of {sequence}")
        self.welcome = json.loads(frames[1])
        self.session = session
        self.minor = minor
        if self.timeout_ms is None:
            self.timeout_ms = int(self.welcome["timeout_ms"])
        return self.welcome

    def step(self, env_ids, obs, rewards, terminated, truncated, final_obs=None):
        """Reports the previous actions' outcomes and asks for new actions.

        ``obs`` [k, obs_dim] are the observations to act on (after autoreset); rewards,
        terminated, truncated [k] are the outcomes of the previous actions (0 on an
        environment's first step); ``final_obs`` [m, obs_dim] holds the last observations
        of the m episodes that ended, in the order of env_ids. Returns (actions,
        policy_version): int32 [k] for a Discrete space, float32 [k, action_dim] for a Box.
        """
        env_ids = np.asarray(env_ids, dtype=np.uint32)
        k = len(env_ids)
        flags = (np.asarray(terminated, dtype=bool) * FLAG_TERMINATED
                 | np.asarray(truncated, dtype=bool) * FLAG_TRUNCATED).astype(np.uint8)
        if final_obs is None:
            final_obs = np.zeros((0, self.obs_dim), np.float32)
        seq = self._next()
        self._socket.send_multipart(step_frames(seq, self.session, self.minor, env_ids,
                                                obs, rewards, flags, final_obs))
        kind, sequence, n, _session, _minor, frames = self._receive(self.timeout_ms, "ACT")
        if kind != Kind.ACT or sequence != seq or n != k or len(frames) != 4:
            raise RemoteError(ErrorCode.OUT_OF_ORDER,
                              f"expected ACT of STEP {seq} for {k} environments, got kind "
                              f"{kind} of {sequence} for {n}")
        if self.discrete:
            actions = np.frombuffer(frames[2], dtype="<i4")
        else:
            actions = np.frombuffer(frames[2], dtype="<f4").reshape(k, self.action_width)
        self.policy_version = int(np.frombuffer(frames[3], dtype="<u8")[0])
        return actions, self.policy_version

    def ping(self):
        """Keeps the session alive while it has nothing to step; waits for PONG."""
        seq = self._next()
        self._socket.send_multipart([pack_header(Kind.PING, seq, 0, self.session, self.minor)])
        kind, sequence, *_ = self._receive(self.timeout_ms, "PONG")
        if kind != Kind.PONG or sequence != seq:
            raise RemoteError(ErrorCode.OUT_OF_ORDER, f"expected PONG of {seq}, got {kind}")

    def close(self):
        """Ends the session (troupe discards its unfinished segments) and the socket."""
        if self._socket is None:
            return
        if self.session:
            self._socket.send_multipart(
                [pack_header(Kind.CLOSE, self._next(), 0, self.session, self.minor)])
            self.session = 0
        self._socket.close(linger=1000)
        self._socket = None

    def __enter__(self):
        self.hello()
        return self

    def __exit__(self, *exc):
        self.close()
