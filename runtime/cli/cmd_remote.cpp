// `troupe remote keygen PATH`: a CURVE key pair for the remote environment
// server or one of its clients (docs/protocol.md, "Security"), written by
// libzmq's zmq_curve_keypair: the secret key to PATH (mode 0600), the public
// key to PATH.pub, each as 40 Z85 characters on one line.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <zmq.h>

#include "runtime/cli/commands.hpp"

namespace troupe::runtime {

namespace {

// Writes `text` to a new file `path` (never over an existing one) with `mode`;
// an error message, empty on success. A file half written is removed.
std::string write_new(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0)
    return fmt::format("cannot create '{}': {}{}", path, std::strerror(errno),
                       errno == EEXIST ? " (keys are never overwritten: remove it or "
                                         "choose another path)"
                                       : "");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return fmt::format("cannot write '{}': {}", path, why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(path.c_str());
    return fmt::format("cannot write '{}': {}", path, why);
  }
  return {};
}

} // namespace

int cmd_remote_keygen(const args_t& args) {
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-')
    return fail(exit_bad_input,
                "usage: troupe remote keygen PATH (writes the secret key to PATH and the "
                "public key to PATH.pub)");
  const std::string secret_path = args[0];
  const std::string public_path = secret_path + ".pub";
  if (!zmq_has("curve"))
    return fail(exit_failure, "this libzmq was built without CURVE: no keys can be made");
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return fail(exit_failure,
                fmt::format("zmq_curve_keypair failed: {}", zmq_strerror(zmq_errno())));
  // The public file first: a secret without its public half is never left.
  if (auto why = write_new(public_path, std::string(pub) + "\n", 0644); !why.empty())
    return fail(exit_bad_input, why);
  if (auto why = write_new(secret_path, std::string(sec) + "\n", 0600); !why.empty()) {
    ::unlink(public_path.c_str());
    return fail(exit_bad_input, why);
  }
  std::printf("troupe: CURVE secret key written to %s (mode 0600), public key %s to %s\n",
              secret_path.c_str(), pub, public_path.c_str());
  return 0;
}

} // namespace troupe::runtime
