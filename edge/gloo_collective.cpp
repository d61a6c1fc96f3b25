#include "edge/gloo_collective.hpp"

#include <exception>
#include <utility>

#include <fmt/format.h>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/address.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace troupe::edge {

status memory_store::set(const std::string& key, const std::vector<char>& value) {
  {
    base::mutex_lock lock(mtx_);
    values_[key] = value;
  }
  changed_.notify_all();
  return {};
}

result<std::vector<char>> memory_store::get(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  base::mutex_lock lock(mtx_);
  const bool found = lock.wait_for(
    changed_, timeout, [&]() TROUPE_REQUIRES(mtx_) { return values_.count(key) > 0; });
  if (!found)
    return make_error(errc::unavailable, "rendezvous: key '{}' was not set within {} ms",
                      key, timeout.count());
  return values_[key];
}

namespace {

// Gloo's store interface over ours: Gloo throws, ours returns errors.
class store_adapter final : public gloo::rendezvous::Store {
public:
  store_adapter(rendezvous_store& inner, std::chrono::milliseconds timeout)
    : inner_(inner), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (auto s = inner_.set(key, data); !s.ok())
      throw gloo::IoException(s.err().message);
  }

  std::vector<char> get(const std::string& key) override {
    auto value = inner_.get(key, timeout_);
    if (!value.ok())
      throw gloo::IoException(value.err().message);
    return std::move(value).value();
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      auto value = inner_.get(key, std::max(left, std::chrono::milliseconds(0)));
      if (!value.ok())
        throw gloo::IoException(value.err().message);
    }
  }

private:
  rendezvous_store& inner_;
  std::chrono::milliseconds timeout_;
};

// Gloo's messages span several lines and start with the source file; the
// first line with the reason is what a reader needs, the rest follows.
std::string gloo_reason(const std::exception& e) {
  std::string text = e.what();
  for (auto& c : text)
    if (c == '\n')
      c = ' ';
  return text;
}

// In sync mode a pair's read blocks in recv(2) holding the pair's lock, so
// closing the pair from another thread waits for that read to time out;
// shutting its socket down ends the read at once. Gloo keeps the socket to
// itself (and Debian's package lacks a header its pair.h needs), so the socket
// is found by its local address: each pair's is unique, since the listener an
// accepted connection shares its port with is closed by then.
bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family)
    return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// A dup(2) of this process's one connected socket whose local address is
// `self`, or -1 when there is not exactly one.
int dup_socket_at(const sockaddr_storage& self) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr)
    return -1;
  int found = -1;
  int matches = 0;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir))
      continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) !=
          0 ||
        !same_endpoint(local, self))
      continue;
    sockaddr_storage peer{};
    len = sizeof peer;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &len) !=
        0)
      continue; // a listener, not a connection
    ++matches;
    found = static_cast<int>(fd);
  }
  ::closedir(dir);
  return matches == 1 ? ::dup(found) : -1;
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a peer that
// shut its end down (an aborted group) raises SIGPIPE, whose default action
// ends the process. For the length of one operation the calling thread blocks
// SIGPIPE (the write then fails with EPIPE, which Gloo reports), and a SIGPIPE
// left pending on the thread is taken before the mask is restored. The
// process's disposition of SIGPIPE, which belongs to the program, is left
// alone.
class sigpipe_blocked {
public:
  sigpipe_blocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &before_);
  }
  ~sigpipe_blocked() {
    if (sigismember(&before_, SIGPIPE))
      return; // blocked before: whatever is pending stays the program's
    const timespec now{0, 0};
    while (::sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    ::pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

private:
  sigset_t pipe_{};
  sigset_t before_{};
};

// dup(2)s of a group's sockets, closed with it.
struct socket_dups {
  std::vector<int> fds;
  socket_dups() = default;
  socket_dups(const socket_dups&) = delete;
  socket_dups& operator=(const socket_dups&) = delete;
  ~socket_dups() {
    for (const int fd : fds)
      ::close(fd);
  }
};

class gloo_collective final : public actors::collective {
public:
  gloo_collective(std::shared_ptr<gloo::Context> ctx, std::string label,
                  std::unique_ptr<socket_dups> sockets)
    : ctx_(std::move(ctx)), label_(std::move(label)), sockets_(std::move(sockets)) {}

  size_t rank() const override { return static_cast<size_t>(ctx_->rank); }
  size_t size() const override { return static_cast<size_t>(ctx_->size); }

  std::string describe() const override {
    return fmt::format("rank {} of {}, {}", ctx_->rank, ctx_->size, label_);
  }

  status allreduce_sum(double* data, size_t count) override {
    if (count == 0 || ctx_->size == 1)
      return {};
    const sigpipe_blocked no_sigpipe;
    try {
      // Gloo's halving-doubling over a buffer registered once per size: a
      // reduce-scatter then an all-gather, so every member ends with the same
      // bytes; each step's reads block on this thread (pairs in sync mode),
      // with no hop through the transport's event-loop thread.
      if (!reduce_ || reduce_count_ != count) {
        reduce_.reset();
        reduce_buf_.assign(count, 0.0);
        reduce_ = std::make_unique<gloo::AllreduceHalvingDoubling<double>>(
          ctx_, std::vector<double*>{reduce_buf_.data()}, static_cast<int>(count));
        reduce_count_ = count;
      }
      std::copy(data, data + count, reduce_buf_.begin());
      reduce_->run();
      std::copy(reduce_buf_.begin(), reduce_buf_.end(), data);
    } catch (const std::exception& e) {
      return make_error(errc::unavailable,
                        "gloo all-reduce of {} doubles ({}) failed: {}", count,
                        describe(), gloo_reason(e));
    }
    return {};
  }

  status broadcast(void* data, size_t bytes, size_t root) override {
    if (root >= size())
      return make_error(errc::invalid_argument,
                        "gloo broadcast ({}): root {} is not a member", describe(), root);
    if (bytes == 0 || ctx_->size == 1)
      return {};
    const sigpipe_blocked no_sigpipe;
    try {
      gloo::BroadcastOneToAll<char> one_to_all(
        ctx_, std::vector<char*>{static_cast<char*>(data)}, bytes,
        static_cast<int>(root));
      one_to_all.run();
    } catch (const std::exception& e) {
      return make_error(errc::unavailable,
                        "gloo broadcast of {} bytes from rank {} ({}) failed: {}", bytes,
                        root, describe(), gloo_reason(e));
    }
    return {};
  }

  void abort() override {
    // Our duplicates of the pairs' sockets stay open until the destructor,
    // so the numbers cannot have been reused by then: a read blocked on this
    // or another thread returns, and the peers see the connection end.
    for (const int fd : sockets_->fds)
      ::shutdown(fd, SHUT_RDWR);
    try {
      ctx_->closeConnections();
    } catch (const std::exception&) {
      // Already closed, or a connection that failed: nothing is left open.
    }
  }

private:
  std::shared_ptr<gloo::Context> ctx_;
  std::string label_;
  std::unique_ptr<socket_dups> sockets_; // the pairs' sockets, for abort()
  std::vector<double> reduce_buf_;       // the buffer registered with reduce_
  std::unique_ptr<gloo::AllreduceHalvingDoubling<double>>
    reduce_; // over reduce_count_ doubles
  size_t reduce_count_ = 0;
};

} // namespace

result<std::unique_ptr<actors::collective>>
connect_gloo_group(rendezvous_store& store, const gloo_group_options& o) {
  const std::string label = o.label.empty() ? o.prefix : o.label;
  if (o.size == 0 || o.rank >= o.size)
    return make_error(errc::invalid_argument, "gloo group '{}': rank {} of {} members",
                      label, o.rank, o.size);
  if (o.interface_host.empty() || o.interface_host == "0.0.0.0" ||
      o.interface_host == "::" || o.interface_host == "*")
    return make_error(errc::invalid_argument,
                      "gloo group '{}': the data interface must be one address, not '{}'",
                      label, o.interface_host);
  const sigpipe_blocked no_sigpipe;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.interface_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(o.rank),
                                                           static_cast<int>(o.size));
    ctx->setTimeout(o.timeout);
    store_adapter adapter(store, o.timeout);
    gloo::rendezvous::PrefixStore prefixed(o.prefix, adapter);
    ctx->connectFullMesh(prefixed, device);
    auto sockets = std::make_unique<socket_dups>();
    for (int i = 0; i < ctx->size; ++i) {
      if (i == ctx->rank)
        continue;
      auto& pair = ctx->getPair(i);
      pair->setSync(true, false); // blocking reads, no busy polling
      const auto* self =
        dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address());
      const int fd = self ? dup_socket_at(self->getSockaddr()) : -1;
      if (fd < 0)
        return make_error(errc::unavailable,
                          "gloo group '{}': rank {} of {} could not keep the socket to "
                          "rank {} for aborting",
                          label, o.rank, o.size, i);
      sockets->fds.push_back(fd);
    }
    return std::unique_ptr<actors::collective>(
      std::make_unique<gloo_collective>(std::move(ctx), label, std::move(sockets)));
  } catch (const std::exception& e) {
    return make_error(errc::unavailable,
                      "gloo group '{}': rank {} of {} could not connect (data interface "
                      "{}): {}",
                      label, o.rank, o.size, o.interface_host, gloo_reason(e));
  }
}

} // namespace troupe::edge
