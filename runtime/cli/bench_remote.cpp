// `troupe bench remote [--json] [--envs N] [--clients LIST] [--seconds S]`:
// remote environments measured (docs/protocol.md). For each number of
// clients, C++ clients (clients/cpp/troupe_remote.hpp), each on its own
// thread, step N CartPoles inside the client and exchange one STEP/ACT per
// step of all N with a remote server (actors/remote_server) on loopback TCP,
// which acts through a game agent with the initial CartPole policy (no
// learner: acting is what a client waits for; complete segments are dropped
// for want of a learner and counted). The floor, in the same run: a raw
// ZeroMQ DEALER/ROUTER loop exchanging frames of the same sizes with no
// decoding, no inference and no environment. Reports env steps per second
// and the ratio to the floor. With --curve, the clients and the server use
// CURVE (fresh key pairs, the client keys on the allow-list); the floor stays
// plaintext.
//
// `troupe bench remote --serve SECONDS [--envs N]` only serves: the same
// server and untrained agent with N slots, on a free loopback port it prints,
// for SECONDS, for clients in other processes and languages to be measured
// against (clients/python/examples/bench.py); it then prints the env steps
// served.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "edge/game_agent.hpp"
#include "actors/policy_store.hpp"
#include "edge/remote_server.hpp"
#include "clients/cpp/troupe_remote.hpp"
#include "envs/registry.hpp"
#include "learners/model.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using bench_clock = std::chrono::steady_clock;

struct remote_figures {
  size_t clients = 0;
  double env_steps_per_s = 0;       // through troupe's server and agent
  double floor_env_steps_per_s = 0; // raw DEALER/ROUTER, same frame sizes
  uint64_t env_steps = 0, floor_env_steps = 0;
};

// The start line of a measurement: each worker arrives once its connection
// and handshake are done; the clock starts when all have arrived, so the
// measured span holds steps only, never set-up.
struct start_line {
  std::atomic<size_t> arrived{0};
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
  std::atomic<size_t> failed{0}; ///< workers that returned an error
  /// Called by a worker after its set-up; false when the run was called off.
  bool arrive_and_wait() {
    arrived.fetch_add(1);
    while (!go.load() && !stop.load())
      std::this_thread::yield();
    return go.load();
  }
};

// CURVE key pairs for --curve: the server's and the clients' (one pair for all).
struct curve_keys {
  std::string server_public, server_secret, client_public, client_secret;
};

result<curve_keys> make_curve_keys() {
  char pub[41] = {}, sec[41] = {}, cpub[41] = {}, csec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0 || zmq_curve_keypair(cpub, csec) != 0)
    return make_error(errc::unavailable, "--curve: zmq_curve_keypair failed: {}",
                      zmq_strerror(zmq_errno()));
  return curve_keys{pub, sec, cpub, csec};
}

// One client: `envs` CartPoles stepped on this thread until `stop`.
result<uint64_t> run_client(const std::string& endpoint, size_t envs, uint64_t seed,
                            start_line& line, const curve_keys* curve) {
  std::vector<std::unique_ptr<envs::env>> games;
  for (size_t i = 0; i < envs; ++i) {
    auto e = envs::make_env("CartPole-v1");
    if (!e)
      return e.err();
    games.push_back(std::move(*e));
  }
  const size_t od = 4;
  std::vector<uint32_t> ids(envs);
  std::vector<float> obs(envs * od), actions, final_obs;
  std::vector<double> rewards(envs, 0.0);
  std::vector<uint8_t> flags(envs, 0);
  for (size_t i = 0; i < envs; ++i) {
    ids[i] = static_cast<uint32_t>(i);
    games[i]->reset(seed + i, &obs[i * od]);
  }
  troupe_client::session s;
  troupe_client::options opts;
  if (curve) {
    opts.server_public_key = curve->server_public;
    opts.public_key = curve->client_public;
    opts.secret_key = curve->client_secret;
  }
  if (auto ok = s.open(endpoint, "bench", static_cast<uint32_t>(envs), 4,
                       troupe_client::discrete(2), std::chrono::seconds(60), opts);
      !ok)
    return make_error(errc::unavailable, "client: {}", ok.message);
  uint64_t steps = 0;
  bool first = true;
  if (!line.arrive_and_wait())
    return steps;
  do {
    auto ok = first ? s.step(ids, obs, {}, {}, {}, actions)
                    : s.step(ids, obs, rewards, flags, final_obs, actions);
    if (!ok)
      return make_error(errc::unavailable, "client: {}", ok.message);
    first = false;
    final_obs.clear();
    for (size_t i = 0; i < envs; ++i) {
      auto r = games[i]->step(&actions[i], &obs[i * od]);
      if (!r)
        return r.err();
      rewards[i] = r->reward;
      flags[i] = static_cast<uint8_t>((r->terminated ? troupe_client::terminated : 0) |
                                      (r->truncated ? troupe_client::truncated : 0));
      if (flags[i]) {
        final_obs.insert(final_obs.end(), &obs[i * od], &obs[(i + 1) * od]);
        games[i]->reset(&obs[i * od]);
      }
    }
    steps += envs;
  } while (!line.stop.load(std::memory_order_relaxed));
  s.close();
  return steps;
}

// Runs `threads` copies of `work` (which call arrive_and_wait() once set up,
// then step at least once and until `stop`) for `seconds` from the moment all
// have arrived; the env steps and env steps per second of that span.
template <class Work>
result<std::pair<uint64_t, double>> timed(size_t threads, double seconds, Work work) {
  start_line line;
  std::vector<result<uint64_t>> out(threads, uint64_t{0});
  std::vector<std::thread> pool;
  for (size_t i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      out[i] = work(i, line);
      if (!out[i])
        line.failed.fetch_add(1);
    });
  // Set-up is bounded: a worker that fails ends the wait (its error is
  // returned below); one that hangs is given up after 60 s.
  const auto setup_deadline = bench_clock::now() + std::chrono::seconds(60);
  while (line.arrived.load() < threads && line.failed.load() == 0 &&
         bench_clock::now() < setup_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool all_arrived = line.arrived.load() >= threads;
  const auto t0 = bench_clock::now();
  if (all_arrived) {
    line.go.store(true);
    std::this_thread::sleep_for(
      std::chrono::duration<double>(seconds)); // the measured span
  }
  line.stop.store(true);
  for (auto& t : pool)
    t.join();
  const double elapsed = std::chrono::duration<double>(bench_clock::now() - t0).count();
  uint64_t total = 0;
  for (auto& r : out) {
    if (!r)
      return r.err();
    total += *r;
  }
  if (!all_arrived)
    return make_error(errc::unavailable,
                      "bench remote: {} of {} clients were not set up within 60 s",
                      threads - line.arrived.load(), threads);
  return std::make_pair(total, static_cast<double>(total) / elapsed);
}

result<remote_figures> measure(size_t clients, size_t envs, double seconds, uint64_t seed,
                               const curve_keys* curve) {
  remote_figures f;
  f.clients = clients;
  // Through troupe: server, decoding, the agent's inference.
  {
    learners::model_spec spec;
    spec.obs_dim = 4;
    spec.n = 2;
    spec.hidden = {64, 64};
    auto store =
      std::make_shared<actors::policy_store>(learners::actor_critic(spec, seed), 8);
    edge::game_agent_options o;
    o.slots = clients * envs;
    o.steps_per_segment = 128;
    o.seed = seed;
    auto agent = edge::game_agent::create(o, store);
    if (!agent)
      return agent.err();
    edge::remote_server_options so;
    so.bind = "tcp://127.0.0.1:*";
    so.shape.obs_dim = 4;
    so.shape.num_actions = 2;
    so.log = [](const std::string&) {};
    if (curve) {
      so.curve_secret_key = curve->server_secret;
      so.curve_allowed_clients = {curve->client_public};
    }
    auto server = edge::remote_server::bind(so, o.slots);
    if (!server)
      return server.err();
    if (auto ok = (*server)->start(*agent); !ok)
      return ok.err();
    const std::string endpoint = (*server)->endpoint();
    auto r = timed(clients, seconds, [&](size_t i, start_line& line) {
      return run_client(endpoint, envs, seed + 1000 * i, line, curve);
    });
    (*server)->stop();
    if (!r)
      return r.err();
    f.env_steps = r->first;
    f.env_steps_per_s = r->second;
  }
  // The floor: the same frame sizes echoed by a bare ROUTER.
  {
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind("tcp://127.0.0.1:*");
    const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
    std::atomic<bool> done{false};
    std::thread echo([&] {
      const std::vector<uint8_t> head(32), ids(4 * envs), acts(4 * envs), version(8);
      std::vector<zmq::message_t> parts;
      while (!done.load()) {
        zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) == 0)
          continue;
        parts.clear();
        if (!zmq::recv_multipart(router, std::back_inserter(parts)))
          continue;
        router.send(parts[0], zmq::send_flags::sndmore);
        router.send(zmq::buffer(head), zmq::send_flags::sndmore);
        router.send(zmq::buffer(ids), zmq::send_flags::sndmore);
        router.send(zmq::buffer(acts), zmq::send_flags::sndmore);
        router.send(zmq::buffer(version), zmq::send_flags::none);
      }
    });
    auto r = timed(clients, seconds, [&](size_t, start_line& line) -> result<uint64_t> {
      zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
      dealer.set(zmq::sockopt::linger, 0);
      dealer.connect(endpoint);
      const std::vector<uint8_t> head(32), ids(4 * envs), obs(16 * envs),
        rewards(8 * envs), flags(envs);
      std::vector<zmq::message_t> parts;
      uint64_t steps = 0;
      if (!line.arrive_and_wait())
        return steps;
      do {
        dealer.send(zmq::buffer(head), zmq::send_flags::sndmore);
        dealer.send(zmq::buffer(ids), zmq::send_flags::sndmore);
        dealer.send(zmq::buffer(obs), zmq::send_flags::sndmore);
        dealer.send(zmq::buffer(rewards), zmq::send_flags::sndmore);
        dealer.send(zmq::buffer(flags), zmq::send_flags::sndmore);
        dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::none);
        parts.clear();
        zmq::pollitem_t item{static_cast<void*>(dealer), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, std::chrono::seconds(10)) == 0)
          return make_error(errc::unavailable, "floor: no echo within 10 s");
        if (!zmq::recv_multipart(dealer, std::back_inserter(parts)))
          return make_error(errc::unavailable, "floor: receive failed");
        steps += envs;
      } while (!line.stop.load(std::memory_order_relaxed));
      return steps;
    });
    done.store(true);
    echo.join();
    if (!r)
      return r.err();
    f.floor_env_steps = r->first;
    f.floor_env_steps_per_s = r->second;
  }
  return f;
}

// --serve: the server of measure() alone, for clients of other processes.
int serve_only(size_t envs, int64_t seconds, uint64_t seed) {
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {64, 64};
  auto store =
    std::make_shared<actors::policy_store>(learners::actor_critic(spec, seed), 8);
  edge::game_agent_options o;
  o.slots = envs;
  o.steps_per_segment = 128;
  o.seed = seed;
  auto agent = edge::game_agent::create(o, store);
  if (!agent)
    return fail(exit_failure, fmt::format("bench remote: {}", agent.err().message));
  edge::remote_server_options so;
  so.bind = "tcp://127.0.0.1:*";
  so.shape.obs_dim = 4;
  so.shape.num_actions = 2;
  so.log = [](const std::string&) {};
  auto server = edge::remote_server::bind(so, o.slots);
  if (!server)
    return fail(exit_failure, fmt::format("bench remote: {}", server.err().message));
  if (auto ok = (*server)->start(*agent); !ok)
    return fail(exit_failure, fmt::format("bench remote: {}", ok.err().message));
  fmt::print("troupe: serving remote environments on {} for {} s ({} slots, an untrained "
             "[64, 64] policy, no learner)\n",
             (*server)->endpoint(), seconds, envs);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(seconds)); // the serving time asked
  (*server)->stop();
  const auto c = (*server)->counters();
  fmt::print("troupe: served {} env steps in {} STEP messages of {} sessions\n",
             c.env_steps, c.steps, c.sessions);
  return 0;
}

} // namespace

int bench_remote(const args_t& args) {
  std::vector<arg_spec> specs{
    {"json", false, false, "print one JSON object instead of a table"},
    {"envs", true, false,
     "CartPoles per client, all in one message per step (default 64)"},
    {"clients", true, false,
     "numbers of clients to measure, comma-separated (default 1,2,4)"},
    {"seconds", true, false, "seconds per measurement (default 3)"},
    {"seed", true, false, "seed of the model and environments (default 1)"},
    {"curve", false, false,
     "clients and server use CURVE (fresh keys; the floor stays plaintext)"},
    {"serve", true, false,
     "only serve for this many seconds (--envs slots) for clients of other processes"}};
  auto parsed = parse_args("bench remote", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto envs = parsed->get_int("envs", 64, 1, 65536);
  if (!envs)
    return fail(exit_bad_input, envs.err().message);
  auto seconds = parsed->get_int("seconds", 3, 1, 3600);
  if (!seconds)
    return fail(exit_bad_input, seconds.err().message);
  auto seed = parsed->get_int("seed", 1, 0, int64_t{1} << 62);
  if (!seed)
    return fail(exit_bad_input, seed.err().message);
  if (parsed->get("serve")) {
    auto serve = parsed->get_int("serve", 10, 1, 3600);
    if (!serve)
      return fail(exit_bad_input, serve.err().message);
    return serve_only(static_cast<size_t>(*envs), *serve, static_cast<uint64_t>(*seed));
  }
  std::vector<size_t> counts;
  {
    std::stringstream in(parsed->get("clients").value_or("1,2,4"));
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long n = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || n < 1 || n > 256)
        return fail(exit_bad_input,
                    fmt::format("bench remote: --clients takes numbers in [1, 256] "
                                "separated by commas, got '{}'",
                                item));
      counts.push_back(static_cast<size_t>(n));
    }
  }
  std::optional<curve_keys> curve;
  if (parsed->flag("curve")) {
    auto keys = make_curve_keys();
    if (!keys)
      return fail(exit_failure, fmt::format("bench remote: {}", keys.err().message));
    curve = *keys;
  }
  std::vector<remote_figures> rows;
  for (size_t c : counts) {
    auto f = measure(c, static_cast<size_t>(*envs), static_cast<double>(*seconds),
                     static_cast<uint64_t>(*seed), curve ? &*curve : nullptr);
    if (!f)
      return fail(exit_failure, fmt::format("bench remote: {}", f.err().message));
    rows.push_back(*f);
  }
  if (parsed->flag("json")) {
    runtime::json out;
    out["envs_per_message"] = *envs;
    out["seconds"] = *seconds;
    out["curve"] = curve.has_value();
    runtime::json list = runtime::json::array();
    for (auto& r : rows) {
      runtime::json j;
      j["clients"] = r.clients;
      j["env_steps_per_s"] = rounded(r.env_steps_per_s, 1);
      j["floor_env_steps_per_s"] = rounded(r.floor_env_steps_per_s, 1);
      j["ratio_to_floor"] = rounded(r.env_steps_per_s / r.floor_env_steps_per_s, 3);
      j["env_steps"] = r.env_steps;
      list.push_back(j);
    }
    out["runs"] = list;
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  fmt::print("remote CartPole over loopback TCP{}, {} envs per message, {} s each\n",
             curve ? " with CURVE" : "", *envs, *seconds);
  fmt::print("{:>8} {:>18} {:>22} {:>9}\n", "clients", "env steps/s", "floor env steps/s",
             "ratio");
  for (auto& r : rows)
    fmt::print("{:>8} {:>18.0f} {:>22.0f} {:>9.3f}\n", r.clients, r.env_steps_per_s,
               r.floor_env_steps_per_s, r.env_steps_per_s / r.floor_env_steps_per_s);
  return 0;
}

} // namespace troupe::runtime
