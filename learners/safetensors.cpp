#include "learners/safetensors.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

// The format is little-endian; troupe copies bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace troupe::learners {

// -- dtypes ------------------------------------------------------------------

namespace {

struct dtype_info {
  st_dtype type;
  const char* name;
  size_t size;
};

constexpr dtype_info dtype_table[] = {
  {st_dtype::f64, "F64", 8},      {st_dtype::f32, "F32", 4}, {st_dtype::f16, "F16", 2},
  {st_dtype::bf16, "BF16", 2},    {st_dtype::i64, "I64", 8}, {st_dtype::i32, "I32", 4},
  {st_dtype::i16, "I16", 2},      {st_dtype::i8, "I8", 1},   {st_dtype::u8, "U8", 1},
  {st_dtype::boolean, "BOOL", 1},
};

const dtype_info& info(st_dtype type) noexcept {
  for (auto& d : dtype_table)
    if (d.type == type)
      return d;
  return dtype_table[1];
}

} // namespace

const char* to_string(st_dtype type) noexcept {
  return info(type).name;
}

size_t element_size(st_dtype type) noexcept {
  return info(type).size;
}

std::optional<st_dtype> parse_dtype(std::string_view name) noexcept {
  for (auto& d : dtype_table)
    if (name == d.name)
      return d.type;
  return std::nullopt;
}

// -- tensors -----------------------------------------------------------------

namespace {

// Product of the dimensions, or nothing when one is negative or it overflows.
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0)
      return std::nullopt;
    auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud)
      return std::nullopt;
    n *= ud;
  }
  return n;
}

template <class T>
st_tensor make_tensor(std::string name, st_dtype type, std::vector<int64_t> shape,
                      const T* values) {
  st_tensor t;
  t.name = std::move(name);
  t.dtype = type;
  t.shape = std::move(shape);
  auto n = checked_numel(t.shape);
  TROUPE_CHECK(n.has_value(), "tensor '{}': invalid shape", t.name);
  t.bytes.resize(*n * sizeof(T));
  if (*n > 0)
    std::memcpy(t.bytes.data(), values, t.bytes.size());
  return t;
}

template <class T>
std::vector<T> copy_out(const st_tensor& t, st_dtype want) {
  TROUPE_CHECK(t.dtype == want, "tensor '{}' is {}, read as {}", t.name,
               to_string(t.dtype), to_string(want));
  TROUPE_CHECK(t.bytes.size() == t.numel() * sizeof(T),
               "tensor '{}' holds {} bytes for {} elements", t.name, t.bytes.size(),
               t.numel());
  std::vector<T> out(t.numel());
  if (!out.empty())
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

} // namespace

size_t st_tensor::numel() const noexcept {
  auto n = checked_numel(shape);
  return n ? static_cast<size_t>(*n) : 0;
}

st_tensor st_tensor::from_f32(std::string name, std::vector<int64_t> shape,
                              const float* values) {
  return make_tensor(std::move(name), st_dtype::f32, std::move(shape), values);
}

st_tensor st_tensor::from_f64(std::string name, std::vector<int64_t> shape,
                              const double* values) {
  return make_tensor(std::move(name), st_dtype::f64, std::move(shape), values);
}

st_tensor st_tensor::from_i64(std::string name, std::vector<int64_t> shape,
                              const int64_t* values) {
  return make_tensor(std::move(name), st_dtype::i64, std::move(shape), values);
}

std::vector<float> st_tensor::to_f32() const {
  return copy_out<float>(*this, st_dtype::f32);
}

std::vector<double> st_tensor::to_f64() const {
  return copy_out<double>(*this, st_dtype::f64);
}

std::vector<int64_t> st_tensor::to_i64() const {
  return copy_out<int64_t>(*this, st_dtype::i64);
}

const st_tensor* st_file::find(std::string_view name) const noexcept {
  for (auto& t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

// -- a small strict JSON reader ---------------------------------------------

namespace {

// Just enough JSON for safetensors headers: RFC 8259 syntax, numbers kept as
// text and converted where the format needs an integer, a nesting limit so
// that hostile input cannot exhaust the stack.
struct json_value {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool flag = false;
  std::string text; // a string's decoded value or a number's literal
  std::vector<json_value> items;
  std::vector<std::pair<std::string, json_value>> members;
};

const char* kind_name(json_value::kind k) {
  switch (k) {
  case json_value::kind::null:
    return "null";
  case json_value::kind::boolean:
    return "a boolean";
  case json_value::kind::number:
    return "a number";
  case json_value::kind::string:
    return "a string";
  case json_value::kind::array:
    return "an array";
  case json_value::kind::object:
    return "an object";
  }
  return "?";
}

class json_parser {
public:
  explicit json_parser(std::string_view text) : text_(text) {}

  // Parses one value that must fill the whole text (surrounding whitespace
  // allowed); on failure `error()` says what and at which byte.
  bool parse_document(json_value& out) {
    skip_space();
    if (!parse_value(out, 0))
      return false;
    skip_space();
    if (pos_ != text_.size())
      return fail("unexpected characters after the JSON value");
    return true;
  }

  const std::string& error() const { return error_; }

private:
  static constexpr int max_depth = 64;

  bool fail(const std::string& what) {
    if (error_.empty())
      error_ = fmt::format("{} at byte {} of the header", what, pos_);
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool parse_value(json_value& out, int depth) {
    if (depth > max_depth)
      return fail(fmt::format("JSON nested deeper than {} levels", max_depth));
    if (pos_ >= text_.size())
      return fail("unexpected end of JSON");
    char c = text_[pos_];
    switch (c) {
    case '{':
      return parse_object(out, depth);
    case '[':
      return parse_array(out, depth);
    case '"':
      out.type = json_value::kind::string;
      return parse_string(out.text);
    case 't':
      out.type = json_value::kind::boolean;
      out.flag = true;
      return literal("true");
    case 'f':
      out.type = json_value::kind::boolean;
      out.flag = false;
      return literal("false");
    case 'n':
      out.type = json_value::kind::null;
      return literal("null");
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(out);
      return fail(fmt::format("unexpected character '{}'", printable(c)));
    }
  }

  static std::string printable(char c) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f)
      return std::string(1, c);
    return fmt::format("\\x{:02x}", u);
  }

  bool parse_object(json_value& out, int depth) {
    out.type = json_value::kind::object;
    ++pos_; // '{'
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return fail("expected a quoted key");
      std::string key;
      if (!parse_string(key))
        return false;
      for (auto& m : out.members)
        if (m.first == key)
          return fail(fmt::format("duplicate key \"{}\"", key));
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return fail("expected ':' after a key");
      ++pos_;
      skip_space();
      json_value v;
      if (!parse_value(v, depth + 1))
        return false;
      out.members.emplace_back(std::move(key), std::move(v));
      skip_space();
      if (pos_ >= text_.size())
        return fail("unterminated object");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}' in an object");
    }
  }

  bool parse_array(json_value& out, int depth) {
    out.type = json_value::kind::array;
    ++pos_; // '['
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_space();
      json_value v;
      if (!parse_value(v, depth + 1))
        return false;
      out.items.push_back(std::move(v));
      skip_space();
      if (pos_ >= text_.size())
        return fail("unterminated array");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or ']' in an array");
    }
  }

  bool parse_number(json_value& out) {
    out.type = json_value::kind::number;
    auto start = pos_;
    auto digits = [&] {
      auto first = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      return pos_ - first;
    };
    if (text_[pos_] == '-')
      ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return fail("invalid number");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0)
        return fail("invalid number: no digits after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      if (digits() == 0)
        return fail("invalid number: no digits in the exponent");
    }
    out.text.assign(text_.substr(start, pos_ - start));
    return true;
  }

  bool hex4(uint32_t& out) {
    if (text_.size() - pos_ < 4)
      return fail("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      out <<= 4;
      if (c >= '0' && c <= '9')
        out |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        out |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        out |= static_cast<uint32_t>(c - 'A' + 10);
      else
        return fail("invalid hex digit in a \\u escape");
    }
    return true;
  }

  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  bool parse_string(std::string& out) {
    ++pos_; // opening quote
    out.clear();
    for (;;) {
      if (pos_ >= text_.size())
        return fail("unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20)
        return fail("control character inside a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size())
        return fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4(cp))
          return false;
        if (cp >= 0xd800 && cp <= 0xdbff) {
          uint32_t low = 0;
          if (text_.substr(pos_, 2) != "\\u")
            return fail("unpaired surrogate in a \\u escape");
          pos_ += 2;
          if (!hex4(low))
            return false;
          if (low < 0xdc00 || low > 0xdfff)
            return fail("invalid low surrogate in a \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          return fail("unpaired surrogate in a \\u escape");
        }
        append_utf8(out, cp);
        break;
      }
      default:
        return fail(fmt::format("invalid escape '\\{}'", printable(e)));
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (s.size() - i < len)
      return i;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80)
        return i;
      cp = (cp << 6) | (cc & 0x3f);
    }
    bool overlong =
      (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

// A JSON number that must be a non-negative integer below 2^63.
std::optional<int64_t> to_index(const json_value& v) {
  if (v.type != json_value::kind::number || v.text.empty() || v.text.size() > 19)
    return std::nullopt;
  uint64_t n = 0; // 19 decimal digits always fit in 64 unsigned bits
  for (char c : v.text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return static_cast<int64_t>(n);
}

} // namespace

// -- reading -----------------------------------------------------------------

namespace {

struct tensor_entry {
  st_tensor tensor;
  uint64_t begin = 0;
  uint64_t end = 0;
};

result<tensor_entry> parse_entry(const std::string& source, const std::string& name,
                                 const json_value& v) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::corrupt_file, "{}: tensor '{}': {}", source, name, what);
  };
  if (name.empty())
    return make_error(errc::corrupt_file, "{}: a tensor has an empty name", source);
  if (v.type != json_value::kind::object)
    return bad(
      fmt::format("expected an object with dtype, shape and data_offsets, got {}",
                  kind_name(v.type)));
  const json_value* dtype = nullptr;
  const json_value* shape = nullptr;
  const json_value* offsets = nullptr;
  for (auto& [key, value] : v.members) {
    if (key == "dtype")
      dtype = &value;
    else if (key == "shape")
      shape = &value;
    else if (key == "data_offsets")
      offsets = &value;
    else
      return bad(
        fmt::format("unknown field \"{}\" (expected dtype, shape, data_offsets)", key));
  }
  if (!dtype || !shape || !offsets)
    return bad(fmt::format("missing field \"{}\"", !dtype   ? "dtype"
                                                   : !shape ? "shape"
                                                            : "data_offsets"));
  if (dtype->type != json_value::kind::string)
    return bad(fmt::format("dtype must be a string, got {}", kind_name(dtype->type)));
  auto type = parse_dtype(dtype->text);
  if (!type)
    return bad(fmt::format("unknown dtype \"{}\" (expected one of F64, F32, F16, BF16, "
                           "I64, I32, I16, I8, U8, BOOL)",
                           dtype->text));
  tensor_entry out;
  out.tensor.name = name;
  out.tensor.dtype = *type;
  if (shape->type != json_value::kind::array)
    return bad(fmt::format("shape must be an array, got {}", kind_name(shape->type)));
  for (size_t i = 0; i < shape->items.size(); ++i) {
    auto d = to_index(shape->items[i]);
    if (!d)
      return bad(fmt::format("shape[{}] must be a non-negative integer, got {}", i,
                             shape->items[i].type == json_value::kind::number
                               ? shape->items[i].text
                               : kind_name(shape->items[i].type)));
    out.tensor.shape.push_back(*d);
  }
  if (offsets->type != json_value::kind::array || offsets->items.size() != 2)
    return bad("data_offsets must be an array [begin, end]");
  auto begin = to_index(offsets->items[0]);
  auto end = to_index(offsets->items[1]);
  if (!begin || !end)
    return bad("data_offsets must hold two non-negative integers");
  if (*begin > *end)
    return bad(fmt::format("data_offsets [{}, {}] end before they begin", *begin, *end));
  out.begin = static_cast<uint64_t>(*begin);
  out.end = static_cast<uint64_t>(*end);
  auto numel = checked_numel(out.tensor.shape);
  auto size = element_size(*type);
  if (!numel || *numel > std::numeric_limits<uint64_t>::max() / size)
    return bad(
      fmt::format("shape [{}] has too many elements", fmt::join(out.tensor.shape, ", ")));
  if (*numel * size != out.end - out.begin)
    return bad(
      fmt::format("shape [{}] of {} needs {} bytes, data_offsets [{}, {}] hold {}",
                  fmt::join(out.tensor.shape, ", "), to_string(*type), *numel * size,
                  out.begin, out.end, out.end - out.begin));
  return out;
}

} // namespace

result<st_file> parse_safetensors(const std::byte* data, size_t size,
                                  const std::string& source) {
  if (size < 8)
    return make_error(errc::corrupt_file,
                      "{}: {} bytes is too short for a safetensors file (expected at "
                      "least the 8-byte header length)",
                      source, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  // A safetensors file is an 8-byte header length and a JSON object: a
  // file whose ninth byte cannot open one, or whose length is implausible,
  // is some other file (a config, a PyTorch .pt) rather than a damaged one.
  if (size > 8 && static_cast<char>(data[8]) != '{') {
    const auto c = static_cast<unsigned char>(data[8]);
    return make_error(
      errc::corrupt_file,
      "{}: not a safetensors file: byte 8 is {}, where a safetensors "
      "file's header, a JSON object, starts with '{{' (the first 8 bytes, "
      "read as the header length, give {})",
      source,
      c >= 0x20 && c < 0x7f ? fmt::format("'{}'", static_cast<char>(c))
                            : fmt::format("0x{:02x}", c),
      header_len);
  }
  if (header_len > st_max_header_bytes)
    return make_error(errc::corrupt_file,
                      "{}: not a safetensors file: its first 8 bytes, read as the header "
                      "length, give {}, which exceeds the limit of {} bytes",
                      source, header_len, st_max_header_bytes);
  if (header_len > size - 8)
    return make_error(errc::corrupt_file,
                      "{}: header length {} goes beyond the end of the file ({} bytes "
                      "after the length field)",
                      source, header_len, size - 8);
  std::string_view header(reinterpret_cast<const char*>(data) + 8,
                          static_cast<size_t>(header_len));
  if (header.empty() || header.front() != '{')
    return make_error(errc::corrupt_file,
                      "{}: the header must be a JSON object starting with '{{'", source);
  if (auto bad = find_invalid_utf8(header); bad != std::string_view::npos)
    return make_error(errc::corrupt_file, "{}: invalid UTF-8 at byte {} of the header",
                      source, bad);
  json_value root;
  json_parser parser(header);
  if (!parser.parse_document(root))
    return make_error(errc::corrupt_file, "{}: malformed JSON header: {}", source,
                      parser.error());

  st_file out;
  std::vector<tensor_entry> entries;
  for (auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.type != json_value::kind::object)
        return make_error(errc::corrupt_file,
                          "{}: __metadata__ must be an object of strings, got {}", source,
                          kind_name(value.type));
      for (auto& [mkey, mvalue] : value.members) {
        if (mvalue.type != json_value::kind::string)
          return make_error(errc::corrupt_file,
                            "{}: __metadata__ entry \"{}\" must be a string, got {}",
                            source, mkey, kind_name(mvalue.type));
        out.metadata.emplace(mkey, mvalue.text);
      }
      continue;
    }
    auto entry = parse_entry(source, key, value);
    if (!entry)
      return entry.err();
    entries.push_back(std::move(*entry));
  }

  // The tensors must tile the data buffer: sorted by offset, each starts
  // where the previous one ended and the last ends at the end of the file.
  uint64_t buffer_size = size - 8 - header_len;
  std::stable_sort(entries.begin(), entries.end(), [](auto& a, auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected_begin = 0;
  const std::string* previous = nullptr;
  for (auto& e : entries) {
    const auto& name = e.tensor.name;
    if (e.end > buffer_size)
      return make_error(
        errc::corrupt_file,
        "{}: tensor '{}': data_offsets [{}, {}] go beyond the data buffer "
        "of {} bytes",
        source, name, e.begin, e.end, buffer_size);
    if (e.begin < expected_begin)
      return make_error(
        errc::corrupt_file,
        "{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}', which "
        "ends at {}",
        source, name, e.begin, e.end, *previous, expected_begin);
    if (e.begin > expected_begin)
      return make_error(errc::corrupt_file,
                        "{}: tensor '{}': data_offsets [{}, {}] leave a gap of {} bytes "
                        "after {} (expected it to begin at {})",
                        source, name, e.begin, e.end, e.begin - expected_begin,
                        previous ? "tensor '" + *previous + "'" : "the header",
                        expected_begin);
    expected_begin = e.end;
    previous = &name;
  }
  if (expected_begin != buffer_size)
    return make_error(
      errc::corrupt_file,
      "{}: the tensors cover {} bytes of the {}-byte data buffer (expected "
      "them to cover all of it)",
      source, expected_begin, buffer_size);

  const std::byte* buffer = data + 8 + header_len;
  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    e.tensor.bytes.assign(buffer + e.begin, buffer + e.end);
    out.tensors.push_back(std::move(e.tensor));
  }
  return out;
}

result<st_file> read_safetensors(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return make_error(err == ENOENT ? errc::not_found : errc::io_error,
                      "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(errc::io_error, "{}: not a regular file", path);
  }
  std::vector<std::byte> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return make_error(errc::io_error, "{}: read failed after {} of {} bytes: {}", path,
                        done, bytes.size(),
                        n == 0 ? "unexpected end of file" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

// -- writing -----------------------------------------------------------------

result<std::vector<std::byte>> serialize_safetensors(const st_file& file) {
  // Keys in file order: the metadata first, then the tensors as given.
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    auto& meta = root["__metadata__"] = nlohmann::ordered_json::object();
    for (auto& [key, value] : file.metadata)
      meta[key] = value;
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& t = file.tensors[i];
    if (t.name.empty() || t.name == "__metadata__")
      return make_error(errc::invalid_argument, "tensor {} has the reserved name '{}'", i,
                        t.name);
    if (root.contains(t.name))
      return make_error(errc::invalid_argument, "tensor '{}' appears twice", t.name);
    auto numel = checked_numel(t.shape);
    if (!numel || *numel * element_size(t.dtype) != t.bytes.size())
      return make_error(errc::invalid_argument,
                        "tensor '{}': shape [{}] of {} does not match its {} bytes",
                        t.name, fmt::join(t.shape, ", "), to_string(t.dtype),
                        t.bytes.size());
    nlohmann::ordered_json entry;
    entry["dtype"] = to_string(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.bytes.size()};
    root[t.name] = std::move(entry);
    offset += t.bytes.size();
  }
  std::string header;
  try {
    header = root.dump();
  } catch (const nlohmann::json::type_error& e) {
    // A name or metadata string that is not UTF-8: no reader would accept it.
    return make_error(
      errc::invalid_argument,
      "safetensors header: a tensor name or metadata entry is not UTF-8 ({})", e.what());
  }
  // Pad with spaces so that the data buffer starts 8-byte aligned.
  while ((8 + header.size()) % 8 != 0)
    header += ' ';

  std::vector<std::byte> out(8 + header.size() + offset);
  uint64_t header_len = header.size();
  std::memcpy(out.data(), &header_len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  auto* cursor = out.data() + 8 + header.size();
  for (auto& t : file.tensors) {
    if (!t.bytes.empty())
      std::memcpy(cursor, t.bytes.data(), t.bytes.size());
    cursor += t.bytes.size();
  }
  return out;
}

namespace {

status write_all(int fd, const std::byte* data, size_t size, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    auto n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return make_error(errc::io_error, "{}: write failed: {}", path,
                        std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

std::string parent_folder(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

status write_safetensors(const std::string& path, const st_file& file) {
  auto image = serialize_safetensors(file);
  if (!image)
    return make_error(image.err().code, "{}: {}", path, image.err().message);
  return write_file_atomically(path, image->data(), image->size());
}

status write_file_atomically(const std::string& path, const void* data, size_t size) {
  static std::atomic<uint64_t> counter{0};
  auto tmp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_error, "{}: cannot create: {}", tmp, std::strerror(errno));
  auto written = write_all(fd, static_cast<const std::byte*>(data), size, tmp);
  if (written && ::fsync(fd) != 0)
    written =
      make_error(errc::io_error, "{}: fsync failed: {}", tmp, std::strerror(errno));
  if (::close(fd) != 0 && written)
    written =
      make_error(errc::io_error, "{}: close failed: {}", tmp, std::strerror(errno));
  if (written && ::rename(tmp.c_str(), path.c_str()) != 0)
    written = make_error(errc::io_error, "{}: cannot rename {} over it: {}", path, tmp,
                         std::strerror(errno));
  if (!written) {
    ::unlink(tmp.c_str());
    return written;
  }
  // Make the rename itself durable.
  int dir = ::open(parent_folder(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return ok_status();
}

} // namespace troupe::learners
