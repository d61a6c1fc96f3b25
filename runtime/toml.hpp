// toml++ with its internal assertions off in every build, so that a malformed
// table header is a parse error with a line, never an abort
// (docs/design-notes.md, "runtime/").
#pragma once

#define TOML_ASSERT(expr) static_cast<void>(0)
#include <toml++/toml.h>
