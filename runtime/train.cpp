#include "runtime/train.hpp"

#include <chrono>

namespace troupe::runtime {

result<training_result> run_training(const config& cfg, const std::string& resume_dir,
                                     session_options options) {
  auto s = session::open(cfg, resume_dir, std::move(options));
  if (!s)
    return s.err();
  if (auto ok = s->start(); !ok)
    return ok.err();
  for (;;) {
    auto done = s->wait(std::chrono::seconds(1));
    if (!done)
      return done.err();
    if (*done)
      break;
  }
  return s->close();
}

} // namespace troupe::runtime
