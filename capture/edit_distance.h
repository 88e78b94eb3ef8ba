// Levenshtein edit distance, for error messages that suggest the closest valid spelling of a
// mistyped word ("did you mean 'std'?", "did you mean 'audit'?").
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace tracecache {

// The number of single-character insertions, deletions and substitutions that turn a into b.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` within `max_distance` edits (the first of equally near ones),
// else an empty view.
std::string_view nearest_spelling(std::string_view word, std::span<const std::string_view> candidates,
                                  size_t max_distance = 2);

}  // namespace tracecache
