// Catcher: a small game written for the embedding examples. Each lane has a
// paddle at the bottom and one piece of fruit falling from the top; the
// paddle moves left, stays or moves right. A catch is worth +1, a miss -1;
// an episode is a round of `fruits_per_round` pieces of fruit.
//
// The game is plain C-compatible arithmetic on purpose: examples/game_loop.c
// and examples/game_loop.py implement the same rules, so that the three
// examples drive the same game through the three interfaces.
#pragma once

#include <cmath>
#include <cstdint>

namespace catcher {

inline constexpr int obs_dim = 4;     ///< paddle x, fruit x - paddle x, fruit y, fruit vx
inline constexpr int num_actions = 3; ///< left, stay, right
inline constexpr float paddle_half = 0.08f; ///< half the paddle's width
inline constexpr float paddle_speed = 0.035f;
inline constexpr float fall_speed =
  0.03f; ///< fruit falls the field's height in ~33 frames
inline constexpr int fruits_per_round = 10;
/// Frames in one round at most (the time limit the config states).
inline constexpr int max_frames = 400;

/// A small generator (splitmix64) so that the game needs nothing else.
struct rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>((next() >> 40) * (1.0 / 16777216.0));
  }
};

/// One lane: a paddle, a piece of fruit and the round's counters.
struct lane {
  float paddle = 0.5f, fruit_x = 0.5f, fruit_y = 1.0f, fruit_vx = 0.0f;
  int fruits = 0, frames = 0, caught = 0, missed = 0;
  rng gen{1};

  void drop_fruit() {
    fruit_x = gen.uniform(0.05f, 0.95f);
    fruit_y = 1.0f;
    fruit_vx = gen.uniform(-0.01f, 0.01f);
  }

  /// Starts a new round.
  void reset() {
    paddle = 0.5f;
    fruits = frames = 0;
    drop_fruit();
  }

  void observe(float* obs) const {
    obs[0] = paddle * 2 - 1;
    obs[1] = (fruit_x - paddle) * 2;
    obs[2] = fruit_y * 2 - 1;
    obs[3] = fruit_vx * 100;
  }

  /// Advances one frame with `action` (0 left, 1 stay, 2 right); returns the
  /// reward and sets `round_over` when the round's last fruit has landed or
  /// its frames ran out.
  float step(int action, bool& round_over) {
    paddle += static_cast<float>(action - 1) * paddle_speed;
    paddle = std::fmin(1.0f, std::fmax(0.0f, paddle));
    fruit_x += fruit_vx;
    if (fruit_x < 0 || fruit_x > 1) { // bounce off the walls
      fruit_vx = -fruit_vx;
      fruit_x = std::fmin(1.0f, std::fmax(0.0f, fruit_x));
    }
    fruit_y -= fall_speed;
    ++frames;
    float reward = 0;
    if (fruit_y <= 0) {
      const bool hit = std::fabs(fruit_x - paddle) <= paddle_half;
      reward = hit ? 1.0f : -1.0f;
      (hit ? caught : missed) += 1;
      ++fruits;
      drop_fruit();
    }
    round_over = fruits >= fruits_per_round || frames >= max_frames;
    return reward;
  }
};

} // namespace catcher
