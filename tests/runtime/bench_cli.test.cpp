// `troupe bench learner --json`: one row per PPO case, V-trace shape and
// acting size, each with a positive finite rate; `troupe bench stats --json`:
// view reads by kind; `troupe bench embed --json`: act() latency and env
// step counts that add up; bad options exit 2. The JSON is parsed (nlohmann-json)
// and checked for its keys, their order and their values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli_support.hpp"

using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace {

// The output, parsed as one JSON document (fails the test when it is not).
nlohmann::ordered_json parse_json(const std::string& text) {
  auto parsed = nlohmann::ordered_json::parse(text, nullptr, false);
  REQUIRE_MESSAGE(!parsed.is_discarded(), "not JSON: ", text);
  return parsed;
}

// The keys of a JSON object, in order.
std::vector<std::string> keys_of(const nlohmann::ordered_json& object) {
  std::vector<std::string> out;
  for (auto& [key, value] : object.items())
    out.push_back(key);
  return out;
}

} // namespace

TEST_CASE("bench learner --json rows: PPO cases, whole updates on one and two threads, "
          "V-trace shapes and acting sizes, each with a positive rate") {
  temp_folder dir("bench-cli");
  // Two small cases (the default's [256,256] x 4096 whole updates take
  // minutes under ThreadSanitizer); chosen cases add no CartPole row.
  auto r = run_troupe("bench learner --json --device cpu --seconds 0.01 --cases "
                      "64x128,256x256",
                      dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto rows = parse_json(r.out);
  REQUIRE(rows.is_array());
  // The two PPO cases; their whole updates, on one thread and (with two
  // hardware threads) on two; two V-trace shapes; two acting sizes; in that
  // order.
  const size_t threads = std::thread::hardware_concurrency() >= 2 ? 2 : 1;
  const size_t updates = 2 * threads;
  REQUIRE(rows.size() == 6 + updates);
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    const auto& row = rows[i];
    const std::string kind = i < 2                 ? "ppo"
                             : i < 2 + updates     ? "ppo_update"
                             : i < 2 + updates + 2 ? "vtrace"
                                                   : "act";
    CHECK(row.at("kind") == kind);
    CHECK(row.at("device") == "cpu");
    std::vector<std::string> keys = {"kind",  "device",        "hidden",
                                     "batch", "samples_per_s", "gemm_gflop_per_s"};
    if (kind == "vtrace")
      keys.push_back("steps");
    if (kind == "ppo_update") {
      keys.push_back("minibatches");
      keys.push_back("threads");
      CHECK(row.at("threads") == (i - 2) % threads + 1);
      CHECK(row.at("hidden") == rows[(i - 2) / threads].at("hidden"));
      CHECK(row.at("batch") == rows[(i - 2) / threads].at("batch"));
    }
    CHECK(keys_of(row) == keys);
    CHECK(row.at("hidden").is_array());
    const double rate = row.at("samples_per_s").get<double>();
    CHECK(std::isfinite(rate));
    CHECK(rate > 0);
  }
  const size_t v = 2 + updates;
  CHECK(rows[v].at("steps") == 32);
  CHECK(rows[v + 1].at("steps") == 16);
  CHECK(rows[v].at("batch") == 1024);     // 32 x 32
  CHECK(rows[v + 1].at("batch") == 1024); // 16 x 64
  CHECK(rows[0].at("hidden") == std::vector<int>{64, 64});
  CHECK(rows[0].at("batch") == 128);
  CHECK(rows[1].at("hidden") == std::vector<int>{256, 256});
  CHECK(rows[1].at("batch") == 256);
  auto bad = run_troupe("bench learner --device tpu", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("tpu") != std::string::npos);
}

TEST_CASE(
  "bench stats --json reports reads of a new snapshot apart from reads with nothing "
  "new, and the two counts add up to the reads timed") {
  temp_folder dir("bench-stats-cli");
  auto r = run_troupe("bench stats --json --deltas 1000 --repeats 1 --reads 20000", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  INFO(r.out);
  const auto out = parse_json(r.out);
  CHECK(keys_of(out) ==
        std::vector<std::string>{
          "merges_per_s", "raw_caf_msgs_per_s", "merge_to_raw_ratio",
          "publish_every_merges", "read_ns_new_snapshot", "read_ns_nothing_new",
          "read_ns_new_snapshot_every_merge", "read_ns_nothing_new_every_merge",
          "consumer_iters_per_s_keeper_running", "consumer_iters_per_s_keeper_blocked",
          "stalled_keeper_throughput_ratio", "dim", "producers", "scheduler_threads"});
  // New and nothing new with default publishing, then both for publishing
  // on every merge.
  const nlohmann::ordered_json* kinds[] = {&out.at("read_ns_new_snapshot"),
                                           &out.at("read_ns_nothing_new"),
                                           &out.at("read_ns_new_snapshot_every_merge"),
                                           &out.at("read_ns_nothing_new_every_merge")};
  std::vector<uint64_t> reads;
  for (auto* kind : kinds) {
    CHECK(keys_of(*kind) == std::vector<std::string>{"reads", "p50", "p99", "p999"});
    reads.push_back(kind->at("reads").get<uint64_t>());
  }
  CHECK(reads[0] + reads[1] == 20000);
  CHECK(reads[2] + reads[3] == 20000);
  CHECK(reads[1] > 0);
  CHECK(reads[3] > 0);
  // A kind of read that happened has finite percentiles; p50 <= p99 <= p99.9.
  // One that never happened has null ones.
  for (size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    const auto& kind = *kinds[k];
    if (reads[k] == 0) {
      CHECK(kind.at("p50").is_null());
      CHECK(kind.at("p999").is_null());
      continue;
    }
    const double p50 = kind.at("p50").get<double>(), p99 = kind.at("p99").get<double>(),
                 p999 = kind.at("p999").get<double>();
    CHECK(std::isfinite(p50));
    CHECK(p50 <= p99);
    CHECK(p99 <= p999);
  }
  auto bad = run_troupe("bench stats --reads 5", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("reads") != std::string::npos);
}

TEST_CASE(
  "bench embed --json reports act() latency percentiles in order, env step counts "
  "that add up and the rates they imply") {
  temp_folder dir("bench-embed-cli");
  auto r = run_troupe("bench embed --json --steps 4096 --slots 3 --seed 5", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto out = parse_json(r.out);
  REQUIRE(out.is_object());
  CHECK(keys_of(out) ==
        std::vector<std::string>{"slots", "act_p50_us", "act_p99_us", "act_max_us",
                                 "act_samples", "game_env_steps", "game_env_steps_per_s",
                                 "learned_env_steps", "learned_env_steps_per_s",
                                 "dropped", "episodes", "return_mean_100", "seconds"});
  CHECK(out.at("slots") == 3);
  const double p50 = out.at("act_p50_us").get<double>(),
               p99 = out.at("act_p99_us").get<double>(),
               max = out.at("act_max_us").get<double>();
  CHECK(std::isfinite(max));
  CHECK(p50 >= 0);
  // Rounded to 3 and 1 decimals: the order holds up to the rounding.
  CHECK(p50 <= p99);
  CHECK(p99 <= max + 0.05);
  const auto samples = out.at("act_samples").get<uint64_t>();
  const auto game = out.at("game_env_steps").get<uint64_t>();
  const auto learned = out.at("learned_env_steps").get<uint64_t>();
  const auto dropped = out.at("dropped").get<uint64_t>();
  const double seconds = out.at("seconds").get<double>();
  CHECK(samples > 0);
  CHECK(samples <= game); // every timed act() is one env step of the game
  CHECK(learned >= 4096); // the learner spent its budget
  // What the learner learned from and what was dropped came from the game.
  CHECK(learned + dropped <= game);
  REQUIRE(seconds > 0);
  // The rates are the counts over the loop's seconds. Both are rounded (the
  // seconds to 3 decimals, the rates to 1), so each rate lies between the
  // count over the largest and over the smallest time that rounds to the
  // printed seconds (a loop of 50 ms leaves 1% of room, which a fixed
  // relative tolerance missed now and then).
  const double game_rate = out.at("game_env_steps_per_s").get<double>();
  const double learned_rate = out.at("learned_env_steps_per_s").get<double>();
  CHECK(std::isfinite(game_rate));
  const double longest = seconds + 0.0005, shortest = std::max(seconds - 0.0005, 1e-9);
  for (const auto& rc : {std::pair{game_rate, game}, std::pair{learned_rate, learned}}) {
    const double rate = rc.first, n = static_cast<double>(rc.second);
    CHECK(rate >= n / longest - 0.05);
    CHECK(rate <= n / shortest + 0.05);
  }
  CHECK(out.at("episodes").get<uint64_t>() > 0);

  auto bad = run_troupe("bench embed --steps 5", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--steps") != std::string::npos);
  auto unknown = run_troupe("bench embed --fps 5", dir);
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("fps") != std::string::npos);
  auto unthrottled_frames = run_troupe("bench embed --frames 5", dir);
  CHECK(unthrottled_frames.status == 2);
  CHECK(unthrottled_frames.err.find("--frames needs --hz") != std::string::npos);
}

// The throttled loop waits for each frame's deadline (the benchmark's own
// wait; 40 frames at 1 kHz). Only counts and orders are asserted, never times.
TEST_CASE("bench embed --hz reports the first act() of a frame apart from the rest and "
          "the control beside them, with counts that follow from the frames and slots") {
  temp_folder dir("bench-embed-hz");
  auto r = run_troupe("bench embed --json --hz 1000 --frames 40 --slots 3 --seed 2", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto out = parse_json(r.out);
  REQUIRE(out.is_object());
  CHECK(out.at("hz") == 1000);
  CHECK(out.at("frames") == 40);
  CHECK(out.at("wait") == "sleep");
  CHECK(out.at("calls") == "act");
  CHECK(out.at("missed_frames").get<uint64_t>() <= 40);
  CHECK(out.at("game_env_steps") == 120); // 40 frames x 3 slots
  CHECK(out.at("act_samples") == 120);
  // The acts lead on odd frames, the control on even ones.
  const std::vector<std::pair<std::string, uint64_t>> expected{
    {"first_act", 20}, {"rest_act", 100}, {"control_first", 20}, {"control_warm", 20}};
  for (const auto& item : expected) {
    // Not a structured binding: INFO is a lambda (clang 14).
    const std::string& kind = item.first;
    const uint64_t samples = item.second;
    INFO(kind);
    const auto& k = out.at(kind);
    CHECK(keys_of(k) ==
          std::vector<std::string>{"p50_us", "p99_us", "max_us", "samples"});
    CHECK(k.at("samples").get<uint64_t>() == samples);
    const double p50 = k.at("p50_us").get<double>(), p99 = k.at("p99_us").get<double>(),
                 max = k.at("max_us").get<double>();
    CHECK(p50 > 0);
    CHECK(p50 <= p99);
    CHECK(p99 <= max + 0.05);
  }
  auto table = run_troupe("bench embed --hz 1000 --frames 4 --slots 2 --spin", dir);
  INFO(table.err);
  REQUIRE(table.status == 0);
  CHECK(table.out.find("busy-waiting") != std::string::npos);
  CHECK(table.out.find("act(), first of a frame") != std::string::npos);
  CHECK(table.out.find("control, first after the wait") != std::string::npos);
  // --batch: one act_batch() per frame, so one timed call per frame.
  auto batch =
    run_troupe("bench embed --json --hz 1000 --frames 6 --slots 3 --batch", dir);
  INFO(batch.err);
  REQUIRE(batch.status == 0);
  const auto batched = parse_json(batch.out);
  CHECK(batched.at("calls") == "act_batch");
  CHECK(batched.at("game_env_steps") == 18);
  CHECK(batched.at("act_samples") == 6);
  CHECK(batched.at("first_act").at("samples") == 3);
  CHECK(batched.at("rest_act").at("samples") == 3);
  auto spin_alone = run_troupe("bench embed --spin", dir);
  CHECK(spin_alone.status == 2);
  CHECK(spin_alone.err.find("--spin needs --hz") != std::string::npos);
}

TEST_CASE(
  "bench remote --json reports, per number of clients, the env steps through troupe "
  "and through the raw ZeroMQ floor, and refuses a bad --clients") {
  temp_folder dir("bench-remote-cli");
  auto r = run_troupe("bench remote --json --seconds 1 --clients 1,2 --envs 8", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto out = parse_json(r.out);
  CHECK(keys_of(out) ==
        std::vector<std::string>{"envs_per_message", "seconds", "curve", "runs"});
  CHECK(out.at("envs_per_message") == 8);
  CHECK(out.at("curve") == false);
  const auto& runs = out.at("runs");
  REQUIRE(runs.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto& run = runs[i];
    CHECK(keys_of(run) == std::vector<std::string>{"clients", "env_steps_per_s",
                                                   "floor_env_steps_per_s",
                                                   "ratio_to_floor", "env_steps"});
    CHECK(run.at("clients") == i + 1);
    const auto steps = run.at("env_steps").get<uint64_t>();
    CHECK(steps > 0);
    CHECK(steps % 8 == 0); // whole messages of 8 environments
    const double rate = run.at("env_steps_per_s").get<double>();
    const double floor = run.at("floor_env_steps_per_s").get<double>();
    REQUIRE(floor > 0);
    CHECK(run.at("ratio_to_floor").get<double>() ==
          doctest::Approx(rate / floor).epsilon(0.01));
  }
  // With CURVE: the clients' keys are let in and their steps counted.
  r = run_troupe("bench remote --json --seconds 1 --clients 1 --envs 8 --curve", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto curve = parse_json(r.out);
  CHECK(curve.at("curve") == true);
  REQUIRE(curve.at("runs").size() == 1);
  CHECK(curve.at("runs")[0].at("env_steps").get<uint64_t>() > 0);
  auto bad = run_troupe("bench remote --clients 1,x", dir);
  CHECK(bad.status == 2);
  CHECK(
    bad.err.find("--clients takes numbers in [1, 256] separated by commas, got 'x'") !=
    std::string::npos);
}

TEST_CASE("bench allreduce --json reports, per group size, the round's time through Gloo "
          "and through a raw TCP ring, and refuses bad sizes") {
  temp_folder dir("bench-allreduce-cli");
  auto r =
    run_troupe("bench allreduce --json --members 1,3 --doubles 1001 --rounds 20", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto out = parse_json(r.out);
  CHECK(keys_of(out) == std::vector<std::string>{"doubles", "rounds", "runs"});
  CHECK(out.at("doubles") == 1001);
  CHECK(out.at("rounds") == 20);
  const auto& runs = out.at("runs");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].at("members") == 1);
  CHECK(runs[1].at("members") == 3);
  const auto& three = runs[1];
  CHECK(keys_of(three) == std::vector<std::string>{"members", "round_us_p50",
                                                   "round_us_p99", "round_us_mean",
                                                   "floor_us_p50", "floor_us_p99",
                                                   "floor_us_mean", "floor_over_gloo"});
  const double p50 = three.at("round_us_p50").get<double>();
  CHECK(p50 > 0);
  CHECK(three.at("round_us_p99").get<double>() >= p50);
  const double mean = three.at("round_us_mean").get<double>();
  const double floor = three.at("floor_us_mean").get<double>();
  CHECK(floor > 0);
  CHECK(three.at("floor_over_gloo").get<double>() ==
        doctest::Approx(floor / mean).epsilon(0.01));
  for (const auto& c : std::vector<std::pair<std::string, std::string>>{
         {"--members 2,0",
          "--members takes numbers in [1, 64] separated by commas, got '0'"},
         {"--rounds 5", "rounds"},
         {"--doubles 0", "doubles"}}) {
    CAPTURE(c.first);
    auto bad = run_troupe("bench allreduce " + c.first, dir);
    CHECK(bad.status == 2);
    CHECK(bad.err.find(c.second) != std::string::npos);
  }
}
