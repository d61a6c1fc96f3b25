// Client of troupe's remote environment protocol (docs/protocol.md) for C++17
// programs, header-only over cppzmq: a simulator serves its environments to a
// troupe run with env.id = "remote".
//
//   troupe_client::session s;
//   auto ok = s.open("tcp://127.0.0.1:5555", "my-sim", 16, 4,
//   troupe_client::discrete(2)); if (!ok) std::cerr << ok.message; s.step(ids, obs, {},
//   {}, {}, actions);        // first step: no outcomes yet s.step(ids, obs, rewards,
//   flags, final_obs, actions); s.close();
//
// Errors are values (troupe_client::status): code 0 is success; a refusal by
// troupe carries the protocol's error code (> 0) and troupe's message; a
// time-out, a closed session or a transport failure have negative codes.
// Little-endian hosts only: arrays go on the wire as they are in memory.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace troupe_client {

/// STEP flag: the previous action ended the episode in a terminal state.
constexpr uint8_t terminated = 1;
/// STEP flag: the previous action ended the episode by truncation.
constexpr uint8_t truncated = 2;

/// The outcome of a call: code 0 on success.
struct status {
  int code = 0;        ///< 0; > 0: troupe's ERROR code; < 0: one of the codes below
  std::string message; ///< what went wrong
  /// True on success.
  explicit operator bool() const noexcept { return code == 0; }
};

/// Nothing came back within the time-out.
constexpr int timed_out = -2;
/// troupe ended the session (CLOSE).
constexpr int closed = -3;
/// ZeroMQ failed, or a reply broke the protocol.
constexpr int io_failure = -4;
/// A bad argument.
constexpr int invalid = -5;

/// An action space: Discrete(n) when n > 0, else a Box of `dim` floats.
struct action_space {
  uint32_t n = 0;   ///< Discrete(n); 0 for a Box
  uint32_t dim = 1; ///< floats of a Box action
};
/// Discrete(n).
inline action_space discrete(uint32_t n) {
  return {n, 1};
}
/// A Box of `dim` floats.
inline action_space box(uint32_t dim) {
  return {0, dim};
}

/// Optional settings of session::open.
struct options {
  /// CURVE (docs/protocol.md, "Security"): troupe's public key and this
  /// client's key pair, 40 Z85 characters each; all empty: plaintext.
  std::string server_public_key, public_key, secret_key;
  /// reconnect(): HELLOs tried before giving up.
  int reconnect_attempts = 8;
  /// The wait before the first of them, doubling up to backoff_max.
  std::chrono::milliseconds backoff{100};
  std::chrono::milliseconds backoff_max{5000};
};

/// One session with troupe (see the file comment). One thread at a time.
class session {
public:
  /// Connects, says HELLO and waits at most `hello_timeout` for WELCOME.
  status open(const std::string& endpoint, const std::string& client, uint32_t num_envs,
              uint32_t obs_dim, action_space actions,
              std::chrono::milliseconds hello_timeout = std::chrono::seconds(60),
              options opts = {}) {
    if (client.empty() || client.size() > 128 ||
        client.find_first_of("\"\\") != std::string::npos || num_envs == 0 ||
        obs_dim == 0 || (actions.n == 0 && actions.dim == 0))
      return {invalid, "open: a client name of 1 to 128 characters without quotes, "
                       "positive num_envs, obs_dim and action size are required"};
    const bool curve = !opts.server_public_key.empty() || !opts.public_key.empty() ||
                       !opts.secret_key.empty();
    if (curve && (!z85_key(opts.server_public_key) || !z85_key(opts.public_key) ||
                  !z85_key(opts.secret_key)))
      return {invalid, "open: CURVE needs server_public_key, public_key and secret_key, "
                       "each 40 Z85 characters"};
    endpoint_ = endpoint;
    client_ = client;
    hello_timeout_ = hello_timeout;
    opts_ = std::move(opts);
    num_envs_ = num_envs;
    obs_dim_ = obs_dim;
    actions_ = actions;
    width_ = actions.n > 0 ? 1 : actions.dim;
    if (auto ok = connect(); !ok)
      return ok;
    return hello();
  }

  /// Whether `s` (from a call of this session) is worth a new session: a
  /// time-out or transport failure (troupe gone or restarting), or troupe's
  /// ERROR unknown_session (6), out_of_order (5), too_many_errors (14),
  /// timeout (15) or server_full (16). A refused handshake and CLOSE are not.
  static bool retryable(const status& s) {
    return s.code == timed_out || s.code == io_failure || s.code == 5 || s.code == 6 ||
           s.code == 14 || s.code == 15 || s.code == 16;
  }

  /// A new session after a failure: a new socket and HELLO, after a back-off
  /// of options::backoff doubling up to backoff_max, at most
  /// reconnect_attempts times, each waiting at most the open's hello_timeout.
  /// Success: the session id changes and every environment starts anew (its
  /// first STEP has no rewards or flags).
  status reconnect() {
    if (endpoint_.empty())
      return {invalid, "reconnect: the session was never opened"};
    auto delay = opts_.backoff;
    status last{io_failure, "no attempt"};
    for (int attempt = 1; attempt <= std::max(1, opts_.reconnect_attempts); ++attempt) {
      // The back-off: a bounded wait with nothing to wait on.
      zmq_poll(nullptr, 0, static_cast<long>(delay.count()));
      delay = std::min(delay * 2, opts_.backoff_max);
      reconnects_ += 1;
      last = connect();
      if (last)
        last = hello();
      if (last)
        return last;
      if (!retryable(last))
        return last;
    }
    last.message = "no new session after " + std::to_string(opts_.reconnect_attempts) +
                   " attempts: " + last.message;
    return last;
  }

  /// HELLOs reconnect() has sent.
  uint32_t reconnects() const noexcept { return reconnects_; }

private:
  static bool z85_key(const std::string& key) {
    uint8_t raw[32];
    return key.size() == 40 && zmq_z85_decode(raw, key.c_str()) != nullptr;
  }

  status connect() {
    try {
      if (socket_)
        socket_.close();
      socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
      socket_.set(zmq::sockopt::linger, 0);
      if (!opts_.server_public_key.empty()) {
        socket_.set(zmq::sockopt::curve_serverkey, opts_.server_public_key);
        socket_.set(zmq::sockopt::curve_publickey, opts_.public_key);
        socket_.set(zmq::sockopt::curve_secretkey, opts_.secret_key);
      }
      socket_.connect(endpoint_);
    } catch (const zmq::error_t& e) {
      return {io_failure, "cannot connect to " + endpoint_ + ": " + e.what()};
    }
    return {};
  }

  status hello() {
    session_ = 0;
    minor_ = 0;
    const std::string space =
      actions_.n > 0
        ? R"({"type": "discrete", "n": )" + std::to_string(actions_.n) + "}"
        : R"({"type": "box", "shape": [)" + std::to_string(actions_.dim) + "]}";
    const std::string json =
      R"({"client": ")" + client_ + R"(", "num_envs": )" + std::to_string(num_envs_) +
      R"(, "observation_space": {"type": "box", "shape": [)" + std::to_string(obs_dim_) +
      R"(]}, "action_space": )" + space + "}";
    const uint64_t seq = ++sequence_;
    if (auto ok = send(header(1, seq, num_envs_), bytes(json.data(), json.size())); !ok)
      return ok;
    reply r;
    if (auto ok = receive(hello_timeout_, "WELCOME", r); !ok)
      return ok;
    if (r.kind != 2 || r.sequence != seq || r.session == 0)
      return {io_failure, "expected WELCOME of HELLO " + std::to_string(seq)};
    session_ = r.session;
    minor_ = r.minor;
    const std::string text =
      r.frames.size() > 1 ? r.frames[1].to_string() : std::string{};
    const auto at = text.find("\"timeout_ms\":");
    timeout_ = std::chrono::milliseconds(
      at == std::string::npos ? 10000 : std::atol(text.c_str() + at + 13));
    if (timeout_.count() <= 0)
      timeout_ = std::chrono::milliseconds(10000);
    return {};
  }

public:
  /// One STEP and its ACT: ids [k], obs [k x obs_dim]; rewards and flags [k]
  /// of the previous actions (empty: all 0, the first step); final_obs
  /// [m x obs_dim] of the m environments with flags, in order. Writes actions
  /// [k x width] (a Discrete action as its index).
  status step(const std::vector<uint32_t>& ids, const std::vector<float>& obs,
              const std::vector<double>& rewards, const std::vector<uint8_t>& flags,
              const std::vector<float>& final_obs, std::vector<float>& actions) {
    const size_t k = ids.size();
    if (!session_ || k == 0 || k > num_envs_ || obs.size() != k * obs_dim_ ||
        (!rewards.empty() && rewards.size() != k) ||
        (!flags.empty() && flags.size() != k))
      return {invalid,
              "step: needs a session, 1 to num_envs ids and arrays of their sizes"};
    const std::vector<double> no_rewards(rewards.empty() ? k : 0, 0.0);
    const std::vector<uint8_t> no_flags(flags.empty() ? k : 0, 0);
    const auto& r = rewards.empty() ? no_rewards : rewards;
    const auto& f = flags.empty() ? no_flags : flags;
    const uint64_t seq = ++sequence_;
    if (auto ok = send(header(3, seq, static_cast<uint32_t>(k)), bytes(ids.data(), 4 * k),
                       bytes(obs.data(), 4 * obs.size()), bytes(r.data(), 8 * k),
                       bytes(f.data(), k), bytes(final_obs.data(), 4 * final_obs.size()));
        !ok)
      return ok;
    reply got;
    if (auto ok = receive(timeout_, "ACT", got); !ok)
      return ok;
    if (got.kind != 4 || got.sequence != seq || got.frames.size() != 4 ||
        got.frames[2].size() != 4 * k * width_ || got.frames[3].size() != 8)
      return {io_failure, "expected ACT of STEP " + std::to_string(seq)};
    actions.resize(k * width_);
    const auto* a = static_cast<const uint8_t*>(got.frames[2].data());
    if (actions_.n > 0) {
      for (size_t i = 0; i < k; ++i) {
        int32_t index = 0;
        std::memcpy(&index, a + 4 * i, 4);
        actions[i] = static_cast<float>(index);
      }
    } else {
      std::memcpy(actions.data(), a, 4 * k * width_);
    }
    std::memcpy(&policy_version_, got.frames[3].data(), 8);
    return {};
  }

  /// PING and its PONG.
  status ping() {
    const uint64_t seq = ++sequence_;
    if (auto ok = send(header(5, seq, 0)); !ok)
      return ok;
    reply r;
    if (auto ok = receive(timeout_, "PONG", r); !ok)
      return ok;
    if (r.kind != 6 || r.sequence != seq)
      return {io_failure, "expected PONG of PING " + std::to_string(seq)};
    return {};
  }

  /// Sends CLOSE and closes the socket.
  void close() {
    if (session_) {
      (void)send(header(7, ++sequence_, 0));
      session_ = 0;
    }
    if (socket_) {
      socket_.set(zmq::sockopt::linger, 1000);
      socket_.close();
    }
  }

  ~session() { close(); }

  /// The session id WELCOME gave (0: none).
  uint64_t id() const noexcept { return session_; }
  /// The policy version of the last ACT.
  uint64_t policy_version() const noexcept { return policy_version_; }

private:
  struct reply {
    std::vector<zmq::message_t> frames;
    uint8_t kind = 0, minor = 0;
    uint64_t sequence = 0, session = 0;
  };

  static zmq::message_t bytes(const void* data, size_t size) {
    return size > 0 ? zmq::message_t(data, size) : zmq::message_t();
  }

  zmq::message_t header(uint8_t kind, uint64_t sequence, uint32_t num_envs) const {
    uint8_t h[32] = {'T', 'R', 'P', 'E', 1, minor_, kind, 0};
    std::memcpy(h + 8, &sequence, 8);
    std::memcpy(h + 16, &num_envs, 4);
    std::memcpy(h + 24, &session_, 8);
    return zmq::message_t(h, 32);
  }

  // Sends the frames given (message_t is move-only: no initializer list).
  template <class... Frames>
  status send(Frames&&... given) {
    std::vector<zmq::message_t> frames;
    (frames.push_back(std::forward<Frames>(given)), ...);
    try {
      for (size_t i = 0; i < frames.size(); ++i)
        socket_.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                      : zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      return {io_failure, std::string("send: ") + e.what()};
    }
    return {};
  }

  status receive(std::chrono::milliseconds timeout, const char* expected, reply& r) {
    try {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, timeout) == 0)
        return {timed_out, std::string("no ") + expected + " from troupe within " +
                             std::to_string(timeout.count()) + " ms"};
      if (!zmq::recv_multipart(socket_, std::back_inserter(r.frames)))
        return {io_failure, std::string("receiving ") + expected + " failed"};
    } catch (const zmq::error_t& e) {
      return {io_failure, std::string("receive: ") + e.what()};
    }
    if (r.frames.empty() || r.frames[0].size() != 32 ||
        std::memcmp(r.frames[0].data(), "TRPE", 4) != 0 ||
        static_cast<const uint8_t*>(r.frames[0].data())[4] != 1)
      return {io_failure, "a reply without a version-1 TRPE header"};
    const auto* h = static_cast<const uint8_t*>(r.frames[0].data());
    r.minor = h[5];
    r.kind = h[6];
    std::memcpy(&r.sequence, h + 8, 8);
    std::memcpy(&r.session, h + 24, 8);
    if (r.kind == 8 && r.frames.size() == 3 && r.frames[1].size() == 4) {
      uint32_t code = 0;
      std::memcpy(&code, r.frames[1].data(), 4);
      return {static_cast<int>(code), r.frames[2].to_string()};
    }
    if (r.kind == 7) {
      session_ = 0;
      return {closed, "troupe ended the session"};
    }
    return {};
  }

  zmq::context_t context_{1};
  zmq::socket_t socket_;
  std::string endpoint_, client_;
  std::chrono::milliseconds hello_timeout_{60000};
  options opts_;
  uint32_t reconnects_ = 0;
  uint64_t sequence_ = 0, session_ = 0, policy_version_ = 0;
  uint8_t minor_ = 0;
  uint32_t num_envs_ = 0, obs_dim_ = 0, width_ = 1;
  action_space actions_;
  std::chrono::milliseconds timeout_{10000};
};

} // namespace troupe_client
