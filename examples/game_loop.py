#!/usr/bin/env python3
"""A game that trains its own agents while it runs, from Python through
troupe's C API (ctypes): the game drives. examples/game_loop.cpp and
examples/game_loop.c are the same program in C++ and C; Catcher's rules
(examples/catcher.hpp) are written again here in Python (in double precision,
so the rounds differ slightly from the C++ ones).

Several lanes, one agent slot per lane, in a fixed-timestep loop: 60 frames
per second in real time by default, as fast as it goes with --unthrottled.
Every frame each lane asks the agent for an action (troupe_agent_act answers
at once from the newest policy), steps its game and reports the outcome;
training runs on troupe's threads in the same process. When stdout is a
terminal, the first lane is drawn.

usage: game_loop.py [--library PATH/libtroupe.so] [--seconds S] [--frames N]
                    [--lanes L] [--unthrottled] [--no-draw] [--output-dir DIR]

The library is --library, else build/libtroupe.so beside this folder, else
the system's libtroupe.so (ctypes.util.find_library). At the end it prints
act()'s latency (p50, p99, max), the frames that missed their deadline, the
policy version and the mean round return. Exits 0 when every call succeeded.
"""
import argparse
import collections
import ctypes as C
import ctypes.util
import math
import os
import sys
import time

ABI_VERSION = 2  # TROUPE_ABI_VERSION of include/troupe/troupe.h
OK = 0

# -- Catcher (the rules of examples/catcher.hpp) -------------------------------
OBS_DIM, NUM_ACTIONS, FRUITS_PER_ROUND, MAX_FRAMES = 4, 3, 10, 400
PADDLE_HALF, PADDLE_SPEED, FALL_SPEED = 0.08, 0.035, 0.03
MASK = (1 << 64) - 1


class Lane:
    """One lane: a paddle, a piece of fruit and the round's counters."""

    def __init__(self, seed):
        self.s = seed & MASK
        self.caught = self.missed = 0
        self.reset()

    def _next(self):  # splitmix64
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def _uniform(self, lo, hi):
        return lo + (hi - lo) * ((self._next() >> 40) / 16777216.0)

    def _drop_fruit(self):
        self.fruit_x = self._uniform(0.05, 0.95)
        self.fruit_y = 1.0
        self.fruit_vx = self._uniform(-0.01, 0.01)

    def reset(self):
        self.paddle = 0.5
        self.fruits = self.frames = 0
        self._drop_fruit()

    def observe(self, obs):
        obs[0] = self.paddle * 2 - 1
        obs[1] = (self.fruit_x - self.paddle) * 2
        obs[2] = self.fruit_y * 2 - 1
        obs[3] = self.fruit_vx * 100

    def step(self, action):
        """One frame with action 0 (left), 1 (stay) or 2 (right): (reward, round over)."""
        self.paddle = min(1.0, max(0.0, self.paddle + (action - 1) * PADDLE_SPEED))
        self.fruit_x += self.fruit_vx
        if self.fruit_x < 0 or self.fruit_x > 1:
            self.fruit_vx = -self.fruit_vx
            self.fruit_x = min(1.0, max(0.0, self.fruit_x))
        self.fruit_y -= FALL_SPEED
        self.frames += 1
        reward = 0.0
        if self.fruit_y <= 0:
            hit = abs(self.fruit_x - self.paddle) <= PADDLE_HALF
            reward = 1.0 if hit else -1.0
            if hit:
                self.caught += 1
            else:
                self.missed += 1
            self.fruits += 1
            self._drop_fruit()
        return reward, self.fruits >= FRUITS_PER_ROUND or self.frames >= MAX_FRAMES


# -- the C API through ctypes ---------------------------------------------------
class Progress(C.Structure):
    _fields_ = [("env_steps", C.c_uint64), ("updates", C.c_uint64), ("episodes", C.c_uint64),
                ("return_mean_100", C.c_double), ("policy_version", C.c_uint64),
                ("stats_version", C.c_uint64), ("transitions_dropped", C.c_uint64),
                ("running", C.c_int), ("finished", C.c_int)]


class EnvDescription(C.Structure):
    _fields_ = [("id", C.c_char_p), ("obs_dim", C.c_size_t),
                ("obs_low", C.POINTER(C.c_float)), ("obs_high", C.POINTER(C.c_float)),
                ("num_actions", C.c_size_t), ("action_dim", C.c_size_t),
                ("action_low", C.POINTER(C.c_float)), ("action_high", C.POINTER(C.c_float)),
                ("max_episode_steps", C.c_int)]


def find_library(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "..", "build", "libtroupe.so")
    if os.path.exists(beside):
        return beside
    return ctypes.util.find_library("troupe") or "libtroupe.so"


def load(path):
    lib = C.CDLL(path)
    lib.troupe_last_error.restype = C.c_char_p
    lib.troupe_status_name.restype = C.c_char_p
    lib.troupe_status_name.argtypes = [C.c_int]
    lib.troupe_register_environment_spaces.argtypes = [C.c_int, C.POINTER(EnvDescription)]
    lib.troupe_session_open_toml.argtypes = [C.c_int, C.c_char_p, C.c_char_p,
                                             C.POINTER(C.c_char_p), C.c_size_t,
                                             C.POINTER(C.c_void_p)]
    lib.troupe_session_make_agent.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p,
                                              C.POINTER(C.c_void_p)]
    lib.troupe_session_start.argtypes = [C.c_void_p]
    lib.troupe_session_progress.argtypes = [C.c_void_p, C.POINTER(Progress)]
    lib.troupe_session_close.argtypes = [C.c_void_p, C.POINTER(Progress)]
    lib.troupe_session_free.argtypes = [C.c_void_p]
    lib.troupe_session_free.restype = None
    lib.troupe_agent_act.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_float),
                                     C.c_size_t, C.POINTER(C.c_float), C.c_size_t]
    lib.troupe_agent_report.argtypes = [C.c_void_p, C.c_size_t, C.c_double, C.c_int,
                                        C.c_int, C.POINTER(C.c_float)]
    lib.troupe_agent_dropped.argtypes = [C.c_void_p, C.POINTER(C.c_uint64)]
    lib.troupe_agent_free.argtypes = [C.c_void_p]
    lib.troupe_agent_free.restype = None
    return lib


class CallFailed(Exception):
    pass


def check(lib, call, status):
    if status != OK:
        raise CallFailed(f"{call}: {lib.troupe_status_name(status).decode()}: "
                         f"{lib.troupe_last_error().decode()}")


def mean_text(mean):
    """The mean round return as printed: "-" until a round has ended."""
    return "-" if math.isnan(mean) else f"{mean:.2f}"


def draw(lane, policy_version, mean, frame):
    rows, cols = 12, 40
    grid = [[" "] * cols for _ in range(rows)]

    def col(x):
        return min(cols - 1, max(0, int(x * (cols - 1) + 0.5)))

    grid[min(rows - 2, max(0, int((1 - lane.fruit_y) * (rows - 2))))][col(lane.fruit_x)] = "o"
    for c in range(col(lane.paddle - PADDLE_HALF), col(lane.paddle + PADDLE_HALF) + 1):
        grid[rows - 1][c] = "="
    out = ["\x1b[H"] + ["|" + "".join(r) + "|\x1b[K\n" for r in grid]
    out.append(f"frame {frame}  caught {lane.caught}  missed {lane.missed}  "
               f"policy v{policy_version}  mean round return {mean_text(mean)}\x1b[K\n")
    sys.stdout.write("".join(out))
    sys.stdout.flush()


def percentile(sorted_xs, q):
    return sorted_xs[min(len(sorted_xs) - 1, int(q * (len(sorted_xs) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description="Catcher trained from a Python game loop")
    ap.add_argument("--library", default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--lanes", type=int, default=32)
    ap.add_argument("--unthrottled", action="store_true")
    ap.add_argument("--no-draw", action="store_true")
    ap.add_argument("--output-dir", default="runs")
    o = ap.parse_args()
    if o.seconds <= 0 or o.frames < 0 or o.lanes <= 0:
        ap.error("--seconds and --lanes must be positive, --frames not negative")
    terminal = not o.no_draw and sys.stdout.isatty()
    lib = load(find_library(o.library))

    floats = C.c_float * OBS_DIM
    low, high = floats(-1, -2, -1, -1), floats(1, 2, 1, 1)
    desc = EnvDescription(b"Catcher-v0", OBS_DIM, low, high, NUM_ACTIONS, 0, None, None,
                          MAX_FRAMES)
    # The game steps its lanes itself: troupe needs Catcher's spaces only.
    check(lib, "troupe_register_environment_spaces",
          lib.troupe_register_environment_spaces(ABI_VERSION, C.byref(desc)))
    out_dir = o.output_dir.replace("\\", "\\\\").replace('"', '\\"')
    config = ("[run]\nname = \"catcher_game_loop_py\"\nseed = 7\ndevice = \"cpu\"\n"
              f"output_dir = \"{out_dir}\"\ncheckpoint_every_updates = 0\n"
              "[env]\nid = \"Catcher-v0\"\nnum_envs = 4\n"
              "[algo]\nname = \"ppo\"\nmode = \"async\"\ntotal_env_steps = 100000000\n"
              "num_steps = 32\nlearning_rate = 1e-3\nanneal_lr = false\n"
              "[algo.ppo]\nnum_minibatches = 2\nupdate_epochs = 4\n")
    session, agent = C.c_void_p(), C.c_void_p()
    check(lib, "troupe_session_open_toml",
          lib.troupe_session_open_toml(ABI_VERSION, config.encode(), b"game_loop_py.toml",
                                       None, 0, C.byref(session)))
    try:
        check(lib, "troupe_session_make_agent",
              lib.troupe_session_make_agent(session, o.lanes, None, C.byref(agent)))
        check(lib, "troupe_session_start", lib.troupe_session_start(session))
        lanes = [Lane(1000 + i) for i in range(o.lanes)]
        round_return = [0.0] * o.lanes
        last_returns = collections.deque(maxlen=100)
        latency_us = []
        obs, final_obs, action = floats(), floats(), (C.c_float * 1)()
        progress, dropped = Progress(), C.c_uint64()
        act, report = lib.troupe_agent_act, lib.troupe_agent_report
        period = 1.0 / 60
        start = time.perf_counter()
        deadline, next_print = start + period, start + 1.0
        frame = missed_frames = 0
        mean = math.nan
        if terminal:
            sys.stdout.write("\x1b[2J")
        while (frame < o.frames) if o.frames else (time.perf_counter() - start < o.seconds):
            for i, lane in enumerate(lanes):
                lane.observe(obs)
                t0 = time.perf_counter()
                s = act(agent, i, obs, OBS_DIM, action, 1)
                latency_us.append((time.perf_counter() - t0) * 1e6)
                check(lib, "troupe_agent_act", s)
                r, over = lane.step(int(action[0]))
                round_return[i] += r
                terminated = over and lane.fruits >= FRUITS_PER_ROUND
                lane.observe(final_obs)
                check(lib, "troupe_agent_report",
                      report(agent, i, r, int(terminated), int(over and not terminated),
                             final_obs))
                if over:
                    last_returns.append(round_return[i])
                    round_return[i] = 0.0
                    lane.reset()
            if last_returns:
                mean = sum(last_returns) / len(last_returns)
            now = time.perf_counter()
            if terminal and frame % 2 == 0:
                lib.troupe_session_progress(session, C.byref(progress))
                draw(lanes[0], progress.policy_version, mean, frame)
            elif not terminal and now >= next_print:
                lib.troupe_session_progress(session, C.byref(progress))
                lib.troupe_agent_dropped(agent, C.byref(dropped))
                print(f"{now - start:6.1f} s  frame {frame}  policy v{progress.policy_version}  "
                      f"mean round return (last 100) {mean_text(mean)}  dropped {dropped.value}",
                      flush=True)
                next_print += 1.0
            if not o.unthrottled:
                if time.perf_counter() > deadline:
                    missed_frames += 1
                else:
                    time.sleep(max(0.0, deadline - time.perf_counter()))
                deadline += period
            frame += 1
        seconds = time.perf_counter() - start
    finally:
        lib.troupe_agent_free(agent)  # agents before their session
        # Stops training, writes the final checkpoint and gives the final progress.
        closed = lib.troupe_session_close(session, C.byref(progress))
        lib.troupe_session_free(session)
    check(lib, "troupe_session_close", closed)
    latency_us.sort()
    print(f"\nframes {frame} in {seconds:.1f} s "
          f"({'unthrottled' if o.unthrottled else '60 per second'})")
    if latency_us:
        print(f"act() latency over {len(latency_us)} calls: p50 {percentile(latency_us, 0.5):.2f}"
              f" us, p99 {percentile(latency_us, 0.99):.2f} us, max {latency_us[-1]:.1f} us "
              "(ctypes call included)")
    print(f"frames that missed their deadline: {missed_frames}")
    print(f"policy version {progress.policy_version}, updates {progress.updates}, "
          f"transitions dropped {progress.transitions_dropped}")
    print(f"mean round return of the last {len(last_returns)} rounds: {mean_text(mean)} "
          "(random play: about -7)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CallFailed as e:
        print(f"game_loop.py: {e}", file=sys.stderr)
        sys.exit(1)
