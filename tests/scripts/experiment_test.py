#!/usr/bin/python3
"""scripts/experiment's summary and tests, black box (tests/CMakeLists.txt runs this).

  /usr/bin/python3 tests/scripts/experiment_test.py [REPO_ROOT]

Run folders are written here with fresh random curves (the seed is printed on
failure); every expected figure is computed here, independently of the
script's code: the rank-sum p-value by counting pairs over every split, Holm's
correction from its definition, quantiles with the standard library.
"""

import itertools
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "experiment")
SEED = int(os.environ.get("TROUPE_TEST_SEED", random.SystemRandom().getrandbits(32)))

COLUMNS = ["wall_time_s", "env_steps", "return_mean_100", "policy_lag_mean", "obs_drift_kl"]


def write_run(out, name, seed, curve, drift):
    """A run folder as troupe writes one: config.toml and metrics.csv."""
    folder = os.path.join(out, "{}-{}".format(name, seed))
    os.makedirs(folder)
    with open(os.path.join(folder, "config.toml"), "w") as f:
        f.write('[run]\nname = "{}"\nseed = {}\n\n[env]\nid = "X"\n'.format(name, seed))
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write(",".join(COLUMNS) + "\n")
        for i, (steps, ret) in enumerate(curve):
            f.write("{},{},{!r},{},{}\n".format(0.5 * (i + 1), steps, ret, 1.0,
                                                 drift[i] if drift else "nan"))
    return folder


def random_curve(rng, rows, level):
    return [((i + 1) * 1000, level + rng.gauss(0.0, 50.0)) for i in range(rows)]


def run_script(*args):
    done = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def pair_count_u(a, b):
    """U of a: pairs where a's value is above b's, ties counting one half."""
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


def exact_p(a, b):
    """Two-sided p of U by enumerating which of the pooled values form group a."""
    pooled = list(a) + list(b)
    centre = len(a) * len(b) / 2
    observed = abs(pair_count_u(a, b) - centre)
    extreme = total = 0
    for pick in itertools.combinations(range(len(pooled)), len(a)):
        chosen = set(pick)
        ga = [pooled[i] for i in pick]
        gb = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        total += 1
        if abs(pair_count_u(ga, gb) - centre) >= observed - 1e-9:
            extreme += 1
    return extreme / total


def holm_reference(ps):
    """Holm: the k-th smallest p times (m - k + 1), made monotone, capped at 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    best = 0.0
    for k, i in enumerate(order):
        best = max(best, (m - k) * ps[i])
        out[i] = min(1.0, best)
    return out


def table_rows(text, header_start):
    """The rows (lists of cells) of the markdown table whose header starts so."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip("|").split("|")])
            return rows
    raise AssertionError("no table starting {!r} in:\n{}".format(header_start, text))


class Experiment(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(SEED)
        self.tmp = tempfile.TemporaryDirectory()
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_summary_reports_threshold_final_and_peak(self):
        threshold = 1000.0
        expected = {}
        for seed in (1, 2, 3):
            curve = random_curve(self.rng, 40, self.rng.uniform(700, 1300))
            write_run(self.out, "arm", seed, curve, None)
            first = next((s for s, r in curve if r >= threshold), None)
            expected[seed] = (first, curve[-1][1], max(r for _, r in curve))
        rc, out, err = run_script("--summarize-only", "--threshold", str(threshold),
                                  "--out", self.out)
        self.assertEqual(rc, 0, err)
        (row,) = table_rows(out, "| run |")
        self.assertEqual(row[0], "arm")
        reached = sum(1 for f, _, _ in expected.values() if f is not None)
        self.assertEqual(row[1], "{}/3".format(reached))
        steps = ["{:.0f}k".format(f / 1000) if f is not None else "-"
                 for f, _, _ in (expected[s] for s in (1, 2, 3))]
        self.assertTrue(row[2].startswith(", ".join(steps)), (row[2], steps))
        finals = ["{:.0f}".format(expected[s][1]) for s in (1, 2, 3)]
        median = statistics.median(expected[s][1] for s in (1, 2, 3))
        self.assertEqual(row[4], "{} ({:.0f})".format(", ".join(finals), median))
        peaks = ["{:.0f}".format(expected[s][2]) for s in (1, 2, 3)]
        self.assertTrue(row[5].startswith(", ".join(peaks)), (row[5], peaks))

    def test_compare_gives_the_exact_rank_sum_p_and_holm(self):
        groups = {}
        for name, n in (("a", 5), ("b", 4), ("c", 4)):
            groups[name] = []
            level = self.rng.uniform(0, 300)
            for seed in range(1, n + 1):
                curve = random_curve(self.rng, 5, level)
                # A tie across groups now and then: midranks must count it half.
                if name == "c" and seed == 1:
                    curve[-1] = (curve[-1][0], groups["a"][0])
                write_run(self.out, name, seed, curve, None)
                groups[name].append(curve[-1][1])
        pairs = [("a", "b"), ("a", "c"), ("b", "c")]
        args = ["--summarize-only", "--out", self.out]
        for a, b in pairs:
            args += ["--compare", "{}:{}:final".format(a, b)]
        rc, out, err = run_script(*args)
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "| comparison |")
        self.assertEqual(len(rows), 3)
        ps = [exact_p(groups[a], groups[b]) for a, b in pairs]
        holm = holm_reference(ps)
        for row, (a, b), p, h in zip(rows, pairs, ps, holm):
            self.assertEqual(row[0], "{} vs {}".format(a, b))
            self.assertEqual(float(row[2]), pair_count_u(groups[a], groups[b]))
            # Shown with three significant digits.
            self.assertTrue(math.isclose(float(row[3]), p, rel_tol=5e-3), (row, p))
            self.assertTrue(math.isclose(float(row[4]), h, rel_tol=5e-3), (row, h))

    def test_complete_separation_of_ten_against_ten(self):
        for name, level in (("low", 0.0), ("high", 5000.0)):
            for seed in range(1, 11):
                write_run(self.out, name, seed, random_curve(self.rng, 3, level), None)
        rc, out, err = run_script("--summarize-only", "--out", self.out,
                                  "--compare", "high:low")
        self.assertEqual(rc, 0, err)
        (row,) = table_rows(out, "| comparison |")
        self.assertEqual(float(row[2]), 100.0)
        # Two of the C(20, 10) = 184,756 splits are as extreme.
        self.assertTrue(math.isclose(float(row[3]), 2 / math.comb(20, 10), rel_tol=5e-3), row)

    def test_column_gives_median_and_p90_after_the_start(self):
        start = 17000
        expected = []
        for seed in (1, 2):
            rows = 40
            curve = random_curve(self.rng, rows, 100.0)
            drift = [self.rng.lognormvariate(-2.0, 1.5) for _ in range(rows)]
            drift[25] = float("nan")  # a batch without the diagnostic
            write_run(self.out, "arm", seed, curve, drift)
            late = [d for (s, _), d in zip(curve, drift) if s >= start and d == d]
            expected.append((statistics.median(late),
                             statistics.quantiles(late, n=10, method="inclusive")[8],
                             len(late)))
        rc, out, err = run_script("--summarize-only", "--out", self.out,
                                  "--column", "obs_drift_kl@{}".format(start))
        self.assertEqual(rc, 0, err)
        (row,) = table_rows(out, "| run | obs_drift_kl at or after {}".format(start))
        cells = re.findall(r"([-0-9.e+]+)/([-0-9.e+]+) \((\d+)\)", row[1])
        self.assertEqual(len(cells), 2, row)
        for (med, p90, n), (want_med, want_p90, want_n) in zip(cells, expected):
            self.assertEqual(int(n), want_n)
            # Shown with two significant digits.
            self.assertTrue(math.isclose(float(med), want_med, rel_tol=0.05), (med, want_med))
            self.assertTrue(math.isclose(float(p90), want_p90, rel_tol=0.05), (p90, want_p90))

    def test_bad_arguments_are_refused_with_what_was_wrong(self):
        write_run(self.out, "arm", 1, random_curve(self.rng, 3, 0.0), None)
        rc, _, err = run_script("--summarize-only", "--out", self.out, "--column", "no_such")
        self.assertNotEqual(rc, 0)
        self.assertIn("no_such", err)
        self.assertIn("no such column", err)
        rc, _, err = run_script("--summarize-only", "--out", self.out,
                                "--column", "obs_drift_kl@soon")
        self.assertNotEqual(rc, 0)
        self.assertIn("FROM_STEPS must be a number, got 'soon'", err)
        rc, _, err = run_script("--summarize-only", "--out", self.out, "--compare", "arm:other")
        self.assertNotEqual(rc, 0)
        self.assertIn("no runs named other", err)
        rc, _, err = run_script("--summarize-only", "--out", self.out,
                                "--compare", "arm:arm:median")
        self.assertNotEqual(rc, 0)
        self.assertIn("A:B:final|steps|peak", err)
        rc, _, err = run_script("--summarize-only", "--out", os.path.join(self.out, "none"))
        self.assertNotEqual(rc, 0)
        self.assertIn("no run folders", err)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0]], exit=False).result
    if not result.wasSuccessful():
        print("failed with TROUPE_TEST_SEED={}".format(SEED))
        sys.exit(1)
