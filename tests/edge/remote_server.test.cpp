// The remote environment server (edge/remote_server.hpp) driven by DEALER
// clients written here over cppzmq on loopback: sessions step and get
// actions, their transitions reach the game agent, malformed messages get
// ERROR with their code while the other clients are served, a client over
// its error budget, one that closes and one that falls silent are dropped
// with their unfinished segments discarded and counted, and an address in
// use is refused. Every receive waits at most a bounded time and fails
// naming what it expected.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "edge/game_agent.hpp"
#include "actors/policy_store.hpp"
#include "edge/remote_server.hpp"
#include "edge/remote_wire.hpp"
#include "clients/cpp/troupe_remote.hpp"
#include "learners/model.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"
#include "tests/skip.hpp"
#include "troupe_remote.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::edge;
using namespace troupe::edge::remote;
using troupe::test::fresh_seed;

namespace {

constexpr std::chrono::milliseconds receive_limit{10000};

env_shape trained_shape() {
  env_shape s;
  s.obs_dim = 4;
  s.discrete = true;
  s.num_actions = 2;
  s.action_dim = 1;
  return s;
}

std::shared_ptr<game_agent> make_agent(size_t slots, size_t steps, uint64_t seed) {
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {16};
  auto store = std::make_shared<policy_store>(learners::actor_critic(spec, seed), 8);
  game_agent_options o;
  o.slots = slots;
  o.steps_per_segment = steps;
  o.seed = seed;
  auto made = game_agent::create(o, store);
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.err().message));
  return *made;
}

// A server on a free loopback port serving `agent`, its log lines kept.
struct served {
  std::mutex log_mtx; // the server's thread writes, the test reads
  std::vector<std::string> log;
  std::unique_ptr<remote_server> server;
  std::shared_ptr<game_agent> agent;

  served(std::shared_ptr<game_agent> a, remote_server_options o = {})
    : agent(std::move(a)) {
    o.bind = "tcp://127.0.0.1:*";
    o.shape = trained_shape();
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mtx);
      log.push_back(line);
    };
    auto made = remote_server::bind(o, agent->slots());
    REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.err().message));
    server = std::move(*made);
    REQUIRE(server->start(agent).ok());
  }
  ~served() { server->stop(); } // joins the thread before `log` goes

  bool logged(const std::string& part) {
    std::lock_guard<std::mutex> lock(log_mtx);
    for (auto& line : log)
      if (line.find(part) != std::string::npos)
        return true;
    return false;
  }
};

struct client {
  zmq::socket_t sock;
  uint64_t seq = 0;
  uint64_t session = 0;
  uint32_t n = 0;

  client(zmq::context_t& ctx, const std::string& endpoint)
    : sock(ctx, zmq::socket_type::dealer) {
    sock.set(zmq::sockopt::linger, 0);
    sock.connect(endpoint);
  }

  void send(const std::vector<frame>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      sock.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  header next_header() {
    header h;
    h.sequence = ++seq;
    h.session = session;
    return h;
  }

  // One message within receive_limit; fails naming `expected` otherwise.
  std::vector<frame> receive(const std::string& expected) {
    zmq::pollitem_t item{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, receive_limit);
    std::vector<zmq::message_t> parts;
    auto got =
      zmq::recv_multipart(sock, std::back_inserter(parts), zmq::recv_flags::dontwait);
    REQUIRE_MESSAGE(got.has_value(), "no message within " << receive_limit.count()
                                                          << " ms; expected "
                                                          << expected);
    std::vector<frame> out;
    for (auto& p : parts) {
      auto* b = static_cast<const uint8_t*>(p.data());
      out.emplace_back(b, b + p.size());
    }
    return out;
  }

  header receive_header(const std::string& expected, std::vector<frame>& frames) {
    frames = receive(expected);
    auto views = views_of(frames);
    error_code code = error_code::none;
    auto h = decode_header(views.data(), views.size(), code);
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.err().message));
    return *h;
  }

  welcome hello(uint32_t envs, const std::string& name = "test-client") {
    n = envs;
    remote::hello m;
    m.client = name;
    m.shape = trained_shape();
    m.shape.num_envs = envs;
    send(encode_hello(next_header(), m));
    std::vector<frame> frames;
    auto h = receive_header("WELCOME", frames);
    REQUIRE_MESSAGE(h.type == kind::welcome, "expected WELCOME, got "
                                               << std::string(to_string(h.type)) << ": "
                                               << error_text(frames));
    auto views = views_of(frames);
    error_code code = error_code::none;
    auto w = decode_welcome(h, views.data(), views.size(), code);
    REQUIRE(w.ok());
    session = w->session;
    return *w;
  }

  static std::string error_text(const std::vector<frame>& frames) {
    return frames.size() == 3 ? std::string(frames[2].begin(), frames[2].end())
                              : std::string{};
  }

  // Sends `m` and returns the ACT.
  act step_once(const step& m) {
    const uint64_t sent = seq + 1;
    send(encode_step(next_header(), m));
    std::vector<frame> frames;
    auto h = receive_header("ACT", frames);
    REQUIRE_MESSAGE(h.type == kind::act, "expected ACT, got "
                                           << std::string(to_string(h.type)) << ": "
                                           << error_text(frames));
    CHECK(h.sequence == sent);
    env_shape shape = trained_shape();
    shape.num_envs = n;
    auto views = views_of(frames);
    error_code code = error_code::none;
    auto a = decode_act(h, views.data(), views.size(), shape, code);
    REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.err().message));
    return *a;
  }

  // Sends `frames` and expects ERROR `code`; returns its message.
  std::string refused(const std::vector<frame>& frames, error_code code) {
    send(frames);
    std::vector<frame> got;
    auto h = receive_header(std::string("ERROR ") + to_string(code), got);
    REQUIRE_MESSAGE(h.type == kind::error, "expected ERROR "
                                             << std::string(to_string(code)) << ", got "
                                             << std::string(to_string(h.type)));
    auto views = views_of(got);
    error_code c = error_code::none;
    auto e = decode_error(h, views.data(), views.size(), c);
    REQUIRE(e.ok());
    CHECK_MESSAGE(e->code == code, "expected " << std::string(to_string(code)) << ", got "
                                               << std::string(to_string(e->code)) << ": "
                                               << e->message);
    return e->message;
  }
};

// A STEP of every environment with random observations; `first`: no
// previous action (rewards and flags 0); otherwise random rewards and ends.
step random_step(std::mt19937_64& gen, uint32_t n, bool first) {
  std::uniform_real_distribution<float> x(-0.2f, 0.2f);
  step m;
  for (uint32_t i = 0; i < n; ++i) {
    m.env_ids.push_back(n - 1 - i); // not in slot order
    for (int j = 0; j < 4; ++j)
      m.obs.push_back(x(gen));
    m.rewards.push_back(first ? 0.0 : 1.0 + static_cast<double>(gen() % 3));
    const uint8_t f =
      first ? 0 : static_cast<uint8_t>(gen() % 5 == 0 ? 1 + gen() % 2 : 0);
    m.flags.push_back(f);
    if (f)
      for (int j = 0; j < 4; ++j)
        m.final_obs.push_back(x(gen));
  }
  return m;
}

} // namespace

TEST_CASE("a remote session is welcomed, gets an action for every STEP, and its "
          "transitions reach the game agent") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  served s(make_agent(8, 4, seed));
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  auto w = c.hello(3);
  CHECK(w.session != 0);
  CHECK(w.num_envs == 3);
  CHECK(w.heartbeat_ms == 1000);
  CHECK(w.timeout_ms == 10000);
  const int rounds = 12;
  uint64_t ended = 0;
  for (int r = 0; r < rounds; ++r) {
    step m = random_step(gen, 3, r == 0);
    for (auto f : m.flags)
      ended += f != 0;
    act a = c.step_once(m);
    CHECK(a.env_ids == m.env_ids);
    REQUIRE(a.actions.size() == 3);
    for (float x : a.actions)
      CHECK((x == 0.0f || x == 1.0f));
    CHECK(a.policy_version == 0);
  }
  auto counters = s.agent->counters();
  CHECK(counters.env_steps == 3 * rounds);
  CHECK(counters.transitions == 3 * (rounds - 1));
  CHECK(counters.episodes == ended);
  auto totals = s.server->counters();
  CHECK(totals.sessions == 1);
  CHECK(totals.steps == rounds);
  CHECK(totals.env_steps == 3 * rounds);
  CHECK(totals.envs_connected == 3);
  CHECK(totals.errors == 0);

  // A PING is answered with a PONG of its sequence number.
  header ping = c.next_header();
  ping.type = kind::ping;
  c.send(encode_signal(ping));
  std::vector<frame> frames;
  auto pong = c.receive_header("PONG", frames);
  CHECK(pong.type == kind::pong);
  CHECK(pong.sequence == ping.sequence);
}

TEST_CASE("every malformed message gets ERROR with its code and the server keeps serving "
          "the other client") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.max_errors = 100;
  served s(make_agent(8, 4, seed), o);
  zmq::context_t ctx;
  client good(ctx, s.server->endpoint());
  client bad(ctx, s.server->endpoint());
  good.hello(2, "good");
  good.step_once(random_step(gen, 2, true));
  auto good_round = [&] { good.step_once(random_step(gen, 2, false)); };

  // Before a session.
  frame short_header(10, 0);
  CHECK(bad.refused({short_header}, error_code::bad_header).find("got 10") !=
        std::string::npos);
  good_round();
  auto wrong_magic = encode_signal(bad.next_header());
  wrong_magic[0][0] = 'X';
  bad.refused(wrong_magic, error_code::bad_magic);
  auto major2 = encode_signal(bad.next_header());
  major2[0][4] = 2;
  major2[0][5] = 7;
  CHECK(bad.refused(major2, error_code::version_mismatch).find("got 2.7") !=
        std::string::npos);
  good_round();
  bad.n = 2;
  CHECK(bad
          .refused(encode_step(bad.next_header(), random_step(gen, 2, true)),
                   error_code::out_of_order)
          .find("no session") != std::string::npos);
  {
    hello m;
    m.client = "bad";
    m.shape = trained_shape();
    m.shape.num_envs = 2;
    m.shape.obs_dim = 5;
    CHECK(bad.refused(encode_hello(bad.next_header(), m), error_code::space_mismatch)
            .find("holds 5 values; troupe trains observations of 4") !=
          std::string::npos);
    m.shape = trained_shape();
    m.shape.num_envs = 100;
    CHECK(bad.refused(encode_hello(bad.next_header(), m), error_code::server_full)
            .find("100 environments asked, 6 of remote.max_envs 8 free") !=
          std::string::npos);
  }
  good_round();

  // Within a session.
  bad.hello(2, "bad");
  step nan_obs = random_step(gen, 2, true);
  nan_obs.obs[1] = std::nanf("");
  bad.refused(encode_step(bad.next_header(), nan_obs), error_code::non_finite);
  step inf_reward = random_step(gen, 2, true);
  inf_reward.rewards[0] = INFINITY;
  bad.refused(encode_step(bad.next_header(), inf_reward), error_code::non_finite);
  auto short_obs = encode_step(bad.next_header(), random_step(gen, 2, true));
  short_obs[2].resize(short_obs[2].size() - 4);
  bad.refused(short_obs, error_code::count_mismatch);
  step reward_first = random_step(gen, 2, true);
  reward_first.rewards[1] = 1.0;
  CHECK(bad.refused(encode_step(bad.next_header(), reward_first), error_code::bad_env_id)
          .find("no action outstanding") != std::string::npos);
  header stale = bad.next_header();
  stale.sequence = 1;
  CHECK(
    bad.refused(encode_step(stale, random_step(gen, 2, true)), error_code::bad_sequence)
      .find("sequence 1 must be above") != std::string::npos);
  header other = bad.next_header();
  other.session += 1000;
  bad.refused(encode_step(other, random_step(gen, 2, true)), error_code::unknown_session);
  bad.refused(encode_hello(bad.next_header(), hello{"again", trained_shape()}),
              error_code::out_of_order);
  header act_kind = bad.next_header();
  act_kind.type = kind::act;
  bad.refused(encode_signal(act_kind), error_code::unknown_kind);
  good_round();

  // Nothing of the refused messages reached the agent; the bad client still steps.
  const auto before = s.agent->counters();
  CHECK(before.env_steps == 2 * 5); // the good client's five rounds
  bad.step_once(random_step(gen, 2, true));
  CHECK(s.agent->counters().env_steps == before.env_steps + 2);
  const auto totals = s.server->counters();
  CHECK(totals.errors == 13); // server_full is not the client's error
  CHECK(totals.sessions_dropped == 0);
  CHECK_MESSAGE(s.logged("client 'bad' at 127.0.0.1"),
                "the log names the client and its address");
}

TEST_CASE("a client over its error budget gets one ERROR too_many_errors naming its last "
          "offence, and its session is gone") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.max_errors = 2;
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  c.hello(4);
  c.step_once(random_step(gen, 4, true));
  c.step_once(random_step(gen, 4, false));
  step nan_obs = random_step(gen, 4, false);
  nan_obs.obs[0] = std::nanf("");
  c.refused(encode_step(c.next_header(), nan_obs), error_code::non_finite);
  c.refused(encode_step(c.next_header(), nan_obs), error_code::non_finite);
  // The third: too_many_errors is its one answer, not a non_finite before it.
  const uint64_t third = c.seq + 1;
  std::vector<frame> frames;
  c.send(encode_step(c.next_header(), nan_obs));
  auto h = c.receive_header("ERROR too_many_errors", frames);
  REQUIRE(h.type == kind::error);
  CHECK(h.sequence == third);
  auto views = views_of(frames);
  error_code code = error_code::none;
  auto e = decode_error(h, views.data(), views.size(), code);
  REQUIRE(e.ok());
  CHECK_MESSAGE(e->code == error_code::too_many_errors,
                "expected too_many_errors, got " << std::string(to_string(e->code))
                                                 << ": " << e->message);
  CHECK(e->message.find("more than remote.max_errors 2 malformed messages") !=
        std::string::npos);
  CHECK(e->message.find("the last: non_finite: STEP message: observations") !=
        std::string::npos);
  CHECK(s.server->counters().sessions_dropped == 1);
  CHECK(s.server->counters().envs_connected == 0);
  CHECK(s.server->counters().errors == 3);
  // Its four transitions were in an unfinished segment: discarded and counted.
  CHECK(s.agent->abandoned() == 4);
  // The next message the client receives answers its next message: nothing
  // else came after too_many_errors.
  c.refused(encode_step(c.next_header(), random_step(gen, 4, false)),
            error_code::unknown_session);
}

TEST_CASE(
  "CLOSE and silence end a session: unfinished segments are discarded and counted, "
  "and the slots serve the next session") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.heartbeat_ms = 20;
  o.timeout_ms = 2000; // well above a loaded machine's pause between two steps
  served s(make_agent(2, 64, seed), o);
  zmq::context_t ctx;
  {
    client c(ctx, s.server->endpoint());
    c.hello(2);
    c.step_once(random_step(gen, 2, true));
    for (int r = 0; r < 5; ++r)
      c.step_once(random_step(gen, 2, false));
    header close = c.next_header();
    close.type = kind::close;
    c.send(encode_signal(close));
    // Messages of one connection are handled in order: this refusal says
    // the CLOSE was handled (the sockets of two clients are not ordered).
    header ping = c.next_header();
    ping.type = kind::ping;
    c.refused(encode_signal(ping), error_code::unknown_session);
  }
  // The next session needs both slots: its WELCOME says the CLOSE freed them.
  client next(ctx, s.server->endpoint());
  next.hello(2, "next");
  CHECK(s.server->counters().sessions_closed == 1);
  CHECK(s.agent->abandoned() == 10);
  CHECK(s.agent->counters().abandoned_episodes == 2);
  next.step_once(random_step(gen, 2, true));
  next.step_once(random_step(gen, 2, false));
  // Silence: the server drops the session and says so.
  std::vector<frame> frames;
  auto h = next.receive_header("ERROR timeout", frames);
  REQUIRE(h.type == kind::error);
  auto views = views_of(frames);
  error_code code = error_code::none;
  auto e = decode_error(h, views.data(), views.size(), code);
  REQUIRE(e.ok());
  CHECK(e->code == error_code::timeout);
  CHECK(s.server->counters().sessions_dropped == 1);
  CHECK(s.agent->abandoned() == 12);
  next.refused(encode_step(next.next_header(), random_step(gen, 2, false)),
               error_code::unknown_session);
}

TEST_CASE(
  "HELLOs wait for remote.min_envs environments, then every waiting one is welcomed") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  remote_server_options o;
  o.min_envs = 5;
  served s(make_agent(8, 4, seed), o);
  zmq::context_t ctx;
  client a(ctx, s.server->endpoint());
  hello m{"first", trained_shape()};
  m.shape.num_envs = 2;
  a.send(encode_hello(a.next_header(), m));
  client b(ctx, s.server->endpoint());
  b.hello(3, "second"); // 2 + 3 = 5: both welcomed
  std::vector<frame> frames;
  auto h = a.receive_header("WELCOME for the first client", frames);
  CHECK(h.type == kind::welcome);
  CHECK(h.session != 0);
  CHECK(h.session != b.session);
  CHECK(s.server->counters().sessions == 2);
}

TEST_CASE("binding an address in use fails, naming the address and the reason") {
  const uint64_t seed = fresh_seed();
  served first(make_agent(2, 4, seed));
  remote_server_options o;
  o.bind = first.server->endpoint();
  o.shape = trained_shape();
  auto second = remote_server::bind(o, 2);
  REQUIRE_FALSE(second.ok());
  CHECK(second.err().code == errc::unavailable);
  CHECK(second.err().message.find(first.server->endpoint()) != std::string::npos);
  CHECK(second.err().message.find("choose another remote.bind") != std::string::npos);

  o.bind = "tcp://nowhere";
  auto malformed = remote_server::bind(o, 2);
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.err().message.find("cannot bind tcp://nowhere") != std::string::npos);
}

TEST_CASE("the C client (clients/c) opens a session, steps with outcomes and final "
          "observations, is refused with the code, and closes") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  served s(make_agent(4, 64, seed));
  char error[512] = "";
  const std::string endpoint = s.server->endpoint();

  // Spaces troupe does not train: refused with the message.
  troupe_remote* wrong = troupe_remote_open(endpoint.c_str(), "c-wrong", 2, 5, 2, 0,
                                            10000, error, sizeof error);
  CHECK(wrong == nullptr);
  CHECK(std::string(error).find("holds 5 values") != std::string::npos);

  troupe_remote* r = troupe_remote_open(endpoint.c_str(), "c-client", 4, 4, 2, 0, 10000,
                                        error, sizeof error);
  REQUIRE_MESSAGE(r != nullptr, error);
  CHECK(troupe_remote_session(r) != 0);
  uint32_t ids[4] = {0, 1, 2, 3};
  float obs[16], actions[4];
  for (float& x : obs)
    x = std::uniform_real_distribution<float>(-0.1f, 0.1f)(gen);
  uint64_t version = 99;
  REQUIRE_MESSAGE(troupe_remote_step(r, 4, ids, obs, nullptr, nullptr, nullptr, actions,
                                     &version, error, sizeof error) == TROUPE_REMOTE_OK,
                  error);
  CHECK(version == 0);
  for (float a : actions)
    CHECK((a == 0.0f || a == 1.0f));
  double rewards[4] = {1, 1, 1, 1};
  uint8_t flags[4] = {0, TROUPE_REMOTE_TERMINATED, 0, TROUPE_REMOTE_TRUNCATED};
  float final_obs[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  REQUIRE_MESSAGE(troupe_remote_step(r, 4, ids, obs, rewards, flags, final_obs, actions,
                                     &version, error, sizeof error) == TROUPE_REMOTE_OK,
                  error);
  CHECK(s.agent->counters().transitions == 4);
  CHECK(s.agent->counters().episodes == 2);
  REQUIRE(troupe_remote_ping(r, error, sizeof error) == TROUPE_REMOTE_OK);

  obs[5] = std::nanf("");
  CHECK(troupe_remote_step(r, 4, ids, obs, rewards, nullptr, nullptr, actions, &version,
                           error, sizeof error) == TROUPE_REMOTE_ERROR);
  CHECK(troupe_remote_last_code(r) == static_cast<uint32_t>(error_code::non_finite));
  CHECK(std::string(error).find("observations must be finite") != std::string::npos);
  troupe_remote_close(r);
}

TEST_CASE(
  "the C++ client (clients/cpp) opens a session, steps, is refused with the code, "
  "and closes") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  served s(make_agent(4, 64, seed));
  troupe_client::session wrong;
  auto refused =
    wrong.open(s.server->endpoint(), "cpp-wrong", 2, 4, troupe_client::box(3));
  CHECK(refused.code == static_cast<int>(error_code::space_mismatch));
  CHECK(refused.message.find("is Box(3); troupe trains Discrete(2)") !=
        std::string::npos);

  troupe_client::session c;
  auto ok = c.open(s.server->endpoint(), "cpp-client", 3, 4, troupe_client::discrete(2));
  REQUIRE_MESSAGE(ok, ok.message);
  CHECK(c.id() != 0);
  const std::vector<uint32_t> ids = {2, 0, 1};
  std::vector<float> obs(12), actions;
  for (float& x : obs)
    x = std::uniform_real_distribution<float>(-0.1f, 0.1f)(gen);
  ok = c.step(ids, obs, {}, {}, {}, actions);
  REQUIRE_MESSAGE(ok, ok.message);
  REQUIRE(actions.size() == 3);
  for (float a : actions)
    CHECK((a == 0.0f || a == 1.0f));
  ok = c.step(ids, obs, {1.0, 2.0, 3.0}, {0, troupe_client::truncated, 0},
              {0.5f, 0.5f, 0.5f, 0.5f}, actions);
  REQUIRE_MESSAGE(ok, ok.message);
  CHECK(s.agent->counters().transitions == 3);
  CHECK(s.agent->counters().episodes == 1);
  REQUIRE(c.ping());
  obs[0] = INFINITY;
  auto bad = c.step(ids, obs, {}, {}, {}, actions);
  CHECK(bad.code == static_cast<int>(error_code::non_finite));
  c.close();
}

TEST_CASE(
  "a client process killed with SIGKILL mid-episode is dropped after timeout_ms: its "
  "episodes are given up, none ends as terminal, its slots serve again") {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import zmq, numpy' 2>/dev/null") != 0)
    TROUPE_SKIP("needs Debian's python3 with pyzmq and NumPy (scripts/setup)");
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  remote_server_options o;
  o.heartbeat_ms = 100;
  o.timeout_ms = 1000;
  served s(make_agent(4, 64, seed), o);
  // The Python client: HELLO, a first STEP and three more, then it says so
  // and waits to be killed.
  const std::string script = R"(
import sys, time
sys.path.insert(0, sys.argv[2] + "/clients/python")
import numpy as np
from troupe_remote import Session
s = Session(sys.argv[1], 4, 4, ("discrete", 2), client="doomed")
s.hello()
ids, obs, no = np.arange(4), np.zeros((4, 4), np.float32), np.zeros(4, bool)
s.step(ids, obs, np.zeros(4), no, no)
for _ in range(3):
    s.step(ids, obs, np.ones(4), no, no)
print("ready", flush=True)
time.sleep(3600)
)";
  int out[2];
  REQUIRE(pipe(out) == 0);
  const std::string endpoint = s.server->endpoint();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(python, "python3", "-c", script.c_str(), endpoint.c_str(), TROUPE_SOURCE_DIR,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string said;
  pollfd p{out[0], POLLIN, 0};
  while (said.find("ready") == std::string::npos) {
    if (poll(&p, 1, 60000) <= 0)
      break;
    char buf[64];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0)
      break;
    said.append(buf, static_cast<size_t>(n));
  }
  const bool ready = said.find("ready") != std::string::npos;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  close(out[0]);
  REQUIRE_MESSAGE(ready, "the client did not say 'ready' within 60 s; it said: " << said);
  CHECK(s.server->counters().envs_connected == 4);

  test::wait_until([&] { return s.server->counters().sessions_dropped == 1; },
                   "the server to drop the killed client's session after timeout_ms");
  const auto c = s.agent->counters();
  CHECK(c.abandoned == 12);         // three transitions of each of four environments
  CHECK(c.abandoned_episodes == 4); // given up, not ended
  CHECK(c.episodes == 0);           // nothing terminal (or truncated) was recorded
  CHECK(c.segments == 0);           // nothing of it reaches the learners
  CHECK(s.server->counters().envs_connected == 0);
  CHECK(s.logged("client 'doomed'"));
  CHECK(s.logged("ended (timeout)"));

  zmq::context_t ctx;
  client next(ctx, endpoint);
  next.hello(4, "next"); // the four slots serve again
}

// -- CURVE ------------------------------------------------------------------------------

namespace {

struct key_pair {
  std::string pub, sec;
};

key_pair new_keys() {
  char pub[41] = {}, sec[41] = {};
  REQUIRE(zmq_curve_keypair(pub, sec) == 0);
  return {pub, sec};
}

} // namespace

TEST_CASE(
  "CURVE: a client with an allowed key steps, while an unknown key, a wrong server key "
  "and a plaintext client get nothing through and are counted and logged") {
  if (!zmq_has("curve"))
    TROUPE_SKIP("this libzmq has no CURVE");
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const key_pair server = new_keys(), allowed = new_keys(), unknown = new_keys(),
                 other_server = new_keys();
  remote_server_options o;
  o.curve_secret_key = server.sec;
  o.curve_allowed_clients = {new_keys().pub, allowed.pub};
  served s(make_agent(4, 64, seed), o);
  // A refused client may try again (ZeroMQ reconnects), so each refusal is
  // awaited by its own log line, not by the count.
  const auto await_log = [](served& at, const std::string& part) {
    troupe::test::wait_until([&] { return at.logged(part); },
                             "the server to log a refusal");
  };
  const std::chrono::milliseconds short_hello{300};
  const std::vector<uint32_t> ids = {0, 1};
  std::vector<float> obs(8), actions;
  for (float& x : obs)
    x = std::uniform_real_distribution<float>(-0.1f, 0.1f)(gen);

  troupe_client::options good;
  good.server_public_key = *curve_public_key(server.sec);
  CHECK(good.server_public_key == server.pub);
  good.public_key = allowed.pub;
  good.secret_key = allowed.sec;
  troupe_client::session c;
  auto ok = c.open(s.server->endpoint(), "curve-cpp", 2, 4, troupe_client::discrete(2),
                   std::chrono::seconds(10), good);
  REQUIRE_MESSAGE(ok, ok.message);
  ok = c.step(ids, obs, {}, {}, {}, actions);
  REQUIRE_MESSAGE(ok, ok.message);
  ok = c.step(ids, obs, {1.0, 1.0}, {}, {}, actions);
  REQUIRE_MESSAGE(ok, ok.message);
  CHECK(s.agent->counters().transitions == 2);

  // The C client with the same keys.
  char error[512] = "";
  troupe_remote_options co{};
  co.server_public_key = server.pub.c_str();
  co.public_key = allowed.pub.c_str();
  co.secret_key = allowed.sec.c_str();
  troupe_remote* r = troupe_remote_open_with(s.server->endpoint().c_str(), "curve-c", 2,
                                             4, 2, 0, 10000, &co, error, sizeof error);
  REQUIRE_MESSAGE(r != nullptr, error);
  float a[2];
  CHECK(troupe_remote_step(r, 2, ids.data(), obs.data(), nullptr, nullptr, nullptr, a,
                           nullptr, error, sizeof error) == TROUPE_REMOTE_OK);
  troupe_remote_close(r);
  CHECK(s.server->counters().refused == 0);

  // A key not on the allow-list: refused by the ZAP handler, logged with the key.
  troupe_client::options stranger = good;
  stranger.public_key = unknown.pub;
  stranger.secret_key = unknown.sec;
  troupe_client::session x;
  auto got = x.open(s.server->endpoint(), "stranger", 2, 4, troupe_client::discrete(2),
                    short_hello, stranger);
  CHECK(got.code == troupe_client::timed_out);
  await_log(s, "its CURVE public key " + unknown.pub + " is not on the allow-list");

  // An allowed key that trusts another server key: the handshake fails.
  troupe_client::options fooled = good;
  fooled.server_public_key = other_server.pub;
  troupe_client::session y;
  got = y.open(s.server->endpoint(), "fooled", 2, 4, troupe_client::discrete(2),
               short_hello, fooled);
  CHECK(got.code == troupe_client::timed_out);
  await_log(s, "the CURVE handshake failed (cryptographic error)");

  // No CURVE at all, at a second CURVE server that no other client reaches:
  // which side notices first is a race (a mechanism mismatch seen by troupe,
  // or the client hanging up on troupe's greeting).
  {
    served s2(make_agent(2, 64, seed), o);
    troupe_client::session z;
    got = z.open(s2.server->endpoint(), "plain", 2, 4, troupe_client::discrete(2),
                 short_hello);
    CHECK(got.code == troupe_client::timed_out);
    await_log(s2, "the CURVE handshake failed");
    CHECK(s2.server->counters().refused >= 1);
    CHECK(s2.server->counters().sessions == 0);
    CHECK(s2.agent->counters().transitions == 0);
  }

  // None of them made a session or reached the agent.
  const auto counted = s.server->counters();
  CHECK(counted.refused >= 2);
  CHECK(counted.sessions == 2);
  CHECK(counted.errors == 0);
  CHECK(s.agent->counters().transitions == 2);
  // The allowed client is still served.
  ok = c.step(ids, obs, {1.0, 1.0}, {}, {}, actions);
  REQUIRE_MESSAGE(ok, ok.message);
  CHECK(s.agent->counters().transitions == 4);
}

TEST_CASE("CURVE settings are checked: a malformed key, an empty allow-list, or an "
          "allow-list without a secret key is refused before binding") {
  remote_server_options o;
  o.bind = "tcp://127.0.0.1:*";
  o.shape = trained_shape();
  o.curve_secret_key = "not a key";
  o.curve_allowed_clients = {new_keys().pub};
  auto made = remote_server::bind(o, 2);
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("a CURVE key is 40 Z85 characters, got 9") !=
        std::string::npos);
  o.curve_secret_key = new_keys().sec;
  o.curve_allowed_clients = {std::string(40, '~')};
  made = remote_server::bind(o, 2);
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("is not Z85") != std::string::npos);
  o.curve_allowed_clients.clear();
  made = remote_server::bind(o, 2);
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("allow-list") != std::string::npos);
  o.curve_secret_key.clear();
  o.curve_allowed_clients = {new_keys().pub};
  made = remote_server::bind(o, 2);
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("needs a CURVE secret key") != std::string::npos);
}

// -- reconnecting
// -------------------------------------------------------------------------

TEST_CASE("the C++ client survives a server that goes away without a word and comes "
          "back on the same address: it reconnects with back-off and steps again") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // The first server is a bare ROUTER that welcomes one session, answers one
  // STEP, and vanishes (as a crashed troupe does: no CLOSE).
  auto gone_ctx = std::make_unique<zmq::context_t>();
  zmq::socket_t gone(*gone_ctx, zmq::socket_type::router);
  gone.set(zmq::sockopt::linger, 0);
  gone.bind("tcp://127.0.0.1:*");
  const std::string endpoint = gone.get(zmq::sockopt::last_endpoint);

  struct outcome {
    troupe_client::status opened, first, failed, reconnected;
    int later_ok = 0;
    uint32_t reconnects = 0;
    uint64_t first_session = 0, second_session = 0;
  } out;
  std::thread game([&] {
    troupe_client::options o;
    o.backoff = std::chrono::milliseconds(10);
    o.backoff_max = std::chrono::milliseconds(100);
    o.reconnect_attempts = 100;
    troupe_client::session c;
    out.opened = c.open(endpoint, "survivor", 2, 4, troupe_client::discrete(2),
                        std::chrono::seconds(10), o);
    if (!out.opened)
      return;
    out.first_session = c.id();
    const std::vector<uint32_t> ids = {0, 1};
    std::vector<float> obs(8, 0.05f), actions;
    out.first = c.step(ids, obs, {}, {}, {}, actions);
    out.failed = c.step(ids, obs, {1.0, 1.0}, {}, {}, actions);
    if (!troupe_client::session::retryable(out.failed))
      return;
    out.reconnected = c.reconnect();
    out.reconnects = c.reconnects();
    out.second_session = c.id();
    if (!out.reconnected)
      return;
    out.later_ok += static_cast<bool>(c.step(ids, obs, {}, {}, {}, actions));
    for (int i = 0; i < 3; ++i)
      out.later_ok += static_cast<bool>(c.step(ids, obs, {1.0, 1.0}, {}, {}, actions));
    c.close();
  });
  // A failed REQUIRE below still joins the client (its every wait is bounded).
  struct joiner {
    std::thread& t;
    ~joiner() {
      if (t.joinable())
        t.join();
    }
  } join_game{game};

  // The vanishing server: WELCOME (timeout_ms 1000), one ACT.
  const auto receive_from = [&](const char* what) {
    zmq::pollitem_t item{static_cast<void*>(gone), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, receive_limit);
    std::vector<zmq::message_t> parts;
    auto got =
      zmq::recv_multipart(gone, std::back_inserter(parts), zmq::recv_flags::dontwait);
    REQUIRE_MESSAGE(got.has_value(), "the vanishing server got no " << what);
    return parts;
  };
  const auto reply = [&](const std::string& id, const std::vector<frame>& frames) {
    gone.send(zmq::buffer(id), zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i)
      gone.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  auto parts = receive_from("HELLO");
  const std::string id = parts[0].to_string();
  header h;
  h.sequence = 1;
  h.session = 41;
  welcome w;
  w.session = 41;
  w.num_envs = 2;
  w.heartbeat_ms = 100;
  w.timeout_ms = 1000;
  reply(id, encode_welcome(h, w));
  parts = receive_from("STEP");
  h.sequence = 2;
  act a;
  a.env_ids = {0, 1};
  a.actions = {1, 0};
  env_shape shape = trained_shape();
  shape.num_envs = 2;
  reply(id, encode_act(h, a, shape));
  gone.close();
  gone_ctx.reset(); // the port is free once the context has ended

  // troupe comes back on the same address.
  const uint64_t seed2 = seed + 1;
  remote_server_options o;
  o.bind = endpoint;
  o.shape = trained_shape();
  auto agent = make_agent(2, 64, seed2);
  auto back = remote_server::bind(o, 2);
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.err().message));
  REQUIRE((*back)->start(agent).ok());
  game.join(); // every wait of the client is bounded

  REQUIRE_MESSAGE(out.opened, out.opened.message);
  REQUIRE_MESSAGE(out.first, out.first.message);
  CHECK(out.first_session == 41);
  // Nothing came back for 1000 ms, or troupe did not know the session.
  CHECK_MESSAGE(troupe_client::session::retryable(out.failed),
                out.failed.code << ": " << out.failed.message);
  REQUIRE_MESSAGE(out.reconnected, out.reconnected.message);
  CHECK(out.reconnects >= 1);
  CHECK(out.second_session != 0);
  CHECK(out.later_ok == 4);
  (*back)->stop();
  CHECK((*back)->counters().sessions == 1);
  CHECK((*back)->counters().env_steps == 8);
}

TEST_CASE("the C client reconnects after troupe dropped its silent session: the ERROR "
          "timeout is retryable and a new session steps") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  remote_server_options o;
  o.heartbeat_ms = 100;
  o.timeout_ms = 1000; // above a loaded machine's pause between open and the first step
  served s(make_agent(2, 64, seed), o);
  char error[512] = "";
  troupe_remote_options co{};
  co.backoff_ms = 5;
  co.backoff_max_ms = 50;
  co.reconnect_attempts = 20;
  troupe_remote* r = troupe_remote_open_with(s.server->endpoint().c_str(), "c-silent", 2,
                                             4, 2, 0, 10000, &co, error, sizeof error);
  REQUIRE_MESSAGE(r != nullptr, error);
  const uint64_t first = troupe_remote_session(r);
  uint32_t ids[2] = {0, 1};
  float obs[8] = {0.1f, 0.0f, 0.0f, 0.0f, -0.1f, 0.0f, 0.0f, 0.0f}, actions[2];
  REQUIRE(troupe_remote_step(r, 2, ids, obs, nullptr, nullptr, nullptr, actions, nullptr,
                             error, sizeof error) == TROUPE_REMOTE_OK);
  troupe::test::wait_until([&] { return s.server->counters().sessions_dropped == 1; },
                           "troupe to drop the silent session");
  double rewards[2] = {1, 1};
  const int status = troupe_remote_step(r, 2, ids, obs, rewards, nullptr, nullptr,
                                        actions, nullptr, error, sizeof error);
  CHECK(status == TROUPE_REMOTE_ERROR);
  CHECK(troupe_remote_last_code(r) == static_cast<uint32_t>(error_code::timeout));
  REQUIRE(troupe_remote_retryable(r, status));
  REQUIRE_MESSAGE(troupe_remote_reconnect(r, error, sizeof error) == TROUPE_REMOTE_OK,
                  error);
  CHECK(troupe_remote_reconnects(r) >= 1);
  CHECK(troupe_remote_session(r) != first);
  CHECK(troupe_remote_step(r, 2, ids, obs, nullptr, nullptr, nullptr, actions, nullptr,
                           error, sizeof error) == TROUPE_REMOTE_OK);
  CHECK(s.server->counters().sessions == 2);
  // A refused handshake is not retryable.
  CHECK_FALSE(troupe_remote_retryable(r, TROUPE_REMOTE_CLOSED));
  troupe_remote_close(r);
}

TEST_CASE("a HELLO waiting for remote.min_envs is dropped after timeout_ms with ERROR "
          "timeout, and its environments no longer count toward min_envs") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  remote_server_options o;
  o.min_envs = 4;
  o.heartbeat_ms = 100;
  o.timeout_ms = 1000; // above a loaded machine's pause between the next two HELLOs
  served s(make_agent(8, 4, seed), o);
  zmq::context_t ctx;
  client a(ctx, s.server->endpoint());
  hello m{"waits", trained_shape()};
  m.shape.num_envs = 3;
  a.send(encode_hello(a.next_header(), m));
  std::vector<frame> frames;
  auto h = a.receive_header("ERROR timeout for the waiting HELLO", frames);
  REQUIRE(h.type == kind::error);
  CHECK(h.sequence == 1);
  CHECK(h.session == 0);
  CHECK(client::error_text(frames).find("waited more than remote.timeout_ms 1000 for "
                                        "remote.min_envs 4") != std::string::npos);
  CHECK(s.server->counters().sessions_dropped == 1);
  // 3 + 2 would have reached 4 had the dropped HELLO still counted.
  client b(ctx, s.server->endpoint());
  m.client = "second";
  m.shape.num_envs = 2;
  b.send(encode_hello(b.next_header(), m));
  client c(ctx, s.server->endpoint());
  c.hello(2, "third"); // 2 + 2 = 4: both welcomed
  h = b.receive_header("WELCOME for the second client", frames);
  CHECK(h.type == kind::welcome);
  CHECK(s.server->counters().sessions == 2);
}

// -- the rules of docs/protocol.md, one by one
// -------------------------------------------

namespace {

// The ERROR (code and header) of the next message on `c`; fails naming `expected`.
std::pair<header, error_reply> next_error(client& c, const std::string& expected) {
  std::vector<frame> frames;
  auto h = c.receive_header(expected, frames);
  REQUIRE_MESSAGE(h.type == kind::error,
                  "expected " << expected << ", got " << std::string(to_string(h.type)));
  auto views = views_of(frames);
  error_code code = error_code::none;
  auto e = decode_error(h, views.data(), views.size(), code);
  REQUIRE_MESSAGE(e.ok(), (e.ok() ? "" : e.err().message));
  return {h, *e};
}

} // namespace

TEST_CASE(
  "a client that comes back after troupe dropped its session gets unknown_session, "
  "on the same connection or a new one, and a new HELLO is welcomed") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.heartbeat_ms = 100;
  o.timeout_ms = 1000; // above a loaded machine's pause between HELLO and the first STEP
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  c.hello(2, "returns");
  const uint64_t dropped = c.session;
  c.step_once(random_step(gen, 2, true));
  troupe::test::wait_until([&] { return s.server->counters().sessions_dropped == 1; },
                           "troupe to drop the silent session");
  CHECK(next_error(c, "ERROR timeout").second.code == error_code::timeout);
  // The same connection, the old session id: STEP, PING and CLOSE.
  const auto same = c.refused(encode_step(c.next_header(), random_step(gen, 2, false)),
                              error_code::unknown_session);
  CHECK(same.find(fmt::format("session {} is not open on this connection", dropped)) !=
        std::string::npos);
  CHECK(same.find("say HELLO for a new session") != std::string::npos);
  for (kind k : {kind::ping, kind::close}) {
    header h = c.next_header();
    h.type = k;
    c.refused(encode_signal(h), error_code::unknown_session);
  }
  // A new connection with the old session id.
  client other(ctx, s.server->endpoint());
  other.session = dropped;
  other.n = 2;
  other.refused(encode_step(other.next_header(), random_step(gen, 2, false)),
                error_code::unknown_session);
  // Without a session id it is a STEP before HELLO: out_of_order.
  other.session = 0;
  other.refused(encode_step(other.next_header(), random_step(gen, 2, true)),
                error_code::out_of_order);
  // HELLO on the same connection makes a new session, which steps.
  c.hello(2, "returns");
  CHECK(c.session != dropped);
  c.step_once(random_step(gen, 2, true));
  CHECK(s.server->counters().sessions == 2);
}

TEST_CASE("an ERROR carries the offending message's sequence whenever its header has "
          "version 1's layout, whatever its kind, and 0 otherwise") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.max_errors = 100;
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  auto expect = [&](std::vector<frame> frames, error_code code, uint64_t sequence) {
    CAPTURE(to_string(code));
    c.send(frames);
    // Not a structured binding: CHECK_MESSAGE is a lambda (clang 14).
    const auto reply = next_error(c, std::string("ERROR ") + to_string(code));
    const header& h = reply.first;
    const error_reply& e = reply.second;
    CHECK_MESSAGE(e.code == code,
                  "got " << std::string(to_string(e.code)) << ": " << e.message);
    CHECK(h.sequence == sequence);
  };
  auto random_sequence = [&] { return 1 + gen() % (uint64_t{1} << 62); };
  for (int session = 0; session < 2; ++session) {
    header h = c.next_header();
    h.sequence = random_sequence();
    auto unknown = encode_signal(h);
    unknown[0][6] = static_cast<uint8_t>(9 + gen() % 247); // no such kind
    expect(unknown, error_code::unknown_kind, h.sequence);
    h.type = kind::pong; // a kind troupe sends
    expect(encode_signal(h), error_code::unknown_kind, h.sequence);
    auto major2 = encode_signal(h);
    major2[0][4] = 2;
    expect(major2, error_code::version_mismatch, 0);
    auto magic = encode_signal(h);
    magic[0][0] = 'X';
    expect(magic, error_code::bad_magic, 0);
    auto longer = encode_signal(h);
    longer[0].push_back(0);
    expect(longer, error_code::bad_header, 0);
    if (session == 0)
      c.hello(2);
  }
}

TEST_CASE("a refused message does not use its sequence number up, whatever the refusal, "
          "and numbers rise per session") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.max_errors = 100;
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  c.hello(2);
  c.step_once(random_step(gen, 2, true));
  auto again = [&] { c.seq -= 1; }; // the next message reuses the refused one's number
  step nan_obs = random_step(gen, 2, false);
  nan_obs.obs[3] = std::nanf("");
  c.refused(encode_step(c.next_header(), nan_obs), error_code::non_finite);
  again();
  c.step_once(random_step(gen, 2, false));
  header other = c.next_header();
  other.session += 1;
  c.refused(encode_step(other, random_step(gen, 2, false)), error_code::unknown_session);
  again();
  c.step_once(random_step(gen, 2, false));
  auto short_rewards = encode_step(c.next_header(), random_step(gen, 2, false));
  short_rewards[3].resize(8);
  c.refused(short_rewards, error_code::count_mismatch);
  again();
  header bad_ping = c.next_header();
  bad_ping.type = kind::ping;
  auto ping_frames = encode_signal(bad_ping);
  ping_frames.push_back(frame{1});
  c.refused(ping_frames, error_code::bad_frame_count);
  again();
  c.step_once(random_step(gen, 2, false));
  // Numbers rise per session: after CLOSE the same connection starts again at 1.
  header close = c.next_header();
  close.type = kind::close;
  c.send(encode_signal(close));
  c.seq = 0;
  c.session = 0;
  c.hello(2);
  c.step_once(random_step(gen, 2, true));
  CHECK(c.seq == 2);
  CHECK(s.server->counters().errors == 4);
}

TEST_CASE("an environment's first STEP in a session must report reward 0 and flags 0: "
          "either set is refused with bad_env_id and changes nothing") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.max_errors = 100;
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  c.hello(3);
  step reward_first = random_step(gen, 3, true);
  const uint32_t id = reward_first.env_ids[gen() % 3];
  const size_t at =
    std::find(reward_first.env_ids.begin(), reward_first.env_ids.end(), id) -
    reward_first.env_ids.begin();
  reward_first.rewards[at] = 0.5 + static_cast<double>(gen() % 7);
  CHECK(c.refused(encode_step(c.next_header(), reward_first), error_code::bad_env_id)
          .find(fmt::format("env id {} has no action outstanding", id)) !=
        std::string::npos);
  for (uint8_t flag : {flag_terminated, flag_truncated}) {
    step flag_first = random_step(gen, 3, true);
    flag_first.flags[at] = flag;
    for (int j = 0; j < 4; ++j)
      flag_first.final_obs.push_back(0.1f * static_cast<float>(j + 1));
    CHECK(c.refused(encode_step(c.next_header(), flag_first), error_code::bad_env_id)
            .find(fmt::format("flags 0x{:02x}", flag)) != std::string::npos);
  }
  CHECK(s.agent->counters().env_steps == 0);
  c.step_once(random_step(gen, 3, true));
  c.step_once(random_step(gen, 3, false)); // now every id has an action outstanding
  CHECK(s.agent->counters().transitions == 3);
}

TEST_CASE("a HELLO whose num_envs is 0 is refused with count_mismatch and makes no "
          "session") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  served s(make_agent(4, 64, seed));
  zmq::context_t ctx;
  client c(ctx, s.server->endpoint());
  hello m{"none", trained_shape()};
  m.shape.num_envs = 0;
  auto frames = encode_hello(c.next_header(), m);
  CHECK(c.refused(frames, error_code::count_mismatch)
          .find("HELLO message: num_envs must be in [1, 1048576], got 0") !=
        std::string::npos);
  CHECK(s.server->counters().sessions == 0);
  c.n = 1;
  std::mt19937_64 gen(seed);
  c.refused(encode_step(c.next_header(), random_step(gen, 1, true)),
            error_code::out_of_order);
  c.hello(1); // the connection is free for a HELLO
}

TEST_CASE(
  "a stopping troupe ends every session with CLOSE, and a STEP that arrives once "
  "the run's agent is closed is answered with CLOSE, never ERROR server_closing") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  served s(make_agent(4, 64, seed));
  zmq::context_t ctx;
  client ending(ctx, s.server->endpoint());
  ending.hello(2, "ending");
  ending.step_once(random_step(gen, 2, true));
  client stopped(ctx, s.server->endpoint());
  stopped.hello(2, "stopped");
  stopped.step_once(random_step(gen, 2, true));
  s.agent->close(); // the run ends before the server stops
  const uint64_t sent = ending.seq + 1;
  ending.send(encode_step(ending.next_header(), random_step(gen, 2, false)));
  std::vector<frame> frames;
  auto h = ending.receive_header("CLOSE", frames);
  CHECK_MESSAGE(h.type == kind::close, "got " << std::string(to_string(h.type)) << ": "
                                              << client::error_text(frames));
  CHECK(h.sequence == sent);
  CHECK(h.session == ending.session);
  CHECK(s.server->counters().envs_connected == 2);
  ending.refused(encode_step(ending.next_header(), random_step(gen, 2, false)),
                 error_code::unknown_session);
  s.server->stop();
  h = stopped.receive_header("CLOSE at stop", frames);
  CHECK(h.type == kind::close);
  CHECK(h.session == stopped.session);
}

// -- a slow client
// ------------------------------------------------------------------------

TEST_CASE("a stalled client does not hold the others up: while it neither steps nor "
          "reads its replies, another client's steps all complete") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  remote_server_options o;
  o.timeout_ms = 60000; // the stall is not silence long enough to be dropped
  served s(make_agent(4, 64, seed), o);
  zmq::context_t ctx;
  client slow(ctx, s.server->endpoint());
  slow.sock.set(zmq::sockopt::rcvhwm, 1); // its unread replies back up at once
  slow.hello(2, "slow");
  slow.step_once(random_step(gen, 2, true));
  // It sends STEPs and reads none of the ACTs, then stalls.
  constexpr int unread = 50;
  for (int i = 0; i < unread; ++i)
    slow.send(encode_step(slow.next_header(), random_step(gen, 2, false)));
  troupe::test::wait_until([&] { return s.server->counters().steps == 1 + unread; },
                           "the server to answer every STEP of the stalled client");
  client fast(ctx, s.server->endpoint());
  fast.hello(2, "fast");
  fast.step_once(random_step(gen, 2, true));
  constexpr int rounds = 200;
  for (int i = 0; i < rounds; ++i)
    fast.step_once(random_step(gen, 2, false)); // each bounded by receive_limit
  const auto counted = s.server->counters();
  CHECK(counted.steps == 1 + unread + 1 + rounds);
  CHECK(counted.env_steps == 2 * (1 + unread + 1 + rounds));
  CHECK(counted.sessions_dropped == 0);
  CHECK(counted.errors == 0);
}
