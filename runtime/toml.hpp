// toml++, included by every troupe source that parses TOML, with its
// internal assertions off also in builds that keep assertions (sanitizer and
// fuzz builds). toml++ 3.3.0 (Debian 12) asserts a precondition of
// parser::parse_key that malformed table headers such as "[`x]" or "[[[1]]]"
// violate (upstream: marzer/tomlplusplus pull request 301); with the
// assertion off, the parser reports a normal parse error for them, as it
// does in release builds, and troupe turns that into a message with the line.
#pragma once

#define TOML_ASSERT(expr) static_cast<void>(0)
#include <toml++/toml.h>
