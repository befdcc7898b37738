// Programmatic dependent launch (docs/kernels.md "Launches"). Every kernel of kernels/ starts
// with pdl::Begin() and is launched by pdl::Launch, which allows the next kernel on the stream (or
// the next node of a captured graph) to be launched before this one has finished:
//   - griddepcontrol.wait blocks until every grid this one depends on has completed and its
//     writes are visible. It comes first, before any load or store, so a kernel never reads an
//     input that is still being written, nor overwrites one that is still being read: what every
//     kernel computes, and from which values, is exactly what it is with plain launches.
//   - no griddepcontrol.launch_dependents: the next grid launches when this one's CTAs have all
//     exited (the implicit trigger), so its CTAs never hold SM slots that this grid's later
//     waves need; the early trigger at the top (10dd652) measured slower.
// Off by default: on an H100 the attribute made decode slower (c = 1: 190.0 against 203.4 tok/s
// without it, same binary and call; docs/performance.md, 2026-12-07 night). LOCKSTEP_PDL=1 (read
// once per process) turns it on for the A/B; unset or any other value launches without it, and
// then both instructions return at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace lockstep::kernels::pdl {

__device__ __forceinline__ void Begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

inline bool Enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LOCKSTEP_PDL");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// only when Enabled(). As with <<< >>>, a launch error is left for the caller's cudaGetLastError().
template <typename... KArgs, typename... Args>
void Launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = Enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace lockstep::kernels::pdl
