// On-device sampling noise and Gumbel-max, keyed exactly like engine/sampling/philox.h: the
// 32 noise bits of (seed, position, token, stream) equal the host's NoiseBits bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

// bits[r, v] = NoiseBits(seed, positions[r], token0 + v, stream).
// positions: in, device, [n_rows] int64. bits: out, device, [n_rows, n_tokens] uint32.
cudaError_t LaunchPhiloxNoise(uint64_t seed, const int64_t* positions, int64_t n_rows,
                              uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                              uint32_t* bits, cudaStream_t stream);

// out[r] = argmax_v ((double)logits[r, v] * inv_temperature + g(seed, positions[r], v)), with
// g = -log(-log((bits + 0.5) * 2^-32)) in double; ties go to the lowest id. Finite logits.
// logits: in, device, [n_rows, vocab] float. positions: in, device, [n_rows] int64.
// out: out, device, [n_rows] int32.
cudaError_t LaunchGumbelArgmax(const float* logits, int64_t n_rows, int64_t vocab,
                               double inv_temperature, uint64_t seed, const int64_t* positions,
                               int32_t* out, cudaStream_t stream);

// Greedy decoding on the device (engine/backend/backend.h GreedyTokens): for every row r of
// logits [n_rows, vocab], out[2r] = the id of the largest finite entry, the lowest id among
// equal ones (-1: none is finite), and out[2r + 1] = the lowest id holding a NaN or +inf (-1:
// none) -- what sampling::PlainGreedyToken reads off the same row on the host. Comparisons only:
// the result does not depend on the reduction tree. Two passes: CTAs over 8192-logit chunks of
// each row write partials to `workspace` (GreedyTokensWorkspaceBytes), one warp per row combines
// them. out: device, [n_rows, 2] int32; n_rows <= 65535.
size_t GreedyTokensWorkspaceBytes(int64_t n_rows, int64_t vocab);
cudaError_t LaunchGreedyTokens(const float* logits, int64_t n_rows, int64_t vocab, void* workspace,
                               size_t workspace_bytes, int32_t* out, cudaStream_t stream);

}  // namespace lockstep::kernels
