// The messages between pipeline stages (docs/pipeline.md), as bytes: little-endian fixed-size
// fields, every length checked on decode (a short or inconsistent message is an error naming
// the byte offset, never a crash). Fuzzed by fuzz/stage_wire_fuzz.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::models::wire {

enum class Kind : uint32_t {
  kConfig = 1,   // rank 0 -> down the chain: the runner options and the split
  kHello = 2,    // stage -> rank 0: its line for the boot banner
  kForward = 3,  // stage r -> r+1: a micro-batch's entries and the residual [T, n_embd]
  kLogits = 4,   // last stage -> rank 0: the head's rows [R, n_out]
  kCopy = 5,     // down the chain: copy KV block src to dst in every layer
  kStop = 6,     // down the chain: shut down
  kError = 7,    // a stage failed: its sentence, passed down and then to rank 0
  kPing = 8,     // down the chain and back to rank 0 untouched (the transport's latency)
};

struct Config {
  int64_t max_step_tokens = 0, max_logit_rows = 0, block_size = 0, n_blocks = 0;
  uint32_t k_format = 0, v_format = 0;
  int64_t micro_batches = 1, timeout_ms = 0;
  std::vector<int64_t> split;
};

struct Entry {
  std::vector<int32_t> tokens, blocks;
  int64_t start = 0, n_logits = 0;
};

struct Message {
  Kind kind = Kind::kStop;
  Config config;                // kConfig
  std::string text;             // kHello, kError
  std::vector<Entry> entries;   // kForward
  std::vector<float> floats;    // kForward: the residual; kLogits: the rows; kPing: payload
  int64_t rows = 0, cols = 0;   // shape of `floats`
  int32_t src = 0, dst = 0;     // kCopy
};

std::vector<uint8_t> Encode(const Message& m);
absl::StatusOr<Message> Decode(std::span<const uint8_t> bytes);

}  // namespace lockstep::models::wire
