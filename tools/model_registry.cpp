#include "tools/model_registry.h"

#include "common/seq2seq/config.h"
#include "common/seq2seq/text_config.h"
#include "vit/caption/model.h"
#include "vit/vit.h"

namespace vitk::tools {

const nn::ModelRegistry& model_registry() {
  static const nn::ModelRegistry* registry = [] {
    auto* r = new nn::ModelRegistry;
    r->add(vit::model_kind());
    r->add(caption::model_kind());
    r->add(seq2seq::model_kind());
    r->add(seq2seq::encoder_kind());
    r->add(seq2seq::text_classifier_kind());
    return r;
  }();
  return *registry;
}

}  // namespace vitk::tools
