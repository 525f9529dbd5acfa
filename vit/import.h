#pragma once
// Importing pretrained ViTs from .safetensors files in the naming of timm, Hugging Face
// (ViTModel / ViTForImageClassification) or torchvision (vit_b_16 and friends) into vitk's model,
// whose parameter names are timm's (vit/vit.h).
//
// The architecture is read off the tensor shapes (width, depth, MLP width, patch size, channels,
// classes, pool), except the number of heads, which no shape shows: it comes from
// ImportOptions::heads or a table of the standard sizes. What the source library does at run time
// and the weights do not say (layer-norm ε, the eval transform) comes from the format's defaults,
// which the caller may override, and is stored in the checkpoint so that classification needs no
// flags.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "vit/vit.h"

namespace vitk::vit {

enum class ImportFormat { timm, hf, torchvision };

// "timm" | "hf" | "torchvision"; vitk::UsageError otherwise.
ImportFormat parse_import_format(const std::string& name);
const char* import_format_name(ImportFormat format);

struct ImportOptions {
  ImportFormat format = ImportFormat::timm;
  // 0: from a table of the standard widths (192 → 3, 384 → 6, 768 → 12, 1024 → 16, 1280 → 16,
  // ...), else d_model / 64 when that divides.
  int64_t heads = 0;
  // 0: the size the source was trained at (its square position grid × the patch size). Another
  // size resamples the position embeddings (bicubic, align_corners as below). A source whose
  // grid is not square needs this, with exactly as many patches as it has positions.
  int64_t image_height = 0, image_width = 0;
  // Only for a source without a classifier head (a backbone): adds a zero head of this size.
  int64_t num_classes = 0;
  // Settings the weights do not carry; options_for(format) fills in the source's own.
  float norm_eps = 1e-6f;
  // For resampling at import, and recorded in the checkpoint (pos_embed_align_corners) as the
  // model's convention for any later change of size.
  bool align_corners = false;
  datasets::Preprocess preprocess;
  // One per class; empty: "class_0", "class_1", ...
  std::vector<std::string> class_names;
};

// The defaults of each source library:
//   timm         ε 1e-6, resize shorter side + centre crop 0.9, bicubic, mean = std = 0.5
//                (the augreg weights' settings), align_corners false;
//   hf           ε 1e-12, squash to the model size, bilinear, mean = std = 0.5 (ViTImageProcessor),
//                align_corners false;
//   torchvision  ε 1e-6, resize shorter side + centre crop 0.875 (224 of 256), bilinear, ImageNet
//                mean and std, align_corners true (interpolate_embeddings).
ImportOptions options_for(ImportFormat format);

struct ImportedVit {
  VitConfig config;
  std::unique_ptr<ParamStore> params;  // finalized, filled
  std::unique_ptr<VisionTransformer> model;
  std::vector<std::string> class_names;         // num_classes of them
  int64_t source_height = 0, source_width = 0;  // the source's image size (grid × patch)
  // What the user should know: how the heads were chosen, tensors deliberately skipped, a head
  // added, positions resampled.
  std::vector<std::string> notes;
};

// Hugging Face's config.json beside model.safetensors: num_attention_heads -> heads,
// layer_norm_eps -> norm_eps, id2label -> class_names (keys "0".."N-1"), image_size ->
// image_height/width; hidden_act must be "gelu" (exact, as vitk's) and qkv_bias true when given.
// Missing keys leave the options as they are. vitk::Error naming the file and key otherwise.
void apply_hf_config(const std::string& path, ImportOptions& options);

// Reads path (see io::SafetensorsFile for the checks on the file itself) and builds the model.
// Every tensor of the file must map to a vitk parameter (or be one of the few known to be unused
// at inference, such as Hugging Face's pooler, which are skipped with a note), and every vitk
// parameter must come from the file; shapes must agree. vitk::Error names the file and the
// tensor otherwise.
ImportedVit import_vit(const std::string& path, const ImportOptions& options);

// Writes the imported model as a vitk checkpoint (configuration and class names included).
void save_imported(const ImportedVit& imported, const std::string& path);

// One class name per line (a trailing '\r' is dropped, as are empty lines at the end of the
// file). vitk::Error naming the file when it cannot be read or holds an empty name.
std::vector<std::string> read_labels(const std::string& path);

}  // namespace vitk::vit
