#!/usr/bin/env python3
"""troupe's C API from Python through ctypes: trains CartPole-v1 briefly with a
session, loads the trained policy and acts, and shows the error rules (a
wrong observation length, a NaN, a closed handle, an ABI mismatch).

usage: policy_ctypes.py LIBTROUPE_SO [OUTPUT_DIR]   (default: a temporary folder, removed)
Exits 0 when every step behaved as documented (docs/embedding.md), else 1.
"""
import ctypes as C
import math
import shutil
import sys
import tempfile

ABI_VERSION = 2  # TROUPE_ABI_VERSION of include/troupe/troupe.h
OK, INVALID_ARGUMENT, BAD_CONFIG, NON_FINITE, DIMENSION_MISMATCH, UNSUPPORTED_VERSION = (
    0, 1, 2, 4, 5, 9)


class Progress(C.Structure):
    _fields_ = [("env_steps", C.c_uint64), ("updates", C.c_uint64), ("episodes", C.c_uint64),
                ("return_mean_100", C.c_double), ("policy_version", C.c_uint64),
                ("stats_version", C.c_uint64), ("transitions_dropped", C.c_uint64),
                ("running", C.c_int), ("finished", C.c_int)]


class PolicyInfo(C.Structure):
    _fields_ = [("obs_dim", C.c_size_t), ("action_dim", C.c_size_t),
                ("num_actions", C.c_size_t), ("discrete", C.c_int)]


def load(path):
    lib = C.CDLL(path)
    lib.troupe_abi_version.restype = C.c_int
    lib.troupe_last_error.restype = C.c_char_p
    lib.troupe_status_name.restype = C.c_char_p
    lib.troupe_status_name.argtypes = [C.c_int]
    lib.troupe_session_open_toml.argtypes = [C.c_int, C.c_char_p, C.c_char_p,
                                             C.POINTER(C.c_char_p), C.c_size_t,
                                             C.POINTER(C.c_void_p)]
    lib.troupe_session_start.argtypes = [C.c_void_p]
    lib.troupe_session_wait.argtypes = [C.c_void_p, C.c_int64, C.POINTER(C.c_int)]
    lib.troupe_session_run_dir.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t]
    lib.troupe_session_close.argtypes = [C.c_void_p, C.POINTER(Progress)]
    lib.troupe_session_free.argtypes = [C.c_void_p]
    lib.troupe_session_free.restype = None
    lib.troupe_policy_load.argtypes = [C.c_int, C.c_char_p, C.POINTER(C.c_void_p)]
    lib.troupe_policy_info_get.argtypes = [C.c_void_p, C.POINTER(PolicyInfo)]
    lib.troupe_policy_act.argtypes = [C.c_void_p, C.POINTER(C.c_float), C.c_size_t,
                                      C.POINTER(C.c_float), C.c_size_t, C.c_int, C.c_uint64]
    lib.troupe_policy_close.argtypes = [C.c_void_p]
    lib.troupe_policy_free.argtypes = [C.c_void_p]
    lib.troupe_policy_free.restype = None
    return lib


failures = 0


def expect(cond, what, lib):
    global failures
    if not cond:
        failures += 1
        print(f"FAILED: {what} (last error: {lib.troupe_last_error().decode()})",
              file=sys.stderr)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    lib = load(sys.argv[1])
    if len(sys.argv) == 3:
        return run(lib, sys.argv[2])
    out_dir = tempfile.mkdtemp(prefix="troupe-ctypes-")
    try:
        return run(lib, out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def run(lib, out_dir):
    expect(lib.troupe_abi_version() == ABI_VERSION, "ABI version", lib)

    session = C.c_void_p()
    rc = lib.troupe_session_open_toml(ABI_VERSION + 1, b"", b"x.toml", None, 0,
                                      C.byref(session))
    expect(rc == UNSUPPORTED_VERSION and f"ABI version {ABI_VERSION + 1}".encode() in lib.troupe_last_error(),
           "an ABI mismatch is refused naming both versions", lib)
    rc = lib.troupe_session_open_toml(ABI_VERSION, b"[algo]\ngamma = 3.0\n", b"py.toml",
                                      None, 0, C.byref(session))
    expect(rc == BAD_CONFIG and b"py.toml:2" in lib.troupe_last_error(),
           "a bad config names file:line", lib)

    toml = (f'[run]\nname = "py"\nseed = 2\noutput_dir = "{out_dir}"\n'
            '[env]\nid = "CartPole-v1"\nnum_envs = 2\n'
            '[algo]\nname = "ppo"\nmode = "sync"\ntotal_env_steps = 1024\n'
            'num_steps = 64\n').encode()
    rc = lib.troupe_session_open_toml(ABI_VERSION, toml, b"py.toml", None, 0,
                                      C.byref(session))
    expect(rc == OK, "opening a session", lib)
    if rc != OK:
        return 1
    expect(lib.troupe_session_start(session) == OK, "starting", lib)
    finished = C.c_int(0)
    for _ in range(60):  # bounded: 60 waits of 5 s
        expect(lib.troupe_session_wait(session, 5000, C.byref(finished)) == OK, "wait", lib)
        if finished.value:
            break
    expect(finished.value == 1, "training ended within 300 s", lib)
    run_dir = C.create_string_buffer(1024)
    expect(lib.troupe_session_run_dir(session, run_dir, 1024) == OK, "run_dir", lib)
    progress = Progress()
    expect(lib.troupe_session_close(session, C.byref(progress)) == OK, "close", lib)
    expect(progress.env_steps >= 1024, f"env_steps {progress.env_steps} >= 1024", lib)
    lib.troupe_session_free(session)

    policy = C.c_void_p()
    rc = lib.troupe_policy_load(ABI_VERSION, run_dir.value, C.byref(policy))
    expect(rc == OK, f"loading the policy of {run_dir.value.decode()}", lib)
    if rc != OK:
        return 1
    info = PolicyInfo()
    expect(lib.troupe_policy_info_get(policy, C.byref(info)) == OK, "info", lib)
    expect((info.obs_dim, info.action_dim, info.num_actions, info.discrete) == (4, 1, 2, 1),
           "CartPole's policy: obs_dim 4, one Discrete(2) action", lib)
    obs = (C.c_float * 5)(0.01, -0.02, 0.03, 0.04, 0.0)
    action = (C.c_float * 1)(-1.0)
    expect(lib.troupe_policy_act(policy, obs, 4, action, 1, 1, 0) == OK, "act", lib)
    expect(action[0] in (0.0, 1.0), f"action {action[0]} is 0 or 1", lib)
    print(f"run {run_dir.value.decode()}: action {action[0]:.0f} for {list(obs)[:4]}")

    rc = lib.troupe_policy_act(policy, obs, 5, action, 1, 1, 0)
    expect(rc == DIMENSION_MISMATCH and b"has 5 values" in lib.troupe_last_error(),
           "a wrong length is refused with the lengths", lib)
    obs[2] = math.nan
    rc = lib.troupe_policy_act(policy, obs, 4, action, 1, 1, 0)
    expect(rc == NON_FINITE and b"value 2 is nan" in lib.troupe_last_error(),
           "a NaN is refused naming its index", lib)
    expect(lib.troupe_policy_close(policy) == OK, "policy close", lib)
    rc = lib.troupe_policy_act(policy, obs, 4, action, 1, 1, 0)
    expect(rc == INVALID_ARGUMENT and b"closed" in lib.troupe_last_error(),
           "a closed handle is refused", lib)
    lib.troupe_policy_free(policy)
    print("passed" if failures == 0 else f"FAILED: {failures} checks")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
