// Numeric arrays on the wire as their bytes. CAF 0.17's serializers write a
// std::vector<float> element by element, each float packed into IEEE 754 big
// endian by arithmetic (detail::pack754) through a virtual call: about 40 ns a
// number there and back, so an 18 KB weights reply cost about 1 ms between two
// nodes on loopback, and 184 KB about 8 ms (measured, docs/benchmarks.md,
// "Across processes"). `raw(v)` in a message's `inspect` writes the element
// count and then the elements' bytes in one block (one memcpy on each side).
//
// The bytes are the host's: every node must be little-endian (x86-64,
// AArch64, RISC-V as Linux runs them), which the static_assert below checks at
// build time. In-process messages are never serialized, so this changes
// nothing inside one process; checkpoints have formats of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

namespace troupe::actors {

static_assert(
  __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
  "raw arrays cross the wire in the host's byte order: little-endian hosts only");

/// A view of a vector whose elements cross the wire as raw bytes.
template <class T>
struct raw_array {
  static_assert(std::is_arithmetic_v<T>, "raw arrays hold numbers");
  std::vector<T>* v;
};

/// Marks `v` for raw serialization in an `inspect` overload.
template <class T>
raw_array<T> raw(std::vector<T>& v) {
  return {&v};
}

/// Writing: the count, then the bytes.
template <class T>
caf::error inspect(caf::serializer& f, raw_array<T>& x) {
  size_t n = x.v->size();
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > 0)
    if (auto err = f.apply_raw(n * sizeof(T), x.v->data()))
      return err;
  return f.end_sequence();
}

/// Reading: the count, then the bytes, in blocks of at most 64 Ki elements, so
/// that a count larger than the bytes that follow (a damaged or hostile
/// message) fails when the bytes run out instead of allocating the count up
/// front.
template <class T>
caf::error inspect(caf::deserializer& f, raw_array<T>& x) {
  size_t n = 0;
  if (auto err = f.begin_sequence(n))
    return err;
  constexpr size_t block = size_t{1} << 16;
  x.v->clear();
  for (size_t done = 0; done < n;) {
    const size_t k = n - done < block ? n - done : block;
    x.v->resize(done + k);
    if (auto err = f.apply_raw(k * sizeof(T), x.v->data() + done))
      return err;
    done += k;
  }
  return f.end_sequence();
}

/// Every other inspector (to_string, logs): the vector as it is.
template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, raw_array<T>& x) {
  return f(*x.v);
}

/// A single number that crosses the wire as its bytes. CAF 0.17 packs a
/// double by arithmetic (detail::pack754), which is undefined behaviour for
/// NaN (UBSan reports it); a field that may hold NaN goes raw.
template <class T>
struct raw_scalar {
  static_assert(std::is_arithmetic_v<T>, "raw scalars are numbers");
  T* p;
};

/// Marks `x` for raw serialization in an `inspect` overload.
template <class T>
raw_scalar<T> raw_value(T& x) {
  return {&x};
}

template <class T>
caf::error inspect(caf::serializer& f, raw_scalar<T>& x) {
  return f.apply_raw(sizeof(T), x.p);
}

template <class T>
caf::error inspect(caf::deserializer& f, raw_scalar<T>& x) {
  return f.apply_raw(sizeof(T), x.p);
}

/// Every other inspector: the number as it is.
template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, raw_scalar<T>& x) {
  return f(*x.p);
}

} // namespace troupe::actors
