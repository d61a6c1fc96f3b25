#!/usr/bin/python3
"""scripts/cluster-sim against closed forms (tests/CMakeLists.txt runs this).

  /usr/bin/python3 tests/scripts/cluster_sim_test.py [REPO_ROOT]

Every expected figure is computed here from the model's equations in float64,
independently of the script's code; inputs are drawn fresh each run (the seed
is printed on failure).
"""

import contextlib
import copy
import importlib.machinery
import importlib.util
import io
import json
import math
import os
import random
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "cluster-sim")
PARAMS = os.path.join(ROOT, "scripts", "cluster-sim.json")
EXAMPLE = os.path.join(ROOT, "scripts", "cluster-sim.example-measured.json")

try:
    import numpy  # noqa: F401
except ImportError:
    print("skipped: no NumPy in this python3 (Debian: python3-numpy)")
    sys.exit(77)

_loader = importlib.machinery.SourceFileLoader("cluster_sim", SCRIPT)
_spec = importlib.util.spec_from_loader("cluster_sim", _loader)
sim = importlib.util.module_from_spec(_spec)
_loader.exec_module(sim)

SEED = random.SystemRandom().randrange(2**31)
draw = random.Random(SEED)


def base_params(**changes):
    """The shipped parameters, small and quiet: few rounds, no stragglers."""
    p = sim.load_params(PARAMS)
    p["simulation"].update(rounds=60, warmup_rounds=5, min_host_rounds=0,
                           seed=draw.randrange(2**31))
    p["stragglers"]["probability"] = 0.0
    for name, value in changes.items():
        section, key = name.split("__")
        p[section][key] = value
    return p


def zero_variance(p):
    p["gradient"]["p99_ms"] = p["gradient"]["median_ms"]
    return p


def alpha_beta_ring_s(n, size, latency_us, cpu_us, gbit_s):
    return (2 * (n - 1) * (latency_us + cpu_us) * 1e-6
            + 2.0 * (n - 1) / n * size * 8.0 / (gbit_s * 1e9))


def alpha_beta_hd_s(n, size, latency_us, cpu_us, gbit_s):
    steps = 2 * int(math.ceil(math.log2(n)))
    return steps * (latency_us + cpu_us) * 1e-6 + 2.0 * (n - 1) / n * size * 8.0 / (gbit_s * 1e9)


class ClosedForms(unittest.TestCase):
    def setUp(self):
        print(f"[{self.id()}] seed {SEED}", file=sys.stderr)

    def test_one_host_without_variance_makes_one_round_per_gradient_time(self):
        for _ in range(3):
            median_ms = draw.uniform(0.3, 5.0)
            learners = draw.randint(1, 4)
            p = zero_variance(base_params(gradient__median_ms=median_ms, hosts__learners=learners,
                                          gradient__in_flight=draw.randint(1, 4),
                                          round__apply_us=draw.uniform(0.0, 0.9) * median_ms * 1e3))
            for policy in sim.POLICIES:
                r = sim.simulate(p, 1, "ring", policy)
                self.assertAlmostEqual(r["rounds_per_s"] * median_ms * 1e-3, 1.0, delta=1e-9)
                steps = learners * p["gradient"]["env_steps"] / (median_ms * 1e-3)
                self.assertAlmostEqual(r["env_steps_per_s"] / steps, 1.0, delta=1e-9)

    def test_the_round_time_without_variance_is_the_alpha_beta_all_reduce(self):
        for n in (2, draw.randint(3, 12), 64):
            latency, cpu = draw.uniform(1.0, 200.0), draw.uniform(0.0, 20.0)
            gbit, size = draw.uniform(1.0, 100.0), draw.randint(1000, 10**7)
            apply_us = draw.uniform(0.0, 50.0)
            p = zero_variance(base_params(model__bytes=size, round__apply_us=apply_us))
            p["network"].update(latency_us=latency, message_cpu_us=cpu, bandwidth_gbit_s=gbit)
            for algorithm, formula in (("ring", alpha_beta_ring_s), ("halving_doubling", alpha_beta_hd_s)):
                expected_ms = (formula(n, size, latency, cpu, gbit) + apply_us * 1e-6) * 1e3
                r = sim.simulate(p, n, algorithm, "wait_all")
                for key in ("round_time_ms_mean", "round_time_ms_p50", "round_time_ms_p99"):
                    self.assertAlmostEqual(r[key] / expected_ms, 1.0, delta=1e-9,
                                           msg=f"{algorithm}, {n} hosts, {key}")

    def test_doubling_the_bandwidth_without_latency_halves_the_communication(self):
        n = draw.randint(2, 40)
        p = zero_variance(base_params(model__bytes=draw.randint(10**5, 10**8), round__apply_us=0.0))
        p["network"].update(latency_us=0.0, message_cpu_us=0.0, bandwidth_gbit_s=draw.uniform(1, 50))
        fast = copy.deepcopy(p)
        fast["network"]["bandwidth_gbit_s"] *= 2.0
        for algorithm in sim.ALGORITHMS:
            slow_ms = sim.simulate(p, n, algorithm, "wait_all")["round_time_ms_mean"]
            fast_ms = sim.simulate(fast, n, algorithm, "wait_all")["round_time_ms_mean"]
            self.assertGreater(slow_ms, 0.0)
            self.assertAlmostEqual(fast_ms * 2.0 / slow_ms, 1.0, delta=1e-9, msg=algorithm)

    def test_recovery_takes_at_least_the_detection_time(self):
        for n in (2, draw.randint(3, 9), 32):
            p = base_params()
            f = p["failures"]
            f.update(heartbeat_timeout_ms=draw.uniform(100, 5000),
                     allreduce_timeout_ms=draw.uniform(100, 5000),
                     crash_detect_ms=draw.uniform(1, 100))
            p["stragglers"]["probability"] = 0.05
            for kind, detect_ms in (("freeze", min(f["heartbeat_timeout_ms"], f["allreduce_timeout_ms"])),
                                    ("crash", f["crash_detect_ms"])):
                r = sim.simulate(p, n, "ring", "wait_all", failure={"kind": kind, "after_round": 6})
                self.assertAlmostEqual(r["detect_s"] * 1e3 / detect_ms, 1.0, delta=1e-9)
                self.assertGreaterEqual(r["recovery_s"] * 1e3, detect_ms)
                # After detection: reforming and the round among n - 1 hosts.
                allreduce_ms = alpha_beta_ring_s(n - 1, p["model"]["bytes"], p["network"]["latency_us"],
                                                 p["network"]["message_cpu_us"],
                                                 p["network"]["bandwidth_gbit_s"]) * 1e3
                self.assertAlmostEqual(r["recovery_s"] * 1e3,
                                       detect_ms + r["reform_s"] * 1e3 + allreduce_ms
                                       + p["round"]["apply_us"] * 1e-3, delta=1e-6)

    def test_the_per_key_rendezvous_grows_with_the_square_of_the_hosts(self):
        p = base_params()
        p["rendezvous"].update(store_op_us=draw.uniform(10, 300), connect_us=0.0,
                               state_sync_after_loss=False)
        p["network"]["latency_us"] = 0.0
        op_s = p["rendezvous"]["store_op_us"] * 1e-6
        for m in (1, draw.randint(2, 50), 1000):
            p["rendezvous"]["store_ops"] = "per_key"
            self.assertAlmostEqual(sim.reform_s(m, p, p["network"]) / (m * op_s + m * (2 * m - 1) * op_s),
                                   1.0, delta=1e-12)
            p["rendezvous"]["store_ops"] = "one_round_trip"
            self.assertAlmostEqual(sim.reform_s(m, p, p["network"]) / (m * op_s + 2 * m * op_s),
                                   1.0, delta=1e-12)

    def test_the_straggler_cutoff_never_gives_less_throughput_than_waiting_for_all(self):
        # Rounds per host count: the policies draw their rounds' times apart
        # (their trajectories part after the first cut), so the ratio is
        # noisy. At 4 hosts and 300 rounds its spread over seeds was 0.047
        # around 1.10 and one CI run saw 0.981; at 3,000 rounds it was 0.035
        # around 1.10, lowest 1.030 of 400 runs. More hosts average more.
        for n, probability, rounds in ((4, 0.2, 3000), (16, 0.05, 750), (48, 0.02, 300)):
            p = base_params()
            p["simulation"].update(rounds=rounds)
            p["stragglers"].update(probability=probability, slowdown=draw.uniform(3.0, 6.0))
            p["policy"]["cutoff_deadline_ms"] = p["gradient"]["median_ms"]
            p["policy"]["cutoff_quorum"] = 1.0  # a quorum below 1 can cut normal hosts
            for algorithm in sim.ALGORITHMS:
                wait = sim.simulate(p, n, algorithm, "wait_all")["env_steps_per_s"]
                cut = sim.simulate(p, n, algorithm, "straggler_cutoff")["env_steps_per_s"]
                # What sampling noise is left is far below 1%, so the
                # cutoff may not lose more than that.
                self.assertGreaterEqual(cut, 0.99 * wait,
                                        msg=f"{n} hosts, p {probability}, {algorithm}")

    def test_stragglers_cost_throughput_and_without_them_nothing_is_lost(self):
        p = base_params()
        p["stragglers"].update(probability=0.1, slowdown=4.0)
        rows = sim.project(p, [8])
        for row in rows:
            self.assertGreater(row["straggler_loss_share"], 0.0)
            self.assertLessEqual(row["env_steps_per_s"], row["env_steps_per_s_ideal"] * 1.05)
        p["stragglers"]["probability"] = 0.0
        for row in sim.project(p, [8]):
            self.assertEqual(row["straggler_loss_share"], 0.0)


def run_cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = sim.main(list(args))
    return code, out.getvalue(), err.getvalue()


class CommandLine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.quick = ["--quiet", "--hosts", "1,3", "--set", "simulation.rounds=40",
                      "--set", "simulation.min_host_rounds=0", "--set", "simulation.warmup_rounds=4"]

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_the_same_seed_gives_the_same_output_and_another_seed_another(self):
        seed = draw.randrange(2**31)
        outputs = []
        for s in (seed, seed, seed + 1):
            target = self.path(f"out{len(outputs)}.json")
            code, text, _ = run_cli(PARAMS, *self.quick, "--set", f"simulation.seed={s}",
                                    "--json", target)
            self.assertEqual(code, 0)
            with open(target, encoding="utf-8") as f:
                outputs.append((text, f.read()))
        self.assertEqual(outputs[0], outputs[1])
        self.assertNotEqual(outputs[0][1], outputs[2][1])
        rows = json.loads(outputs[0][1])["rows"]
        self.assertEqual({r["hosts"] for r in rows}, {1, 3})
        self.assertIn("env steps/s", outputs[0][0])

    def test_the_shipped_files_load_and_fit_reports_each_figure(self):
        code, text, _ = run_cli(PARAMS, "--fit", EXAMPLE, "--set", "simulation.rounds=40",
                                "--set", "simulation.min_host_rounds=0",
                                "--json", self.path("fit.json"))
        self.assertIn(code, (0, 1))
        with open(self.path("fit.json"), encoding="utf-8") as f:
            fit = json.load(f)
        with open(EXAMPLE, encoding="utf-8") as f:
            example = json.load(f)
        self.assertIn("illustrative", example["note"])
        self.assertEqual([r["processes"] for r in fit["fit"]],
                         [m["processes"] for m in example["measurements"]])
        for r in fit["fit"]:
            for key, err in r["relative_error"].items():
                self.assertAlmostEqual(err, (r["simulated"][key] - r["measured"][key]) / r["measured"][key])
        self.assertEqual(code == 0, fit["within_tolerance"])
        # A generous tolerance accepts the same figures.
        code, _, _ = run_cli(PARAMS, "--fit", EXAMPLE, "--tolerance", "1e9",
                             "--set", "simulation.rounds=40", "--set", "simulation.min_host_rounds=0")
        self.assertEqual(code, 0)

    def write(self, name, text):
        with open(self.path(name), "w", encoding="utf-8") as f:
            f.write(text)
        return self.path(name)

    def shipped(self):
        with open(PARAMS, encoding="utf-8") as f:
            return json.load(f)

    def expect_error(self, args, *fragments):
        code, _, err = run_cli(*args)
        self.assertEqual(code, 2, err)
        for fragment in fragments:
            self.assertIn(fragment, err)

    def test_bad_parameters_are_refused_naming_the_place_the_rule_and_the_value(self):
        doc = self.shipped()
        doc["network"]["latency_usec"] = doc["network"].pop("latency_us")
        bad = self.write("unknown.json", json.dumps(doc))
        self.expect_error([bad], "network.latency_usec", "unknown key", "latency_us")
        doc = self.shipped()
        doc["stragglers"]["probability"]["value"] = 1.5
        self.expect_error([self.write("range.json", json.dumps(doc))],
                          "stragglers.probability", "<= 1.0", "1.5")
        doc = self.shipped()
        doc["gradient"]["p99_ms"]["value"] = doc["gradient"]["median_ms"]["value"] / 2
        self.expect_error([self.write("p99.json", json.dumps(doc))], "gradient.p99_ms", "median_ms")
        doc = self.shipped()
        del doc["model"]["bytes"]["about"]
        self.expect_error([self.write("about.json", json.dumps(doc))], "model.bytes", "about")
        self.expect_error([self.write("broken.json", '{\n "hosts": [\n')], "broken.json:3", "not valid JSON")
        self.expect_error([PARAMS, "--set", "policy.policies=[\"wait_some\"]"], "policy.policies",
                          "wait_all", "wait_some")
        self.expect_error([PARAMS, "--set", "network.bandwith_gbit_s=10"], "bandwidth_gbit_s")
        self.expect_error([PARAMS, "--hosts", "1,x"], "--hosts", "1,x")
        self.expect_error([PARAMS, "--hosts", "0"], "--hosts", "0")
        self.expect_error([self.path("missing.json")], "missing.json", "cannot read")
        bad_fit = self.write("fit.json", json.dumps([{"processes": 2, "env_steps_per_second": 5}]))
        self.expect_error([PARAMS, "--fit", bad_fit], "measurements[0]", "env_steps_per_second",
                          "env_steps_per_s")
        bad_fit = self.write("fit2.json", json.dumps([{"processes": 2, "env_steps_per_s": -5}]))
        self.expect_error([PARAMS, "--fit", bad_fit], "measurements[0].env_steps_per_s", "-5")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
