// The layout of a remote_wire fuzz input, shared by the target
// (remote_wire.fuzz.cpp) and the seed writer (seeds.cpp): three bytes that
// choose the session's shape, then the message's frames, each as a
// little-endian u16 length and that many bytes (a last frame cut short keeps
// what is there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "edge/remote_wire.hpp"

namespace troupe::fuzz {

/// A decoded fuzz input: the session's shape and the message's frames.
struct remote_wire_input {
  edge::remote::env_shape shape;           ///< what the handshake agreed
  std::vector<edge::remote::frame> frames; ///< the message
};

/// Splits `data` as the file comment says.
inline remote_wire_input read_remote_wire_input(const uint8_t* data, size_t size) {
  remote_wire_input in;
  const uint8_t b0 = size > 0 ? data[0] : 0, b1 = size > 1 ? data[1] : 0,
                b2 = size > 2 ? data[2] : 0;
  in.shape.num_envs = 1 + b0 % 16;
  in.shape.obs_dim = 1 + b1 % 8;
  in.shape.discrete = (b2 & 1) != 0;
  in.shape.num_actions = in.shape.discrete ? 1 + (b2 >> 1) % 8 : 0;
  in.shape.action_dim = in.shape.discrete ? 1 : 1 + (b2 >> 4) % 4;
  size_t at = 3;
  while (at + 2 <= size) {
    const size_t n = data[at] | (static_cast<size_t>(data[at + 1]) << 8);
    at += 2;
    const size_t take = n < size - at ? n : size - at;
    in.frames.emplace_back(data + at, data + at + take);
    at += take;
  }
  return in;
}

/// The bytes of an input of `shape` (as read_remote_wire_input chooses it
/// from b0, b1, b2) and `frames`.
inline std::string
write_remote_wire_input(uint8_t b0, uint8_t b1, uint8_t b2,
                        const std::vector<edge::remote::frame>& frames) {
  std::string out{static_cast<char>(b0), static_cast<char>(b1), static_cast<char>(b2)};
  for (auto& f : frames) {
    out.push_back(static_cast<char>(f.size() & 0xff));
    out.push_back(static_cast<char>((f.size() >> 8) & 0xff));
    out.append(f.begin(), f.end());
  }
  return out;
}

} // namespace troupe::fuzz
