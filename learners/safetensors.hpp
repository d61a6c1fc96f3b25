// A strict reader and writer of the safetensors format that never trusts the
// file and never leaves half of one (docs/checkpoints.md, "The container").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace troupe::learners {

/// The element types of safetensors that troupe reads and writes.
enum class st_dtype : uint8_t {
  f64,     ///< "F64", IEEE binary64
  f32,     ///< "F32", IEEE binary32
  f16,     ///< "F16", IEEE binary16 (stored and copied, not converted)
  bf16,    ///< "BF16", bfloat16 (stored and copied, not converted)
  i64,     ///< "I64"
  i32,     ///< "I32"
  i16,     ///< "I16"
  i8,      ///< "I8"
  u8,      ///< "U8"
  boolean, ///< "BOOL", one byte per element
};

/// The dtype's name as the format spells it ("F32", ...).
const char* to_string(st_dtype type) noexcept;

/// Bytes per element of `type`.
size_t element_size(st_dtype type) noexcept;

/// The dtype a format name stands for, or nothing when the name is unknown.
std::optional<st_dtype> parse_dtype(std::string_view name) noexcept;

/// One named tensor: dtype, shape and its little-endian bytes.
struct st_tensor {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<int64_t> shape; ///< empty for a scalar (one element)
  std::vector<std::byte> bytes;

  /// Number of elements (the product of the shape; 1 for a scalar).
  size_t numel() const noexcept;

  /// A float32 tensor copied from `values` (numel(shape) of them).
  static st_tensor from_f32(std::string name, std::vector<int64_t> shape,
                            const float* values);
  /// A float64 tensor copied from `values` (numel(shape) of them).
  static st_tensor from_f64(std::string name, std::vector<int64_t> shape,
                            const double* values);
  /// An int64 tensor copied from `values` (numel(shape) of them).
  static st_tensor from_i64(std::string name, std::vector<int64_t> shape,
                            const int64_t* values);

  /// The elements as float32; only for an F32 tensor (checked).
  std::vector<float> to_f32() const;
  /// The elements as float64; only for an F64 tensor (checked).
  std::vector<double> to_f64() const;
  /// The elements as int64; only for an I64 tensor (checked).
  std::vector<int64_t> to_i64() const;
};

/// The contents of one safetensors file: metadata and tensors in file order.
struct st_file {
  std::map<std::string, std::string> metadata; ///< the "__metadata__" entries
  std::vector<st_tensor> tensors;

  /// The tensor called `name`, or nullptr.
  const st_tensor* find(std::string_view name) const noexcept;
};

/// Largest header troupe accepts (as the reference implementation: 100 MB).
constexpr uint64_t st_max_header_bytes = 100'000'000;

/// Parses a whole safetensors image held in memory, with `source` (usually
/// the file path) naming it in error messages.
result<st_file> parse_safetensors(const std::byte* data, size_t size,
                                  const std::string& source);

/// Reads and parses the safetensors file at `path`.
result<st_file> read_safetensors(const std::string& path);

/// The bytes of a safetensors image of `file` (header padded to 8 bytes),
/// failing on duplicate or empty names, a name "__metadata__", or a tensor
/// whose byte count does not match its shape and dtype.
result<std::vector<std::byte>> serialize_safetensors(const st_file& file);

/// Writes `file` to `path` with write_file_atomically.
status write_safetensors(const std::string& path, const st_file& file);

/// Writes `size` bytes to `path` so that a crash leaves the old file or the
/// whole new one, and a failure leaves `path` untouched.
status write_file_atomically(const std::string& path, const void* data, size_t size);

} // namespace troupe::learners
