// Fuzzes the remote protocol's decoder (actors/remote_wire) with whole
// messages (tests/fuzz/remote_wire_input.hpp: a session shape, then frames).
// Invariants: no crash and no read out of bounds; a refusal has a code and a
// message; an accepted message re-encodes to frames that decode to the same
// message, and for the binary kinds the re-encoded array frames are the
// received bytes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "edge/remote_wire.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/remote_wire_input.hpp"

using namespace troupe;
using namespace troupe::edge::remote;

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
void expect_refusal(const result<T>& r, error_code code) {
  if (!r.ok()) {
    TROUPE_FUZZ_EXPECT(code != error_code::none, "a refusal without a code: {}",
                       r.err().message);
    TROUPE_FUZZ_EXPECT(!r.err().message.empty(), "a refusal without a message");
  }
}

// Decodes `frames` again (header and body) with `shape`.
struct again {
  std::vector<frame> frames;
  std::vector<frame_view> views;
  header h;
};

again decode_again(std::vector<frame> frames) {
  again a;
  a.frames = std::move(frames);
  a.views = views_of(a.frames);
  error_code code = error_code::none;
  auto h = decode_header(a.views.data(), a.views.size(), code);
  TROUPE_FUZZ_EXPECT(h.ok(), "a re-encoded header is refused: {}",
                     h ? std::string{} : h.err().message);
  a.h = *h;
  return a;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto in = fuzz::read_remote_wire_input(data, size);
  const auto views = views_of(in.frames);
  const env_shape& shape = in.shape;
  error_code code = error_code::none;
  auto h = decode_header(views.data(), views.size(), code);
  expect_refusal(h, code);
  if (!h)
    return 0;
  // The order check never fails silently either.
  for (bool session : {false, true}) {
    error_code c = error_code::none;
    if (auto ok = check_client_kind(h->type, session, c); !ok)
      TROUPE_FUZZ_EXPECT(c != error_code::none, "an order refusal without a code");
  }
  code = error_code::none;
  switch (h->type) {
  case kind::hello: {
    auto m = decode_hello(*h, views.data(), views.size(), code);
    expect_refusal(m, code);
    if (!m)
      break;
    TROUPE_FUZZ_EXPECT(check_shape(m->shape).ok(), "an accepted HELLO of a bad shape");
    auto a = decode_again(encode_hello(*h, *m));
    auto back = decode_hello(a.h, a.views.data(), a.views.size(), code);
    TROUPE_FUZZ_EXPECT(back.ok(), "a re-encoded HELLO is refused: {}",
                       back ? std::string{} : back.err().message);
    TROUPE_FUZZ_EXPECT(back->client == m->client &&
                         back->shape.num_envs == m->shape.num_envs &&
                         back->shape.obs_dim == m->shape.obs_dim &&
                         back->shape.discrete == m->shape.discrete &&
                         back->shape.num_actions == m->shape.num_actions &&
                         back->shape.action_dim == m->shape.action_dim,
                       "HELLO of '{}' does not round-trip", m->client);
    break;
  }
  case kind::welcome: {
    auto m = decode_welcome(*h, views.data(), views.size(), code);
    expect_refusal(m, code);
    if (!m)
      break;
    auto a = decode_again(encode_welcome(*h, *m));
    auto back = decode_welcome(a.h, a.views.data(), a.views.size(), code);
    TROUPE_FUZZ_EXPECT(back.ok() && back->session == m->session &&
                         back->heartbeat_ms == m->heartbeat_ms &&
                         back->timeout_ms == m->timeout_ms &&
                         back->max_errors == m->max_errors && back->minor == m->minor,
                       "WELCOME of session {} does not round-trip", m->session);
    break;
  }
  case kind::step: {
    auto m = decode_step(*h, views.data(), views.size(), shape, code);
    expect_refusal(m, code);
    if (!m)
      break;
    const size_t k = m->size();
    TROUPE_FUZZ_EXPECT(k == h->num_envs && m->obs.size() == k * shape.obs_dim &&
                         m->rewards.size() == k && m->flags.size() == k,
                       "a STEP of {} envs with {} obs, {} rewards, {} flags", k,
                       m->obs.size(), m->rewards.size(), m->flags.size());
    for (float x : m->obs)
      TROUPE_FUZZ_EXPECT(std::isfinite(x), "an accepted observation {}", x);
    for (double r : m->rewards)
      TROUPE_FUZZ_EXPECT(std::isfinite(r), "an accepted reward {}", r);
    auto re = encode_step(*h, *m);
    for (size_t i = 1; i < re.size(); ++i)
      TROUPE_FUZZ_EXPECT(re[i] == in.frames[i], "STEP frame {} re-encodes differently",
                         i);
    auto a = decode_again(std::move(re));
    auto back = decode_step(a.h, a.views.data(), a.views.size(), shape, code);
    TROUPE_FUZZ_EXPECT(
      back.ok() && back->env_ids == m->env_ids && same_bits(back->obs, m->obs) &&
        same_bits(back->rewards, m->rewards) && back->flags == m->flags &&
        same_bits(back->final_obs, m->final_obs),
      "a STEP of {} envs does not round-trip", k);
    break;
  }
  case kind::act: {
    auto m = decode_act(*h, views.data(), views.size(), shape, code);
    expect_refusal(m, code);
    if (!m)
      break;
    auto re = encode_act(*h, *m, shape);
    for (size_t i = 1; i < re.size(); ++i)
      TROUPE_FUZZ_EXPECT(re[i] == in.frames[i], "ACT frame {} re-encodes differently", i);
    auto a = decode_again(std::move(re));
    auto back = decode_act(a.h, a.views.data(), a.views.size(), shape, code);
    TROUPE_FUZZ_EXPECT(back.ok() && back->env_ids == m->env_ids &&
                         same_bits(back->actions, m->actions) &&
                         back->policy_version == m->policy_version,
                       "an ACT does not round-trip");
    break;
  }
  case kind::error: {
    auto m = decode_error(*h, views.data(), views.size(), code);
    expect_refusal(m, code);
    if (!m)
      break;
    auto a = decode_again(encode_error(*h, *m));
    auto back = decode_error(a.h, a.views.data(), a.views.size(), code);
    TROUPE_FUZZ_EXPECT(back.ok() && back->code == m->code && back->message == m->message,
                       "an ERROR does not round-trip");
    break;
  }
  case kind::ping:
  case kind::pong:
  case kind::close: {
    auto ok = decode_signal(*h, views.size(), code);
    if (!ok)
      TROUPE_FUZZ_EXPECT(code == error_code::bad_frame_count, "a signal refused with {}",
                         to_string(code));
    break;
  }
  }
  return 0;
}
