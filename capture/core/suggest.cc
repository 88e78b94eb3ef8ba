#include "capture/core/suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace tracecache {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view nearest_spelling(std::string_view word, std::span<const std::string_view> candidates,
                                  size_t max_distance) {
  std::string_view best;
  size_t best_distance = max_distance + 1;
  for (std::string_view c : candidates) {
    // The distance is at least the difference in length: skip far candidates unmeasured.
    if (c.size() > word.size() + max_distance || word.size() > c.size() + max_distance) continue;
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  const std::string_view best = nearest_spelling(word, candidates);
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

}  // namespace tracecache
