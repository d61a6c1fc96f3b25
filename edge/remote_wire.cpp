#include "edge/remote_wire.hpp"

#include <cmath>
#include <cstring>
#include <exception>
#include <unordered_set>

#include <nlohmann/json.hpp>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "remote_wire copies arrays as they are in memory: it needs a little-endian host"
#endif

namespace troupe::edge::remote {

using json = nlohmann::json;

const char* to_string(kind k) noexcept {
  switch (k) {
  case kind::hello:
    return "HELLO";
  case kind::welcome:
    return "WELCOME";
  case kind::step:
    return "STEP";
  case kind::act:
    return "ACT";
  case kind::ping:
    return "PING";
  case kind::pong:
    return "PONG";
  case kind::close:
    return "CLOSE";
  case kind::error:
    return "ERROR";
  }
  return "?";
}

const char* to_string(error_code c) noexcept {
  switch (c) {
  case error_code::none:
    return "none";
  case error_code::bad_header:
    return "bad_header";
  case error_code::bad_magic:
    return "bad_magic";
  case error_code::version_mismatch:
    return "version_mismatch";
  case error_code::unknown_kind:
    return "unknown_kind";
  case error_code::out_of_order:
    return "out_of_order";
  case error_code::unknown_session:
    return "unknown_session";
  case error_code::bad_frame_count:
    return "bad_frame_count";
  case error_code::bad_handshake:
    return "bad_handshake";
  case error_code::space_mismatch:
    return "space_mismatch";
  case error_code::count_mismatch:
    return "count_mismatch";
  case error_code::bad_env_id:
    return "bad_env_id";
  case error_code::non_finite:
    return "non_finite";
  case error_code::bad_sequence:
    return "bad_sequence";
  case error_code::too_many_errors:
    return "too_many_errors";
  case error_code::timeout:
    return "timeout";
  case error_code::server_full:
    return "server_full";
  case error_code::server_closing:
    return "server_closing";
  case error_code::bad_flags:
    return "bad_flags";
  }
  return "unknown";
}

std::vector<frame_view> views_of(const std::vector<frame>& frames) {
  std::vector<frame_view> out;
  out.reserve(frames.size());
  for (auto& f : frames)
    out.push_back(frame_view{f.data(), f.size()});
  return out;
}

namespace {

constexpr uint8_t magic[4] = {'T', 'R', 'P', 'E'};

// -- little-endian scalars and arrays -----------------------------------------------

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

template <class T>
frame array_frame(const std::vector<T>& values) {
  frame f(values.size() * sizeof(T));
  if (!f.empty())
    std::memcpy(f.data(), values.data(), f.size());
  return f;
}

template <class T>
std::vector<T> read_array(const frame_view& f) {
  std::vector<T> out(f.size / sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), f.data, out.size() * sizeof(T));
  return out;
}

// A failure with its protocol code.
error fail(error_code& code, error_code c, errc e, std::string message) {
  code = c;
  return error{e, std::move(message)};
}

status frame_count(const header& h, size_t count, size_t expected, error_code& code) {
  if (count == expected)
    return ok_status();
  return fail(code, error_code::bad_frame_count, errc::bad_input,
              fmt::format("{} message: a {} has {} frames (the header and {}), got {}",
                          to_string(h.type), to_string(h.type), expected, expected - 1,
                          count));
}

// The frame `index` must hold exactly `bytes` bytes.
status frame_size(const header& h, const frame_view* frames, size_t index,
                  const char* what, size_t bytes, const std::string& why,
                  error_code& code) {
  if (frames[index].size == bytes)
    return ok_status();
  return fail(code, error_code::count_mismatch, errc::dimension_mismatch,
              fmt::format("{} message: frame {} ({}) must be {} bytes ({}), got {}",
                          to_string(h.type), index, what, bytes, why,
                          frames[index].size));
}

// The first non-finite value of `v`, as an error naming `what`.
template <class T>
status all_finite(const header& h, const std::vector<T>& v, size_t width,
                  const char* what, error_code& code) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return fail(code, error_code::non_finite, errc::non_finite,
                  fmt::format("{} message: {} must be finite, got {} at row {} column {}",
                              to_string(h.type), what, static_cast<double>(v[i]),
                              i / width, i % width));
  return ok_status();
}

// -- JSON of the handshake ----------------------------------------------------------

error bad_json(error_code& code, const std::string& what) {
  return fail(code, error_code::bad_handshake, errc::bad_input,
              fmt::format("HELLO message: {}", what));
}

// A positive integer member `key` of `j` at most `max`.
result<uint32_t> uint_member(const json& j, const char* where, const char* key,
                             uint64_t min, uint64_t max, error_code& code) {
  auto it = j.find(key);
  if (it == j.end())
    return bad_json(code, fmt::format("{}: the key '{}' is missing", where, key));
  if (!it->is_number_integer())
    return bad_json(
      code, fmt::format("{}.{}: expected an integer, got {}", where, key, it->dump()));
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v >= min && v <= max)
      return static_cast<uint32_t>(v);
  }
  return bad_json(code, fmt::format("{}.{}: expected an integer in [{}, {}], got {}",
                                    where, key, min, max, it->dump()));
}

// The product of a space's "shape" (1 or more, at most max_dim).
result<uint32_t> shape_size(const json& space, const char* where, error_code& code) {
  auto it = space.find("shape");
  if (it == space.end())
    return bad_json(code, fmt::format("{}: the key 'shape' is missing", where));
  if (!it->is_array() || it->empty())
    return bad_json(code, fmt::format("{}.shape: expected a non-empty array of positive "
                                      "integers, got {}",
                                      where, it->dump()));
  uint64_t n = 1;
  for (auto& d : *it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() == 0 || d.get<uint64_t>() > max_dim)
      return bad_json(code, fmt::format("{}.shape: expected positive integers up to {}, "
                                        "got {}",
                                        where, max_dim, it->dump()));
    n *= d.get<uint64_t>();
    if (n > max_dim)
      return bad_json(code, fmt::format("{}.shape: {} holds more than {} values", where,
                                        it->dump(), max_dim));
  }
  return static_cast<uint32_t>(n);
}

result<std::string> space_type(const json& space, const char* where, error_code& code) {
  if (!space.is_object())
    return bad_json(code,
                    fmt::format("{}: expected an object, got {}", where, space.dump()));
  auto it = space.find("type");
  if (it == space.end() || !it->is_string())
    return bad_json(code, fmt::format("{}.type: expected \"box\" or \"discrete\", got {}",
                                      where, it == space.end() ? "nothing" : it->dump()));
  return it->get<std::string>();
}

result<hello> parse_hello(const header& h, const frame_view& body, error_code& code) {
  const char* begin = reinterpret_cast<const char*>(body.data);
  json j = json::parse(begin, begin + body.size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return bad_json(code, fmt::format("frame 1 is not JSON ({} bytes)", body.size));
  if (!j.is_object())
    return bad_json(code,
                    fmt::format("frame 1 must be a JSON object, got {}", j.type_name()));
  hello m;
  auto client = j.find("client");
  if (client == j.end() || !client->is_string())
    return bad_json(code, "client: expected a string (the client's name)");
  m.client = client->get<std::string>();
  if (m.client.empty() || m.client.size() > max_client_name)
    return bad_json(code, fmt::format("client: expected 1 to {} characters, got {}",
                                      max_client_name, m.client.size()));
  auto n = uint_member(j, "hello", "num_envs", 1, max_session_envs, code);
  if (!n)
    return n.err();
  if (*n != h.num_envs)
    return bad_json(
      code,
      fmt::format("num_envs {} disagrees with the header's num_envs {}", *n, h.num_envs));
  m.shape.num_envs = *n;

  auto obs = j.find("observation_space");
  if (obs == j.end())
    return bad_json(code, "the key 'observation_space' is missing");
  auto obs_type = space_type(*obs, "observation_space", code);
  if (!obs_type)
    return obs_type.err();
  if (*obs_type != "box")
    return bad_json(code, fmt::format("observation_space.type: expected \"box\" (float32 "
                                      "observations), got \"{}\"",
                                      *obs_type));
  auto obs_dim = shape_size(*obs, "observation_space", code);
  if (!obs_dim)
    return obs_dim.err();
  m.shape.obs_dim = *obs_dim;

  auto act = j.find("action_space");
  if (act == j.end())
    return bad_json(code, "the key 'action_space' is missing");
  auto act_type = space_type(*act, "action_space", code);
  if (!act_type)
    return act_type.err();
  if (*act_type == "discrete") {
    auto actions = uint_member(*act, "action_space", "n", 1, max_discrete_actions, code);
    if (!actions)
      return actions.err();
    m.shape.discrete = true;
    m.shape.num_actions = *actions;
    m.shape.action_dim = 1;
  } else if (*act_type == "box") {
    auto dim = shape_size(*act, "action_space", code);
    if (!dim)
      return dim.err();
    m.shape.discrete = false;
    m.shape.num_actions = 0;
    m.shape.action_dim = *dim;
  } else {
    return bad_json(code, fmt::format("action_space.type: expected \"box\" or "
                                      "\"discrete\", got \"{}\"",
                                      *act_type));
  }
  return m;
}

} // namespace

// -- encoding -----------------------------------------------------------------------

frame encode_header(const header& h) {
  frame f(header_size, 0);
  std::memcpy(f.data(), magic, 4);
  f[4] = h.major;
  f[5] = h.minor;
  f[6] = static_cast<uint8_t>(h.type);
  f[7] = h.flags;
  put_u64(f.data() + 8, h.sequence);
  put_u32(f.data() + 16, h.num_envs);
  put_u32(f.data() + 20, 0);
  put_u64(f.data() + 24, h.session);
  return f;
}

std::vector<frame> encode_hello(header h, const hello& m) {
  h.type = kind::hello;
  h.num_envs = m.shape.num_envs;
  h.session = 0;
  json j;
  j["client"] = m.client;
  j["num_envs"] = m.shape.num_envs;
  j["observation_space"] = {{"type", "box"}, {"shape", {m.shape.obs_dim}}};
  if (m.shape.discrete)
    j["action_space"] = {{"type", "discrete"}, {"n", m.shape.num_actions}};
  else
    j["action_space"] = {{"type", "box"}, {"shape", {m.shape.action_dim}}};
  const std::string text = j.dump();
  return {encode_header(h), frame(text.begin(), text.end())};
}

std::vector<frame> encode_welcome(header h, const welcome& m) {
  h.type = kind::welcome;
  h.major = m.major;
  h.minor = m.minor;
  h.num_envs = m.num_envs;
  h.session = m.session;
  json j;
  j["session"] = m.session;
  j["major"] = m.major;
  j["minor"] = m.minor;
  j["heartbeat_ms"] = m.heartbeat_ms;
  j["timeout_ms"] = m.timeout_ms;
  j["max_errors"] = m.max_errors;
  const std::string text = j.dump();
  return {encode_header(h), frame(text.begin(), text.end())};
}

std::vector<frame> encode_step(header h, const step& m) {
  h.type = kind::step;
  h.num_envs = static_cast<uint32_t>(m.env_ids.size());
  return {encode_header(h),       array_frame(m.env_ids), array_frame(m.obs),
          array_frame(m.rewards), array_frame(m.flags),   array_frame(m.final_obs)};
}

std::vector<frame> encode_act(header h, const act& m, const env_shape& shape) {
  h.type = kind::act;
  h.num_envs = static_cast<uint32_t>(m.env_ids.size());
  frame actions;
  if (shape.discrete) {
    std::vector<int32_t> index(m.actions.size());
    for (size_t i = 0; i < index.size(); ++i)
      index[i] = static_cast<int32_t>(m.actions[i]);
    actions = array_frame(index);
  } else {
    actions = array_frame(m.actions);
  }
  frame version(8);
  put_u64(version.data(), m.policy_version);
  return {encode_header(h), array_frame(m.env_ids), std::move(actions),
          std::move(version)};
}

std::vector<frame> encode_error(header h, const error_reply& m) {
  h.type = kind::error;
  frame code(4);
  put_u32(code.data(), static_cast<uint32_t>(m.code));
  return {encode_header(h), std::move(code), frame(m.message.begin(), m.message.end())};
}

std::vector<frame> encode_signal(header h) {
  return {encode_header(h)};
}

// -- decoding -----------------------------------------------------------------------

result<header> decode_header(const frame_view* frames, size_t count, error_code& code) {
  if (count == 0 || frames[0].size != header_size)
    return fail(code, error_code::bad_header, errc::bad_input,
                fmt::format("header: frame 0 must be {} bytes, got {}", header_size,
                            count == 0 ? 0 : frames[0].size));
  const uint8_t* p = frames[0].data;
  if (std::memcmp(p, magic, 4) != 0)
    return fail(code, error_code::bad_magic, errc::bad_input,
                fmt::format("header: the magic must be 54 52 50 45 ('TRPE'), got "
                            "{:02x} {:02x} {:02x} {:02x}",
                            p[0], p[1], p[2], p[3]));
  header h;
  h.major = p[4];
  h.minor = p[5];
  if (h.major != protocol_major)
    return fail(code, error_code::version_mismatch, errc::unsupported_version,
                fmt::format("header: protocol major version {} is required, got {}.{}",
                            protocol_major, h.major, h.minor));
  if (p[6] < static_cast<uint8_t>(kind::hello) ||
      p[6] > static_cast<uint8_t>(kind::error))
    return fail(code, error_code::unknown_kind, errc::bad_input,
                fmt::format("header: the kind must be in [1, 8], got {}", p[6]));
  h.type = static_cast<kind>(p[6]);
  h.flags = p[7];
  h.sequence = get_u64(p + 8);
  h.num_envs = get_u32(p + 16);
  h.session = get_u64(p + 24);
  return h;
}

uint64_t readable_sequence(const frame_view* frames, size_t count) noexcept {
  if (count == 0 || frames[0].size != header_size ||
      std::memcmp(frames[0].data, magic, 4) != 0 || frames[0].data[4] != protocol_major)
    return 0;
  return get_u64(frames[0].data + 8);
}

result<hello> decode_hello(const header& h, const frame_view* frames, size_t count,
                           error_code& code) {
  if (auto ok = frame_count(h, count, 2, code); !ok)
    return ok.err();
  if (h.num_envs == 0 || h.num_envs > max_session_envs)
    return fail(code, error_code::count_mismatch, errc::invalid_argument,
                fmt::format("HELLO message: num_envs must be in [1, {}], got {}",
                            max_session_envs, h.num_envs));
  try {
    return parse_hello(h, frames[1], code);
  } catch (const std::exception& e) {
    // nlohmann's accessors throw on types the checks above let through.
    return bad_json(code, fmt::format("frame 1: {}", e.what()));
  }
}

result<welcome> decode_welcome(const header& h, const frame_view* frames, size_t count,
                               error_code& code) {
  if (auto ok = frame_count(h, count, 2, code); !ok)
    return ok.err();
  const char* begin = reinterpret_cast<const char*>(frames[1].data);
  json j = json::parse(begin, begin + frames[1].size, nullptr, false);
  auto bad = [&](const std::string& what) {
    return fail(code, error_code::bad_handshake, errc::bad_input,
                fmt::format("WELCOME message: {}", what));
  };
  if (j.is_discarded() || !j.is_object())
    return bad("frame 1 is not a JSON object");
  welcome m;
  m.major = h.major;
  m.minor = h.minor;
  m.num_envs = h.num_envs;
  try {
    auto get = [&](const char* key, uint64_t max, uint64_t& out) -> status {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max)
        return bad(fmt::format("{}: expected an integer in [0, {}], got {}", key, max,
                               it == j.end() ? std::string("nothing") : it->dump()));
      out = it->get<uint64_t>();
      return ok_status();
    };
    uint64_t session = 0, heartbeat = 0, timeout = 0, errors = 0;
    if (auto ok = get("session", UINT64_MAX, session); !ok)
      return ok.err();
    if (auto ok = get("heartbeat_ms", UINT32_MAX, heartbeat); !ok)
      return ok.err();
    if (auto ok = get("timeout_ms", UINT32_MAX, timeout); !ok)
      return ok.err();
    if (auto ok = get("max_errors", UINT32_MAX, errors); !ok)
      return ok.err();
    if (session == 0 || session != h.session)
      return bad(fmt::format("session {} must be nonzero and equal the header's {}",
                             session, h.session));
    m.session = session;
    m.heartbeat_ms = static_cast<uint32_t>(heartbeat);
    m.timeout_ms = static_cast<uint32_t>(timeout);
    m.max_errors = static_cast<uint32_t>(errors);
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  return m;
}

result<step> decode_step(const header& h, const frame_view* frames, size_t count,
                         const env_shape& shape, error_code& code) {
  if (auto ok = frame_count(h, count, 6, code); !ok)
    return ok.err();
  const size_t k = h.num_envs;
  if (k == 0 || k > shape.num_envs)
    return fail(code, error_code::count_mismatch, errc::dimension_mismatch,
                fmt::format("STEP message: num_envs must be in [1, {}] (the session's "
                            "environments), got {}",
                            shape.num_envs, k));
  const size_t d = shape.obs_dim;
  const std::string per_env = fmt::format("num_envs {}", k);
  const std::string per_obs = fmt::format("num_envs {} x obs_dim {} float32", k, d);
  if (auto ok = frame_size(h, frames, 1, "env ids", 4 * k, per_env + " u32", code); !ok)
    return ok.err();
  if (auto ok = frame_size(h, frames, 2, "observations", 4 * k * d, per_obs, code); !ok)
    return ok.err();
  if (auto ok = frame_size(h, frames, 3, "rewards", 8 * k, per_env + " float64", code);
      !ok)
    return ok.err();
  if (auto ok = frame_size(h, frames, 4, "flags", k, per_env + " u8", code); !ok)
    return ok.err();
  step m;
  m.env_ids = read_array<uint32_t>(frames[1]);
  m.flags = read_array<uint8_t>(frames[4]);
  std::vector<bool> seen(shape.num_envs, false);
  size_t ended = 0;
  for (size_t i = 0; i < k; ++i) {
    const uint32_t id = m.env_ids[i];
    if (id >= shape.num_envs)
      return fail(code, error_code::bad_env_id, errc::invalid_argument,
                  fmt::format("STEP message: env id {} (position {}) must be below the "
                              "session's num_envs {}",
                              id, i, shape.num_envs));
    if (seen[id])
      return fail(
        code, error_code::bad_env_id, errc::invalid_argument,
        fmt::format("STEP message: env id {} appears twice (position {})", id, i));
    seen[id] = true;
    const uint8_t f = m.flags[i];
    if (f & ~(flag_terminated | flag_truncated))
      return fail(
        code, error_code::bad_flags, errc::invalid_argument,
        fmt::format("STEP message: flags of env id {} may set bits 0 and 1 only, "
                    "got 0x{:02x}",
                    id, f));
    if (f != 0)
      ++ended;
  }
  if (auto ok =
        frame_size(h, frames, 5, "final observations", 4 * ended * d,
                   fmt::format("{} ended episodes x obs_dim {} float32", ended, d), code);
      !ok)
    return ok.err();
  m.obs = read_array<float>(frames[2]);
  m.rewards = read_array<double>(frames[3]);
  m.final_obs = read_array<float>(frames[5]);
  if (auto ok = all_finite(h, m.obs, d, "observations", code); !ok)
    return ok.err();
  if (auto ok = all_finite(h, m.rewards, 1, "rewards", code); !ok)
    return ok.err();
  if (auto ok = all_finite(h, m.final_obs, d, "final observations", code); !ok)
    return ok.err();
  return m;
}

result<act> decode_act(const header& h, const frame_view* frames, size_t count,
                       const env_shape& shape, error_code& code) {
  if (auto ok = frame_count(h, count, 4, code); !ok)
    return ok.err();
  const size_t k = h.num_envs;
  if (k == 0 || k > shape.num_envs)
    return fail(
      code, error_code::count_mismatch, errc::dimension_mismatch,
      fmt::format("ACT message: num_envs must be in [1, {}], got {}", shape.num_envs, k));
  const size_t w = shape.action_width();
  if (auto ok = frame_size(h, frames, 1, "env ids", 4 * k,
                           fmt::format("num_envs {} u32", k), code);
      !ok)
    return ok.err();
  if (auto ok = frame_size(
        h, frames, 2, "actions", 4 * k * w,
        fmt::format("num_envs {} x {} {}", k, w, shape.discrete ? "int32" : "float32"),
        code);
      !ok)
    return ok.err();
  if (auto ok = frame_size(h, frames, 3, "policy version", 8, "one u64", code); !ok)
    return ok.err();
  act m;
  m.env_ids = read_array<uint32_t>(frames[1]);
  for (size_t i = 0; i < k; ++i)
    if (m.env_ids[i] >= shape.num_envs)
      return fail(code, error_code::bad_env_id, errc::invalid_argument,
                  fmt::format("ACT message: env id {} (position {}) must be below {}",
                              m.env_ids[i], i, shape.num_envs));
  if (shape.discrete) {
    auto index = read_array<int32_t>(frames[2]);
    m.actions.resize(index.size());
    for (size_t i = 0; i < index.size(); ++i) {
      if (index[i] < 0 || static_cast<uint32_t>(index[i]) >= shape.num_actions)
        return fail(code, error_code::space_mismatch, errc::invalid_argument,
                    fmt::format("ACT message: action {} (position {}) must be in [0, {})",
                                index[i], i, shape.num_actions));
      m.actions[i] = static_cast<float>(index[i]);
    }
  } else {
    m.actions = read_array<float>(frames[2]);
    if (auto ok = all_finite(h, m.actions, w, "actions", code); !ok)
      return ok.err();
  }
  m.policy_version = get_u64(frames[3].data);
  return m;
}

result<error_reply> decode_error(const header& h, const frame_view* frames, size_t count,
                                 error_code& code) {
  if (auto ok = frame_count(h, count, 3, code); !ok)
    return ok.err();
  if (auto ok = frame_size(h, frames, 1, "code", 4, "one u32", code); !ok)
    return ok.err();
  error_reply m;
  m.code = static_cast<error_code>(get_u32(frames[1].data));
  m.message.assign(reinterpret_cast<const char*>(frames[2].data), frames[2].size);
  return m;
}

status decode_signal(const header& h, size_t count, error_code& code) {
  return frame_count(h, count, 1, code);
}

status check_client_kind(kind k, bool has_session, error_code& code) {
  switch (k) {
  case kind::hello:
    if (!has_session)
      return ok_status();
    return fail(code, error_code::out_of_order, errc::invalid_argument,
                "HELLO message: this connection has a session already (send CLOSE "
                "first, or open another connection)");
  case kind::step:
  case kind::ping:
  case kind::close:
    if (has_session)
      return ok_status();
    return fail(code, error_code::out_of_order, errc::invalid_argument,
                fmt::format("{} message: no session on this connection (send HELLO "
                            "and wait for WELCOME first)",
                            to_string(k)));
  default:
    return fail(code, error_code::unknown_kind, errc::invalid_argument,
                fmt::format("{} message: a client may send HELLO, STEP, PING or CLOSE, "
                            "not {}",
                            to_string(k), to_string(k)));
  }
}

status check_shape(const env_shape& shape) {
  if (shape.num_envs == 0 || shape.num_envs > max_session_envs)
    return make_error(errc::invalid_argument, "num_envs must be in [1, {}], got {}",
                      max_session_envs, shape.num_envs);
  if (shape.obs_dim == 0 || shape.obs_dim > max_dim)
    return make_error(errc::invalid_argument, "obs_dim must be in [1, {}], got {}",
                      max_dim, shape.obs_dim);
  if (shape.discrete &&
      (shape.num_actions == 0 || shape.num_actions > max_discrete_actions))
    return make_error(errc::invalid_argument,
                      "a Discrete space's n must be in [1, {}], got {}",
                      max_discrete_actions, shape.num_actions);
  if (!shape.discrete && (shape.action_dim == 0 || shape.action_dim > max_dim))
    return make_error(errc::invalid_argument, "action_dim must be in [1, {}], got {}",
                      max_dim, shape.action_dim);
  return ok_status();
}

status check_same_spaces(const env_shape& offered, const env_shape& trained) {
  auto describe = [](const env_shape& s) {
    return s.discrete ? fmt::format("Discrete({})", s.num_actions)
                      : fmt::format("Box({})", s.action_dim);
  };
  if (offered.obs_dim != trained.obs_dim)
    return make_error(errc::dimension_mismatch,
                      "HELLO message: observation_space holds {} values; troupe trains "
                      "observations of {}",
                      offered.obs_dim, trained.obs_dim);
  if (offered.discrete != trained.discrete ||
      (offered.discrete ? offered.num_actions != trained.num_actions
                        : offered.action_dim != trained.action_dim))
    return make_error(errc::dimension_mismatch,
                      "HELLO message: action_space is {}; troupe trains {}",
                      describe(offered), describe(trained));
  return ok_status();
}

} // namespace troupe::edge::remote
