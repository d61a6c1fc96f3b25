// The remote protocol's codec (actors/remote_wire): every kind round-trips
// with fresh random contents, the bytes sit at the offsets docs/protocol.md
// gives, and every malformed message is refused with its error code and a
// message naming the rule and the values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "edge/remote_wire.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::edge::remote;
using troupe::test::fresh_seed;

namespace {

env_shape random_shape(std::mt19937_64& gen, bool discrete) {
  env_shape s;
  s.num_envs = 1 + static_cast<uint32_t>(gen() % 64);
  s.obs_dim = 1 + static_cast<uint32_t>(gen() % 12);
  s.discrete = discrete;
  s.num_actions = discrete ? 1 + static_cast<uint32_t>(gen() % 9) : 0;
  s.action_dim = discrete ? 1 : 1 + static_cast<uint32_t>(gen() % 6);
  return s;
}

header random_header(std::mt19937_64& gen) {
  header h;
  h.sequence = gen();
  h.session = gen() | 1;
  return h;
}

// A random STEP of `shape`: a random subset of the environments in random
// order, some of them ended.
step random_step(std::mt19937_64& gen, const env_shape& shape) {
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  std::vector<uint32_t> ids(shape.num_envs);
  for (uint32_t i = 0; i < shape.num_envs; ++i)
    ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), gen);
  const size_t k = 1 + gen() % shape.num_envs;
  step m;
  m.env_ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
  for (size_t i = 0; i < k; ++i) {
    for (uint32_t j = 0; j < shape.obs_dim; ++j)
      m.obs.push_back(value(gen));
    m.rewards.push_back(std::uniform_real_distribution<double>(-1e6, 1e6)(gen));
    const uint8_t f = static_cast<uint8_t>(gen() % 4);
    m.flags.push_back(f);
    if (f)
      for (uint32_t j = 0; j < shape.obs_dim; ++j)
        m.final_obs.push_back(value(gen));
  }
  return m;
}

act random_act(std::mt19937_64& gen, const env_shape& shape) {
  act m;
  const size_t k = 1 + gen() % shape.num_envs;
  for (size_t i = 0; i < k; ++i) {
    m.env_ids.push_back(static_cast<uint32_t>(gen() % shape.num_envs));
    for (uint32_t j = 0; j < shape.action_width(); ++j)
      m.actions.push_back(shape.discrete
                            ? static_cast<float>(gen() % shape.num_actions)
                            : std::uniform_real_distribution<float>(-3.0f, 3.0f)(gen));
  }
  m.policy_version = gen();
  return m;
}

struct decoded_frames {
  std::vector<frame> frames;
  std::vector<frame_view> views;
  header h;
};

// Decodes the header of `frames` (which must succeed).
decoded_frames with_header(std::vector<frame> frames) {
  decoded_frames d;
  d.frames = std::move(frames);
  d.views = views_of(d.frames);
  error_code code = error_code::none;
  auto h = decode_header(d.views.data(), d.views.size(), code);
  REQUIRE_MESSAGE(h.ok(), (h ? std::string{} : h.err().message));
  d.h = *h;
  return d;
}

// `code` by reference: it is read after the call that sets it.
template <class T>
void check_refused(const result<T>& r, const error_code& code, error_code expected,
                   const std::string& says) {
  REQUIRE_FALSE(r.ok());
  CHECK(code == expected);
  CAPTURE(r.err().message);
  CHECK(r.err().message.find(says) != std::string::npos);
}

void check_refused(const status& s, const error_code& code, error_code expected,
                   const std::string& says) {
  REQUIRE_FALSE(s.ok());
  CHECK(code == expected);
  CAPTURE(s.err().message);
  CHECK(s.err().message.find(says) != std::string::npos);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

std::string text(const frame& f) {
  return std::string(f.begin(), f.end());
}

frame bytes(const std::string& s) {
  return frame(s.begin(), s.end());
}

} // namespace

TEST_CASE("the header frame holds every field at the offsets docs/protocol.md gives") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  header h;
  h.minor = static_cast<uint8_t>(gen());
  h.type = kind::step;
  h.flags = static_cast<uint8_t>(gen());
  h.sequence = gen();
  h.num_envs = static_cast<uint32_t>(gen());
  h.session = gen();
  const frame f = encode_header(h);
  REQUIRE(f.size() == 32);
  CHECK(text(frame(f.begin(), f.begin() + 4)) == "TRPE");
  CHECK(f[4] == 1);
  CHECK(f[5] == h.minor);
  CHECK(f[6] == 3);
  CHECK(f[7] == h.flags);
  uint64_t sequence = 0, session = 0;
  uint32_t num_envs = 0, reserved = 1;
  for (int i = 7; i >= 0; --i) {
    sequence = (sequence << 8) | f[8 + i];
    session = (session << 8) | f[24 + i];
  }
  for (int i = 3; i >= 0; --i) {
    num_envs = (num_envs << 8) | f[16 + i];
    reserved = (reserved << 8) | f[20 + i];
  }
  CHECK(sequence == h.sequence);
  CHECK(num_envs == h.num_envs);
  CHECK(reserved == 0);
  CHECK(session == h.session);

  const frame_view v{f.data(), f.size()};
  error_code code = error_code::none;
  auto back = decode_header(&v, 1, code);
  REQUIRE(back.ok());
  CHECK(back->major == 1);
  CHECK(back->minor == h.minor);
  CHECK(back->type == kind::step);
  CHECK(back->flags == h.flags);
  CHECK(back->sequence == h.sequence);
  CHECK(back->num_envs == h.num_envs);
  CHECK(back->session == h.session);
}

TEST_CASE("HELLO and WELCOME round-trip with random spaces, names and settings") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int round = 0; round < 50; ++round) {
    hello m;
    m.client = "client-" + std::to_string(gen() % 100000);
    m.shape = random_shape(gen, gen() % 2 == 0);
    header h = random_header(gen);
    auto d = with_header(encode_hello(h, m));
    CHECK(d.h.type == kind::hello);
    CHECK(d.h.session == 0);
    CHECK(d.h.sequence == h.sequence);
    CHECK(d.h.num_envs == m.shape.num_envs);
    error_code code = error_code::none;
    auto back = decode_hello(d.h, d.views.data(), d.views.size(), code);
    REQUIRE_MESSAGE(back.ok(), (back ? std::string{} : back.err().message));
    CHECK(back->client == m.client);
    CHECK(back->shape.num_envs == m.shape.num_envs);
    CHECK(back->shape.obs_dim == m.shape.obs_dim);
    CHECK(back->shape.discrete == m.shape.discrete);
    CHECK(back->shape.action_width() == m.shape.action_width());
    if (m.shape.discrete)
      CHECK(back->shape.num_actions == m.shape.num_actions);

    welcome w;
    w.session = gen() | 1;
    w.minor = static_cast<uint8_t>(gen() % 3);
    w.num_envs = m.shape.num_envs;
    w.heartbeat_ms = static_cast<uint32_t>(gen());
    w.timeout_ms = static_cast<uint32_t>(gen());
    w.max_errors = static_cast<uint32_t>(gen());
    auto dw = with_header(encode_welcome(h, w));
    CHECK(dw.h.type == kind::welcome);
    CHECK(dw.h.session == w.session);
    CHECK(dw.h.minor == w.minor);
    auto wb = decode_welcome(dw.h, dw.views.data(), dw.views.size(), code);
    REQUIRE_MESSAGE(wb.ok(), (wb ? std::string{} : wb.err().message));
    CHECK(wb->session == w.session);
    CHECK(wb->minor == w.minor);
    CHECK(wb->num_envs == w.num_envs);
    CHECK(wb->heartbeat_ms == w.heartbeat_ms);
    CHECK(wb->timeout_ms == w.timeout_ms);
    CHECK(wb->max_errors == w.max_errors);
  }
}

TEST_CASE(
  "a HELLO written by hand as docs/protocol.md shows decodes, shapes multiplied") {
  header h;
  h.type = kind::hello;
  h.num_envs = 3;
  const std::string json = R"({"client": "hand", "num_envs": 3,
    "observation_space": {"type": "box", "shape": [2, 3], "low": [0], "high": [1]},
    "action_space": {"type": "box", "shape": [2, 2]}, "extra": "ignored"})";
  std::vector<frame> frames{encode_header(h), bytes(json)};
  auto views = views_of(frames);
  error_code code = error_code::none;
  auto m = decode_hello(h, views.data(), views.size(), code);
  REQUIRE_MESSAGE(m.ok(), (m ? std::string{} : m.err().message));
  CHECK(m->client == "hand");
  CHECK(m->shape.obs_dim == 6);
  CHECK_FALSE(m->shape.discrete);
  CHECK(m->shape.action_dim == 4);
}

TEST_CASE(
  "STEP round-trips bit for bit with random subsets, rewards and ended episodes") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int round = 0; round < 200; ++round) {
    const env_shape shape = random_shape(gen, round % 2 == 0);
    const step m = random_step(gen, shape);
    const header h = random_header(gen);
    auto d = with_header(encode_step(h, m));
    CHECK(d.h.type == kind::step);
    CHECK(d.h.num_envs == m.size());
    CHECK(d.h.session == h.session);
    error_code code = error_code::none;
    auto back = decode_step(d.h, d.views.data(), d.views.size(), shape, code);
    REQUIRE_MESSAGE(back.ok(), (back ? std::string{} : back.err().message));
    CHECK(back->env_ids == m.env_ids);
    CHECK(same_bits(back->obs, m.obs));
    CHECK(same_bits(back->rewards, m.rewards));
    CHECK(back->flags == m.flags);
    CHECK(same_bits(back->final_obs, m.final_obs));
  }
}

TEST_CASE("ACT round-trips: Discrete actions as int32 indices, Box actions bit for bit") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (int round = 0; round < 200; ++round) {
    const env_shape shape = random_shape(gen, round % 2 == 0);
    const act m = random_act(gen, shape);
    auto d = with_header(encode_act(random_header(gen), m, shape));
    CHECK(d.h.type == kind::act);
    REQUIRE(d.frames.size() == 4);
    CHECK(d.frames[2].size() == 4 * m.env_ids.size() * shape.action_width());
    if (shape.discrete) {
      int32_t first = 0;
      std::memcpy(&first, d.frames[2].data(), 4);
      CHECK(first == static_cast<int32_t>(m.actions[0]));
    }
    error_code code = error_code::none;
    auto back = decode_act(d.h, d.views.data(), d.views.size(), shape, code);
    REQUIRE_MESSAGE(back.ok(), (back ? std::string{} : back.err().message));
    CHECK(back->env_ids == m.env_ids);
    CHECK(same_bits(back->actions, m.actions));
    CHECK(back->policy_version == m.policy_version);
  }
}

TEST_CASE("PING, PONG, CLOSE and ERROR round-trip") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  for (kind k : {kind::ping, kind::pong, kind::close}) {
    header h = random_header(gen);
    h.type = k;
    auto d = with_header(encode_signal(h));
    CHECK(d.h.type == k);
    CHECK(d.h.sequence == h.sequence);
    CHECK(d.h.session == h.session);
    error_code code = error_code::none;
    CHECK(decode_signal(d.h, d.views.size(), code).ok());
  }
  error_reply e;
  e.code = static_cast<error_code>(1 + gen() % 18);
  e.message = "rule " + std::to_string(gen());
  auto d = with_header(encode_error(random_header(gen), e));
  CHECK(d.h.type == kind::error);
  error_code code = error_code::none;
  auto back = decode_error(d.h, d.views.data(), d.views.size(), code);
  REQUIRE(back.ok());
  CHECK(back->code == e.code);
  CHECK(back->message == e.message);
}

TEST_CASE(
  "a malformed header is refused: short, long, absent, wrong magic, major, kind") {
  header h;
  h.type = kind::ping;
  frame good = encode_header(h);
  error_code code = error_code::none;

  CHECK_FALSE(decode_header(nullptr, 0, code).ok());
  CHECK(code == error_code::bad_header);

  for (size_t size : {size_t{0}, size_t{1}, size_t{31}, size_t{33}}) {
    frame f(good.begin(), good.begin() + std::min(size, good.size()));
    f.resize(size, 0);
    const frame_view v{f.data(), f.size()};
    check_refused(decode_header(&v, 1, code), code, error_code::bad_header,
                  "must be 32 bytes, got " + std::to_string(size));
  }

  frame f = good;
  f[3] = 'X';
  frame_view v{f.data(), f.size()};
  check_refused(decode_header(&v, 1, code), code, error_code::bad_magic,
                "got 54 52 50 58");

  f = good;
  f[4] = 2;
  f[5] = 7;
  v = {f.data(), f.size()};
  check_refused(decode_header(&v, 1, code), code, error_code::version_mismatch,
                "major version 1 is required, got 2.7");

  for (uint8_t bad : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
    f = good;
    f[6] = bad;
    v = {f.data(), f.size()};
    check_refused(decode_header(&v, 1, code), code, error_code::unknown_kind,
                  "got " + std::to_string(bad));
  }
}

TEST_CASE("a refused header's sequence is readable whenever the header has version 1's "
          "layout, whatever its kind, and is 0 for another length, magic or major") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  header h;
  h.type = kind::step;
  h.sequence = 1 + gen() % (uint64_t{1} << 63);
  h.session = gen();
  const frame good = encode_header(h);
  frame_view v{good.data(), good.size()};
  CHECK(readable_sequence(&v, 1) == h.sequence);
  error_code code = error_code::none;
  for (uint8_t any_kind :
       {uint8_t{0}, uint8_t{2}, uint8_t{9}, static_cast<uint8_t>(10 + gen() % 246)}) {
    CAPTURE(int(any_kind));
    frame f = good;
    f[6] = any_kind;
    v = {f.data(), f.size()};
    CHECK(readable_sequence(&v, 1) == h.sequence);
  }
  frame f = good;
  f[4] = static_cast<uint8_t>(2 + gen() % 254);
  v = {f.data(), f.size()};
  CHECK_FALSE(decode_header(&v, 1, code).ok());
  CHECK(readable_sequence(&v, 1) == 0);
  f = good;
  f[gen() % 4] ^= static_cast<uint8_t>(1 + gen() % 255);
  v = {f.data(), f.size()};
  CHECK(readable_sequence(&v, 1) == 0);
  for (size_t size : {size_t{0}, size_t{31}, size_t{33}}) {
    f = good;
    f.resize(size, 0);
    v = {f.data(), f.size()};
    CHECK(readable_sequence(&v, 1) == 0);
  }
  CHECK(readable_sequence(nullptr, 0) == 0);
}

TEST_CASE("kinds out of order are refused: STEP before WELCOME, a second HELLO, "
          "kinds troupe sends") {
  error_code code = error_code::none;
  CHECK(check_client_kind(kind::hello, false, code).ok());
  for (kind k : {kind::step, kind::ping, kind::close}) {
    CHECK(check_client_kind(k, true, code).ok());
    check_refused(check_client_kind(k, false, code), code, error_code::out_of_order,
                  "no session");
  }
  check_refused(check_client_kind(kind::hello, true, code), code,
                error_code::out_of_order, "has a session already");
  for (kind k : {kind::welcome, kind::act, kind::pong, kind::error})
    for (bool session : {false, true})
      check_refused(check_client_kind(k, session, code), code, error_code::unknown_kind,
                    std::string("not ") + to_string(k));
}

TEST_CASE("a malformed HELLO is refused naming the field: JSON, names, counts, spaces") {
  header h;
  h.type = kind::hello;
  h.num_envs = 4;
  auto decode = [&](const std::string& json, error_code& code, uint32_t n = 4) {
    header hh = h;
    hh.num_envs = n;
    std::vector<frame> frames{encode_header(hh), bytes(json)};
    auto views = views_of(frames);
    return decode_hello(hh, views.data(), views.size(), code);
  };
  const std::string obs = R"("observation_space": {"type": "box", "shape": [4]})";
  const std::string act = R"("action_space": {"type": "discrete", "n": 2})";
  const std::string name = R"("client": "c", )";
  error_code code = error_code::none;
  check_refused(decode("{not json", code), code, error_code::bad_handshake, "not JSON");
  check_refused(decode("[1, 2]", code), code, error_code::bad_handshake,
                "must be a JSON object, got array");
  check_refused(decode(R"({"num_envs": 4, )" + obs + ", " + act + "}", code), code,
                error_code::bad_handshake, "client: expected a string");
  check_refused(
    decode(R"({"client": "", "num_envs": 4, )" + obs + ", " + act + "}", code), code,
    error_code::bad_handshake, "client: expected 1 to 128 characters, got 0");
  check_refused(decode("{" + name + obs + ", " + act + "}", code), code,
                error_code::bad_handshake, "'num_envs' is missing");
  check_refused(decode("{" + name + R"("num_envs": 5, )" + obs + ", " + act + "}", code),
                code, error_code::bad_handshake,
                "num_envs 5 disagrees with the header's num_envs 4");
  check_refused(decode("{" + name + R"("num_envs": -1, )" + obs + ", " + act + "}", code),
                code, error_code::bad_handshake,
                "expected an integer in [1, 1048576], got -1");
  check_refused(decode("{" + name + R"("num_envs": 4, )" + act + "}", code), code,
                error_code::bad_handshake, "'observation_space' is missing");
  check_refused(decode("{" + name +
                         R"("num_envs": 4, "observation_space": {"type": )"
                         R"("discrete", "n": 3}, )" +
                         act + "}",
                       code),
                code, error_code::bad_handshake, "expected \"box\"");
  check_refused(decode("{" + name +
                         R"("num_envs": 4, "observation_space": {"type": )"
                         R"("box", "shape": [0]}, )" +
                         act + "}",
                       code),
                code, error_code::bad_handshake, "positive integers");
  check_refused(decode("{" + name +
                         R"("num_envs": 4, "observation_space": {"type": )"
                         R"("box", "shape": [1024, 1025]}, )" +
                         act + "}",
                       code),
                code, error_code::bad_handshake, "more than 1048576 values");
  check_refused(decode("{" + name + R"("num_envs": 4, )" + obs + "}", code), code,
                error_code::bad_handshake, "'action_space' is missing");
  check_refused(decode("{" + name + R"("num_envs": 4, )" + obs +
                         R"(, "action_space": {"type": "multi"}})",
                       code),
                code, error_code::bad_handshake, "got \"multi\"");
  check_refused(decode("{" + name + R"("num_envs": 4, )" + obs +
                         R"(, "action_space": {"type": "discrete", "n": 0}})",
                       code),
                code, error_code::bad_handshake,
                "action_space.n: expected an integer in [1, ");
  check_refused(decode("{" + name + R"("num_envs": 4, )" + obs +
                         R"(, "action_space": {"type": "discrete", "n": 2.5}})",
                       code),
                code, error_code::bad_handshake, "expected an integer, got 2.5");
  check_refused(
    decode("{" + name + R"("num_envs": 0, )" + obs + ", " + act + "}", code, 0), code,
    error_code::count_mismatch, "num_envs must be in [1, 1048576], got 0");

  // A HELLO with another number of frames.
  std::vector<frame> one{encode_header(h)};
  auto views = views_of(one);
  check_refused(decode_hello(h, views.data(), views.size(), code), code,
                error_code::bad_frame_count,
                "a HELLO has 2 frames (the header and 1), got 1");
}

TEST_CASE(
  "HELLO's spaces are compared with the trained ones: obs_dim, type, n, action_dim") {
  env_shape trained;
  trained.obs_dim = 4;
  trained.discrete = true;
  trained.num_actions = 2;
  env_shape offered = trained;
  offered.num_envs = 77;
  CHECK(check_same_spaces(offered, trained).ok());
  offered.obs_dim = 5;
  auto s = check_same_spaces(offered, trained);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().message.find("holds 5 values; troupe trains observations of 4") !=
        std::string::npos);
  offered = trained;
  offered.num_actions = 3;
  s = check_same_spaces(offered, trained);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().message.find("is Discrete(3); troupe trains Discrete(2)") !=
        std::string::npos);
  offered = trained;
  offered.discrete = false;
  offered.action_dim = 2;
  s = check_same_spaces(offered, trained);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().message.find("is Box(2); troupe trains Discrete(2)") !=
        std::string::npos);

  CHECK(check_shape(trained).ok());
  env_shape bad = trained;
  bad.obs_dim = 0;
  CHECK_FALSE(check_shape(bad).ok());
  bad = trained;
  bad.num_envs = max_session_envs + 1;
  CHECK_FALSE(check_shape(bad).ok());
}

TEST_CASE(
  "a malformed STEP is refused: frames, counts, lengths, ids, flags, non-finite") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  env_shape shape;
  shape.num_envs = 8;
  shape.obs_dim = 3;
  step m = random_step(gen, shape);
  // At least one ended episode, at least two environments.
  while (m.size() < 2 || m.final_obs.empty())
    m = random_step(gen, shape);
  header h = random_header(gen);
  const auto good = encode_step(h, m);
  error_code code = error_code::none;
  auto decode = [&](std::vector<frame> frames) {
    auto d = with_header(std::move(frames));
    return decode_step(d.h, d.views.data(), d.views.size(), shape, code);
  };
  REQUIRE(decode(good).ok());

  auto fewer = good;
  fewer.pop_back();
  check_refused(decode(fewer), code, error_code::bad_frame_count, "got 5");

  // num_envs 0 and above N.
  for (uint32_t k : {0u, 9u}) {
    header hh = h;
    hh.type = kind::step;
    hh.num_envs = k;
    auto frames = good;
    frames[0] = encode_header(hh);
    check_refused(decode(frames), code, error_code::count_mismatch,
                  "num_envs must be in [1, 8] (the session's environments), got " +
                    std::to_string(k));
  }
  // Every array one byte short or one element long.
  const char* names[] = {"",        "env ids", "observations",
                         "rewards", "flags",   "final observations"};
  for (size_t i = 1; i <= 5; ++i) {
    auto frames = good;
    frames[i].push_back(0);
    check_refused(decode(frames), code, error_code::count_mismatch,
                  std::string("frame ") + std::to_string(i) + " (" + names[i] + ")");
  }
  {
    auto frames = good;
    frames[2].resize(frames[2].size() - 4);
    check_refused(decode(frames), code, error_code::count_mismatch,
                  "must be " + std::to_string(4 * m.size() * 3) + " bytes");
  }
  // A final observation missing for an ended episode.
  {
    auto frames = good;
    frames[5].resize(frames[5].size() - 12);
    check_refused(decode(frames), code, error_code::count_mismatch, "ended episodes");
  }
  // Ids out of range and repeated.
  {
    step bad = m;
    bad.env_ids[1] = 8;
    check_refused(decode(encode_step(h, bad)), code, error_code::bad_env_id,
                  "env id 8 (position 1) must be below the session's num_envs 8");
    bad = m;
    bad.env_ids[1] = bad.env_ids[0];
    check_refused(decode(encode_step(h, bad)), code, error_code::bad_env_id,
                  "appears twice (position 1)");
  }
  // Undefined flag bits.
  {
    step bad = m;
    bad.flags[0] |= 4;
    check_refused(decode(encode_step(h, bad)), code, error_code::bad_flags,
                  "bits 0 and 1");
  }
  // Non-finite observations, rewards and final observations.
  for (float x : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    step bad = m;
    bad.obs[4] = x;
    check_refused(decode(encode_step(h, bad)), code, error_code::non_finite,
                  "observations must be finite");
    CHECK(code == error_code::non_finite);
    bad = m;
    bad.final_obs.back() = -x;
    check_refused(decode(encode_step(h, bad)), code, error_code::non_finite,
                  "final observations must be finite");
    bad = m;
    bad.rewards[1] = static_cast<double>(x);
    check_refused(decode(encode_step(h, bad)), code, error_code::non_finite,
                  "rewards must be finite");
  }
}

TEST_CASE("a malformed ACT, WELCOME, ERROR or signal is refused") {
  env_shape shape;
  shape.num_envs = 4;
  shape.num_actions = 3;
  act m;
  m.env_ids = {0, 3};
  m.actions = {2, 1};
  header h;
  auto d = with_header(encode_act(h, m, shape));
  error_code code = error_code::none;
  REQUIRE(decode_act(d.h, d.views.data(), d.views.size(), shape, code).ok());

  // An index outside [0, n).
  int32_t three = 3;
  std::memcpy(d.frames[2].data() + 4, &three, 4);
  d.views = views_of(d.frames);
  check_refused(decode_act(d.h, d.views.data(), d.views.size(), shape, code), code,
                error_code::space_mismatch, "action 3 (position 1) must be in [0, 3)");
  // A policy version of 7 bytes.
  d = with_header(encode_act(h, m, shape));
  d.frames[3].pop_back();
  d.views = views_of(d.frames);
  check_refused(decode_act(d.h, d.views.data(), d.views.size(), shape, code), code,
                error_code::count_mismatch, "frame 3 (policy version) must be 8 bytes");

  welcome w;
  w.session = 5;
  d = with_header(encode_welcome(h, w));
  d.frames[1] =
    bytes(R"({"session": 6, "heartbeat_ms": 1, "timeout_ms": 1, "max_errors": 1})");
  d.views = views_of(d.frames);
  check_refused(decode_welcome(d.h, d.views.data(), d.views.size(), code), code,
                error_code::bad_handshake,
                "session 6 must be nonzero and equal the header's 5");
  d.frames[1] = bytes(R"({"session": 5, "timeout_ms": 1, "max_errors": 1})");
  d.views = views_of(d.frames);
  check_refused(decode_welcome(d.h, d.views.data(), d.views.size(), code), code,
                error_code::bad_handshake, "heartbeat_ms: expected an integer");

  d = with_header(encode_error(h, error_reply{error_code::timeout, "late"}));
  d.frames[1].push_back(0);
  d.views = views_of(d.frames);
  check_refused(decode_error(d.h, d.views.data(), d.views.size(), code), code,
                error_code::count_mismatch, "frame 1 (code) must be 4 bytes");

  header ping;
  ping.type = kind::ping;
  check_refused(decode_signal(ping, 2, code), code, error_code::bad_frame_count,
                "a PING has 1 frames");
}
