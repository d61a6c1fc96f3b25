#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "runtime/cast.hpp"
#include "runtime/config.hpp"
#include "tests/cli_support.hpp"
#include "tests/seed.hpp"

using namespace troupe::runtime;
using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace {

std::string errors_of(const std::string& text,
                      const std::vector<std::string>& sets = {}) {
  auto cfg = parse_config(text, "cartpole.toml", sets);
  REQUIRE_FALSE(cfg.has_value());
  CHECK(cfg.err().code == troupe::errc::bad_config);
  return cfg.err().message;
}

} // namespace

TEST_CASE("a valid file resolves every option, with file values and their lines") {
  auto cfg = parse_config("[run]\nname = \"exp\"\nseed = 42\n\n[stats]\nmode = \"ema\"\n"
                          "momentum = 0.9\n",
                          "exp.toml");
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_string("run.name") == "exp");
  CHECK(cfg->get_int("run.seed") == 42);
  CHECK(cfg->get_string("stats.mode") == "ema");
  CHECK(cfg->get_float("stats.momentum") == 0.9);
  CHECK(cfg->origin("run.seed") == "exp.toml:3");
  CHECK(cfg->get_string("run.device") == "auto");
  CHECK(cfg->origin("run.device") == "default");
}

TEST_CASE("an unknown key names file, line and the nearest valid key") {
  auto msg = errors_of("[run]\nseed = 1\n\n[stats]\nmode = \"ema\"\n\nmomentun = 0.9\n");
  CHECK(msg ==
        "cartpole.toml:7: unknown key 'stats.momentun' (did you mean 'stats.momentum'?)");
}

TEST_CASE("stats.epsilon is refused in a file and in --set, saying to write "
          "model.obs_norm_eps, the one epsilon of observation normalization") {
  auto msg = errors_of("[stats]\nmode = \"ema\"\nepsilon = 1e-6\n");
  CHECK(msg.find("cartpole.toml:3: unknown key 'stats.epsilon' (removed:") !=
        std::string::npos);
  CHECK(msg.find("write model.obs_norm_eps instead") != std::string::npos);
  msg = errors_of("", {"stats.epsilon=1e-6"});
  CHECK(msg.find("--set stats.epsilon=1e-6: unknown key 'stats.epsilon' (removed:") !=
        std::string::npos);
  CHECK(msg.find("write model.obs_norm_eps instead") != std::string::npos);
  auto cfg = parse_config("[model]\nobs_norm_eps = 1e-6\n", "m.toml");
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_float("model.obs_norm_eps") == 1e-6);
  CHECK(find_option("stats.epsilon") == nullptr);
}

TEST_CASE("unknown sections and top-level keys are reported with their lines") {
  auto msg = errors_of("seed = 3\n[statz]\nmode = \"ema\"\n");
  CHECK(msg.find("cartpole.toml:1: unknown top-level key 'seed'") != std::string::npos);
  CHECK(
    msg.find("cartpole.toml:2: unknown section '[statz]' (did you mean '[stats]'?)") !=
    std::string::npos);
}

TEST_CASE("a wrong type names the expected type and the value given") {
  auto msg = errors_of("[run]\nseed = \"abc\"\n");
  CHECK(msg == "cartpole.toml:2: run.seed: expected an integer in [0, 4294967295], "
               "got string \"abc\"");
  msg = errors_of("[stats]\npublish_every_merges = 2.5\n");
  CHECK(msg.find("cartpole.toml:2: stats.publish_every_merges: expected an integer") ==
        0);
  CHECK(msg.find("got float 2.5") != std::string::npos);
}

TEST_CASE("an out-of-range value names the range and the value given") {
  auto msg = errors_of("[stats]\nmomentum = 1.0\n");
  CHECK(msg ==
        "cartpole.toml:2: stats.momentum: expected a float in [0, 1), got float 1");
  msg = errors_of("[run]\ndevice = \"gpu\"\n");
  CHECK(msg ==
        "cartpole.toml:2: run.device: expected one of \"auto\", \"cpu\", \"cuda\", "
        "got string \"gpu\"");
  msg = errors_of("[model]\nobs_norm_eps = 0\n");
  CHECK(msg.find("expected a float in (0, 1], got integer 0") != std::string::npos);
}

TEST_CASE("every problem of a file is reported, in file order") {
  auto msg = errors_of("[run]\nseed = -1\nname = 3\n[stats]\nmod = \"ema\"\n");
  auto a = msg.find(":2:"), b = msg.find(":3:"), c = msg.find(":5:");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  REQUIRE(c != std::string::npos);
  CHECK(a < b);
  CHECK(b < c);
}

TEST_CASE("invalid TOML syntax names the file and line") {
  auto cfg = parse_config("[run]\nseed = 1\nname = \"unterminated\n", "bad.toml");
  REQUIRE_FALSE(cfg.has_value());
  CHECK(cfg.err().message.rfind("bad.toml:3: invalid TOML", 0) == 0);
}

TEST_CASE("--set overrides are applied after the file and validated the same way") {
  auto cfg = parse_config(
    "[run]\nseed = 1\n", "a.toml",
    {"run.seed=7", "stats.mode=ema", "run.name=my run", "stats.momentum=0.5"});
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_int("run.seed") == 7);
  CHECK(cfg->origin("run.seed") == "--set");
  CHECK(cfg->get_string("stats.mode") == "ema");
  CHECK(cfg->get_string("run.name") == "my run");
  CHECK(cfg->get_float("stats.momentum") == 0.5);
}

TEST_CASE("a bad --set names the override, the key, the expectation and the value") {
  auto msg = errors_of("", {"run.seed=abc"});
  CHECK(msg == "--set run.seed=abc: run.seed: expected an integer in [0, 4294967295], "
               "got string \"abc\"");
  msg = errors_of("", {"stats.momentun=0.5"});
  CHECK(msg == "--set stats.momentun=0.5: unknown key 'stats.momentun' "
               "(did you mean 'stats.momentum'?)");
  msg = errors_of("", {"stats.momentum=1.5"});
  CHECK(msg.find("expected a float in [0, 1), got float 1.5") != std::string::npos);
  msg = errors_of("", {"run.seed"});
  CHECK(msg == "--set run.seed: expected section.key=value");
}

TEST_CASE("the resolved config printed as TOML parses back to the same values") {
  auto cfg =
    parse_config("[run]\nname = \"q\\\"uote\"\nseed = 99\n[stats]\nmomentum = 0.25\n",
                 "a.toml", {"stats.publish_interval_ms=0"});
  REQUIRE(cfg.has_value());
  auto again = parse_config(cfg->to_toml(), "resolved.toml");
  REQUIRE(again.has_value());
  CHECK(again->to_toml() == cfg->to_toml());
  CHECK(again->get_string("run.name") == "q\"uote");
  CHECK(again->get_int("stats.publish_interval_ms") == 0);
}

TEST_CASE("a resolved config whose strings hold control characters parses back to the "
          "same config") {
  // Found while writing the config fuzz target's round-trip invariant:
  // to_toml wrote control characters raw, which TOML forbids, so --resume
  // could not read the run's config.toml.
  std::mt19937_64 gen(troupe::test::fresh_seed());
  std::string name, escaped;
  for (int i = 0; i < 40; ++i) {
    auto c = static_cast<char>(1 + gen() % 127); // every ASCII character but NUL
    name += c;
    escaped += fmt::format("\\u{:04X}", static_cast<int>(c));
  }
  CAPTURE(escaped);
  auto cfg = parse_config("[run]\nname = \"" + escaped + "\"\n", "a.toml");
  REQUIRE(cfg.has_value());
  REQUIRE(cfg->get_string("run.name") == name);
  auto again = parse_config(cfg->to_toml(), "resolved.toml");
  REQUIRE_MESSAGE(again.has_value(), (again ? std::string{} : again.err().message));
  CHECK(again->get_string("run.name") == name);
  CHECK(again->to_toml() == cfg->to_toml());
}

TEST_CASE("a --set string that is not UTF-8 is refused, naming the override") {
  // Found with the same invariant: such bytes went into the resolved
  // config.toml, which then no longer parsed.
  auto msg = errors_of("", {"run.name=ab\xff\xfe"});
  CHECK(msg.find("--set run.name=ab\xff\xfe: run.name: expected a number, a boolean or a "
                 "UTF-8 string") == 0);
  auto cfg = parse_config("", "a.toml", {"run.name=caf\xc3\xa9 bar"});
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_string("run.name") == "caf\xc3\xa9 bar");
}

TEST_CASE("a table header starting with a character no key may start with is a TOML "
          "error with its line") {
  // Found by the config fuzz target (input in tests/fuzz/regressions/config/):
  // toml++ 3.3.0 aborted on an assertion for "[`un]" in builds that keep
  // assertions, instead of reporting a parse error.
  const std::string path = std::string(TROUPE_SOURCE_DIR) +
                           "/tests/fuzz/regressions/config/table-header-backtick.toml";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  auto msg = errors_of(text);
  CHECK(msg.find("cartpole.toml:9: invalid TOML") == 0);
  for (const char* header : {"[`x]\n", "[[[1]]]\n", "[[[a]]\n", "[[=\n", "[ \x01]\n"}) {
    CAPTURE(header);
    CHECK(errors_of(std::string("[run]\nseed = 2\n") + header)
            .find("cartpole.toml:3: invalid TOML") == 0);
  }
}

TEST_CASE("config describe lists every option with its type, default and range") {
  auto text = describe_schema();
  for (auto& spec : schema()) {
    CAPTURE(spec.name());
    CHECK(text.find(spec.name()) != std::string::npos);
    CHECK(text.find(spec.description) != std::string::npos);
    CHECK(text.find(spec.expectation()) != std::string::npos);
  }
}

TEST_CASE("docs/training.md lists every [model] option with its default and its values") {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/docs/training.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  size_t listed = 0;
  for (auto& spec : schema()) {
    if (spec.section != "model")
      continue;
    CAPTURE(spec.name());
    const auto row = fmt::format("| `{}` | `{}` | {} | ", spec.key,
                                 to_toml(spec.default_value), spec.expectation());
    CHECK_MESSAGE(doc.find(row) != std::string::npos, "no row starting ", row);
    ++listed;
  }
  CHECK(listed >= 10);
}

TEST_CASE("troupe check prints the resolved config, or every error with exit status 2") {
  temp_folder dir("check");
  auto good = dir.write("good.toml", "[run]\nseed = 5\n");
  auto r = run_troupe(fmt::format("check '{}' --set stats.mode=ema", good), dir);
  CHECK(r.status == 0);
  CHECK(r.out.find("seed = 5") != std::string::npos);
  CHECK(r.out.find("mode = \"ema\"") != std::string::npos);
  auto bad = dir.write("bad.toml", "[run]\nseed = 5\n[stats]\nmomentun = 0.9\n");
  r = run_troupe(fmt::format("check '{}'", bad), dir);
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find(
          "bad.toml:4: unknown key 'stats.momentun' (did you mean 'stats.momentum'?)") !=
        std::string::npos);
  r = run_troupe("check missing.toml", dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("missing.toml: no such config file") != std::string::npos);
  r = run_troupe(fmt::format("check '{}' --set run.seed=x", good), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("--set run.seed=x") != std::string::npos);
  r = run_troupe(fmt::format("check '{}' --sett a=b", good), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("did you mean '--set'") != std::string::npos);
}

namespace {

// Levenshtein distance, the full table: the reference for nearest().
size_t full_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j)
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
  return d[a.size()][b.size()];
}

} // namespace

TEST_CASE("nearest gives the first candidate at the smallest edit distance within the "
          "limit, as a full search does") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  // Few letters give many near ties; many letters, names whose byte counts
  // alone tell them apart (nearest's cheap bound).
  size_t letters = 3;
  auto word = [&](size_t max_len) {
    std::string w(rng() % (max_len + 1), 'a');
    for (auto& c : w)
      c = static_cast<char>('a' + rng() % letters);
    return w;
  };
  size_t found = 0;
  for (int round = 0; round < 4000; ++round) {
    letters = round < 2000 ? 3 : 2 + rng() % 25;
    const std::string name = word(12);
    std::vector<std::string> candidates(1 + rng() % 12);
    for (auto& c : candidates)
      c = word(14);
    const size_t limit = std::max<size_t>(2, name.size() / 3);
    std::string expected;
    size_t best = std::string::npos;
    for (auto& c : candidates)
      if (auto d = full_distance(name, c); d < best) {
        best = d;
        expected = c;
      }
    if (best > limit)
      expected.clear();
    found += !expected.empty();
    CAPTURE(name);
    CHECK(nearest(name, candidates) == expected);
  }
  CHECK(found > 0); // the case with a hint was exercised
  CHECK(nearest("algo.learning_rat", {"algo.lr", "algo.learning_rate"}) ==
        "algo.learning_rate");
  CHECK(nearest("zzzzzzzz", {"algo.lr", "run.seed"}).empty());
}

// -- the algorithms' sections ------------------------------------------------

TEST_CASE("an algorithm's keys live in its own section [algo.<name>], and the resolved "
          "config holds only the run's algorithm's section") {
  auto cfg = parse_config("[algo]\nname = \"impala\"\ngamma = 0.9\n\n[algo.impala]\n"
                          "rho_bar = 0.5\nvf_coef = 0.25\n",
                          "i.toml", {"algo.impala.c_bar=0.75"});
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_float("algo.impala.rho_bar") == 0.5);
  CHECK(cfg->origin("algo.impala.rho_bar") == "i.toml:6");
  CHECK(cfg->get_float("algo.impala.c_bar") == 0.75);
  CHECK(cfg->get_float("algo.gamma") == 0.9);
  const auto text = cfg->to_toml();
  CHECK(text.find("[algo.impala]\nrho_bar = 0.5\n") != std::string::npos);
  CHECK(text.find("[algo.ppo]") == std::string::npos);
  CHECK(text.find("[algo.a3c]") == std::string::npos);
  auto again = parse_config(text, "resolved.toml");
  REQUIRE(again.has_value());
  CHECK(again->to_toml() == text);
}

TEST_CASE("a flat [algo] key of an older troupe names its new place, in a file and in "
          "--set, and says to delete one the run's algorithm does not have") {
  auto msg = errors_of("[algo]\nname = \"ppo\"\nclip_coef = 0.1\nnum_steps = 64\n"
                       "update_epochs = 2\nrho_bar = 0.9\n");
  CHECK(msg.find("cartpole.toml:3: algo.clip_coef has moved to the algorithm's own "
                 "section: write 'clip_coef' under [algo.ppo] (algo.ppo.clip_coef)") !=
        std::string::npos);
  CHECK(msg.find(
          "cartpole.toml:5: algo.update_epochs has moved to the algorithm's own "
          "section: write 'update_epochs' under [algo.ppo] (algo.ppo.update_epochs)") !=
        std::string::npos);
  CHECK(msg.find("cartpole.toml:6: algo.rho_bar has moved to [algo.impala]; this run's "
                 "algorithm 'ppo' has no 'rho_bar'") != std::string::npos);
  CHECK(msg.find("delete the line") != std::string::npos);
  CHECK(msg.find("num_steps") == std::string::npos); // a shared key stays in [algo]
  // The run's algorithm decides where a key of several algorithms goes.
  msg = errors_of("[algo]\nname = \"a3c\"\nent_coef = 0.02\n");
  CHECK(msg.find("cartpole.toml:3: algo.ent_coef has moved to the algorithm's own "
                 "section: write 'ent_coef' under [algo.a3c] (algo.a3c.ent_coef)") !=
        std::string::npos);
  msg = errors_of("", {"algo.name=impala", "algo.vf_coef=0.3"});
  CHECK(msg.find("--set algo.vf_coef=0.3: unknown key 'algo.vf_coef' (algo.vf_coef has "
                 "moved to the algorithm's own section: write 'vf_coef' under "
                 "[algo.impala] (algo.impala.vf_coef))") != std::string::npos);
}

TEST_CASE("a key of another algorithm's section is an error naming the file:line, the "
          "key and the section that applies") {
  // [algo.impala] keys in a PPO run.
  auto msg = errors_of("[algo]\nname = \"ppo\"\n\n[algo.impala]\nrho_bar = 0.5\n");
  CHECK(msg.find("cartpole.toml:5: algo.impala.rho_bar is a key of [algo.impala], but "
                 "this run's algorithm is 'ppo' (algo.name, cartpole.toml:2): its "
                 "hyperparameters are in [algo.ppo]") != std::string::npos);
  msg = errors_of("", {"algo.a3c.vf_coef=1"});
  CHECK(msg.find("--set algo.a3c.vf_coef: algo.a3c.vf_coef is a key of [algo.a3c], but "
                 "this run's algorithm is 'ppo' (algo.name, default)") !=
        std::string::npos);
  // clip_coef under [algo.impala]: a key of [algo.ppo] only.
  msg = errors_of("[algo]\nname = \"impala\"\n[algo.impala]\nclip_coef = 0.2\n");
  CHECK(msg.find("cartpole.toml:4: unknown key 'algo.impala.clip_coef' ('clip_coef' is a "
                 "key of [algo.ppo], not of [algo.impala], whose keys are: rho_bar, "
                 "c_bar, pg_rho_bar, ent_coef, vf_coef, policy_clip, "
                 "local_bn_same_pass)") != std::string::npos);
  msg = errors_of("[algo.ppoo]\nclip_coef = 0.2\n");
  CHECK(msg.find("cartpole.toml:1: unknown section '[algo.ppoo]' (did you mean "
                 "'[algo.ppo]'?)") != std::string::npos);
}

TEST_CASE("a run folder's config of an older troupe is migrated on resume: the run's "
          "algorithm's flat keys move to its section, another algorithm's are dropped") {
  temp_folder dir("migrate");
  auto old =
    dir.write("config.toml", "[algo]\nname = \"a3c\"\nnum_steps = 5\ngae_lambda = 1.0\n"
                             "clip_coef = 0.3\nent_coef = 0.02\nrho_bar = 1.0\n");
  auto refused = load_config(old);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.err().message.find("algo.gae_lambda has moved") != std::string::npos);
  std::vector<std::string> moved;
  auto cfg = load_run_config(old, {}, &moved);
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_float("algo.a3c.gae_lambda") == 1.0);
  CHECK(cfg->get_float("algo.a3c.ent_coef") == 0.02);
  CHECK(cfg->origin("algo.a3c.ent_coef") == old + ":6");
  CHECK(cfg->get_int("algo.num_steps") == 5);
  CHECK(moved == std::vector<std::string>{"algo.ent_coef -> algo.a3c.ent_coef",
                                          "algo.gae_lambda -> algo.a3c.gae_lambda"});
}

TEST_CASE("troupe train refuses a config with flat [algo] keys with exit status 2 and "
          "starts nothing") {
  temp_folder dir("flat");
  auto old = dir.write("old.toml", fmt::format("[run]\noutput_dir = '{}'\n[algo]\n"
                                               "name = \"ppo\"\nnum_minibatches = 2\n",
                                               (dir.path / "runs").string()));
  auto r = run_troupe(fmt::format("train '{}'", old), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("old.toml:5: algo.num_minibatches has moved to the algorithm's own "
                   "section: write 'num_minibatches' under [algo.ppo] "
                   "(algo.ppo.num_minibatches)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path / "runs"));
  // A batch shorter than the minibatch count: refused before anything starts.
  auto small = dir.write("small.toml", fmt::format("[run]\noutput_dir = '{}'\n[env]\n"
                                                   "num_envs = 2\n[algo]\nnum_steps = 3\n"
                                                   "[algo.ppo]\nnum_minibatches = 8\n",
                                                   (dir.path / "runs").string()));
  r = run_troupe(fmt::format("train '{}'", small), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("ppo: a batch of 6 transitions (num_steps x num_envs) cannot be split "
                   "into num_minibatches = 8 minibatches") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path / "runs"));
}

TEST_CASE("every config the project ships under config/ loads and validates") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(TROUPE_SOURCE_DIR) / "config";
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".toml")
      continue;
    ++files;
    const auto path = entry.path().string();
    CAPTURE(path);
    auto cfg = troupe::runtime::load_config(path);
    CHECK_MESSAGE(cfg.ok(), (cfg.ok() ? std::string{} : cfg.err().message));
  }
  CHECK(files >= 20); // the folder was found and read
}

TEST_CASE("docs/protocol.md's TOML blocks validate, and its [remote] block sets every "
          "remote.* key to its default") {
  const std::string path = std::string(TROUPE_SOURCE_DIR) + "/docs/protocol.md";
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  std::vector<std::string> blocks;
  for (size_t at = text.find("```toml\n"); at != std::string::npos;
       at = text.find("```toml\n", at)) {
    const size_t begin = at + 8;
    const size_t end = text.find("```", begin);
    REQUIRE_MESSAGE(end != std::string::npos, "an unclosed ```toml block in " << path);
    blocks.push_back(text.substr(begin, end - begin));
    at = end + 3;
  }
  REQUIRE(blocks.size() >= 2); // "Security" and "troupe's side"
  size_t with_every_key = 0;
  for (const auto& block : blocks) {
    CAPTURE(block);
    auto cfg = parse_config(block, "docs/protocol.md");
    REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? std::string{} : cfg.err().message));
    if (block.find("obs_dim") == std::string::npos)
      continue;
    ++with_every_key;
    for (const auto& spec : schema()) {
      if (spec.section != "remote")
        continue;
      CAPTURE(spec.name());
      CHECK_MESSAGE(cfg->origin(spec.name()) != "default",
                    spec.name() << " is missing from the block");
      if (spec.type == value_type::integer)
        CHECK(cfg->get_int(spec.name()) == std::get<int64_t>(spec.default_value));
      else if (spec.type == value_type::string)
        CHECK(cfg->get_string(spec.name()) == std::get<std::string>(spec.default_value));
    }
  }
  CHECK(with_every_key == 1);
}

TEST_CASE("reward normalization's discount is algo.gamma unless model.reward_norm_gamma "
          "is set, and the resolved config keeps it") {
  std::mt19937_64 gen(troupe::test::fresh_seed());
  const double gamma =
    std::round(std::uniform_real_distribution<double>(0.5, 0.999)(gen) * 1000) / 1000;
  CAPTURE(gamma);
  auto cfg = parse_config(
    fmt::format("[model]\nreward_norm = true\n[algo]\ngamma = {}\n", gamma), "r.toml");
  REQUIRE(cfg.has_value());
  CHECK(cfg->get_bool("model.reward_norm"));
  CHECK(cfg->get_float("model.reward_norm_gamma") == gamma);
  CHECK(cfg->get_float("model.reward_norm_eps") == 1e-8);
  CHECK(cfg->get_float("model.reward_norm_clip") == 10.0);
  // Written to the run's config.toml, it reads back the same, even if
  // algo.gamma is overridden on --resume.
  auto again = parse_config(cfg->to_toml(), "resolved.toml", {"algo.gamma=0.5"});
  REQUIRE(again.has_value());
  CHECK(again->get_float("model.reward_norm_gamma") == gamma);
  // Set explicitly (file or --set), it is its own.
  auto own =
    parse_config("[model]\nreward_norm_gamma = 0.9\n[algo]\ngamma = 0.99\n", "r.toml");
  REQUIRE(own.has_value());
  CHECK(own->get_float("model.reward_norm_gamma") == 0.9);
  CHECK(own->origin("model.reward_norm_gamma") == "r.toml:2");
  auto set =
    parse_config("", "r.toml", {"model.reward_norm_gamma=0.8", "algo.gamma=0.7"});
  REQUIRE(set.has_value());
  CHECK(set->get_float("model.reward_norm_gamma") == 0.8);
}

TEST_CASE("bad reward normalization values are refused with the place, the key, the rule "
          "and the value") {
  auto msg = errors_of("[model]\nreward_norm = 1\n");
  CHECK(msg == "cartpole.toml:2: model.reward_norm: expected a boolean, got integer 1");
  msg = errors_of("[model]\nobs_norm = true\nreward_norm_gamma = 1.5\n");
  CHECK(msg == "cartpole.toml:3: model.reward_norm_gamma: expected a float in [0, 1], "
               "got float 1.5");
  msg = errors_of("[model]\nreward_norm_eps = 0.0\n");
  CHECK(msg == "cartpole.toml:2: model.reward_norm_eps: expected a float in (0, 1], "
               "got float 0");
  msg = errors_of("[model]\nreward_norm_clip = -10\n");
  CHECK(msg ==
        "cartpole.toml:2: model.reward_norm_clip: expected a float in (0, 1000000], "
        "got integer -10");
  msg = errors_of("", {"model.reward_norm=maybe"});
  CHECK(msg ==
        "--set model.reward_norm=maybe: model.reward_norm: expected a boolean, got "
        "string \"maybe\"");
  msg = errors_of("[model]\nreward_normalize = true\n");
  CHECK(msg.find("cartpole.toml:2: unknown key 'model.reward_normalize'") == 0);
  CHECK(msg.find("model.reward_norm") != std::string::npos);
}

TEST_CASE("model.norm_update = step is refused with ema or frozen statistics, naming "
          "both keys and their places, and accepted otherwise") {
  auto msg = errors_of("[model]\nnorm_update = \"step\"\n\n[stats]\nmode = \"ema\"\n");
  CHECK(msg == "cartpole.toml:2: model.norm_update = \"step\" merges each batch's steps "
               "into the statistics by their counts, which stats.mode = \"ema\" "
               "(cartpole.toml:5) does not keep; set one of them otherwise");
  msg = errors_of("[stats]\nfreeze_after = 5000\n", {"model.norm_update=step"});
  CHECK(msg == "--set model.norm_update: model.norm_update = \"step\" would change the "
               "statistics that stats.freeze_after = 5000 (cartpole.toml:2) freezes; set "
               "one of them otherwise");
  msg = errors_of("[model]\nnorm_update = \"always\"\n");
  CHECK(msg.find("cartpole.toml:2: model.norm_update: expected one of") == 0);
  for (const char* update : {"batch", "step"}) {
    CAPTURE(update);
    auto cfg = parse_config("[model]\nobs_norm = true\nreward_norm = true\n", "a.toml",
                            {fmt::format("model.norm_update={}", update)});
    REQUIRE(cfg.has_value());
    CHECK(cfg->get_string("model.norm_update") == update);
  }
  // ema with the default (batch) is fine.
  CHECK(parse_config("[stats]\nmode = \"ema\"\n", "a.toml").has_value());
}

TEST_CASE("algo.learner_threads 0 takes a second thread only for the only learner of a "
          "sync run in one process with its own runners, on the CPU without batch norm, "
          "and 1 and 2 as given") {
  const std::string sync = "[algo]\nmode = \"sync\"\n";
  const unsigned two = std::thread::hardware_concurrency() >= 2 ? 2 : 1;
  troupe::learners::model_spec plain, normed;
  normed.batch_norm = troupe::learners::batch_norm_mode::global;
  const auto cpu = troupe::learners::device_kind::cpu;
  const auto cuda = troupe::learners::device_kind::cuda;
  auto threads = [&](const std::string& text, const std::vector<std::string>& sets,
                     const troupe::learners::model_spec& spec,
                     troupe::learners::device_kind device, bool own = true) {
    auto cfg = parse_config(text, "t.toml", sets);
    REQUIRE(cfg.has_value());
    return learner_threads_for(*cfg, spec, device, own);
  };
  CHECK(threads(sync, {}, plain, cpu) == two);
  CHECK(threads("[algo]\nmode = \"async\"\n", {}, plain, cpu) == 1);
  CHECK(threads(sync, {"algo.num_learners=2"}, plain, cpu) == 1);
  CHECK(threads(sync, {"cluster.listen=\"127.0.0.1:0\""}, plain, cpu) == 1);
  CHECK(threads(sync, {}, normed, cpu) == 1);
  CHECK(threads(sync, {}, plain, cuda) == 1);
  // A game or remote clients feed the runners and go on acting while it learns.
  CHECK(threads(sync, {}, plain, cpu, false) == 1);
  CHECK(threads("[algo]\nmode = \"async\"\nlearner_threads = 2\n", {}, normed, cpu) == 2);
  CHECK(threads(sync, {"algo.learner_threads=1"}, plain, cpu) == 1);
  const auto message = errors_of(sync, {"algo.learner_threads=3"});
  CHECK(message.find("algo.learner_threads") != std::string::npos);
  CHECK(message.find("3") != std::string::npos);
}

TEST_CASE("env.slow_runners slows the last runner slots of the layout by env.slowdown "
          "and the rest not at all") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const int learners = 1 + static_cast<int>(gen() % 4),
            per = 1 + static_cast<int>(gen() % 4);
  const int slots = learners * per, slow = static_cast<int>(gen() % (slots + 1));
  const double factor = std::uniform_real_distribution<double>(1.0, 20.0)(gen);
  CAPTURE(learners);
  CAPTURE(per);
  CAPTURE(slow);
  auto cfg = parse_config("", "t.toml",
                          {fmt::format("algo.num_learners={}", learners),
                           fmt::format("algo.runners_per_learner={}", per),
                           fmt::format("env.slow_runners={}", slow),
                           fmt::format("env.slowdown={}", factor)});
  REQUIRE(cfg.has_value());
  for (int slot = 0; slot < slots; ++slot) {
    CAPTURE(slot);
    CHECK(runner_slowdown(*cfg, static_cast<uint64_t>(slot)) ==
          (slot >= slots - slow ? factor : 1.0));
  }
  CHECK(runner_slowdown(*cfg, static_cast<uint64_t>(slots)) == 1.0); // no such slot
  auto plain = parse_config("", "t.toml", {});
  REQUIRE(plain.has_value());
  CHECK(runner_slowdown(*plain, 0) == 1.0);
  auto message = errors_of("[env]\nslowdown = 0.5\n");
  CHECK(message.find("cartpole.toml:2") != std::string::npos);
  CHECK(message.find("env.slowdown") != std::string::npos);
  CHECK(message.find("0.5") != std::string::npos);
  message = errors_of("[model]\nreward_norm_scope = \"worker\"\n");
  CHECK(message.find("model.reward_norm_scope") != std::string::npos);
  CHECK(message.find("worker") != std::string::npos);
  CHECK(message.find("runner") != std::string::npos); // a valid value is named
}
