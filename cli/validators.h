// CLI11 validators shared by the commands' option tables.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace tracecache::cli {

// A whole number in [lo, hi]. Its error names the range and the value given ("--steps: must be
// a whole number in [1, 2147483647], got '0'"); CLI11's own range checks print the bound of the
// option's C++ type, a 309-digit double for PositiveNumber.
inline CLI::Validator whole_number_in(int64_t lo, int64_t hi = INT_MAX) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
          return fmt::format("must be a whole number in [{}, {}], got '{}'", lo, hi, text);
        }
        return "";
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

// A finite number in [lo, hi], with whole_number_in's wording ("--remote-backoff: must be a
// number in [0.001, 86400], got '0'").
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < lo || v > hi) {
          return fmt::format("must be a number in [{}, {}], got '{}'", lo, hi, text);
        }
        return "";
      },
      fmt::format("NUMBER in [{}, {}]", lo, hi));
}

}  // namespace tracecache::cli
