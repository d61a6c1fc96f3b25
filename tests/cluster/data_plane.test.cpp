// Black-box tests of the all-reduce data plane (cluster.data_plane =
// "allreduce"): a coordinator and worker processes on loopback, each host a
// replica of the parameter server, the replicas' weights hash-checked in
// every round; the group's forming, its refusals and a lost member.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actors/replica.hpp"
#include "learners/checkpoint.hpp"
#include "tests/cli_support.hpp"
#include "tests/cluster/cluster_fixture.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using namespace troupe::test;

namespace {

// The cases' CartPole PPO config with the default data plane, the all-reduce
// one, and `hosts` worker hosts in the group ([cluster] is the config's last
// section).
std::string write_plane_config(const temp_folder& dir, uint64_t seed, uint64_t total,
                               int hosts, const std::string& mode = "async") {
  const auto path = write_config(dir, seed, total, /*obs_norm=*/true, mode);
  const auto text =
    read_text(path) + fmt::format("hosts = {}\nround_timeout_ms = {}\n", hosts,
                                  20000 * TROUPE_TEST_TIMEOUT_SCALE);
  return dir.write("cluster.toml", text);
}

// The coordinator's closing line about the data plane: rounds and members.
std::pair<long, long> rounds_and_members(const std::string& log) {
  std::smatch m;
  const std::regex said(
    R"(cluster: the data plane: ([0-9]+) rounds over ([0-9]+) members)");
  REQUIRE_MESSAGE(std::regex_search(log, m, said), "no data plane summary in:\n" << log);
  return {std::stol(m[1].str()), std::stol(m[2].str())};
}

// Waits until the coordinator's log says that the group formed again as
// `says`, then for 20 more updates after `when` (the group goes on learning).
void await_new_epoch(cluster_run& fx, child& coord, const std::string& says,
                     const std::string& when, const std::vector<child*>& also) {
  fx.await(
    [&] {
      return coord.err().find("the data plane's group forms again: " + says) !=
             std::string::npos;
    },
    std::chrono::seconds(120), "no epoch saying: " + says, also);
  const double updates = metric(fx.run, "updates");
  fx.await([&] { return metric(fx.run, "updates") > updates + 20; },
           std::chrono::seconds(120), "no 20 updates after " + when, also);
}

} // namespace

TEST_CASE_FIXTURE(cluster_run,
                  "with the all-reduce data plane two workers train CartPole PPO async "
                  "past a mean return of 200, their replicas' weights hash-checked in "
                  "every round, and the coordinator, with no learners, stays out of the "
                  "group and writes the members' weights into its final checkpoint") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 3000000, 2));
  auto& w1 = start_worker("w1");
  auto& w2 = start_worker("w2");
  INFO(report());
  await([&] { return metric(run, "return_mean_100") > 200; }, std::chrono::seconds(240),
        "no 100-episode mean return above 200", {&w1, &w2});
  CHECK(metric(run, "hosts") == 2);
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  const auto log = coord.err();
  CHECK(log.find("the data plane's group forms: 2 host(s), epoch 1, on 127.0.0.1") !=
        std::string::npos);
  const auto [rounds, members] = rounds_and_members(log);
  CHECK(members == 2);
  CHECK(rounds > 10);
  CHECK(log.find("the coordinator out of the group") != std::string::npos);
  // Each member gave the coordinator its replica as it left; the final
  // checkpoint holds the newest, whose hash the closing line names.
  CHECK(coord.out().find("cluster: host w1 leaves with its replica at version ") !=
        std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex(R"(the weights' hash 0x([0-9a-f]{16}))")));
  const auto hash = std::stoull(m[1].str(), nullptr, 16);
  const auto folders = troupe::learners::checkpoint_folders(run.string());
  REQUIRE(!folders.empty());
  auto final_ckpt = troupe::learners::load_checkpoint(
    (fs::path(folders.back()) / "policy.safetensors").string());
  const std::string load_error = final_ckpt.ok() ? "" : final_ckpt.err().message;
  CAPTURE(load_error);
  REQUIRE(final_ckpt.ok());
  const auto& model = final_ckpt->model;
  const std::vector<float> params(model.params(), model.params() + model.param_count());
  const std::vector<float> buffers(model.buffers(),
                                   model.buffers() + model.buffer_count());
  CHECK(troupe::actors::weights_hash(params, buffers) == hash);
  // The gradients went to the hosts' own replicas: the coordinator's counts
  // them as all-reduced, not as sent to it.
  CHECK(log.find("gradients applied on every host: ") != std::string::npos);
  for (const auto* c : {&coord, &w1, &w2}) {
    const auto text = c->err() + c->out();
    CHECK(text.find("differ between hosts") == std::string::npos);
    // A round in flight when the run ends may fail (the others left); no
    // replica ended before that.
    CHECK(text.find("the parameter server ended") == std::string::npos);
  }
}

// The newest version a member's replica left with, from the coordinator's log.
static long left_at_version(const std::string& log) {
  long newest = -1;
  const std::regex left(R"(leaves with its replica at version ([0-9]+) after)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), left);
       it != std::sregex_iterator(); ++it)
    newest = std::max(newest, std::stol((*it)[1].str()));
  return newest;
}

TEST_CASE_FIXTURE(cluster_run,
                  "a coordinator out of the group, resumed from its final checkpoint, "
                  "hands the joining workers the checkpoint's weights, Adam state and "
                  "counters, and their rounds go on from its version") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 100000000, 2));
  auto& w1 = start_worker("w1");
  auto& w2 = start_worker("w2");
  INFO(report());
  await([&] { return metric(run, "updates") >= 20; }, std::chrono::seconds(120),
        "no 20 updates of the group", {&w1, &w2});
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  const long version = left_at_version(coord.out());
  REQUIRE(version > 0);

  auto& coord2 = resume_coordinator("127.0.0.1:0", "127.0.0.1");
  addr = address_of(run);
  auto& w3 = start_worker("w3");
  auto& w4 = start_worker("w4");
  const double updates = metric(run, "updates");
  await([&] { return metric(run, "updates") > updates + 10; }, std::chrono::seconds(120),
        "no 10 updates after the resume", {&w3, &w4});
  stop_run({{"coordinator", &coord2}, {"w3", &w3}, {"w4", &w4}});
  const auto log = coord2.err();
  CHECK(log.find("the data plane's group forms: 2 host(s), epoch 1, on 127.0.0.1") !=
        std::string::npos);
  // Each joining host's replica started from the checkpoint: its version,
  // and Adam's step count with it (one per round that applied gradients).
  for (const auto* w : {&w3, &w4}) {
    const auto text = w->err() + w->out();
    CAPTURE(text);
    std::smatch m;
    REQUIRE(std::regex_search(text, m,
                              std::regex(R"(its replica starts from the coordinator's )"
                                         R"(state at version ([0-9]+) \(Adam step )"
                                         R"(([0-9]+)\))")));
    CHECK(std::stol(m[1].str()) == version);
    CHECK(std::stol(m[2].str()) == version);
  }
  CHECK(left_at_version(coord2.out()) > version);
  CHECK(log.find("differ between hosts") == std::string::npos);
}

TEST_CASE_FIXTURE(
  cluster_run,
  "sync mode with the all-reduce data plane and a coordinator with a learner "
  "of its own (rank 0 of the group): every round is one optimizer step of "
  "all four learners, and the run learns") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 3000000, 2, "sync"),
                      {"--set", "algo.num_learners=1"});
  auto& w1 = start_worker("w1");
  auto& w2 = start_worker("w2", {"--learners", "2"});
  INFO(report());
  await([&] { return metric(run, "return_mean_100") > 150; }, std::chrono::seconds(240),
        "no 100-episode mean return above 150", {&w1, &w2});
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  const auto log = coord.err();
  CHECK(log.find("the data plane's group forms: 2 host(s) and the coordinator, epoch 1, "
                 "on 127.0.0.1") != std::string::npos);
  const auto [rounds, members] = rounds_and_members(log);
  CHECK(members == 3);
  // Sync: each round waits for one gradient of each of the four learners,
  // so the gradients applied are four per step (the last round may have
  // ended with the run).
  std::smatch m;
  const std::regex applied(
    R"(gradients applied on every host: ([0-9]+) \(version ([0-9]+)\))");
  REQUIRE(std::regex_search(log, m, applied));
  const long gradients = std::stol(m[1].str()), version = std::stol(m[2].str());
  CHECK(version > 10);
  CHECK(gradients == 4 * version);
  CHECK(rounds >= version);
}

TEST_CASE_FIXTURE(cluster_run,
                  "a learner host that comes after the group formed enters at the next "
                  "epoch with the members' weights and learns with them") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 100000000, 1));
  auto& w1 = start_worker("w1");
  INFO(report());
  await([&] { return metric(run, "updates") >= 5; }, std::chrono::seconds(120),
        "no 5 updates with the group of w1 alone", {&w1});
  auto& late = start_worker("late");
  await_new_epoch(*this, coord, "2 host(s), epoch 2, on 127.0.0.1 (host late joins)",
                  "the join", {&w1, &late});
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"late", &late}});
  const auto log = coord.err();
  const auto [rounds, members] = rounds_and_members(log);
  CHECK(members == 2);
  CHECK(rounds > 10);
  CHECK(log.find("differ between hosts") == std::string::npos);
  // w1 was in a round or between two when the group moved on: it left epoch 1
  // and took part in epoch 2's first exchange.
  CHECK(std::regex_search(w1.err() + w1.out(),
                          std::regex(R"(replica of host 'w1': the group formed again )"
                                     R"(\(rank [01] of 2, epoch 2\))")));
}

TEST_CASE_FIXTURE(cluster_run,
                  "with cluster.hosts = 0 a coordinator with a learner trains alone in a "
                  "group of one from its start, and each learner host that joins enters "
                  "at the next epoch") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 100000000, 0),
                      {"--set", "algo.num_learners=1"});
  INFO(report());
  await([&] { return metric(run, "updates") >= 5; }, std::chrono::seconds(120),
        "no 5 updates of the coordinator's group of one", {});
  CHECK(coord.err().find("the data plane's group forms: 0 host(s) and the coordinator, "
                         "epoch 1, on 127.0.0.1") != std::string::npos);
  auto& w1 = start_worker("w1");
  await_new_epoch(*this, coord,
                  "1 host(s) and the coordinator, epoch 2, on 127.0.0.1 "
                  "(host w1 joins)",
                  "w1 joined", {&w1});
  auto& w2 = start_worker("w2");
  await_new_epoch(*this, coord,
                  "2 host(s) and the coordinator, epoch 3, on 127.0.0.1 "
                  "(host w2 joins)",
                  "w2 joined", {&w1, &w2});
  CHECK(metric(run, "hosts") == 2);
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  const auto log = coord.err();
  const auto [rounds, members] = rounds_and_members(log);
  CHECK(members == 3);
  CHECK(rounds > 20);
  // The coordinator's replica left each group for the next at a join.
  const auto coord_text = log + coord.out();
  CHECK(coord_text.find("replica of host 'coordinator': the group formed again (rank 0 "
                        "of 2, epoch 2)") != std::string::npos);
  CHECK(coord_text.find("replica of host 'coordinator': the group formed again (rank 0 "
                        "of 3, epoch 3)") != std::string::npos);
  for (const auto* c : {&coord, &w1, &w2})
    CHECK((c->err() + c->out()).find("differ between hosts") == std::string::npos);
}

// The replicas' log lines about a failed round that the survivors complete
// in the next epoch: the failure naming the lost peer, and what became of
// the round (applied nowhere: sent again; applied elsewhere: taken from there).
static void check_regrouped(const std::string& host, const std::string& log) {
  CAPTURE(host);
  // The round fails on the lost peer's closed connection, or, when the gate
  // opened epoch 2 first, on the old group being replaced.
  CHECK(std::regex_search(
    log,
    std::regex("replica of host '" + host +
               R"(': round [0-9]+ failed: (gloo [^\n]*\(rank [0-9] of 3, epoch 1\) )"
               R"(failed: [^\n]*127\.0\.0\.1[^\n]*|the group of epoch 1 is replaced )"
               R"(by epoch 2 \(rank [0-9] of 3\)); the members still alive form )"
               R"(the group again)")));
  CHECK(std::regex_search(
    log,
    std::regex("replica of host '" + host +
               R"(': the group formed again \(rank [0-9] of 2, epoch 2\); the failed )"
               R"(round (was applied nowhere: this host sends its sums again|was )"
               R"(applied on another member: its sums are taken from there))")));
}

TEST_CASE_FIXTURE(cluster_run,
                  "a member killed with SIGKILL: the survivors (a coordinator with a "
                  "learner and a worker) form the group again in epoch 2, complete the "
                  "failed round once and go on learning") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 100000000, 2),
                      {"--set", "algo.num_learners=1"});
  auto& w1 = start_worker("w1");
  auto& w2 = start_worker("w2");
  INFO(report());
  await([&] { return metric(run, "updates") >= 10; }, std::chrono::seconds(120),
        "no 10 updates of the group", {&w1, &w2});
  w2.kill_now();
  await_new_epoch(*this, coord, "1 host(s) and the coordinator, epoch 2", "the loss",
                  {&w1});
  stop_run({{"coordinator", &coord}, {"w1", &w1}});
  const auto log = coord.err();
  check_regrouped("coordinator", log);
  check_regrouped("w1", w1.err() + w1.out());
  const auto [rounds, members] = rounds_and_members(log);
  CHECK(members == 2);
  CHECK(rounds > 10);
  // Every round after the loss checked the two replicas' weights against each
  // other: a round applied twice on one of them would have ended the run.
  for (const auto* text : {&log}) {
    CHECK(text->find("differ between hosts") == std::string::npos);
    CHECK(text->find("the parameter server ended") == std::string::npos);
  }
  CHECK(log.find("lost host w2 (127.0.0.1:") != std::string::npos);
  CHECK(log.find("it hosted learners w2.learner0 (1 runners each); its count of env "
                 "steps not learned is unknown") != std::string::npos);
  // Its incarnation is fenced at the keeper (whose answer names the last of its
  // observation deltas merged), and nothing of it merged after that: the
  // keeper's count from w2 is its count at the fence, its count from w1 is
  // what w1's outbox saw acknowledged, and the coordinator's own runner's
  // (not sequenced) come on top.
  CHECK(log.find("fenced host w2 (incarnation ") != std::string::npos);
  CHECK(log.find("at the statistics keeper: merged obs through delta ") !=
        std::string::npos);
  CHECK(log.find("could not fence") == std::string::npos);
  const long total =
    number_after(log, R"(cluster: the statistics keeper merged ([0-9]+) samples)");
  const long from_w1 =
    number_after(log, R"(by worker incarnation: [^\n]*w1/[0-9a-f]+ ([0-9]+))");
  const long from_w2 =
    number_after(log, R"(by worker incarnation: [^\n]*w2/[0-9a-f]+ ([0-9]+))");
  const long w2_at_fence = number_after(
    log,
    R"(fenced worker 'w2' incarnation [0-9a-fx]+: its later deltas are dropped; it merged ([0-9]+) samples)");
  const long w1_acked = number_after(
    w1.out(),
    R"(worker w1: the statistics keeper acknowledged [0-9]+ delta\(s\) \(([0-9]+) samples\) from this host\n)");
  CHECK(from_w1 > 0);
  CHECK(from_w2 > 0);
  CHECK(total >= from_w1 + from_w2);
  CHECK(from_w2 == w2_at_fence);
  CHECK(from_w1 == w1_acked);
}

TEST_CASE_FIXTURE(
  cluster_run,
  "a member frozen with SIGSTOP is declared lost and left out of epoch 2, and "
  "after SIGCONT it joins again in epoch 3") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 100000000, 2));
  auto& w1 = start_worker("w1");
  auto& w2 = start_worker("w2");
  INFO(report());
  await([&] { return metric(run, "updates") >= 10; }, std::chrono::seconds(120),
        "no 10 updates of the group", {&w1, &w2});
  w2.signal(SIGSTOP);
  await_new_epoch(*this, coord, "1 host(s), epoch 2", "w2 froze", {&w1});
  // Let go, w2 finds its coordinator connection gone, joins again as a new
  // incarnation and enters the next epoch.
  w2.signal(SIGCONT);
  await_new_epoch(*this, coord, "2 host(s), epoch 3, on 127.0.0.1 (host w2 joins)",
                  "w2 came back", {&w1, &w2});
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  CHECK(coord.err().find("differ between hosts") == std::string::npos);
  CHECK(rounds_and_members(coord.err()).second == 2);
}

TEST_CASE_FIXTURE(cluster_run,
                  "an environment-only host (started without --run) feeds the learner "
                  "hosts' learners through their feed doors and takes their policy "
                  "versions, a learner host that joins later takes half its runners, and "
                  "when a learner host is killed its runners go to the other") {
  auto& coord =
    start_coordinator(write_plane_config(dir, fresh_seed() % 1000, 50000000, 2));
  auto& w1 = start_worker("w1");
  // No --run: it learns the run from the welcome, and only then reaches the
  // learner hosts, which were started with it.
  auto args = worker_args("e1", {"--learners", "0", "--runners", "2"});
  args.erase(args.begin() + 3, args.begin() + 5);
  REQUIRE(std::find(args.begin(), args.end(), "--run") == args.end());
  auto& e1 = start("e1", args);
  INFO(report());
  const auto e1_log = [&] { return e1.out() + e1.err(); };
  const auto log_of = [](child& c) { return c.out() + c.err(); };
  // w1's door is the only one: both runners go there.
  await(
    [&] {
      const auto log = e1_log();
      return log.find("runner 'e1.runner0' feeds learner 0 of learner host w1") !=
               std::string::npos &&
             log.find("runner 'e1.runner1' feeds learner 0 of learner host w1") !=
               std::string::npos;
    },
    std::chrono::seconds(120), "e1's runners were not handed to w1", {&w1, &e1});
  CHECK(e1_log().find("2 runners feeding the learners of 1 learner host(s)") !=
        std::string::npos);
  CHECK(e1_log().find("takes the policy versions of learner host w1") !=
        std::string::npos);

  // w2 joins: its door opens, and one runner moves to it; w1's learner lets
  // it go, w2's learns its batches.
  auto& w2 = start_worker("w2");
  std::smatch m;
  std::string moved; // taken from the log while it lives (m points into it)
  await(
    [&] {
      const auto log = e1_log();
      if (!std::regex_search(
            log, m,
            std::regex(R"(runner '(e1.runner[01])' moves from learner host w1 to w2)")))
        return false;
      moved = m[1].str();
      return true;
    },
    std::chrono::seconds(120), "no runner of e1 moved to w2", {&w1, &w2, &e1});
  const std::string stayed = moved == "e1.runner0" ? "e1.runner1" : "e1.runner0";
  await(
    [&] {
      return log_of(w2).find("first batch from guest runner '" + moved + "'") !=
               std::string::npos &&
             log_of(w1).find("guest runner '" + moved + "' left it") !=
               std::string::npos &&
             log_of(w1).find("first batch from guest runner '" + stayed + "'") !=
               std::string::npos;
    },
    std::chrono::seconds(120),
    "w2's learner did not learn the moved runner's batches, or w1's the other's",
    {&w1, &w2, &e1});
  const auto coord_log = coord.err() + coord.out();
  CHECK(coord_log.find("cluster: learner host w1 opened its feed door at 127.0.0.1:") !=
        std::string::npos);
  CHECK(coord_log.find("no learners, 2 runners feeding the learner hosts' learners") !=
        std::string::npos);

  // hosts.csv has rows of both learner hosts (the environment-only host's
  // batches count where they were learned), w2's once its reports arrived.
  const auto host_row = [&](const std::string& host) {
    return std::regex_search(read_text(run / "hosts.csv"),
                             std::regex("\n[0-9.e+-]+,[0-9]+," + host + ",[1-9][0-9]*,"));
  };
  await([&] { return host_row("w1") && host_row("w2"); }, std::chrono::seconds(120),
        "no rows of w1 and w2 in hosts.csv", {&w1, &w2, &e1});

  // w2 is killed: its runner goes back to w1's learner, which learns on.
  w2.kill_now();
  await(
    [&] {
      const auto log = log_of(w1);
      // The runner joins w1's learner a second time.
      const auto first = log.find("guest runner '" + moved + "' joins");
      return first != std::string::npos && log.find("guest runner '" + moved + "' joins",
                                                    first + 1) != std::string::npos;
    },
    std::chrono::seconds(120), "the runner of the killed host did not go back to w1",
    {&w1, &e1});
  CHECK(e1_log().find("lost the feed door of learner host w2") != std::string::npos);
  const double updates = metric(run, "updates");
  await([&] { return metric(run, "updates") > updates + 20; }, std::chrono::seconds(120),
        "no 20 updates after w2 was killed", {&w1, &e1});
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"e1", &e1}});
  // The environment-only host acted with versions the learner hosts pushed:
  // the coordinator, out of the group, has only the start's.
  const auto end_log = e1_log();
  REQUIRE(std::regex_search(end_log, m,
                            std::regex(R"(its runners acted with policy versions up to )"
                                       R"(([0-9]+) \(from the learner hosts\))")));
  CHECK(std::stol(m[1].str()) > 20);
  {
    const auto hosts = read_text(run / "hosts.csv");
    CHECK(hosts.rfind("wall_time_s,env_steps,host,host_env_steps,host_updates,"
                      "host_episodes,host_sps,policy_lag_mean,return_mean\n",
                      0) == 0);
    CHECK(hosts.find(",e1,") == std::string::npos);
  }
  for (const auto* c : {&coord, &w1, &e1}) {
    const auto text = c->err() + c->out();
    CHECK(text.find("differ between hosts") == std::string::npos);
  }
}

TEST_CASE("the data plane's settings are checked before anything starts, and the "
          "removed parameter-server plane is refused naming its replacement") {
  temp_folder dir("troupe-plane-config");
  const auto cfg = write_config(dir, 1, 1000);
  const std::vector<std::pair<std::string, std::string>> cases = {
    {"--set cluster.hosts=5000", "cluster.hosts"},
    {"--set cluster.hosts=1 --set cluster.data_interface='\"0.0.0.0\"'",
     "cluster.data_interface = \"0.0.0.0\": the data plane binds to one address, never a "
     "wildcard"},
    {"--set cluster.data_plane='\"server\"'",
     "cluster.data_plane: expected one of \"allreduce\", got string \"server\" (removed: "
     "the "
     "parameter-server data plane (each gradient to the coordinator and the weights "
     "back) was removed on 2026-11-27"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.first);
    auto r = run_command(
      fmt::format("env {} timeout -k 10 {} '{}' train '{}' --listen 127.0.0.1:0 {}",
                  token_env, troupe_command_limit_s, TROUPE_BINARY, cfg, c.first),
      dir);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.second) != std::string::npos);
    CHECK(!fs::exists(dir.path / "runs")); // nothing started, nothing written
  }
}
