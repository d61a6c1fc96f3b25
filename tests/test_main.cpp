// The doctest main of every test binary, plus the bookkeeping behind
// TROUPE_SKIP (tests/skip.hpp): a run whose selected cases were all skipped
// exits with skip_exit_code instead of 0.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>
#include <mutex>
#include <set>
#include <string>

#include "tests/skip.hpp"

namespace {

std::mutex skip_mutex;
std::string current_case;      // name of the test case running now
std::set<std::string> skipped; // names of the cases that skipped
unsigned selected_cases = 0;   // cases that passed the filters of this run

// Follows the run: which case is current, and how many were selected.
struct skip_listener : doctest::IReporter {
  explicit skip_listener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    std::lock_guard<std::mutex> guard(skip_mutex);
    selected_cases = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    std::lock_guard<std::mutex> guard(skip_mutex);
    current_case = tc.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

} // namespace

DOCTEST_REGISTER_LISTENER("troupe_skip", 1, skip_listener);

namespace troupe::test {

void mark_skipped(const std::string& reason) {
  std::lock_guard<std::mutex> guard(skip_mutex);
  skipped.insert(current_case);
  // On stdout, where CTest's log and `ctest -V` show it (doctest's MESSAGE
  // only appears with -s or on failure).
  std::cout << "skipped: " << reason << std::endl;
}

} // namespace troupe::test

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int result = context.run();
  if (context.shouldExit() || result != 0)
    return result;
  std::lock_guard<std::mutex> guard(skip_mutex);
  if (!skipped.empty() && skipped.size() == selected_cases)
    return troupe::test::skip_exit_code;
  return result;
}
