#include "edge/remote_server.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <iterator>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "base/mutex.hpp"

namespace troupe::edge {

using namespace remote;
using clock_type = std::chrono::steady_clock;

status check_z85_key(const std::string& key, const std::string& what) {
  if (key.size() != 40)
    return make_error(errc::invalid_argument,
                      "{}: a CURVE key is 40 Z85 characters, got {} characters", what,
                      key.size());
  uint8_t raw[32];
  if (zmq_z85_decode(raw, key.c_str()) == nullptr)
    return make_error(errc::invalid_argument,
                      "{}: '{}' is not Z85 (ZeroMQ's base-85: 0-9 a-z A-Z and "
                      ".-:+=^!/*?&<>()[]{{}}@%$#)",
                      what, key);
  return ok_status();
}

result<std::string> curve_public_key(const std::string& secret_key) {
  if (auto ok = check_z85_key(secret_key, "CURVE secret key"); !ok)
    return ok.err();
  char pub[41] = {};
  if (zmq_curve_public(pub, secret_key.c_str()) != 0)
    return make_error(errc::unavailable,
                      "CURVE: libzmq cannot derive a public key: {} (is it built "
                      "with CURVE?)",
                      zmq_strerror(zmq_errno()));
  return std::string(pub);
}

namespace {

// libzmq's ZAP endpoint (RFC 27): one handler per context.
constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";

// One client connection (a DEALER's routing id), with or without a session.
struct connection {
  std::string routing_id;
  std::string peer = "?";   // the peer's address, when ZeroMQ knows it
  std::string client = "?"; // the HELLO's name
  uint64_t session = 0;     // 0: none yet
  bool welcomed = false;    // false: the HELLO waits for min_envs
  uint8_t minor = protocol_minor;
  uint64_t hello_sequence = 0;
  uint64_t last_sequence = 0;
  bool any_sequence = false;
  env_shape shape;            // num_envs: the session's N
  std::vector<size_t> slots;  // env id -> agent slot
  std::vector<uint8_t> acted; // env id -> an action is outstanding
  uint32_t errors = 0;
  clock_type::time_point last_heard;
};

// How a message left its connection.
enum class outcome { keep, drop_session, forget };

} // namespace

struct remote_server::impl {
  remote_server_options opts;
  size_t slot_count = 0;
  zmq::context_t context{1};
  zmq::socket_t socket;
  zmq::socket_t zap;                       // CURVE: libzmq's authentication requests
  zmq::socket_t monitor;                   // CURVE: the ROUTER socket's handshake events
  std::unordered_set<std::string> allowed; // CURVE: client public keys, 32 bytes
  std::string endpoint;
  std::shared_ptr<game_agent> agent;
  std::thread thread;
  std::atomic<bool> stopping{false};
  bool started = false;

  std::unordered_map<std::string, connection> connections;
  std::vector<size_t> free_slots; // a stack: the lowest slot on top
  uint64_t next_session = 1;
  uint64_t requested_envs = 0; // over sessions welcomed or waiting
  bool min_reached = false;

  mutable base::mutex counters_mtx;
  remote_server_counters totals TROUPE_GUARDED_BY(counters_mtx);

  // Scratch of on_step.
  std::vector<std::pair<size_t, size_t>> order; // (slot, position in the STEP)
  std::vector<float> obs_run, act_run;

  void log(const std::string& line) const { write_log(opts.log, "remote: " + line); }

  std::string who(const connection& c) const {
    return c.session
             ? fmt::format("client '{}' at {} (session {})", c.client, c.peer, c.session)
             : fmt::format("client '{}' at {}", c.client, c.peer);
  }

  void count(uint64_t remote_server_counters::*field, uint64_t k = 1) {
    base::mutex_lock lock(counters_mtx);
    totals.*field += k;
  }

  // -- sending ----------------------------------------------------------------------

  void send(const std::string& routing_id, const std::vector<frame>& frames) {
    try {
      socket.send(zmq::buffer(routing_id),
                  zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      for (size_t i = 0; i < frames.size(); ++i)
        socket.send(zmq::buffer(frames[i]),
                    i + 1 < frames.size()
                      ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                      : zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      log(fmt::format("cannot send to a client: {}", e.what()));
    }
  }

  header reply_header(const connection& c, uint64_t sequence) const {
    header h;
    h.minor = c.minor;
    h.sequence = sequence;
    h.session = c.session;
    return h;
  }

  void send_error(const connection& c, uint64_t sequence, error_code code,
                  const std::string& message) {
    send(c.routing_id,
         encode_error(reply_header(c, sequence), error_reply{code, message}));
  }

  // -- sessions ---------------------------------------------------------------------

  // Gives the session's slots up and back to the free list.
  void end_session(connection& c, const char* why) {
    if (c.session == 0)
      return;
    const uint64_t before = agent ? agent->abandoned() : 0;
    for (size_t slot : c.slots) {
      if (agent)
        (void)agent->abandon(slot); // fails only once the agent is closed
      free_slots.push_back(slot);
    }
    std::sort(free_slots.begin(), free_slots.end(), std::greater<size_t>());
    const uint64_t discarded = agent ? agent->abandoned() - before : 0;
    requested_envs -= c.shape.num_envs;
    if (c.welcomed) {
      base::mutex_lock lock(counters_mtx);
      totals.envs_connected -= c.shape.num_envs;
    }
    log(fmt::format("{} ended ({}): {} environments left, {} transitions of unfinished "
                    "segments discarded",
                    who(c), why, c.shape.num_envs, discarded));
    c.session = 0;
    c.welcomed = false;
    c.slots.clear();
    c.acted.clear();
  }

  void welcome_session(connection& c) {
    welcome w;
    w.session = c.session;
    w.minor = c.minor;
    w.num_envs = c.shape.num_envs;
    w.heartbeat_ms = opts.heartbeat_ms;
    w.timeout_ms = opts.timeout_ms;
    w.max_errors = opts.max_errors;
    header h = reply_header(c, c.hello_sequence);
    c.welcomed = true;
    c.last_heard = clock_type::now(); // the wait for min_envs is not silence
    {
      base::mutex_lock lock(counters_mtx);
      totals.sessions += 1;
      totals.envs_connected += c.shape.num_envs;
    }
    send(c.routing_id, encode_welcome(h, w));
    log(fmt::format("{} welcomed: {} environments (slots {}..), protocol 1.{}", who(c),
                    c.shape.num_envs, c.slots.empty() ? 0 : c.slots.front(), c.minor));
  }

  // A refusal: counted for the client, logged, answered with one ERROR: its own
  // code within the budget; past it, too_many_errors (naming the last offence)
  // and the session is dropped.
  outcome refuse(connection& c, uint64_t sequence, error_code code, const error& e) {
    c.errors += 1;
    log(fmt::format("{}: {}: {} (error {} of {} allowed)", who(c), to_string(code),
                    e.message, c.errors, opts.max_errors));
    count(&remote_server_counters::errors); // counters move after the log line
    if (c.errors <= opts.max_errors) {
      send_error(c, sequence, code, e.message);
      return outcome::keep;
    }
    // The session ends before the client hears why: what it then sees is done.
    const auto reply = encode_error(
      reply_header(c, sequence),
      error_reply{error_code::too_many_errors,
                  fmt::format("more than remote.max_errors {} malformed messages: the "
                              "session is dropped; the last: {}: {}",
                              opts.max_errors, to_string(code), e.message)});
    if (c.session) {
      end_session(c, "too many errors");
      count(&remote_server_counters::sessions_dropped);
    }
    send(c.routing_id, reply);
    return outcome::forget;
  }

  outcome on_hello(connection& c, const header& h, const frame_view* frames, size_t n) {
    error_code code = error_code::none;
    auto m = decode_hello(h, frames, n, code);
    if (!m)
      return refuse(c, h.sequence, code, m.err());
    c.client = m->client;
    if (auto same = check_same_spaces(m->shape, opts.shape); !same)
      return refuse(c, h.sequence, error_code::space_mismatch, same.err());
    const uint32_t want = m->shape.num_envs;
    if (want > free_slots.size()) {
      // Not malformed: refused without counting against the client.
      const std::string why =
        fmt::format("HELLO message: {} environments asked, {} of remote.max_envs {} free",
                    want, free_slots.size(), slot_count);
      log(fmt::format("{}: server_full: {}", who(c), why));
      send_error(c, h.sequence, error_code::server_full, why);
      return outcome::keep;
    }
    c.session = next_session++;
    c.minor = std::min(h.minor, protocol_minor);
    c.hello_sequence = h.sequence;
    c.last_sequence = h.sequence;
    c.any_sequence = true;
    c.shape = opts.shape;
    c.shape.num_envs = want;
    c.slots.clear();
    for (uint32_t i = 0; i < want; ++i) {
      c.slots.push_back(free_slots.back());
      free_slots.pop_back();
    }
    c.acted.assign(want, 0);
    requested_envs += want;
    if (min_reached || requested_envs >= opts.min_envs) {
      if (!min_reached) {
        min_reached = true;
        // Every HELLO that waited is welcomed now, in any order.
        for (auto& [id, other] : connections)
          if (other.session && !other.welcomed && &other != &c)
            welcome_session(other);
      }
      welcome_session(c);
    } else {
      log(fmt::format("{} waits: {} of remote.min_envs {} environments have asked",
                      who(c), requested_envs, opts.min_envs));
    }
    return outcome::keep;
  }

  outcome on_step(connection& c, const header& h, const frame_view* frames, size_t n) {
    error_code code = error_code::none;
    auto m = decode_step(h, frames, n, c.shape, code);
    if (!m)
      return refuse(c, h.sequence, code, m.err());
    const size_t k = m->size();
    const size_t od = opts.shape.obs_dim;
    for (size_t i = 0; i < k; ++i) {
      const uint32_t id = m->env_ids[i];
      if (!c.acted[id] && (m->rewards[i] != 0 || m->flags[i] != 0))
        return refuse(
          c, h.sequence, error_code::bad_env_id,
          error{errc::invalid_argument,
                fmt::format("STEP message: env id {} has no action outstanding "
                            "(its first STEP): its reward and flags must be 0, "
                            "got reward {} flags 0x{:02x}",
                            id, m->rewards[i], m->flags[i])});
    }
    // The outcomes of the previous actions.
    size_t ended = 0;
    for (size_t i = 0; i < k; ++i) {
      const uint32_t id = m->env_ids[i];
      const uint8_t f = m->flags[i];
      const float* final_obs = f ? &m->final_obs[ended++ * od] : nullptr;
      if (!c.acted[id])
        continue;
      auto ok = agent->report(c.slots[id], m->rewards[i], (f & flag_terminated) != 0,
                              (f & flag_truncated) != 0, final_obs);
      if (!ok)
        return agent_failed(c, h, ok.err());
      c.acted[id] = 0;
    }
    // The new actions, one forward pass per run of consecutive slots.
    const size_t width = opts.shape.action_width();
    act reply;
    reply.env_ids = m->env_ids;
    reply.actions.resize(k * width);
    order.clear();
    for (size_t i = 0; i < k; ++i)
      order.emplace_back(c.slots[m->env_ids[i]], i);
    std::sort(order.begin(), order.end());
    for (size_t begin = 0; begin < order.size();) {
      size_t end = begin + 1;
      while (end < order.size() && order[end].first == order[end - 1].first + 1)
        ++end;
      const size_t count = end - begin;
      obs_run.resize(count * od);
      act_run.resize(count * width);
      for (size_t j = 0; j < count; ++j) {
        const size_t i = order[begin + j].second;
        std::copy(&m->obs[i * od], &m->obs[(i + 1) * od], &obs_run[j * od]);
      }
      auto ok =
        agent->act_batch(order[begin].first, count, obs_run.data(), act_run.data());
      if (!ok)
        return agent_failed(c, h, ok.err());
      for (size_t j = 0; j < count; ++j) {
        const size_t i = order[begin + j].second;
        std::copy(&act_run[j * width], &act_run[(j + 1) * width],
                  &reply.actions[i * width]);
        c.acted[m->env_ids[i]] = 1;
      }
      begin = end;
    }
    reply.policy_version = agent->policy_version();
    {
      // Counted before the reply: a client that has its ACT sees it counted.
      base::mutex_lock lock(counters_mtx);
      totals.steps += 1;
      totals.env_steps += k;
    }
    c.last_sequence = h.sequence; // only an answered message uses its number up
    send(c.routing_id, encode_act(reply_header(c, h.sequence), reply, c.shape));
    return outcome::keep;
  }

  // The agent refused a checked message: it is closed (the run ends), or a
  // rule of the agent's that the decoder does not know.
  outcome agent_failed(connection& c, const header& h, const error& e) {
    if (e.code == errc::unavailable) {
      // The run is ending: the session ends as at stop(), with CLOSE, which
      // answers this STEP (it carries its sequence number).
      header close = reply_header(c, h.sequence);
      close.type = kind::close;
      const auto reply = encode_signal(close);
      end_session(c, "the run ends");
      send(c.routing_id, reply);
      return outcome::forget;
    }
    return refuse(c, h.sequence, error_code::count_mismatch, e);
  }

  outcome on_message(std::vector<zmq::message_t>& parts) {
    if (parts.empty())
      return outcome::keep;
    const std::string routing_id = parts[0].to_string();
    auto [it, fresh] = connections.try_emplace(routing_id);
    connection& c = it->second;
    if (fresh) {
      c.routing_id = routing_id;
      if (parts.size() > 1) {
        try {
          c.peer = parts[1].gets("Peer-Address");
        } catch (const zmq::error_t&) {
          c.peer = "?"; // ipc:// and inproc:// have none
        }
      }
    }
    c.last_heard = clock_type::now();
    std::vector<frame_view> views;
    views.reserve(parts.size() - 1);
    for (size_t i = 1; i < parts.size(); ++i)
      views.push_back(
        frame_view{static_cast<const uint8_t*>(parts[i].data()), parts[i].size()});
    error_code code = error_code::none;
    auto h = decode_header(views.data(), views.size(), code);
    if (!h)
      return refuse(c, readable_sequence(views.data(), views.size()), code, h.err());
    const bool in_session =
      h->type == kind::step || h->type == kind::ping || h->type == kind::close;
    // A session this connection does not hold (dropped, closed, of another
    // connection, or of a troupe that restarted): the client must say HELLO.
    auto not_open = [&] {
      return refuse(
        c, h->sequence, error_code::unknown_session,
        error{
          errc::invalid_argument,
          c.welcomed
            ? fmt::format("{} message: session {} is not this connection's session {}",
                          to_string(h->type), h->session, c.session)
            : fmt::format("{} message: session {} is not open on this connection (it "
                          "was closed or dropped, or troupe restarted): say HELLO for "
                          "a new session",
                          to_string(h->type), h->session)});
    };
    if (in_session && !c.welcomed && h->session != 0)
      return not_open();
    if (auto ok = check_client_kind(h->type, c.session != 0, code); !ok)
      return refuse(c, h->sequence, code, ok.err());
    if (in_session) {
      if (!c.welcomed)
        return refuse(c, h->sequence, error_code::out_of_order,
                      error{errc::invalid_argument,
                            fmt::format("{} message: the session waits for WELCOME "
                                        "(remote.min_envs {} not reached)",
                                        to_string(h->type), opts.min_envs)});
      if (h->session != c.session)
        return not_open();
      if (c.any_sequence && h->sequence <= c.last_sequence)
        return refuse(
          c, h->sequence, error_code::bad_sequence,
          error{errc::invalid_argument,
                fmt::format("{} message: sequence {} must be above {}, the last "
                            "sequence troupe answered in this session",
                            to_string(h->type), h->sequence, c.last_sequence)});
    }
    switch (h->type) {
    case kind::hello:
      return on_hello(c, *h, views.data(), views.size());
    case kind::step:
      return on_step(c, *h, views.data(), views.size());
    case kind::ping:
      if (auto ok = decode_signal(*h, views.size(), code); !ok)
        return refuse(c, h->sequence, code, ok.err());
      c.last_sequence = h->sequence;
      {
        header pong = reply_header(c, h->sequence);
        pong.type = kind::pong;
        send(c.routing_id, encode_signal(pong));
      }
      return outcome::keep;
    case kind::close:
      if (auto ok = decode_signal(*h, views.size(), code); !ok)
        return refuse(c, h->sequence, code, ok.err());
      end_session(c, "closed by the client");
      count(&remote_server_counters::sessions_closed);
      return outcome::forget;
    default:
      return outcome::keep; // check_client_kind refused the others
    }
  }

  // Sessions silent for timeout_ms are dropped; connections without a session
  // are forgotten after as long.
  void drop_silent(clock_type::time_point now) {
    const auto limit = std::chrono::milliseconds(opts.timeout_ms);
    for (auto it = connections.begin(); it != connections.end();) {
      connection& c = it->second;
      if (now - c.last_heard <= limit) {
        ++it;
        continue;
      }
      if (c.session && !c.welcomed) {
        // A HELLO waiting for min_envs cannot send anything else: it waits at
        // most timeout_ms, so that a client that died waiting does not hold
        // its environments' places; a live one says HELLO again.
        header h = reply_header(c, c.hello_sequence);
        h.session = 0; // the client never heard of the session
        const auto reply = encode_error(
          h,
          error_reply{error_code::timeout,
                      fmt::format("the HELLO waited more than remote.timeout_ms {} for "
                                  "remote.min_envs {} ({} environments asked): say HELLO "
                                  "again",
                                  opts.timeout_ms, opts.min_envs, requested_envs)});
        end_session(c, "waited too long for remote.min_envs");
        count(&remote_server_counters::sessions_dropped);
        send(c.routing_id, reply);
      } else if (c.session) {
        const auto reply = encode_error(
          reply_header(c, 0),
          error_reply{error_code::timeout,
                      fmt::format("nothing heard for more than remote.timeout_ms {}: the "
                                  "session is dropped",
                                  opts.timeout_ms)});
        // Counted once the session is ended and logged: whoever sees the
        // count also sees its abandoned slots and the log line.
        end_session(c, "timeout");
        count(&remote_server_counters::sessions_dropped);
        send(c.routing_id, reply);
      }
      it = connections.erase(it);
    }
  }

  // -- CURVE ------------------------------------------------------------------------

  // Answers libzmq's ZAP requests: 200 for a CURVE client key on the
  // allow-list, 400 (refused, counted, logged) for any other.
  void on_zap() {
    std::vector<zmq::message_t> req;
    while (zmq::recv_multipart(zap, std::back_inserter(req), zmq::recv_flags::dontwait)) {
      // version, request id, domain, address, routing id, mechanism, credentials...
      const bool well_formed = req.size() >= 6 && req[0].to_string() == "1.0";
      const std::string mechanism = well_formed ? req[5].to_string() : std::string{};
      const std::string address = well_formed ? req[3].to_string() : std::string("?");
      std::string key_text = "(none)";
      bool ok = false;
      if (well_formed && mechanism == "CURVE" && req.size() == 7 && req[6].size() == 32) {
        const std::string key = req[6].to_string();
        char z85[41] = {};
        zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32);
        key_text = z85;
        ok = allowed.count(key) > 0;
      }
      if (!ok) {
        log(fmt::format(
          "refused a client at {}: {}", address,
          mechanism == "CURVE"
            ? fmt::format("its CURVE public key {} is not on the allow-list "
                          "(remote.curve_allowed_clients_file)",
                          key_text)
            : fmt::format("mechanism '{}' where CURVE is required", mechanism)));
        count(&remote_server_counters::refused);
      }
      std::vector<zmq::message_t> reply;
      reply.emplace_back(std::string("1.0"));
      reply.emplace_back(req.size() > 1 ? req[1].to_string() : std::string{});
      reply.emplace_back(std::string(ok ? "200" : "400"));
      reply.emplace_back(std::string(ok ? "OK" : "client key not allowed"));
      reply.emplace_back(ok ? key_text : std::string{}); // user id
      reply.emplace_back();                              // no metadata
      zmq::send_multipart(zap, reply);
      req.clear();
    }
  }

  // The handshake events of the ROUTER socket: a client that fails CURVE's
  // handshake (a wrong server key, no CURVE at all, garbage) is counted and
  // logged here; a key refused by on_zap was counted there.
  void on_monitor() {
    std::vector<zmq::message_t> event;
    while (zmq::recv_multipart(monitor, std::back_inserter(event),
                               zmq::recv_flags::dontwait)) {
      if (event.size() == 2 && event[0].size() == 6) {
        uint16_t id = 0;
        uint32_t value = 0;
        std::memcpy(&id, event[0].data(), 2);
        std::memcpy(&value, static_cast<const uint8_t*>(event[0].data()) + 2, 4);
        if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
            id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
          // Which side sees a failure first is a race: a plaintext client
          // may hang up on troupe's greeting (no detail, an errno) before
          // troupe reads its mechanism.
          const std::string why =
            id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
              ? fmt::format("no detail: {}", zmq_strerror(static_cast<int>(value)))
            : value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
              ? std::string("mechanism mismatch")
            : value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
              ? std::string("cryptographic error")
              : fmt::format("protocol error 0x{:x}", value);
          log(
            fmt::format("refused a connection on {}: the CURVE handshake failed ({}): a "
                        "client without CURVE, with a wrong server public key, or not "
                        "speaking ZeroMQ",
                        event[1].to_string(), why));
          count(&remote_server_counters::refused);
        }
      }
      event.clear();
    }
  }

  void serve() {
    const auto tick =
      std::chrono::milliseconds(std::min<uint32_t>(opts.heartbeat_ms, 100));
    std::vector<zmq::message_t> parts;
    const bool curve = static_cast<bool>(zap);
    while (!stopping.load(std::memory_order_acquire)) {
      try {
        zmq::pollitem_t items[3] = {
          {static_cast<void*>(socket), 0, ZMQ_POLLIN, 0},
          {curve ? static_cast<void*>(zap) : nullptr, 0, ZMQ_POLLIN, 0},
          {curve ? static_cast<void*>(monitor) : nullptr, 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, curve ? 3 : 1, tick);
        if (curve) {
          on_zap();
          on_monitor();
        }
        for (;;) {
          parts.clear();
          auto got = zmq::recv_multipart(socket, std::back_inserter(parts),
                                         zmq::recv_flags::dontwait);
          if (!got)
            break;
          const std::string id = parts.empty() ? std::string{} : parts[0].to_string();
          if (on_message(parts) == outcome::forget)
            connections.erase(id);
        }
        drop_silent(clock_type::now());
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM)
          return;
        log(fmt::format("ZeroMQ error while serving (going on): {}", e.what()));
      } catch (const std::exception& e) {
        log(fmt::format("error while serving (going on): {}", e.what()));
      }
    }
    // The run ends: every session is told.
    for (auto& [id, c] : connections)
      if (c.session) {
        header h = reply_header(c, 0);
        h.type = kind::close;
        send(c.routing_id, encode_signal(h));
        end_session(c, "the server stops");
      }
    connections.clear();
  }
};

result<std::unique_ptr<remote_server>> remote_server::bind(remote_server_options opts,
                                                           size_t slots) {
  if (auto ok = check_shape(opts.shape); !ok)
    return make_error(errc::invalid_argument, "remote server: {}", ok.err().message);
  if (slots == 0 || slots > max_session_envs)
    return make_error(errc::invalid_argument,
                      "remote server: slots must be in [1, {}], got {}", max_session_envs,
                      slots);
  const bool curve = !opts.curve_secret_key.empty();
  if (curve) {
    if (auto ok = check_z85_key(opts.curve_secret_key, "remote server: CURVE secret key");
        !ok)
      return ok.err();
    if (opts.curve_allowed_clients.empty())
      return make_error(errc::invalid_argument,
                        "remote server: CURVE needs an allow-list of client public keys; "
                        "it is empty");
  } else if (!opts.curve_allowed_clients.empty()) {
    return make_error(errc::invalid_argument,
                      "remote server: an allow-list of client keys needs a CURVE secret "
                      "key");
  }
  auto p = std::make_unique<impl>();
  p->opts = std::move(opts);
  p->slot_count = slots;
  for (size_t i = slots; i-- > 0;)
    p->free_slots.push_back(i);
  for (const auto& key : p->opts.curve_allowed_clients) {
    if (auto ok = check_z85_key(key, "remote server: an allowed client key"); !ok)
      return ok.err();
    uint8_t raw[32];
    zmq_z85_decode(raw, key.c_str());
    p->allowed.insert(std::string(reinterpret_cast<const char*>(raw), 32));
  }
  try {
    p->socket = zmq::socket_t(p->context, zmq::socket_type::router);
    // A closing server gives its last CLOSE messages a moment, not forever.
    p->socket.set(zmq::sockopt::linger, 200);
    if (curve) {
      if (!zmq_has("curve"))
        return make_error(errc::unavailable,
                          "remote server: this libzmq was built without CURVE");
      // The ZAP handler is bound before the first connection can ask it.
      p->zap = zmq::socket_t(p->context, zmq::socket_type::rep);
      p->zap.set(zmq::sockopt::linger, 0);
      p->zap.bind(zap_endpoint);
      const std::string monitor_at =
        fmt::format("inproc://troupe-remote-monitor-{}", static_cast<void*>(p.get()));
      if (zmq_socket_monitor(static_cast<void*>(p->socket), monitor_at.c_str(),
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
        throw zmq::error_t();
      p->monitor = zmq::socket_t(p->context, zmq::socket_type::pair);
      p->monitor.set(zmq::sockopt::linger, 0);
      p->monitor.connect(monitor_at);
      p->socket.set(zmq::sockopt::curve_server, true);
      p->socket.set(zmq::sockopt::curve_secretkey, p->opts.curve_secret_key);
      p->socket.set(zmq::sockopt::zap_domain, "troupe-remote");
    }
    p->socket.bind(p->opts.bind);
    p->endpoint = p->socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(errc::unavailable, "cannot bind {}: {}{}", p->opts.bind, e.what(),
                      e.num() == EADDRINUSE ? " (another program or run uses this "
                                              "address; choose another remote.bind)"
                                            : "");
  }
  return std::unique_ptr<remote_server>(new remote_server(std::move(p)));
}

remote_server::remote_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

remote_server::~remote_server() {
  stop();
}

std::string remote_server::endpoint() const {
  return impl_->endpoint;
}

status remote_server::start(std::shared_ptr<game_agent> agent) {
  auto& m = *impl_;
  if (m.started)
    return make_error(errc::invalid_argument, "remote server: started already");
  if (!agent)
    return make_error(errc::invalid_argument, "remote server: an agent is required");
  if (agent->slots() != m.slot_count || agent->obs_dim() != m.opts.shape.obs_dim ||
      agent->action_dim() != m.opts.shape.action_width())
    return make_error(errc::dimension_mismatch,
                      "remote server: the agent has {} slots, obs_dim {}, action_dim {}; "
                      "the server serves {} slots, obs_dim {}, action width {}",
                      agent->slots(), agent->obs_dim(), agent->action_dim(), m.slot_count,
                      m.opts.shape.obs_dim, m.opts.shape.action_width());
  m.agent = std::move(agent);
  m.started = true;
  m.thread = std::thread([&m] { m.serve(); });
  return ok_status();
}

void remote_server::stop() {
  if (!impl_)
    return;
  auto& m = *impl_;
  m.stopping.store(true, std::memory_order_release);
  if (m.thread.joinable())
    m.thread.join();
  try {
    if (m.monitor)
      m.monitor.close();
    if (m.zap)
      m.zap.close();
    m.socket.close();
    m.context.close();
  } catch (const zmq::error_t& e) {
    m.log(fmt::format("closing the socket: {}", e.what()));
  }
}

remote_server_counters remote_server::counters() const {
  base::mutex_lock lock(impl_->counters_mtx);
  return impl_->totals;
}

} // namespace troupe::edge
