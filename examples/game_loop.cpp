// A game that trains its own agents while it runs: the game drives.
//
// Catcher (examples/catcher.hpp) runs with several lanes, one agent slot per
// lane, in a fixed-timestep loop: 60 frames per second in real time by
// default, as fast as it goes with --unthrottled. Every frame each lane asks
// the agent for an action (act() answers at once from the newest policy),
// steps its game and reports the outcome; training runs on troupe's threads
// in the same process and the policy the lanes act with improves while the
// game plays. When stdout is a terminal, the first lane is drawn.
//
//   game_loop [--seconds S] [--frames N] [--lanes L] [--unthrottled] [--no-draw]
//             [--output-dir DIR]
//
// At the end it prints act()'s latency (p50, p99, max), the frames that
// missed their deadline, the policy version and the mean round return.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <troupe/troupe.hpp>

#include "catcher.hpp"
#include "catcher_env.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  double seconds = 60;
  long frames = 0; // 0: until `seconds` have passed
  size_t lanes = 32;
  bool unthrottled = false;
  bool draw = true;
  std::string output_dir = "runs";
};

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "game_loop: %s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--unthrottled") {
      o.unthrottled = true;
    } else if (a == "--no-draw") {
      o.draw = false;
    } else if (a == "--seconds") {
      if (!(v = value("--seconds")) || (o.seconds = std::atof(v)) <= 0)
        return false;
    } else if (a == "--frames") {
      if (!(v = value("--frames")) || (o.frames = std::atol(v)) <= 0)
        return false;
    } else if (a == "--lanes") {
      if (!(v = value("--lanes")) || (o.lanes = std::strtoul(v, nullptr, 10)) == 0)
        return false;
    } else if (a == "--output-dir") {
      if (!(v = value("--output-dir")))
        return false;
      o.output_dir = v;
    } else {
      std::fprintf(stderr,
                   "game_loop: unknown option '%s'\nusage: game_loop [--seconds S] "
                   "[--frames N] [--lanes L] [--unthrottled] [--no-draw] "
                   "[--output-dir DIR]\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

std::string config_text(const options& o) {
  // PPO with the lanes' transitions gathered into small batches (4 segments
  // of 32 frames), so that at 60 frames per second the policy improves within
  // a minute; one learner.
  return "[run]\n"
         "name = \"catcher_game_loop\"\n"
         "seed = 7\n"
         "device = \"cpu\"\n"
         "output_dir = \"" +
         o.output_dir +
         "\"\n"
         "checkpoint_every_updates = 0\n"
         "[env]\n"
         "id = \"Catcher-v0\"\n"
         "num_envs = 4\n"
         "[algo]\n"
         "name = \"ppo\"\n"
         "mode = \"async\"\n"
         "total_env_steps = 100000000\n"
         "num_steps = 32\n"
         "learning_rate = 1e-3\n"
         "anneal_lr = false\n"
         "[algo.ppo]\n"
         "num_minibatches = 2\n"
         "update_epochs = 4\n";
}

double percentile(std::vector<double>& xs, double q) {
  if (xs.empty())
    return NAN;
  const size_t k =
    std::min(xs.size() - 1, static_cast<size_t>(q * (xs.size() - 1) + 0.5));
  std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(k), xs.end());
  return xs[k];
}

// The mean round return as printed: "-" until a round has ended.
std::string mean_text(double mean) {
  if (std::isnan(mean))
    return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", mean);
  return text;
}

void draw(const catcher::lane& l, const troupe::progress& p, double mean_return,
          long frame) {
  constexpr int rows = 12, cols = 40;
  char grid[rows][cols + 1];
  for (auto& row : grid) {
    std::memset(row, ' ', cols);
    row[cols] = 0;
  }
  auto col = [&](float x) {
    return std::clamp(static_cast<int>(x * (cols - 1) + 0.5f), 0, cols - 1);
  };
  const int fy = std::clamp(static_cast<int>((1 - l.fruit_y) * (rows - 2)), 0, rows - 2);
  grid[fy][col(l.fruit_x)] = 'o';
  for (int c = col(l.paddle - catcher::paddle_half);
       c <= col(l.paddle + catcher::paddle_half); ++c)
    grid[rows - 1][c] = '=';
  std::printf("\x1b[H");
  for (auto& row : grid)
    std::printf("|%s|\x1b[K\n", row);
  std::printf(
    "frame %ld  caught %d  missed %d  policy v%llu  mean round return %s\x1b[K\n", frame,
    l.caught, l.missed, static_cast<unsigned long long>(p.policy_version),
    mean_text(mean_return).c_str());
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o))
    return 2;
  const bool terminal = o.draw && isatty(STDOUT_FILENO);

  // The game steps its lanes itself: troupe needs Catcher's spaces only.
  if (auto s = catcher::register_catcher_spaces(); !s.ok()) {
    std::fprintf(stderr, "game_loop: %s\n", s.err().message.c_str());
    return 1;
  }
  auto opened = troupe::session::open_toml(config_text(o), "game_loop.toml");
  if (!opened.ok()) {
    std::fprintf(stderr, "game_loop: %s\n", opened.err().message.c_str());
    return 2;
  }
  troupe::session session = std::move(*opened);
  auto made = session.make_agent(o.lanes);
  if (!made.ok()) {
    std::fprintf(stderr, "game_loop: %s\n", made.err().message.c_str());
    return 1;
  }
  troupe::agent agent = *made;
  if (auto s = session.start(); !s.ok()) {
    std::fprintf(stderr, "game_loop: %s\n", s.err().message.c_str());
    return 1;
  }

  std::vector<catcher::lane> lanes(o.lanes);
  std::vector<float> obs(o.lanes * catcher::obs_dim);
  std::vector<double> round_return(o.lanes, 0.0);
  std::deque<double> last_returns; // the last 100 finished rounds, all lanes
  for (size_t i = 0; i < o.lanes; ++i) {
    lanes[i].gen.s = 1000 + i;
    lanes[i].reset();
  }
  std::vector<double> latency_us;
  latency_us.reserve(1 << 20);
  long missed_frames = 0, frame = 0;
  const auto period = std::chrono::duration_cast<clock_type::duration>(
    std::chrono::duration<double>(1.0 / 60));
  const auto start = clock_type::now();
  auto deadline = start + period;
  auto next_print = start + std::chrono::seconds(1);
  if (terminal)
    std::printf("\x1b[2J");

  for (;; ++frame) {
    if (o.frames ? frame >= o.frames
                 : clock_type::now() - start >= std::chrono::duration<double>(o.seconds))
      break;
    for (size_t i = 0; i < o.lanes; ++i) {
      float* x = &obs[i * catcher::obs_dim];
      lanes[i].observe(x);
      float action = 1;
      const auto t0 = clock_type::now();
      auto acted = agent.act(i, x, &action);
      latency_us.push_back(
        std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
      if (!acted.ok()) {
        std::fprintf(stderr, "game_loop: %s\n", acted.err().message.c_str());
        return 1;
      }
      bool over = false;
      const float r = lanes[i].step(static_cast<int>(action), over);
      round_return[i] += r;
      const bool terminated = over && lanes[i].fruits >= catcher::fruits_per_round;
      float final_obs[catcher::obs_dim];
      lanes[i].observe(final_obs);
      if (auto s = agent.report(i, r, terminated, over && !terminated, final_obs);
          !s.ok()) {
        std::fprintf(stderr, "game_loop: %s\n", s.err().message.c_str());
        return 1;
      }
      if (over) {
        last_returns.push_back(round_return[i]);
        if (last_returns.size() > 100)
          last_returns.pop_front();
        round_return[i] = 0;
        lanes[i].reset();
      }
    }
    double mean = NAN;
    if (!last_returns.empty()) {
      mean = 0;
      for (double r : last_returns)
        mean += r;
      mean /= static_cast<double>(last_returns.size());
    }
    const auto now = clock_type::now();
    if (terminal && (frame % 2 == 0))
      draw(lanes[0], session.progress(), mean, frame);
    else if (!terminal && now >= next_print) {
      const auto p = session.progress();
      std::printf("%6.1f s  frame %ld  policy v%llu  mean round return (last 100) %s  "
                  "dropped %llu\n",
                  std::chrono::duration<double>(now - start).count(), frame,
                  static_cast<unsigned long long>(p.policy_version),
                  mean_text(mean).c_str(),
                  static_cast<unsigned long long>(agent.dropped()));
      std::fflush(stdout);
      next_print += std::chrono::seconds(1);
    }
    if (!o.unthrottled) {
      if (clock_type::now() > deadline)
        ++missed_frames;
      else
        std::this_thread::sleep_until(deadline);
      deadline += period;
    }
  }

  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  double mean = NAN;
  if (!last_returns.empty()) {
    mean = 0;
    for (double r : last_returns)
      mean += r;
    mean /= static_cast<double>(last_returns.size());
  }
  const size_t calls = latency_us.size();
  const double p50 = percentile(latency_us, 0.50), p99 = percentile(latency_us, 0.99);
  const double max =
    latency_us.empty() ? NAN : *std::max_element(latency_us.begin(), latency_us.end());
  // close() stops training, writes the final checkpoint and gives the final progress.
  auto closed = session.close();
  const troupe::progress p = closed.ok() ? *closed : session.progress();
  std::printf("\nframes %ld in %.1f s (%s)\n", frame, seconds,
              o.unthrottled ? "unthrottled" : "60 per second");
  std::printf("act() latency over %zu calls: p50 %.2f us, p99 %.2f us, max %.1f us\n",
              calls, p50, p99, max);
  std::printf("frames that missed their deadline: %ld\n", missed_frames);
  std::printf("policy version %llu, updates %llu, transitions dropped %llu\n",
              static_cast<unsigned long long>(p.policy_version),
              static_cast<unsigned long long>(p.updates),
              static_cast<unsigned long long>(p.transitions_dropped));
  std::printf("mean round return of the last %zu rounds: %s (random play: about -7)\n",
              last_returns.size(), mean_text(mean).c_str());
  if (!closed.ok()) {
    std::fprintf(stderr, "game_loop: %s\n", closed.err().message.c_str());
    return 1;
  }
  return 0;
}
