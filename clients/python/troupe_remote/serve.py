"""Serving many Gymnasium-style environments to troupe, batched into one message per step."""

import collections
import dataclasses
import math
import time

import numpy as np

from .protocol import RemoteError, ServerClosed, ServerTimeout
from .session import Session


@dataclasses.dataclass
class ServeResult:
    """What serve() did."""
    env_steps: int = 0                      # environment steps taken
    episodes: int = 0                       # episodes ended
    returns: list = dataclasses.field(default_factory=list)  # every episode's return
    policy_version: int = 0                 # the newest policy version that acted
    reason: str = ""                        # why it stopped
    reconnects: int = 0                     # sessions opened again after a failure

    def mean_return(self, last=100):
        """Mean return of the last `last` episodes (NaN before any)."""
        tail = self.returns[-last:]
        return float(np.mean(tail)) if tail else math.nan


def _spaces(env):
    obs_dim = int(np.prod(env.observation_space.shape))
    space = env.action_space
    if hasattr(space, "n"):
        return obs_dim, ("discrete", int(space.n))
    return obs_dim, ("box", int(np.prod(space.shape)))


def serve(envs, endpoint, client="python", seed=0, max_env_steps=None, stop=None,
          retries=0, backoff_s=0.5, backoff_max_s=10.0, hello_timeout_ms=60000,
          context=None, curve_keys=None):
    """Serves `envs` (Gymnasium-style objects with observation_space and action_space)
    to the troupe run at `endpoint` until troupe closes the session, `max_env_steps`
    environment steps are taken, or `stop(result)` returns True (checked after every
    step). A troupe that does not answer within its time-out raises ServerTimeout
    unless `retries` allows a new session: after a failure it waits `backoff_s`
    (doubling up to `backoff_max_s`), resets every environment and says HELLO again.
    `curve_keys` (server public key, client public key, client secret key) makes
    the sessions CURVE (see Session). Returns a ServeResult.
    """
    envs = list(envs)
    n = len(envs)
    obs_dim, action_space = _spaces(envs[0])
    for env in envs[1:]:
        if _spaces(env) != (obs_dim, action_space):
            raise ValueError("every environment must have the same spaces")
    result = ServeResult()
    failures = 0
    delay = backoff_s
    episode = 0
    while True:
        session = Session(endpoint, n, obs_dim, action_space, client=client,
                          hello_timeout_ms=hello_timeout_ms, context=context,
                          curve_keys=curve_keys)
        try:
            session.hello()
            obs = np.zeros((n, obs_dim), np.float32)
            for i, env in enumerate(envs):
                o, _info = env.reset(seed=seed + episode * n + i)
                obs[i] = np.asarray(o, np.float32).reshape(-1)
            episode += 1
            returns = np.zeros(n)
            ids = np.arange(n, dtype=np.uint32)
            rewards = np.zeros(n)
            terminated = np.zeros(n, bool)
            truncated = np.zeros(n, bool)
            final_obs = []
            while True:
                actions, version = session.step(
                    ids, obs, rewards, terminated, truncated,
                    np.asarray(final_obs, np.float32).reshape(-1, obs_dim))
                result.policy_version = version
                final_obs = []
                for i, env in enumerate(envs):
                    a = int(actions[i]) if action_space[0] == "discrete" else actions[i]
                    o, r, term, trunc, _info = env.step(a)
                    rewards[i] = r
                    terminated[i] = term
                    truncated[i] = trunc
                    returns[i] += r
                    if term or trunc:
                        final_obs.append(np.asarray(o, np.float32).reshape(-1))
                        result.returns.append(float(returns[i]))
                        result.episodes += 1
                        returns[i] = 0
                        o, _info = env.reset()
                    obs[i] = np.asarray(o, np.float32).reshape(-1)
                result.env_steps += n
                failures = 0
                delay = backoff_s
                if max_env_steps is not None and result.env_steps >= max_env_steps:
                    result.reason = f"max_env_steps {max_env_steps} reached"
                    return result
                if stop is not None and stop(result):
                    result.reason = "stop() said so"
                    return result
        except ServerClosed as e:
            result.reason = str(e)
            return result
        except (ServerTimeout, RemoteError) as e:
            failures += 1
            if failures > retries:
                raise
            result.reconnects += 1
            time.sleep(delay)  # back-off before a new session, not synchronization
            delay = min(delay * 2, backoff_max_s)
        finally:
            session.close()
