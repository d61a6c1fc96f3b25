// A reader of TensorBoard event files for tests, written apart from
// learners/tensorboard.cpp: its own bitwise CRC-32C, the TFRecord framing with
// both masked CRCs checked, and a protobuf decoder of the Event fields troupe
// writes (every other field is skipped by its wire type).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace troupe::test {

/// CRC-32C computed bit by bit (no table), reflected polynomial 0x82f63b78.
inline uint32_t reference_crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/// TFRecord's mask of a CRC.
inline uint32_t reference_masked_crc(const void* data, size_t size) {
  const uint32_t crc = reference_crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// One decoded Event.
struct tb_event {
  double wall_time = 0;
  bool has_step = false;
  int64_t step = 0;
  std::string file_version;
  bool has_summary = false;
  std::vector<std::pair<std::string, float>> values; ///< (tag, simple_value)
  int64_t session_status = -1; ///< session_log's status (1: START), -1: none
};

/// The events of a file, or the first problem found.
struct tb_read {
  std::vector<tb_event> events;
  std::string error; ///< empty when the whole file read back
};

namespace detail {

inline uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t x = 0;
  for (int i = 0; i < bytes; ++i)
    x |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return x;
}

// Reads a varint at `at`; false when it runs past `end` or is over 10 bytes.
inline bool varint(const std::string& s, size_t& at, size_t end, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (at >= end)
      return false;
    const auto byte = static_cast<unsigned char>(s[at++]);
    out |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return true;
  }
  return false;
}

// Calls field(number, wire_type, begin, end_or_value) for every field of the
// message s[begin, end); false on malformed input.
template <class F>
bool for_each_field(const std::string& s, size_t begin, size_t end, F&& field) {
  size_t at = begin;
  while (at < end) {
    uint64_t key = 0;
    if (!varint(s, at, end, key))
      return false;
    const auto number = static_cast<uint32_t>(key >> 3);
    const auto type = static_cast<uint32_t>(key & 7);
    uint64_t value = 0;
    size_t start = at;
    switch (type) {
    case 0:
      if (!varint(s, at, end, value))
        return false;
      break;
    case 1:
      if (end - at < 8)
        return false;
      value = le(s, at, 8);
      at += 8;
      break;
    case 2:
      if (!varint(s, at, end, value) || end - at < value)
        return false;
      start = at;
      at += value;
      break;
    case 5:
      if (end - at < 4)
        return false;
      value = le(s, at, 4);
      at += 4;
      break;
    default:
      return false;
    }
    if (!field(number, type, start, value))
      return false;
  }
  return true;
}

inline bool parse_value(const std::string& s, size_t begin, size_t end, tb_event& ev) {
  std::string tag;
  float simple = 0;
  bool has_simple = false;
  bool ok =
    for_each_field(s, begin, end, [&](uint32_t n, uint32_t t, size_t at, uint64_t v) {
      if (n == 1 && t == 2)
        tag = s.substr(at, v);
      else if (n == 2 && t == 5) {
        const auto bits = static_cast<uint32_t>(v);
        std::memcpy(&simple, &bits, 4);
        has_simple = true;
      }
      return true;
    });
  if (!ok || !has_simple)
    return false;
  ev.values.emplace_back(std::move(tag), simple);
  return true;
}

inline bool parse_event(const std::string& s, tb_event& ev) {
  return for_each_field(
    s, 0, s.size(), [&](uint32_t n, uint32_t t, size_t at, uint64_t v) {
      if (n == 1 && t == 1)
        std::memcpy(&ev.wall_time, &v, 8);
      else if (n == 2 && t == 0) {
        ev.has_step = true;
        ev.step = static_cast<int64_t>(v);
      } else if (n == 3 && t == 2)
        ev.file_version = s.substr(at, v);
      else if (n == 7 && t == 2) {
        ev.session_status = 0;
        return for_each_field(s, at, at + v,
                              [&](uint32_t n2, uint32_t t2, size_t, uint64_t v2) {
                                if (n2 == 1 && t2 == 0)
                                  ev.session_status = static_cast<int64_t>(v2);
                                return true;
                              });
      } else if (n == 5 && t == 2) {
        ev.has_summary = true;
        return for_each_field(
          s, at, at + v, [&](uint32_t n2, uint32_t t2, size_t at2, uint64_t v2) {
            return n2 != 1 || t2 != 2 || parse_value(s, at2, at2 + v2, ev);
          });
      }
      return true;
    });
}

} // namespace detail

/// Decodes the records of an events file's bytes, checking both CRCs of each.
inline tb_read read_tb_events(const std::string& bytes) {
  tb_read out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      out.error = fmt::format("record at byte {}: cut short in its length", at);
      return out;
    }
    const uint64_t length = detail::le(bytes, at, 8);
    const auto length_crc = static_cast<uint32_t>(detail::le(bytes, at + 8, 4));
    if (length_crc != reference_masked_crc(bytes.data() + at, 8)) {
      out.error = fmt::format("record at byte {}: the length's CRC does not match", at);
      return out;
    }
    if (bytes.size() - at - 12 < length + 4) {
      out.error = fmt::format("record at byte {}: cut short", at);
      return out;
    }
    const std::string payload = bytes.substr(at + 12, length);
    const auto data_crc = static_cast<uint32_t>(detail::le(bytes, at + 12 + length, 4));
    if (data_crc != reference_masked_crc(payload.data(), payload.size())) {
      out.error = fmt::format("record at byte {}: the data's CRC does not match", at);
      return out;
    }
    tb_event ev;
    if (!detail::parse_event(payload, ev)) {
      out.error = fmt::format("record at byte {}: not an Event", at);
      return out;
    }
    out.events.push_back(std::move(ev));
    at += 12 + length + 4;
  }
  return out;
}

/// Reads and decodes the events file at `path`.
inline tb_read read_tb_events_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    tb_read out;
    out.error = "cannot open " + path.string();
    return out;
  }
  return read_tb_events(
    std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

/// The files of `folder` whose names start with "events.out.tfevents.", sorted.
inline std::vector<std::filesystem::path>
tb_event_files(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> out;
  for (auto& e : std::filesystem::directory_iterator(folder))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace troupe::test
