// "Did you mean": the nearest known name to a misspelled one, for error messages (unknown ops,
// attributes, generators, safetensors tensor names).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace tracecache {

// Levenshtein distance (insertions, deletions, substitutions) between `a` and `b`.
size_t edit_distance(std::string_view a, std::string_view b);

// " (did you mean 'x'?)" for the candidate closest to `word` within edit distance 2 (the first
// one on ties), else "".
std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates);

}  // namespace tracecache
