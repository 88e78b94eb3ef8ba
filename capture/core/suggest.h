// "Did you mean": the nearest known name to a misspelled one, for error messages (unknown ops,
// attributes, generators, safetensors tensor names, CLI subcommands).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace tracecache {

// Levenshtein distance (insertions, deletions, substitutions) between `a` and `b`.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` within `max_distance` edits (the first of equally near ones),
// else an empty view.
std::string_view nearest_spelling(std::string_view word, std::span<const std::string_view> candidates,
                                  size_t max_distance = 2);

// " (did you mean 'x'?)" for the candidate closest to `word` within edit distance 2 (the first
// one on ties), else "".
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

}  // namespace tracecache
