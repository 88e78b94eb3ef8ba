// Counter-based random numbers: element i of a seeded tensor is a pure function of (seed, i).
//
// This makes seeded tensors identical in every process and on every machine, independent of
// how many elements are drawn or in which order, and lets kernels fill them in parallel.
// Thread-safe: no state.
#pragma once

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

}  // namespace tracecache
