// Counter-based random numbers: element i of a seeded tensor is a pure function of (seed, i).
//
// This makes seeded tensors identical in every process and on every machine, independent of
// how many elements are drawn or in which order, and lets kernels fill them in parallel.
// Two generators live here: a splitmix64 mixer (the `uniform` and `normal` sources, trace
// programs' generators, dropout_mask) and Philox4x32-10 (rand_uniform and rand_normal, whose
// seed is a graph input). Thread-safe: no state.
#pragma once

#include <array>
#include <cstdint>

#include "capture/core/buffer.h"

namespace tracecache {

// 64 random bits for (seed, index): splitmix64 finalizer over a mix of both.
uint64_t random_bits(uint64_t seed, uint64_t index);
// Uniform in [0, 1) with 24 bits of precision (exactly representable as f32).
double uniform01(uint64_t seed, uint64_t index);
// Standard normal by Box-Muller over the pair (2*(index/2), 2*(index/2)+1).
double standard_normal(uint64_t seed, uint64_t index);

// Fills `out` with U[low, high) (floats) or floor(U[low, high)) (integers; bool: low/high 0..2).
void fill_uniform(HostBuffer& out, uint64_t seed, double low, double high);
// Fills `out` with N(mean, std^2). REQUIRES: out.dtype() is floating.
void fill_normal(HostBuffer& out, uint64_t seed, double mean, double stddev);

// The dropout mask (op dropout_mask, docs/ops.md): the stream of a (per-step seed, per-layer
// salt) pair, and its elements [begin, end) written to `out` (f32): element i is
// 1 / (1 - p) (rounded to f32) when uniform01(stream, i) < 1 - p, else 0. Any split of the
// range gives the same bits (the cpu kernel fills ranges on several threads).
uint64_t dropout_stream(int64_t seed, int64_t salt);
void fill_dropout_mask(float* out, uint64_t stream, double p, int64_t begin, int64_t end);

// ---- rand_uniform and rand_normal (docs/ops.md, "Random numbers") ------------------------------

// One block of Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
// 1, 2, 3", SC'11; Random123's philox4x32 with 10 rounds, its known-answer vectors hold): four
// 32-bit words, a bijection of the counter for each key.
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The largest `stream` attribute: the stream shares counter word 1 with the block index's high
// bits, which are below 2^14 (kMaxElements is 2^48, four elements a block).
inline constexpr int64_t kMaxRandStream = 0xffff;

// What one rand_uniform or rand_normal node draws from: the seed tensor's (seed, offset) and
// the node's `stream` (in [0, kMaxRandStream]).
struct RandStream {
  int64_t seed = 0;
  int64_t offset = 0;
  int64_t stream = 0;
};

// The stream of a node whose seed input is `seed` (i64[2]: seed, offset) and whose `stream`
// attribute is `stream`. REQUIRES: what the ops' inference rule accepts.
RandStream rand_stream(const HostBuffer& seed, int64_t stream);

// Block j: key (low, high 32 bits of seed), counter (low 32 bits of j, (stream << 16) | the
// high bits of j, low, high 32 bits of offset). Elements 4j .. 4j+3 come from it.
PhiloxCounter rand_block(const RandStream& s, uint64_t block);

// Element i, computed alone (the reference kernels): rand_uniform's is word i % 4 of block
// i / 4, (bits >> 8) * 2^-24; rand_normal's is one half of the Box-Muller pair of words
// (2k, 2k+1) of that block, k = (i % 4) / 2: cos for even i, sin for odd i.
float rand_uniform_at(const RandStream& s, int64_t i);
float rand_normal_at(const RandStream& s, int64_t i);

// Elements [begin, end) of `out` (indexed from the tensor's start, like fill_dropout_mask), one
// Philox block per four elements: the bits of the _at functions for every split of a tensor
// into ranges (the cpu kernels fill ranges on several threads).
void fill_rand_uniform(float* out, const RandStream& s, int64_t begin, int64_t end);
void fill_rand_normal(float* out, const RandStream& s, int64_t begin, int64_t end);

}  // namespace tracecache
