// Multi-token prediction (MTP / NextN) blocks (docs/models.md, "MTP heads"): the extra decoder
// block a model file may carry after its n_layer layers (GGUF `<arch>.nextn_predict_layers`,
// tensors blk.<n_layer>.nextn.* as llama.cpp's converter writes them), and MtpHead, its forward
// on a Backend with its own paged KV. The MTP drafter (engine/spec/mtp_drafter.cc) drafts with
// it. One row of the block, as vLLM's Qwen3NextMultiTokenPredictor and llama.cpp's graph_mtp
// (src/models/qwen3next.cpp, qwen35.cpp) compute it:
//   e = rmsnorm(embed(t[p+1]), enorm); h = rmsnorm(H[p], hnorm)     H: the target's final hidden
//   x = eh_proj [e | h]          (embedding first: vLLM torch.cat([embeds, hidden]), ggml_concat(e, h))
//   x = decoder_layer(x)         (full (gated) attention over the block's own KV rows, RoPE at p)
//   g = rmsnorm(x, shared_head_norm or output_norm); logits = output g      (predicts t[p+2])
// H[p] is the target's hidden state after its final norm (the LM head's input: vLLM's
// Qwen3NextModel.forward output, llama.cpp's h_nextn).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/models/blocks.h"
#include "engine/models/arena.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"

namespace lockstep::models {

// After the family read its config over block_count layers: moves the last
// `<arch>.nextn_predict_layers` of them out of the trunk (c->n_layer, c->layers) into
// c->n_nextn / c->nextn_layer. The MTP layer is a full attention layer (gated for the hybrid
// families, whatever the recurrent-layer pattern says of its index, as llama.cpp's loader does).
// Errors name the key.
absl::Status SplitNextnLayers(const gguf::File& f, Config* c);
// Binds the tensors of every nextn layer (its decoder layer and blk.N.nextn.{eh_proj, enorm,
// hnorm, shared_head_norm}). A file carrying its own nextn.embed_tokens or shared_head_head is
// refused by name (the Qwen converters share the trunk's).
absl::Status BindNextnLayers(const gguf::File& f, const Config& c, Weights* w);

struct MtpOptions {
  int64_t max_step_tokens = 64;  // rows per Forward at most
  int64_t block_size = 16;       // positions per KV block
  int64_t n_blocks = 0;          // KV blocks of the block's own pool
};

// Rows of the MTP block for one sequence: row i is (tokens[i], hidden[i]) at position start + i,
// its K/V written to (and its attention reading) the blocks of `blocks`. The logits and g rows of
// the last n_out rows are returned.
struct MtpEntry {
  std::span<const int32_t> tokens;  // [n] t[p+1]
  std::span<const float> hidden;    // [n, n_embd] H[p] (post-norm), or the block's own g
  int64_t start = 0;                // p of row 0
  std::span<const int32_t> blocks;
  int64_t n_out = 1;
};

class MtpHead {
 public:
  // The first nextn layer of `target` on `be`; an error naming the file's architecture when it
  // has none.
  static absl::StatusOr<std::unique_ptr<MtpHead>> Create(const Model& target, backend::Backend& be,
                                                         const MtpOptions& options);
  ~MtpHead();

  const MtpOptions& options() const { return options_; }
  int64_t n_vocab() const { return target_.config().n_vocab; }
  int64_t n_embd() const { return target_.config().n_embd; }

  // logits: [n_out, n_vocab]; g: [n_out, n_embd] (the input of the next chained row).
  absl::Status Forward(const MtpEntry& e, std::vector<float>* logits, std::vector<float>* g,
                       const DumpFn* dump = nullptr);
  // Copies the block's K and V rows of block src into block dst (copy-on-write of its pool).
  absl::Status CopyBlock(int32_t src, int32_t dst);

 private:
  MtpHead(const Model& target, backend::Backend& be, const MtpOptions& o)
      : target_(target), be_(be), options_(o) {}
  absl::Status Init();

  const Model& target_;
  backend::Backend& be_;
  MtpOptions options_;
  Config c_;            // the target's config with the MTP layer appended at index il_
  int64_t il_ = 0;      // the MTP layer's index (== the target's n_layer, as in the file)
  backend::Weight tok_embd_, output_, head_norm_, eh_proj_, enorm_, hnorm_;
  LayerWeights layer_;
  backend::KvLayout layout_;
  backend::KvLayer kv_;
  backend::Tensor e_, h_, ec_, x_, sel_, logits_;
  Scratch s_;
  Arena arena_{be_};
};

}  // namespace lockstep::models
